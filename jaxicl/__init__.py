"""jaxicl: training dynamics of in-context-learning models, with exact losses and theorem checks."""

from . import baselines, dynamics, losses, models, tasks, theory
from .dynamics import FlowSolution, gradient_descent, gradient_flow, optax_train, train
from .losses import mc_loss, population_loss, register_population_loss, sample_loss
from .sensitivity import finite_difference, sensitivity
from .sweep import sweep

__version__ = "0.1.0"

__all__ = [
    "baselines",
    "dynamics",
    "losses",
    "models",
    "tasks",
    "theory",
    "FlowSolution",
    "gradient_descent",
    "gradient_flow",
    "optax_train",
    "train",
    "mc_loss",
    "population_loss",
    "register_population_loss",
    "sample_loss",
    "sensitivity",
    "finite_difference",
    "sweep",
]
