r"""One-layer linear self-attention (Zhang, Frei & Bartlett, eq. 3.3).

$$
f_\text{LSA}(E; \theta) = E + W^{PV} E \, \frac{E^\top W^{KQ} E}{\rho}, \qquad
\theta = (W^{KQ}, W^{PV}) \in \mathbb{R}^{(d+1)\times(d+1)} \times \mathbb{R}^{(d+1)\times(d+1)},
$$

with $\rho$ = (number of columns of $E$) − 1 = the prompt length, so a model trained on length-$N$ prompts
is evaluated on length-$M$ prompts with $\rho = M$ (eq. 4.2). The prediction is the bottom-right entry.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate
from ..tasks.linear_regression import Prompt, embed


def _warn_if_sigma_too_large(sigma, task) -> None:
    import warnings

    from ..tasks.covariance import FixedCovariance

    if not isinstance(task.covariance, FixedCovariance):
        return
    lam = task.covariance.matrix
    if isinstance(lam, jax.core.Tracer):
        return
    n = task.n_context
    d = lam.shape[0]
    gam = (1 + 1 / n) * lam + jnp.trace(lam) / n * jnp.eye(d, dtype=lam.dtype)
    lhs = float(sigma) ** 2 * float(jnp.linalg.norm(gam, 2)) * d**0.5
    if lhs >= 2:
        warnings.warn(
            f"σ = {sigma} violates Thm 4.1's condition σ²‖Γ‖_op√d < 2 (got {lhs:.3g}); gradient flow "
            "runs, but the convergence guarantee (and the PL constant μ > 0) does not apply.",
            UserWarning,
            stacklevel=3,
        )


@jax.jit  # eager callers (exact losses at one point) get one program instead of four slices
def _blocks(W_kq, W_pv):
    d = W_kq.shape[-1] - 1
    return W_kq[:d, :d], W_kq[d, :d], W_pv[d, :d], W_pv[d, d]


class LinearSelfAttention(eqx.Module):
    r"""One layer of linear self-attention (Zhang et al. eq. 3.3) with full key-query and projection-value matrices
    $W^{KQ}, W^{PV} \in \mathbb{R}^{(d+1)\times(d+1)}$: on the embedded prompt $E$ (examples $(x_i, y_i)$ and the
    query $(x_q, 0)$ as columns), the prediction is
    $\hat y = [E + W^{PV} E \cdot E^\top W^{KQ} E / N]_{d+1, N+1}$.

    Args:
        W_kq: $W^{KQ}$, shape (d+1, d+1).
        W_pv: $W^{PV}$, shape (d+1, d+1).

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        model = icl.models.LinearSelfAttention.balanced_init(d=3, sigma=0.1, key=jax.random.PRNGKey(0))
        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)))
        y_hat = model.predict(task.sample_one(jax.random.PRNGKey(1)))  # a scalar
        ```
    """

    W_kq: Float[Array, "d+1 d+1"]
    W_pv: Float[Array, "d+1 d+1"]

    def __init__(self, W_kq, W_pv):
        W_kq, W_pv = jnp.asarray(W_kq), jnp.asarray(W_pv)
        for name, w in (("W_kq", W_kq), ("W_pv", W_pv)):
            if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 2:
                raise ValueError(
                    f"LinearSelfAttention.{name} must be a (d+1, d+1) matrix with d >= 1, got shape {w.shape}."
                )
        if W_kq.shape != W_pv.shape:
            raise ValueError(f"W_kq {W_kq.shape} and W_pv {W_pv.shape} must have the same shape.")
        self.W_kq, self.W_pv = W_kq, W_pv

    @property
    def d(self) -> int:
        return self.W_kq.shape[-1] - 1

    # --- constructors -----------------------------------------------------------------
    @classmethod
    def balanced_init(cls, d: int, sigma: float, key: PRNGKeyArray, dtype=None, task=None):
        r"""Assumption 3.3: $W^{PV} = \sigma e_{d+1}e_{d+1}^\top$, $W^{KQ} = \sigma \operatorname{diag}(\Theta\Theta^\top, 0)$,
        $\Theta\Theta^\top = MM^\top/\|MM^\top\|_F$.

        With ``task`` (a ``LinearRegression`` with a fixed covariance), warns when $\sigma$ violates
        Thm 4.1's condition $\sigma^2\|\Gamma\|_\text{op}\sqrt d < 2$; the model is returned either way.
        """
        d = _validate.integer("balanced_init: d", d)
        _validate.real("balanced_init: sigma", sigma, gt=0)
        if task is not None:
            _warn_if_sigma_too_large(sigma, task)
        dtype = dtype or jnp.result_type(float)
        m = jax.random.normal(key, (d, d), dtype)
        tt = m @ m.T
        tt = tt / jnp.linalg.norm(tt)
        W_kq = jnp.zeros((d + 1, d + 1), dtype).at[:d, :d].set(sigma * tt)
        W_pv = jnp.zeros((d + 1, d + 1), dtype).at[d, d].set(sigma)
        return cls(W_kq, W_pv)

    @classmethod
    def random_init(cls, d: int, scale: float, key: PRNGKeyArray, dtype=None):
        """Generic init: every entry of W^KQ and W^PV iid N(0, scale²)."""
        d = _validate.integer("random_init: d", d)
        _validate.real("random_init: scale", scale, ge=0)
        dtype = dtype or jnp.result_type(float)
        k1, k2 = jax.random.split(key)
        shape = (d + 1, d + 1)
        return cls(scale * jax.random.normal(k1, shape, dtype), scale * jax.random.normal(k2, shape, dtype))

    @classmethod
    def from_blocks(cls, K, k_y, b_x, b_y):
        """The entries that affect the prediction (eq. 3.6): W^KQ[:, :d] = [K; k_yᵀ],
        W^PV[d, :] = (b_xᵀ, b_y); every other entry zero."""
        K = jnp.asarray(K)
        d = K.shape[0]
        W_kq = jnp.zeros((d + 1, d + 1), K.dtype).at[:d, :d].set(K).at[d, :d].set(k_y)
        W_pv = jnp.zeros((d + 1, d + 1), K.dtype).at[d, :d].set(b_x).at[d, d].set(b_y)
        return cls(W_kq, W_pv)

    # --- the parts that matter (eq. 3.6, Lemma 5.1) ----------------------------------------
    def blocks(self):
        """(K = W^KQ_11, k_y = w^KQ_21, b_x = w^PV_21, b_y = w^PV_22)."""
        return _blocks(self.W_kq, self.W_pv)

    # --- forward -----------------------------------------------------------------------------
    def __call__(self, E: Float[Array, "d+1 n+1"]) -> Float[Array, "d+1 n+1"]:
        """f_LSA(E; θ) of eq. (3.3) for one embedded prompt."""
        if E.ndim != 2 or E.shape[0] != self.d + 1:
            raise ValueError(
                f"LinearSelfAttention with d={self.d} expects an embedding of shape ({self.d + 1}, n+1), got {E.shape}."
            )
        rho = E.shape[1] - 1
        return E + self.W_pv @ E @ (E.T @ self.W_kq @ E) / rho

    def predict(self, prompt: Prompt, n_context=None) -> Float[Array, ""]:
        r"""$\hat y_\text{query} = [f_\text{LSA}(E(P))]_{d+1,\,n+1}$, evaluated in $O(n d + d^2)$ as in eq. (3.6).

        ``n_context``: the prompt length ρ when the examples beyond it are zero-padded (they add nothing to
        E Eᵀ); may be traced, so prompts of every length M ≤ the padded length share one compiled program."""
        if prompt.x.ndim != 2 or prompt.x.shape[-1] != self.d:
            raise ValueError(
                f"LinearSelfAttention with d={self.d} got a prompt of width {prompt.x.shape[-1:]} "
                f"(x has shape {prompt.x.shape}); the prompt's inputs must have d={self.d}."
            )
        E = embed(prompt)
        rho = E.shape[1] - 1 if n_context is None else n_context
        return self.W_pv[-1] @ (E @ (E.T @ (self.W_kq @ E[:, -1]))) / rho
