r"""Theory of Yang, Huang, Liang & Chi, *In-context learning with representations: contextual
generalization of trained transformers*: the ridge-regression limit, the infimum of the loss, the
constants of Thm 1 and the inference-time quantities of Thm 2 and §3.2.

Notation (eqs. 12, 19, 34): $Z = (z_1 \dots z_N) \in \mathbb{R}^{m\times N}$ the prompt features $z_k = f(v_k)$,
$\hat Z = (Z, Z^Q) \in \mathbb{R}^{m\times K}$, $\bar E = (I_N, 0) \in \mathbb{R}^{N\times K}$,
$S = \mathbb{E}[\lambda\lambda^\top]$ ($= I$ under Assumption 1),
$G = Z^\top S Z + \tau \operatorname{tr}(S) I_N$ ($= Z^\top Z + m\tau I = \bar Z^2$) and, for a ridge parameter $c$,

$$
A(c) = (Z^\top Z + c I_N)^{-1} (Z^\top \hat Z + c \bar E).
$$

The transformer's limit is $A = A(m\tau)$ (eq. 34: ridge regression (20) with penalty $m\tau/N$); the best
prediction (23)–(25) is $A(N\tau)$ (penalty $\tau$). Both predict the labels of the prompt tokens exactly
(columns $k \le N$ are $e_k$) and $\hat y_k = \langle y, A_{:,k}\rangle$ (eq. 27).

The excess loss is Lemma 5: $L(\theta) - L^\star = \frac1{2K} \sum_k \|\bar Z(\hat a_k - A_{:,k})\|^2 =
\frac1{2K} \operatorname{tr}((\hat A - A)^\top G (\hat A - A))$.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..losses.template import template_loss
from ..models.softmax_attention import MultiHeadSoftmaxICL
from ..tasks.template_regression import TemplateRegression

# Every array-valued function below is jitted (``eqx.filter_jit``): the checks call them eagerly, where their jnp
# operations compiled one XLA program each (some 90 in a quick yang2024 run). ``inference_bound`` is two programs: one would
# hold two independent LAPACK calls, which XLA:CPU can deadlock on (see ``expected_gap``).


# --- the ridge-regression limit and the infimum --------------------------------------------------------
@eqx.filter_jit
def ridge_matrix(task: TemplateRegression, c) -> Float[Array, "N K"]:
    r"""$A(c) = (Z^\top Z + cI)^{-1}(Z^\top \hat Z + c\bar E)$: $\hat y_k = \langle y, A(c)_{:,k}\rangle$ is ridge
    regression on the prompt with penalty $c/N$ in the normalisation of eq. (20) ($c = m\tau$: eq. 34; $c = N\tau$:
    eq. 25)."""
    Z, N, K = task.Z, task.n_context, task.K
    gram = Z.T @ Z + c * jnp.eye(N, dtype=Z.dtype)
    return jnp.linalg.solve(gram, Z.T @ task.Z_hat + c * jnp.eye(N, K, dtype=Z.dtype))


@eqx.filter_jit
def optimal_prediction_matrix(task: TemplateRegression) -> Float[Array, "N K"]:
    """The minimiser of the exact loss over all Â: (ZᵀSZ + τ trS I)⁻¹(ZᵀSẐ + τ trS Ē); equal to
    A = A(mτ) of eq. (34) under Assumption 1 (S = I)."""
    S, Z, N, K = task.coef_second_moment(), task.Z, task.n_context, task.K
    c = task.tau * jnp.trace(S)
    return jnp.linalg.solve(
        Z.T @ S @ Z + c * jnp.eye(N, dtype=Z.dtype), Z.T @ S @ task.Z_hat + c * jnp.eye(N, K, dtype=Z.dtype)
    )


@eqx.filter_jit
def loss_gram(task: TemplateRegression) -> Float[Array, "N N"]:
    """G = ZᵀSZ + τ tr(S) I (= Z̄² of eq. 12 under Assumption 1): the metric of the excess loss, and
    the second moment E[yyᵀ] of the prompt labels under the task's law of λ."""
    S, Z = task.coef_second_moment(), task.Z
    return Z.T @ S @ Z + task.tau * jnp.trace(S) * jnp.eye(task.n_context, dtype=Z.dtype)


@eqx.filter_jit
def loss_infimum(task: TemplateRegression) -> Float[Array, ""]:
    """L⋆ = inf_θ L(θ) (Lemma 5), the loss of the optimal Â."""
    return template_loss(optimal_prediction_matrix(task), task)


