r"""Exact population loss of multi-head softmax attention on template regression (Yang et al. eq. 9).

The prediction is $\hat y = \hat A^\top y$ with $\hat A = (\hat a_1 \dots \hat a_K) \in \mathbb{R}^{N\times K}$ fixed by
the parameters (the dictionary is fixed), and $y_k = \lambda^\top(z_k + \varepsilon_k)$, $z_k = f(v_k)$. With
$S = \mathbb{E}[\lambda\lambda^\top]$, $\hat y_k - y_k = \lambda^\top(Z\hat a_k - z_k) + \lambda^\top(\mathcal{E}\hat a_k -
\varepsilon_k)$ where $\mathcal{E} = (\varepsilon_1 \dots \varepsilon_N)$; $\lambda$ is independent of $\varepsilon$ and
$\mathbb{E}[\varepsilon_i \varepsilon_j^\top] = \delta_{ij} \tau I_m$, so

$$
\mathbb{E}(\hat y_k - y_k)^2 = (Z\hat a_k - z_k)^\top S (Z\hat a_k - z_k) + \tau \operatorname{tr}(S) \cdot
\begin{cases} \|\hat a_k - e_k\|^2 & k \le N \\ \|\hat a_k\|^2 + 1 & k > N \end{cases}
$$

and $L = \frac1{2K} \sum_k$ of it (DESIGN.md; $S = I$ gives the paper's loss with $m\tau$). In matrix form, with
$\bar E = (I_N, 0) \in \mathbb{R}^{N\times K}$:

$$
L = \frac1{2K} \Big[ \|S^{1/2}(Z\hat A - \hat Z)\|_F^2 + \tau \operatorname{tr} S \, (\|\hat A - \bar E\|_F^2 + K - N) \Big].
$$
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from ..models.softmax_attention import MultiHeadSoftmaxICL
from ..tasks.template_regression import TemplateRegression
from .registry import register_population_loss


def template_loss(A_hat: Float[Array, "N K"], task: TemplateRegression) -> Float[Array, ""]:
    r"""The population loss of Yang et al. (eq. 9) for the linear predictor $\hat y = \hat A^\top y$, exactly:
    $\tfrac12 \mathbb{E}\big[\tfrac1K \sum_k (\hat y_k - y_k)^2\big]$ over the template coefficients $\lambda$ and the
    label noise $\tau$ (a quadratic form in $\hat A$). A trained `MultiHeadSoftmaxICL` predicts this way with
    $\hat A$ its ``prediction_matrix`` (eq. 8), which is how its population loss is computed.

    Args:
        A_hat: the prediction matrix $\hat A$, shape (N, K): column $k$ weighs the N labels to predict token $k$.
        task: the `TemplateRegression` (its templates $Z$, coefficient law and $\tau$).

    Returns:
        The loss, a scalar.

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl
        from jaxicl.theory import yang

        key = jax.random.PRNGKey(0)
        task = icl.tasks.TemplateRegression.random(key, d=8, K=24, n_context=6, m=4, tau=0.1)
        A = yang.optimal_prediction_matrix(task)  # the ridge-regression limit of Thm 2 (eq. 20)
        best = icl.losses.template_loss(A, task)
        assert jnp.allclose(best, yang.loss_infimum(task), rtol=1e-5)
        assert icl.losses.template_loss(A + 0.01, task) > best  # A is the minimiser
        ```
    """
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
