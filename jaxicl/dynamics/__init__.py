"""Training dynamics: diffrax gradient flow, gradient descent, optax training, fixed-set optimizers."""

from .descent import check_finite_curve, first_nonfinite_step, gradient_descent, optax_train, raise_if_diverged
from .fit import FitResult, lbfgs, levenberg_marquardt, optax_fit
from .flow import FlowSolution, check_flow, gradient_flow, log_time_grid

__all__ = [
    "FitResult",
    "FlowSolution",
    "check_finite_curve",
    "check_flow",
    "first_nonfinite_step",
    "gradient_descent",
    "gradient_flow",
    "lbfgs",
    "levenberg_marquardt",
    "log_time_grid",
    "optax_fit",
    "optax_train",
    "raise_if_diverged",
]
from ..runtime.planning import PlannedRun, planning
from .checkpoint import load_checkpoint, save_checkpoint
from .train import (
    Curriculum,
    TrainResult,
    cast_floating,
    ensemble_size_that_fits,
    member,
    stack_members,
    step_seconds,
    train,
)

__all__ += [
    "Curriculum",
    "PlannedRun",
    "TrainResult",
    "cast_floating",
    "ensemble_size_that_fits",
    "load_checkpoint",
    "member",
    "planning",
    "save_checkpoint",
    "stack_members",
    "step_seconds",
    "train",
]
