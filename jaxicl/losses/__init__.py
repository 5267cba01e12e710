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
from . import linear_transformer  # noqa: F401  (registers LinearTransformer × LinearRegression)
from .linear_transformer import sample_loss, sample_residuals, sample_residuals_and_jacobian

__all__ = [
    "NoClosedFormError",
    "has_population_loss",
    "lsa_population_loss",
    "mc_loss",
    "population_loss",
    "register_population_loss",
    "sample_loss",
    "sample_residuals",
    "sample_residuals_and_jacobian",
]
