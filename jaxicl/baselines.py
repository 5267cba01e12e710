r"""Classical in-context estimators, each a function of one prompt, predicting at every prefix like a
decoder transformer with the encoding of Garg et al.: the prediction for example i uses examples 1…i−1
only (and is 0 for i = 1).

All take ``xs`` (N, d) and ``ys`` (N, m) and return predictions (N, m); the iterative ones return the
predictions after each iteration, (k, N, m). Lift to a batch of prompts with ``jax.vmap``.

- `ols` (minimum-norm least squares), `ridge`;
- `gradient_descent_steps`: k steps of GD on $\frac1{2n}\|Xw - y\|^2$ from $w = 0$ (AlgoFormer eq. 5);
- `newton_steps`: k steps of the Newton iteration of AlgoFormer eq. (4),
  $M_0 = \alpha S$, $M_{k+1} = 2M_k - M_k S M_k$, $w_k = M_k X^\top y$, $S = X^\top X$;
- `nearest_neighbours` (mean label of the k nearest previous inputs) and `averaging`
  ($w = \frac1n \sum_j y_j x_j$), the baselines of Garg et al.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def _prefixes(xs):
    """(N, N, d): row i holds examples j < i, zeros elsewhere; and the counts n_i = i (at least 1)."""
    N = xs.shape[0]
    before = jnp.tril(jnp.ones((N, N), xs.dtype), k=-1)  # before[i, j] = 1 iff j < i
    return before[:, :, None] * xs[None], jnp.maximum(jnp.arange(N), 1).astype(xs.dtype)


def _predict(ws, xs):
    """Prediction x_iᵀ W_i at every position from per-prefix weights (…, N, d, m)."""
    return jnp.einsum("nd,...ndm->...nm", xs, ws)


def ols(xs: Float[Array, "N d"], ys: Float[Array, "N m"]) -> Float[Array, "N m"]:
    r"""Minimum-norm least squares on each prefix: $W_i = \operatorname{pinv}(X_{<i}) Y_{<i}$ (one batched SVD)."""
    Xp, _ = _prefixes(xs)
    return _predict(jnp.linalg.pinv(Xp) @ ys[None], xs)


def ols_gram(xs: Float[Array, "N d"], ys: Float[Array, "N m"]) -> Float[Array, "N m"]:
    r"""`ols` from the prefix Gram matrices: $W_i = \operatorname{pinv}(G_i) b_i$ with $G_i = X_{<i}^\top X_{<i}$ and
    $b_i = X_{<i}^\top Y_{<i}$ (cumulative sums), which is $\operatorname{pinv}(X_{<i}) Y_{<i}$ because $b_i$ lies in the
    row space of $X_{<i}$. One d × d symmetric
    eigendecomposition per prefix, O(N d³), instead of an SVD of an N × d matrix, O(N² d²): at N = 201, d = 20 (Zhang
    et al.'s Fig. 1 at paper size) far cheaper, on a GPU as on a CPU. Eigenvalues below N·ε·λ_max count as zero (as
    ``pinv``'s default cut-off does for G's square root, squared: the rank of $X_{<i}$ is kept for i < d). The Gram
    squares the condition number: use float64 where a prefix is nearly singular (i ≈ d)."""
    N, d = xs.shape
    outer = xs[:, :, None] * xs[:, None, :]
    G = jnp.cumsum(outer, 0) - outer  # G_i: examples j < i
    xy = xs[:, :, None] * ys[:, None, :]
    b = jnp.cumsum(xy, 0) - xy
    lam, V = jnp.linalg.eigh(G)
    cut = max(N, d) * jnp.finfo(xs.dtype).eps * jnp.max(lam, axis=-1, keepdims=True)
    inv = jnp.where(lam > cut, 1.0 / jnp.where(lam > cut, lam, 1.0), 0.0)
    W = V @ (inv[..., None] * (jnp.swapaxes(V, -1, -2) @ b))
    return _predict(W, xs)


def ridge(xs: Float[Array, "N d"], ys: Float[Array, "N m"], lam=1.0) -> Float[Array, "N m"]:
    r"""Ridge on each prefix: $W_i = (X_{<i}^\top X_{<i} + \lambda I)^{-1} X_{<i}^\top Y_{<i}$ (one batched solve)."""
    Xp, _ = _prefixes(xs)
    S = jnp.swapaxes(Xp, 1, 2) @ Xp + lam * jnp.eye(xs.shape[1], dtype=xs.dtype)
    return _predict(jnp.linalg.solve(S, jnp.swapaxes(Xp, 1, 2) @ ys[None]), xs)


def _spectral_bound(S):
    """‖S‖_F ≥ λ_max(S) for symmetric PSD S, per prefix (no eigendecomposition)."""
    return jnp.sqrt(jnp.sum(S**2, axis=(-2, -1)))


def gradient_descent_steps(
    xs: Float[Array, "N d"], ys: Float[Array, "N m"], n_steps: int, eta=None
) -> Float[Array, "k N m"]:
    r"""$W_{t+1} = W_t - \eta X_{<i}^\top(X_{<i} W_t - Y_{<i}) / n_i$ from $W_0 = 0$, $t = 1, \dots, k$, on every prefix.
    Default $\eta = 1/\|S_i/n_i\|_F \le 1/\lambda_\max$ (a safe step without an eigendecomposition)."""
    Xp, n = _prefixes(xs)
    S = jnp.swapaxes(Xp, 1, 2) @ Xp / n[:, None, None]
    b = jnp.swapaxes(Xp, 1, 2) @ ys[None] / n[:, None, None]
    if eta is None:
        eta = 1.0 / jnp.maximum(_spectral_bound(S), jnp.finfo(xs.dtype).tiny)
    eta = jnp.broadcast_to(jnp.asarray(eta, xs.dtype), (xs.shape[0],))[:, None, None]

    def step(W, _):
        W = W - eta * (S @ W - b)
        return W, W

    _, Ws = jax.lax.scan(step, jnp.zeros_like(b), None, length=int(n_steps))
    return _predict(Ws, xs)


def newton_steps(xs: Float[Array, "N d"], ys: Float[Array, "N m"], n_steps: int, alpha=None) -> Float[Array, "k N m"]:
    """Newton–Schulz iteration of AlgoFormer eq. (4) on every prefix, predictions after t = 1…k steps.
    Default α = 1/‖S‖_F² ≤ 1/‖SSᵀ‖₂ (inside eq. 4's range (0, 2/‖SSᵀ‖₂]); M_k → S⁺, so W_k → OLS."""
    Xp, _ = _prefixes(xs)
    S = jnp.swapaxes(Xp, 1, 2) @ Xp
    XtY = jnp.swapaxes(Xp, 1, 2) @ ys[None]
    if alpha is None:
        alpha = 1.0 / jnp.maximum(_spectral_bound(S) ** 2, jnp.finfo(xs.dtype).tiny)
    M0 = jnp.broadcast_to(jnp.asarray(alpha, xs.dtype), (xs.shape[0],))[:, None, None] * S

    def step(M, _):
        M = 2 * M - M @ S @ M
        return M, M @ XtY

    _, Ws = jax.lax.scan(step, M0, None, length=int(n_steps))
    return _predict(Ws, xs)


def nearest_neighbours(xs: Float[Array, "N d"], ys: Float[Array, "N m"], k: int = 3) -> Float[Array, "N m"]:
    """Mean label of the (up to) k nearest previous inputs in Euclidean distance (Garg et al.)."""
    N = xs.shape[0]
    k = min(int(k), N)
    dist = jnp.sum((xs[:, None] - xs[None]) ** 2, -1)
    valid = jnp.tril(jnp.ones((N, N), bool), k=-1)
    _, idx = jax.lax.top_k(jnp.where(valid, -dist, -jnp.inf), k)  # (N, k)
    use = jnp.take_along_axis(valid, idx, axis=1).astype(xs.dtype)
    return jnp.einsum("nk,nkm->nm", use, ys[idx]) / jnp.maximum(jnp.sum(use, 1), 1)[:, None]


def averaging(xs: Float[Array, "N d"], ys: Float[Array, "N m"]) -> Float[Array, "N m"]:
    r"""$W_i = \frac1{n_i} \sum_{j<i} x_j y_j^\top$ (Garg et al.'s averaging estimator)."""
    Xp, n = _prefixes(xs)
    return _predict(jnp.swapaxes(Xp, 1, 2) @ ys[None] / n[:, None, None], xs)


BASELINES = {"ols": ols, "ridge": ridge, "nearest_neighbours": nearest_neighbours, "averaging": averaging}
