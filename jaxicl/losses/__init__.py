"""Population losses: exact closed forms (registered per model/task type) and Monte Carlo."""

from .registry import (
    NoClosedFormError,
    has_population_loss,
    mc_loss,
    population_loss,
    register_population_loss,
)
from . import lsa_linear  # noqa: F401  (registers LSA × LinearRegression)
from .lsa_linear import lsa_population_loss

__all__ = [
    "NoClosedFormError",
    "has_population_loss",
    "lsa_population_loss",
    "mc_loss",
    "population_loss",
    "register_population_loss",
]