@eqx.filter_jit
def loss_infimum_lemma5(task: TemplateRegression) -> Float[Array, ""]:
    r"""$L^\star$ written as in Lemma 5 (Assumption 1): $\frac1{2K}\big[\sum_{k\le N} (\|z_k\|^2 + m\tau - b_k^\top
    \bar Z^{-2} b_k) + \sum_{k>N} (\|z_k\|^2 - b_k^\top \bar Z^{-2} b_k)\big]$, with $b_k = Z^\top z_k + m\tau e_k$
    ($k \le N$), $Z^\top z_k$ ($k > N$)."""
    Z, Zh, N, K, m = task.Z, task.Z_hat, task.n_context, task.K, task.m
    mt = m * task.tau
    B = Z.T @ Zh + mt * jnp.eye(N, K, dtype=Z.dtype)
    quad = jnp.sum(B * jnp.linalg.solve(Z.T @ Z + mt * jnp.eye(N, dtype=Z.dtype), B), axis=0)
    return (jnp.sum(Zh**2) + N * mt - jnp.sum(quad)) / (2 * K)


@eqx.filter_jit
def excess_loss(A_hat: Float[Array, "N K"], task: TemplateRegression, A=None) -> Float[Array, ""]:
    """Δ = L(θ) − L⋆ = (1/2K) tr((Â − A)ᵀ G (Â − A)) (Lemma 5, eq. 36), computed without cancellation.
    ``A``: the optimal prediction matrix, when precomputed (e.g. in float64 for a float32 run)."""
    D = A_hat - (optimal_prediction_matrix(task) if A is None else A)
    return jnp.sum(D * (loss_gram(task) @ D)) / (2 * task.K)


# --- Assumption 2, Prop. 1 and Thm 1 ------------------------------------------------------------------
def _sqrt_psd(G):
    lam, U = jnp.linalg.eigh(G)
    return (U * jnp.sqrt(jnp.maximum(lam, 0.0))) @ U.T


@eqx.filter_jit
def _gram_assumption1(task: TemplateRegression) -> Float[Array, "N N"]:
    """Z̄² = ZᵀZ + mτ I: the loss metric G under Assumption 1 (S = I), whatever the task's law of λ."""
    Z = task.Z
    return Z.T @ Z + task.m * task.tau * jnp.eye(task.n_context, dtype=Z.dtype)


@eqx.filter_jit
def z_bar(task: TemplateRegression) -> Float[Array, "N N"]:
    r"""$\bar Z = (Z^\top Z + m\tau I)^{1/2}$ (eq. 12)."""
    return _sqrt_psd(_gram_assumption1(task))


@eqx.filter_jit
def attention_B(model: MultiHeadSoftmaxICL, task: TemplateRegression) -> Float[Array, "K N H"]:
    r"""$B_k = \bar Z C_k \in \mathbb{R}^{N\times H}$ for every $k$ (eq. 13); the columns of inactive (padded) heads
    are zero."""
    C = model.attention(task.tokens, task.n_context) * model.head_mask[:, None, None]  # (H, N, K)
    return jnp.einsum("ij,hjk->kih", z_bar(task), C)


@eqx.filter_jit
def zeta(model: MultiHeadSoftmaxICL, task: TemplateRegression) -> Float[Array, ""]:
    """ζ = min_k λ_min(B_k B_kᵀ) (eq. 14 at θ^(0)); > 0 iff Assumption 2 holds."""
    B = attention_B(model, task)
    return jnp.min(jnp.linalg.eigvalsh(B @ jnp.swapaxes(B, 1, 2))[:, 0])


@eqx.filter_jit
def w_curvature(model: MultiHeadSoftmaxICL, task: TemplateRegression) -> Float[Array, ""]:
    r"""Largest eigenvalue of the Hessian of $L$ in $w$ at fixed $Q$: $\max_k \lambda_\max(B_k^\top B_k)/K$ (the loss
    is $\frac1{2K}\sum_k\|\bar Z(C_k w_{:,k}) - \bar Z A_{:,k}\|^2 + L^\star$, Lemma 5). GD in $w$ is stable for
    $\eta_w < 2/$``w_curvature``."""
    B = attention_B(model, task)
    return jnp.max(jnp.linalg.eigvalsh(B @ jnp.swapaxes(B, 1, 2))[:, -1]) / task.K  # N×N, same nonzero spectrum


