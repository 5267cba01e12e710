"""Exact population loss of one-layer LSA (eq. 3.3) on in-context linear regression.

Only K = W^KQ_11, k_y = w^KQ_21, b_x = w^PV_21, b_y = w^PV_22 affect the prediction (eq. 3.6).
With u = b_x + b_y w, V = K + w k_yᵀ, c = k_yᵀx_q and y_i = wᵀx_i + ε_i (ε_i ~ N(0, s²)),

    ŷ = (1/N) Σ_i g(x_i, ε_i) + Q,   g = (uᵀx + b_y ε)(xᵀV x_q + ε c),   Q = (1/N)(b_xᵀx_q)(x_qᵀK x_q).

Given (w, x_q) the g_i are iid, so E(ŷ − y_q)² = Var(g)/N + (E g + Q − wᵀx_q)² + s². Isserlis over
x_q ~ N(0, Λ) and then over w ~ N(0, Ω) (Ω = I, or Λ⁻¹) gives the closed form below, valid for
**every** parameter value and label-noise level. On the invariant manifold (b_x = k_y = 0,
s = 0, Ω = I) it reduces to ½trΛ + ½b²tr(ΓΛKΛKᵀ) − b tr(Λ²K) (Zhang et al. eq. 5.5 + ½trΛ).

For the random diagonal prior Λ = diag(λ), λ_i iid, with Ω = I the loss is a polynomial of degree
≤ 3 in λ; every mixed monomial of such a polynomial contains some λ_i − E λ_i to the first power,
so E f(λ) = f(μ) + Σ_i (E f(μ + (λ_i − μ)e_i) − f(μ)) exactly, and each 1-D expectation is exact
with a two-node Gauss rule built from E λ, E λ², E λ³ (Thm 4.5 needs exactly these moments).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..models.lsa import LinearSelfAttention
from ..tasks.covariance import FixedCovariance, RandomDiagonalCovariance
from ..tasks.linear_regression import LinearRegression
from .registry import no_closed_form, register_population_loss


# jitted: called eagerly (checks, gradients at one point) its forty-odd jnp operations compiled one XLA program each
@functools.partial(jax.jit, static_argnames="query_term")
def lsa_loss_gaussian(K, k, bx, by, Lam, Om, N, s2, query_term: bool = True):
    """½E(ŷ − y_q)² for x ~ N(0, Λ), w ~ N(0, Ω), noise variance s², context length N.

    ``query_term=False`` drops the query's own column Q (attention masked as in Ahn et al. eq. 2)."""
    I = jnp.eye(K.shape[0], dtype=K.dtype)
    tLO = jnp.trace(Lam @ Om)
    tLOLO = jnp.trace(Lam @ Om @ Lam @ Om)
    alpha = k @ Lam @ k
    tau = jnp.trace(K.T @ Lam @ K @ Lam)
    Lbx = Lam @ bx
    bLb = bx @ Lbx
    ell = Lam @ K @ Lam @ k
    quartic = by**2 * alpha * (tLO**2 + 2 * tLOLO)

    # Var(g) terms, averaged over (x_q, w)
    ET1 = bLb * (tau + alpha * tLO) + 4 * by * (Lbx @ Om @ ell) + by**2 * (tau * tLO) + quartic
    r0 = K.T @ Lbx
    R = by * K.T @ Lam + jnp.outer(k, Lbx)
    ET2 = r0 @ Lam @ r0 + jnp.trace(R.T @ Lam @ R @ Om) + quartic + 2 * by * tLO * (r0 @ Lam @ k)
    ET3 = by**2 * tau + 2 * by * (ell @ bx) + alpha * (bLb + 4 * by**2 * tLO)
    var_g = ET1 + ET2 + s2 * ET3 + 2 * by**2 * s2**2 * alpha

    # (E g − wᵀx_q) = pᵀx_q with p = r0' + (R − I) w + b_y (wᵀΛw) k
    r0p = r0 + by * s2 * k
    Rp = R - I
    EpLp = r0p @ Lam @ r0p + jnp.trace(Rp.T @ Lam @ Rp @ Om) + quartic + 2 * by * tLO * (r0p @ Lam @ k)

    # the query's own column: Q = (1/N)(b_xᵀx_q)(x_qᵀK x_q)
    Ks = (K + K.T) / 2
    tKL = jnp.trace(K @ Lam)
    KsLbx = Ks @ Lbx
    z = Lbx * tKL + 2 * Lam @ KsLbx
    Epz = (r0p + by * tLO * k) @ z
    EQ2 = (
        bLb * (tKL**2 + 2 * jnp.trace(Ks @ Lam @ Ks @ Lam)) + 4 * tKL * (Lbx @ KsLbx) + 8 * (KsLbx @ Lam @ KsLbx)
    ) / N**2

    if not query_term:
        return 0.5 * (s2 + var_g / N + EpLp)
    return 0.5 * (s2 + var_g / N + EpLp + 2 * Epz / N + EQ2)


