"""Closed-form predictions of Zhang, Frei & Bartlett, *Trained Transformers Learn Linear Models
In-Context* (paper file 003). Equation numbers refer to that paper.

Conventions: Λ is the (training) covariance, N the training prompt length, M the test prompt
length. "Prediction error" is E(ŷ − y)² (eq. 4.6, no ½); the population loss is half of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..models.lsa import LinearSelfAttention


@jax.jit
def gamma(Lam, N):
    """Γ = (1 + 1/N) Λ + tr(Λ)/N · I: Zhang et al.'s Thm 4.1, and Ahn et al.'s Thm 1 (eq. 8, Σ for Λ, n for N),
    the same matrix (`jaxicl.theory.ahn` uses this one). Jitted: the checks call it eagerly. N is taken in Λ's
    dtype: an integer array N (a sweep's axis) would otherwise make 1/N single precision."""
    Lam = jnp.asarray(Lam)
    N = jnp.asarray(N, Lam.dtype)
    d = Lam.shape[-1]
    return (1 + 1 / N) * Lam + jnp.trace(Lam) / N * jnp.eye(d, dtype=Lam.dtype)


def w_star(Lam, N):
    r"""Limit (4.1): $W^{KQ}_* = \operatorname{tr}(\Gamma^{-2})^{-1/4} \operatorname{diag}(\Gamma^{-1}, 0)$,
    $W^{PV}_* = \operatorname{tr}(\Gamma^{-2})^{1/4} e_{d+1}e_{d+1}^\top$."""
    d = Lam.shape[-1]
    gi = jnp.linalg.inv(gamma(Lam, N))
    c = jnp.trace(gi @ gi) ** 0.25
    W_kq = jnp.zeros((d + 1, d + 1), Lam.dtype).at[:d, :d].set(gi / c)
    W_pv = jnp.zeros((d + 1, d + 1), Lam.dtype).at[d, d].set(c)
    return W_kq, W_pv


def w_star_model(Lam, N) -> LinearSelfAttention:
    r"""The LSA model at Thm 4.1's global minimiser $(W^{KQ}_*, W^{PV}_*)$ of eq. (4.1) (`w_star`)."""
    return LinearSelfAttention(*w_star(Lam, N))


def reduced_loss(U11, u, Lam, N):
    r"""$\tilde\ell(U_{11}, u_{-1}) = \operatorname{tr}[\tfrac12 u^2 \Gamma \Lambda U_{11} \Lambda U_{11}^\top - u \Lambda^2
    U_{11}^\top]$ (eq. 5.5)."""
    G = gamma(Lam, N)
    return jnp.trace(0.5 * u**2 * G @ Lam @ U11 @ Lam @ U11.T - u * Lam @ Lam @ U11.T)


def reduced_vector_field(U11, u, Lam, N):
    r"""Right-hand side of the gradient-flow ODE (5.4): $(dU_{11}/dt,\ du_{-1}/dt)$."""
    G = gamma(Lam, N)
    dU = -(u**2) * G @ Lam @ U11 @ Lam + u * Lam @ Lam
    du = -jnp.trace(u * G @ Lam @ U11 @ Lam @ U11.T - Lam @ Lam @ U11.T)
    return dU, du


def min_reduced_loss(Lam, N):
    r"""$\min \tilde\ell = -\tfrac12 \operatorname{tr}(\Lambda^2 \Gamma^{-1})$, attained at $u_{-1} U_{11} = \Gamma^{-1}$
    (Lemma 5.3)."""
    return -0.5 * jnp.trace(Lam @ Lam @ jnp.linalg.inv(gamma(Lam, N)))


def min_population_loss(Lam, N):
    """Global minimum of the population loss (3.8): ½ tr Λ + min ℓ̃."""
    return 0.5 * jnp.trace(Lam) + min_reduced_loss(Lam, N)


def sigma_condition(sigma, Lam, N):
    r"""$\sigma^2 \|\Gamma\|_\text{op} \sqrt d < 2$ (Thm 4.1). Returns (holds, lhs)."""
    d = Lam.shape[-1]
    lhs = sigma**2 * jnp.linalg.norm(gamma(Lam, N), 2) * jnp.sqrt(d)
    return lhs < 2, lhs


def pl_constant(sigma, theta_theta_t, Lam, N):
    r"""$\mu$ of eq. (5.7) for the initialization $\sigma$, $\Theta\Theta^\top$ (with $\|\Theta\Theta^\top\|_F = 1$)."""
    d = Lam.shape[-1]
    G = gamma(Lam, N)
    Li = jnp.linalg.inv(Lam)
    gop = jnp.linalg.norm(G, 2)
    lam_theta_sq = jnp.trace(Lam @ theta_theta_t @ Lam)  # ‖ΛΘ‖_F²
    denom = jnp.sqrt(d) * jnp.linalg.norm(Lam, 2) ** 2 * jnp.trace(jnp.linalg.inv(G) @ Li) * jnp.trace(Li)
    return sigma**2 / denom * lam_theta_sq * (2 - jnp.sqrt(d) * sigma**2 * gop)


def prediction_error(a, Sigma, best_linear_error, Lam, N, M):
    """Thm 4.2, eq. (4.6): E(ŷ − y)² of W* on test prompts of length M from a distribution D with
    x ~ N(0, Λ), a = Λ⁻¹E[xy], Σ = Cov(xy)."""
    G = gamma(Lam, N)
    Gi2 = jnp.linalg.matrix_power(jnp.linalg.inv(G), 2)
    t = jnp.trace(Lam)

    def sq(A):
        return a @ A @ a

    return (
        best_linear_error
        + jnp.trace(Sigma @ Gi2 @ Lam) / M
        + (sq(Gi2 @ Lam @ Lam @ Lam) + 2 * t * sq(Gi2 @ Lam @ Lam) + t**2 * sq(Gi2 @ Lam)) / N**2
    )


def linear_task_moments(w, Lam, noise_std=0.0):
    r"""($a$, $\Sigma$, best linear error) of Thm 4.2 for $y = \langle w, x\rangle + \varepsilon$,
    $\varepsilon \sim N(0, s^2)$: $a = w$, $\Sigma = \|w\|^2_\Lambda \Lambda + \Lambda w w^\top \Lambda + s^2 \Lambda$,
    best error $s^2$."""
    s2 = noise_std**2
    Lw = Lam @ w
    return w, (w @ Lw) * Lam + jnp.outer(Lw, Lw) + s2 * Lam, s2


def prediction_error_isotropic(Lam, N, M):
    r"""$\mathbb{E}_w$ of the noiseless linear error (after Thm 4.2) for $w \sim N(0, I)$:
    $\|w\|^2_A \to \operatorname{tr} A$."""
    G = gamma(Lam, N)
    Gi2 = jnp.linalg.matrix_power(jnp.linalg.inv(G), 2)
    L2, L3 = Lam @ Lam, Lam @ Lam @ Lam
    t = jnp.trace(Lam)
    return (jnp.trace(Gi2 @ L3) + jnp.trace(Gi2 @ L2) * t) / M + (
        jnp.trace(Gi2 @ L3) + 2 * t * jnp.trace(Gi2 @ L2) + t**2 * jnp.trace(Gi2 @ Lam)
    ) / N**2


def corollary_4_3_bound(Lam, N, M):
    """Upper bound (d+1)trΛ/M + (1 + 2d + d²κ) trΛ / N² on the isotropic error (Cor. 4.3)."""
    d = Lam.shape[-1]
    ev = jnp.linalg.eigvalsh(Lam)
    kappa = ev[-1] / ev[0]
    t = jnp.trace(Lam)
    return (d + 1) * t / M + (1 + 2 * d + d**2 * kappa) * t / N**2


def corollary_4_3_lengths(Lam, eps):
    """Prompt lengths (M, N) that Cor. 4.3 says suffice for error ≤ ε."""
    d = Lam.shape[-1]
    ev = jnp.linalg.eigvalsh(Lam)
    kappa = ev[-1] / ev[0]
    t = jnp.trace(Lam)
    return 2 * (d + 1) * t / eps, jnp.sqrt(2 * (1 + 2 * d + d**2 * kappa) * t / eps)


def covariate_scaling_slope(Lam, N, c):
    """§4.2: test covariates scaled by c (x → c x). The regression slope of ŷ on ⟨w, x_q⟩ is
    c² tr(Γ⁻¹Λ²)/tr Λ (exact, any M), → c² as N → ∞."""
    return c**2 * jnp.trace(jnp.linalg.inv(gamma(Lam, N)) @ Lam @ Lam) / jnp.trace(Lam)


def query_shift_error(Lam, Lam_query, N, M):
    r"""§4.2 query shift: $\mathbb{E}(\hat y - \langle w, x_q\rangle)^2$ of $W^*$ for $x_i \sim N(0, \Lambda)$,
    $x_q \sim N(0, \Lambda_q)$, $w \sim N(0, I)$: $\operatorname{tr}(\Lambda_q [\Gamma^{-1} \mathbb{E}(\hat S^2) \Gamma^{-1}
    - \Gamma^{-1}\Lambda - \Lambda\Gamma^{-1} + I])$, $\mathbb{E} \hat S^2 = \Lambda^2 + (\Lambda^2 +
    \operatorname{tr}(\Lambda)\Lambda)/M$ (Wishart)."""
    d = Lam.shape[-1]
    Gi = jnp.linalg.inv(gamma(Lam, N))
    ES2 = Lam @ Lam + (Lam @ Lam + jnp.trace(Lam) * Lam) / M
    inner = Gi @ ES2 @ Gi - Gi @ Lam - Lam @ Gi + jnp.eye(d, dtype=Lam.dtype)
    return jnp.trace(Lam_query @ inner)


def random_covariance_gammas(m1, m2, m3, d, N):
    """γ_i, ξ_i of (C.3) for iid diagonal entries with raw moments m1, m2, m3 (same for all i); N as a float, as in
    `gamma`."""
    N = jnp.asarray(N, jnp.result_type(m3, float))
    g = (N + 1) / N * m3 + (m3 + (d - 1) * m1 * m2) / N
    return g, m2


def random_covariance_limit(m1, m2, m3, d, N, dtype=float):
    """Thm 4.5, eq. (4.12): limits of W^KQ, W^PV, and B = E[Λ²] E[ΓΛ²]⁻¹ (a scalar for iid entries)."""
    g, xi = random_covariance_gammas(m1, m2, m3, d, N)
    B = xi / g * jnp.eye(d, dtype=dtype)
    c = jnp.linalg.norm(B)
    W_kq = jnp.zeros((d + 1, d + 1), dtype).at[:d, :d].set(B / jnp.sqrt(c))
    W_pv = jnp.zeros((d + 1, d + 1), dtype).at[d, d].set(jnp.sqrt(c))
    return W_kq, W_pv, xi / g


def random_covariance_limit_error(b, lam_new=None, moments=None):
    """M → ∞ prediction error E(ŷ − ⟨w, x_q⟩)² of the (4.12) model on a new covariance, eq. (4.13):
    Σ_i λ_i (b λ_i − 1)² for a given diagonal Λ_new, or its mean Σ_i (b² m3 − 2 b m2 + m1) over Λ_new."""
    if lam_new is not None:
        return jnp.sum(lam_new * (b * lam_new - 1) ** 2)
    m1, m2, m3, d = moments
    return d * (b**2 * m3 - 2 * b * m2 + m1)