@eqx.filter_jit
def w_floor(model: MultiHeadSoftmaxICL, task: TemplateRegression, A=None) -> Float[Array, ""]:
    r"""$\min_w \Delta$ at the model's $Q$: the excess loss (Lemma 5, eq. 36) that training $w$ alone reaches,
    $\frac1{2K} \sum_k \min_w \|G^{1/2}(C_k w - a_k)\|^2$, a least-squares problem per $k$
    ($C_k \in \mathbb{R}^{N\times H}$: the heads' attention on the prompt for token $k$, $G$ the loss metric, $a_k$
    column $k$ of $A$). 0 when every $C_k$ has full row rank (Assumption 2, which Prop. 1 gives for $H \ge N$ at a
    Gaussian $Q$); positive when $H < N$, since $\operatorname{rank} C_k \le H$."""
    A = optimal_prediction_matrix(task) if A is None else A
    R = _sqrt_psd(loss_gram(task))
    C = model.attention(task.tokens, task.n_context) * model.head_mask[:, None, None]  # (H, N, K)
    M = jnp.einsum("ij,hjk->kih", R, C)  # G^½ C_k, (K, N, H)
    b = (R @ A).T  # G^½ a_k, (K, N)
    w = jax.vmap(lambda Mk, bk: jnp.linalg.lstsq(Mk, bk)[0])(M, b)
    return jnp.sum((jnp.einsum("knh,kh->kn", M, w) - b) ** 2) / (2 * task.K)


@dataclasses.dataclass(frozen=True)
class Theorem1Constants:
    """The constants of Thm 1 at an initialisation θ^(0) (eqs. 14–17, 44, 61)."""

    zeta0: float  # (14)
    delta0: float  # Δ(0) = L(θ^(0)) − L⋆
    zbar_norm: float  # ‖Z̄‖₂
    f_bar_max: float  # max_i ‖z̄_i‖₂ (12)
    A_norm: float  # ‖A‖₂
    gamma: float  # the smallest γ allowed by (15)
    alpha_bar: float  # ᾱ of (44): the bound |α_{h,k}| = |w_{h,k}|/γ ≤ ᾱ along the run (43a)
    smoothness: float  # L of (61)
    eta_Q: float  # 1/L (16)
    eta_w: float  # γ² η_Q (16)
    rate: float  # 1 − η_w ζ0 / (2K) (18)


def theorem1_constants(model0: MultiHeadSoftmaxICL, task: TemplateRegression) -> Theorem1Constants:
    r"""Step sizes and rate of Thm 1 (Assumption 1: $S = I$; $w^{(0)} = 0$).

    $\gamma = \zeta_0^{-5/4} \big(\frac{128\sqrt2}{\sqrt2 - 1} \|\bar Z\|_2^2 \sqrt H \bar f_\max K^{3/2}
    \Delta(0)\big)^{1/2}$ (15), the value at which (48) keeps $\lambda_\min(B_k B_k^\top) \ge \zeta_0/2$;
    $\bar\alpha = 4\sqrt{2K} \|\bar Z\|_2 \sqrt{\Delta(0)} / (\gamma \zeta_0)$ (44); and the tighter smoothness
    constant of Lemma 10 (61),

    $$
    L^2 = 2\Big[\tfrac1K\big(2\gamma\|\bar Z\|_2^2(2\gamma H\bar\alpha + \|A\|_2)\big)^2 + \gamma^4 H^2\|\bar Z\|_2^4/K^2\Big]
    + 8 \big(\gamma \bar f_\max \|\bar Z\|_2 / K\big)^2 \max\{1, 4K\bar\alpha^2\}
    \big[(\bar\alpha\gamma H)^2 + 4N(\bar\alpha\gamma H + \|A\|_2)^2\big].
    $$

    The text of (61) shows the factor $\gamma \bar f_\max\|\bar Z\|_2$ (from (58)) without its square and $1/K$; both
    are restored here so that $L$ scales like the loss ($L^2 \propto c^4$ when $f \to c f$, $\tau \to c^2\tau$), as (58)
    gives.
    """
    task = task.with_coefficients(0.0, 1.0)
    K, N = task.K, task.n_context
    H = float(model0.n_heads)
    zb = z_bar(task)
    zbn = float(jnp.linalg.norm(zb, 2))
    fbar = float(jnp.max(jnp.linalg.norm(zb, axis=0)))
    A = optimal_prediction_matrix(task)
    A_norm = float(jnp.linalg.norm(A, 2))
    z0 = float(zeta(model0, task))
    d0 = float(excess_loss(model0.prediction_matrix(task.tokens, N), task))
    if not z0 > 0:
        raise ValueError(f"Assumption 2 fails at this initialisation (ζ0 = {z0:.3g}); use H >= N heads (Prop. 1).")
    gamma = z0**-1.25 * math.sqrt(128 * math.sqrt(2) / (math.sqrt(2) - 1) * zbn**2 * math.sqrt(H) * fbar * K**1.5 * d0)
    abar = 4 * math.sqrt(2 * K) * zbn * math.sqrt(d0) / (gamma * z0)
    L2 = 2 * ((2 * gamma * zbn**2 * (2 * gamma * H * abar + A_norm)) ** 2 / K + gamma**4 * H**2 * zbn**4 / K**2)
    L2 += (
        8
        * (gamma * fbar * zbn / K) ** 2
        * max(1.0, 4 * K * abar**2)
        * ((abar * gamma * H) ** 2 + 4 * N * (abar * gamma * H + A_norm) ** 2)
    )
    L = math.sqrt(L2)
    eta_Q = 1.0 / L
    eta_w = gamma**2 * eta_Q
    return Theorem1Constants(z0, d0, zbn, fbar, A_norm, gamma, abar, L, eta_Q, eta_w, 1.0 - eta_w * z0 / (2 * K))


