"""Population losses: exact closed forms (registered per model/task type) and Monte Carlo."""

from . import (
    linear_transformer,  # noqa: F401  (registers LinearTransformer × LinearRegression)
    lsa_linear,  # noqa: F401  (registers LSA × LinearRegression)
    restricted,  # noqa: F401  (registers LinearTransformer × FixedGramRegression)
    template,  # noqa: F401  (registers MultiHeadSoftmaxICL × TemplateRegression)
)
from .linear_transformer import sample_loss, sample_residuals, sample_residuals_and_jacobian
from .lsa_linear import lsa_population_loss
from .registry import (
    NoClosedFormError,
    has_population_loss,
    mc_loss,
    population_loss,
    register_population_loss,
)
from .restricted import (
    GaussianXBatch,
    fixed_gram_depth_curves,
    fixed_gram_loss,
    fixed_gram_population_loss,
    gaussian_x_loss,
    gaussian_x_mc,
)
from .sequence import (
    first_weighted_loop,
    loop_weights,
    position_errors,
    position_errors_per_loop,
    prefix_curve,
    sequence_loss,
)
from .template import template_loss

__all__ = [
    "first_weighted_loop",
    "loop_weights",
    "position_errors",
    "position_errors_per_loop",
    "prefix_curve",
    "sequence_loss",
    "GaussianXBatch",
    "fixed_gram_depth_curves",
    "fixed_gram_loss",
    "fixed_gram_population_loss",
    "gaussian_x_loss",
    "gaussian_x_mc",
    "NoClosedFormError",
    "has_population_loss",
    "lsa_population_loss",
    "mc_loss",
    "population_loss",
    "register_population_loss",
    "sample_loss",
    "sample_residuals",
    "sample_residuals_and_jacobian",
    "template_loss",
]