def lsa_population_loss(model: LinearSelfAttention, covariance, n_context, noise_std=0.0, weights="isotropic"):
    """Exact loss of ``model`` for x ~ N(0, Λ) with Λ = ``covariance`` (a matrix), prompt length
    ``n_context`` and label noise ``noise_std``. Every argument but ``weights`` may be traced, so a
    sweep over N, Λ or the noise compiles once."""
    K, k, bx, by = model.blocks()
    Lam = jnp.asarray(covariance, K.dtype)
    Om = jnp.eye(K.shape[0], dtype=K.dtype) if weights == "isotropic" else jnp.linalg.inv(Lam)
    return lsa_loss_gaussian(K, k, bx, by, Lam, Om, n_context, jnp.asarray(noise_std) ** 2)


def _blocks_and_noise(model: LinearSelfAttention, task: LinearRegression):
    if model.d != task.d:
        raise ValueError(f"model has d={model.d} but the task has d={task.d}.")
    K, k, bx, by = model.blocks()
    return K, k, bx, by, task.noise_std**2


@register_population_loss(LinearSelfAttention, LinearRegression)
def lsa_linear_regression_loss(model: LinearSelfAttention, task: LinearRegression):
    """Exact loss (3.8)/(4.10) for a fixed Λ or a random diagonal prior (see module docstring)."""
    K, k, bx, by, s2 = _blocks_and_noise(model, task)
    N = task.n_context
    cov = task.covariance
    if isinstance(cov, FixedCovariance):
        return lsa_population_loss(model, cov.matrix, N, task.noise_std, task.weights)
    if isinstance(cov, RandomDiagonalCovariance):
        if task.weights != "isotropic":
            raise no_closed_form(
                model, task, "random covariance with inverse-covariance weights is not polynomial in Λ"
            )
        nodes, weights = cov.gauss_rule()
        return _diagonal_prior_loss(K, k, bx, by, nodes, weights, cov.raw_moments()[0], N, s2)
    raise no_closed_form(model, task, f"covariance prior {type(cov).__name__} has no closed form")


@jax.jit
def _diagonal_prior_loss(K, k, bx, by, nodes, weights, mean, N, s2):
    """E_λ of `lsa_loss_gaussian` at Λ = diag(λ), λ_i iid with Gauss rule (nodes, weights) and mean μ, w ~ N(0, I):
    f(μ) + Σ_i (E f(μ + (λ_i − μ)e_i) − f(μ)), exact for this degree-3 polynomial (module docstring)."""
    d = K.shape[0]
    I = jnp.eye(d, dtype=K.dtype)

    def f(lam):
        return lsa_loss_gaussian(K, k, bx, by, jnp.diag(lam), I, N, s2)

    mu = jnp.full((d,), mean, K.dtype)
    f0 = f(mu)
    # f at μ with coordinate i moved to each node: shape (d, 2)
    moved = jax.vmap(lambda i: jax.vmap(lambda xi: f(mu.at[i].set(xi)))(nodes))(jnp.arange(d))
    return f0 + jnp.sum(moved @ weights - f0)