def theorem2_iterations(c: Theorem1Constants, task: TemplateRegression, B: float, eps: float, delta: float) -> float:
    """Iterations T of eq. (21) after which (1/2K)‖ŷ − ŷ⋆‖² ≤ ε with probability ≥ 1 − δ for ‖λ‖ ≤ B."""
    N, m, tau = task.n_context, task.m, float(task.tau)
    zn = float(jnp.linalg.norm(task.Z, 2))
    ld = math.log(1 / delta)
    noise = math.sqrt(tau) * math.sqrt(2 * math.sqrt(N * ld) + 2 * ld + N)
    num = math.log(B**2 * c.delta0 * (zn + noise) ** 2 / (m * tau * eps))
    return num / math.log(1 / (1 - c.eta_w * c.zeta0 / (2 * task.K)))


def inference_bound(A_hat, y, task: TemplateRegression):
    """The deterministic core of Thm 2: (1/2K)‖ŷ − ŷ⋆‖² ≤ ‖y‖² Δ / λ_min(Z̄²) with Δ the excess loss
    and λ_min(Z̄²) ≥ mτ (from Lemma 5: Δ ≥ λ_min(Z̄²)‖Â − A‖_F²/(2K))."""
    G = _gram_assumption1(task)
    return _inference_bound(A_hat, y, task, G, _min_eigenvalue(G))


@eqx.filter_jit
def _min_eigenvalue(G):
    return jnp.linalg.eigvalsh(G)[0]


@eqx.filter_jit
def _inference_bound(A_hat, y, task: TemplateRegression, G, lam_min):
    D = A_hat - ridge_matrix(task, task.m * task.tau)
    return jnp.sum(y**2, axis=-1) * (jnp.sum(D * (G @ D)) / (2 * task.K)) / lam_min


# --- inference: ŷ⋆, ŷ_best and the gap (§3.2) ----------------------------------------------------------
@eqx.filter_jit
def ridge_coefficients(y: Float[Array, "*batch N"], task: TemplateRegression, penalty) -> Float[Array, "*batch m"]:
    """argmin_λ (1/2N)Σ_i (y_i − λᵀz_i)² + (penalty/2)‖λ‖² = (ZZᵀ + N·penalty·I)⁻¹ Z y.
    penalty = mτ/N is the transformer's λ̂ (20); penalty = τ is λ̂_τ (25)."""
    Z, N = task.Z, task.n_context
    M = Z @ Z.T + N * penalty * jnp.eye(task.m, dtype=Z.dtype)
    return jnp.linalg.solve(M, (y @ Z.T).T).T


def _complete(y, lam, task):
    """(y, (Z^Q)ᵀ λ): the given labels, then the template's prediction for the K − N unseen tokens."""
    return jnp.concatenate([y, lam @ task.features[task.n_context :].T], axis=-1)


@eqx.filter_jit
def y_star(y, task: TemplateRegression):
    """ŷ⋆ = (y, (Z^Q)ᵀ λ̂) with λ̂ the ridge solution (20), penalty mτ/N (eq. 22)."""
    return _complete(y, ridge_coefficients(y, task, task.m * task.tau / task.n_context), task)


