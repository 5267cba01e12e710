"""Exact population loss of multi-head softmax attention on template regression (Yang et al. eq. 9).

The prediction is ŷ = Âᵀy with Â = (â_1 … â_K) ∈ R^{N×K} fixed by the parameters (the dictionary is
fixed), and y_k = λᵀ(z_k + ε_k), z_k = f(v_k). With S = E[λλᵀ], ŷ_k − y_k = λᵀ(Zâ_k − z_k) + λᵀ(Eâ_k − ε_k)
where E = (ε_1 … ε_N); λ is independent of ε and E[ε_i ε_jᵀ] = δ_ij τ I_m, so

    E(ŷ_k − y_k)² = (Zâ_k − z_k)ᵀ S (Zâ_k − z_k) + τ tr(S) · { ‖â_k − e_k‖²   (k ≤ N)
                                                               { ‖â_k‖² + 1     (k > N)

and L = (1/2K) Σ_k of it (DESIGN.md; S = I gives the paper's loss with mτ). In matrix form, with
Ē = (I_N, 0) ∈ R^{N×K}:  L = (1/2K) [ ‖S^{1/2}(ZÂ − Ẑ)‖_F² + τ tr S (‖Â − Ē‖_F² + K − N) ].
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from ..models.softmax_attention import MultiHeadSoftmaxICL
from ..tasks.template_regression import TemplateRegression
from .registry import register_population_loss


def template_loss(A_hat: Float[Array, "N K"], task: TemplateRegression) -> Float[Array, ""]:
    """½E[(1/K) Σ_k (ŷ_k − y_k)²] for the linear predictor ŷ = Âᵀy (eq. 9, exact)."""
    N, K = task.n_context, task.K
    if A_hat.shape != (N, K):
        raise ValueError(f"Â must be (N, K) = ({N}, {K}) for this task, got {A_hat.shape}.")
    S = task.coef_second_moment()
    R = task.Z @ A_hat - task.Z_hat
    noise = task.tau * jnp.trace(S) * (jnp.sum((A_hat - jnp.eye(N, K, dtype=A_hat.dtype)) ** 2) + (K - N))
    return (jnp.sum(R * (S @ R)) + noise) / (2 * K)


@register_population_loss(MultiHeadSoftmaxICL, TemplateRegression)
def softmax_template_population_loss(model: MultiHeadSoftmaxICL, task: TemplateRegression) -> Float[Array, ""]:
    if model.K != task.K or model.d != task.d:
        raise ValueError(f"the model has (K, d) = ({model.K}, {model.d}) but the task has ({task.K}, {task.d}).")
    return template_loss(model.prediction_matrix(task.tokens, task.n_context), task)
