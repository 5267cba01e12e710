"""Training dynamics: diffrax gradient flow, gradient descent, optax training."""

from .descent import check_finite_curve, gradient_descent, optax_train
from .flow import FlowSolution, gradient_flow, log_time_grid

__all__ = ["FlowSolution", "check_finite_curve", "gradient_descent", "gradient_flow", "log_time_grid", "optax_train"]