@eqx.filter_jit
def y_best(y, task: TemplateRegression):
    """ŷ_best = (y, (Z^Q)ᵀ λ̂_τ), λ̂_τ of (24) = ridge with penalty τ (25) (eq. 23)."""
    return _complete(y, ridge_coefficients(y, task, task.tau), task)


@eqx.filter_jit
def expected_inference_loss(A_hat, task_eval: TemplateRegression, A_ref=None) -> Float[Array, ""]:
    """E (1/2K)‖ŷ − ŷ⋆‖² over prompts of ``task_eval`` (any law of λ): (1/2K) tr((Â − A)ᵀ E[yyᵀ] (Â − A)),
    with A = A(mτ) the transformer's limit (default ``A_ref``). For in-domain λ it equals Δ exactly."""
    A_ref = ridge_matrix(task_eval, task_eval.m * task_eval.tau) if A_ref is None else A_ref
    D = A_hat - A_ref
    return jnp.sum(D * (loss_gram(task_eval) @ D)) / (2 * task_eval.K)


def _seen_gram(task: TemplateRegression, n_context):
    r"""($N$, mask of the $N$ prompt tokens among $K$, $G_N = \sum_{k\le N} z_k z_k^\top$); $N$ may be traced."""
    N = task.n_context if n_context is None else n_context
    F = task.features
    seen = (jnp.arange(task.K) < N).astype(F.dtype)
    return N, seen, (F * seen[:, None]).T @ F


@eqx.filter_jit
def expected_gap(task: TemplateRegression, n_context=None) -> Float[Array, ""]:
    r"""$\mathbb{E}\,\frac1K\|\hat y^\star - \hat y_\text{best}\|^2$ in closed form (Fig. 3), for prompts of length
    ``n_context`` (default $N$; may be traced, so one program covers a range of $N$):

    $$
    \tfrac1K \operatorname{tr}\big( (\hat Z\hat Z^\top - G_N) D (G_N S G_N + \tau \operatorname{tr}S\, G_N) D \big), \qquad
    D = (G_N + m\tau I)^{-1} - (G_N + N\tau I)^{-1},
    $$

    $G_N = \sum_{k\le N} z_k z_k^\top$ ($m\times m$): only the unseen labels differ,
    $\hat y^\star_k - \hat y^\text{best}_k = z_k^\top(\hat\lambda - \hat\lambda_\tau)$, and
    $\mathbb{E}[Zy y^\top Z^\top] = G_N S G_N + \tau \operatorname{tr}S\, G_N$."""
    N, seen, G = _seen_gram(task, n_context)
    F, m, tau = task.features, task.m, task.tau
    S = task.coef_second_moment()
    T = F.T @ F
    eye = jnp.eye(m, dtype=F.dtype)
    # one stacked LAPACK call, not two: two independent LAPACK custom calls in one XLA:CPU program can
    # run concurrently and deadlock (0 % CPU, seen with jax 0.10.2)
    inv = jnp.linalg.inv(jnp.stack([G + m * tau * eye, G + N * tau * eye]))
    D = inv[0] - inv[1]
    middle = G @ S @ G + tau * jnp.trace(S) * G
    return jnp.trace((T - G) @ D @ middle @ D) / task.K


@eqx.filter_jit
def gap(y_all: Float[Array, "*batch K"], task: TemplateRegression, n_context=None):
    """(1/K)‖ŷ⋆ − ŷ_best‖² (§3.2, Fig. 3) for a prompt showing the first ``n_context`` (default N; may be
    traced) of the labels ``y_all``: only the unseen labels differ, by z_kᵀ(λ̂ − λ̂_τ), and both ridge
    solutions are m×m solves with the prompt as a mask."""
    N, seen, G = _seen_gram(task, n_context)
    F, m, tau = task.features, task.m, task.tau
    b = ((y_all * seen) @ F).T  # Σ_{i ≤ N} y_i z_i, (m, *batch)
    eye = jnp.eye(m, dtype=F.dtype)
    sol = jnp.linalg.solve(jnp.stack([G + m * tau * eye, G + N * tau * eye]), jnp.stack([b, b]))  # one call, see above
    diff = sol[0] - sol[1]
    return jnp.sum(((F @ diff).T * (1 - seen)) ** 2, axis=-1) / task.K


def fitted_log_slope(losses, every: int = 1) -> float:
    """Least-squares slope of log Δ(t) per iteration, for Δ recorded every ``every`` iterations: < 0 for
    linear convergence (Thm 1)."""
    y = np.log(np.asarray(losses, float))
    return float(np.polyfit(np.arange(y.size) * every, y, 1)[0])
