r"""Losses of the multi-layer linear transformer (Ahn et al. eq. 5, halved as everywhere in jaxicl).

jaxicl's losses are $\tfrac12\mathbb{E}(\hat y - y_\text{query})^2$; Ahn et al.'s $f$ of eq. (5) is
$\mathbb{E}(\hat y - y_\text{query})^2$, twice that.

- **One layer, one head, $\sigma$ = identity** (any parametrization): only $b$ = last row of $P$ and
  $A$ = first $d$ columns of $Q$ matter (App. A.1), and with the mask of eq. (2)
  $-\hat y = \frac1n \sum_{i\le n} (b^\top z_i)(z_i^\top A x_q)$ — the LSA prediction of Zhang et al. eq. (3.6) with
  $(K, k_y) = (A_{1:d}, A_{d+1})$, $(b_x, b_y) = -b$, and without the query's own column. The exact
  loss is therefore ``lsa_loss_gaussian(..., query_term=False)``.
- **Deeper models** have no registered closed form: use `sample_loss` on a fixed training set
  (the paper's L-BFGS setting) or ``mc_loss`` / fresh samples per step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..models.linear_transformer import GramBatch, LinearTransformer
from ..tasks.covariance import FixedCovariance
from ..tasks.linear_regression import LinearRegression, Prompt
from .lsa_linear import lsa_loss_gaussian
from .registry import no_closed_form, register_population_loss


def single_layer_blocks(model: LinearTransformer):
    """(K, k_y, b_x, b_y) of the equivalent unmasked LSA (Zhang et al. eq. 3.6) for a one-layer,
    one-head, σ = identity model; a layer switched off (depth 0) gives b = 0."""
    P, Q = model.layer_weights()
    d = model.d
    b = P[0, 0, -1] * model.layer_mask()[0]
    A = Q[0, 0, :, :d]
    return A[:d], A[d], -b[:d], -b[d]


@register_population_loss(LinearTransformer, LinearRegression)
def linear_transformer_loss(model: LinearTransformer, task: LinearRegression) -> Float[Array, ""]:
    """Exact ½E(ŷ − y_q)² for one layer, one head, σ = identity and a fixed covariance."""
    if model.d != task.d:
        raise ValueError(f"model has d={model.d} but the task has d={task.d}.")
    if model.max_depth != 1 or model.n_heads != 1 or model.activation != "identity":
        raise no_closed_form(
            model,
            task,
            f"closed form only for one layer, one head, σ = identity (got {model.max_depth} layers, "
            f"{model.n_heads} heads, σ = {model.activation}); use sample_loss on a training set or mc_loss",
        )
    if not isinstance(task.covariance, FixedCovariance):
        raise no_closed_form(model, task, f"covariance prior {type(task.covariance).__name__}")
    K, k, bx, by = single_layer_blocks(model)
    Lam = task.covariance.matrix.astype(K.dtype)
    Om = jnp.eye(task.d, dtype=K.dtype) if task.weights == "isotropic" else jnp.linalg.inv(Lam)
    return lsa_loss_gaussian(K, k, bx, by, Lam, Om, task.n_context, task.noise_std**2, query_term=False)


def sample_loss(model, data: Prompt | GramBatch) -> Float[Array, ""]:
    """Sample average ½ mean_b (ŷ_b − y_b)² over a fixed set of prompts (Ahn et al. §5.3, §6.1).

    ``data`` is a batch of prompts, or their `GramBatch` (σ = identity linear transformers:
    the fast path, with a hand-written backward pass)."""
    if isinstance(data, GramBatch):
        pred = model.predict_gram(data)
    else:
        if data.x.ndim != 3:
            raise ValueError(f"sample_loss needs a batch of prompts (x of shape (B, n, d)); got {data.x.shape}.")
        pred = jax.vmap(model.predict)(data)
    return 0.5 * jnp.mean((pred - data.y_query) ** 2)


def sample_residuals(model: LinearTransformer, data: GramBatch) -> Float[Array, " B"]:
    """Residuals r_b = (ŷ_b − y_b)/√B, so ½‖r‖² = sample_loss (for Gauss–Newton / Levenberg–Marquardt).
    Plain JAX (forward-mode differentiable)."""
    pred = model.predict_gram(data, reverse_kernel=False)
    return (pred - data.y_query) / jnp.sqrt(data.batch)


def sample_residuals_and_jacobian(model: LinearTransformer, data: GramBatch):
    """`sample_residuals` and their Jacobian with respect to the model's parameters (see
    ``LinearTransformer.prediction_jacobian``), for ``levenberg_marquardt(..., jacobian_fn=...)``."""
    pred, J = model.prediction_jacobian(data)
    scale = jnp.sqrt(data.batch).astype(pred.dtype)
    return (pred - data.y_query) / scale, J / scale
