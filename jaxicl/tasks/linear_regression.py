"""In-context linear regression prompts (Zhang et al. §3.3, eq. 3.4; Ahn et al. §3; Garg et al.).

A prompt is (x_1, y_1, …, x_N, y_N, x_query) with x_i, x_query ~ N(0, Λ) iid given Λ,
Λ ~ covariance prior, w ~ N(0, I) ("isotropic") or N(0, Λ⁻¹) ("inverse_covariance"),
y_i = ⟨w, x_i⟩ + ε_i, ε_i ~ N(0, noise_std²). The query label y_query carries noise too, so
the loss ½E(ŷ − y_query)² includes the irreducible ½ noise_std².
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate
from .covariance import CovariancePrior, FixedCovariance, ScaledIdentityCovariance

WEIGHTS = ("isotropic", "inverse_covariance")


class Prompt(eqx.Module):
    """One prompt (or a batch of prompts when every leaf has a leading batch axis)."""

    x: Float[Array, "n d"]
    y: Float[Array, " n"]
    x_query: Float[Array, " d"]
    y_query: Float[Array, ""]

    @property
    def n_context(self) -> int:
        return self.x.shape[-2]

    @property
    def d(self) -> int:
        return self.x.shape[-1]


def embed(prompt: Prompt) -> Float[Array, "d+1 n+1"]:
    """Embedding E(P) of eq. (3.4): columns (x_i, y_i), last column (x_query, 0)."""
    top = jnp.concatenate([prompt.x, prompt.x_query[None, :]], axis=0).T
    bottom = jnp.concatenate([prompt.y, jnp.zeros((1,), prompt.y.dtype)])[None, :]
    return jnp.concatenate([top, bottom], axis=0)


class LinearRegression(eqx.Module):
    r"""Prompt distribution for in-context linear regression.

    Args:
        d: input dimension.
        n_context: number of in-context examples N (test prompts: use ``with_context(M)``).
        covariance: a `CovariancePrior` (``FixedCovariance(Λ)`` or a random prior).
        weights: ``"isotropic"`` (w ~ N(0, I)) or ``"inverse_covariance"`` (w ~ N(0, Λ⁻¹)).
        noise_std: label-noise standard deviation (an array leaf: sweepable, differentiable).

    A prompt holds N examples $(x_i, y_i)$ and a query $x_q$, with $x \sim N(0, \Lambda)$ and
    $y = w^\top x + \sigma\varepsilon$ (Zhang et al. §3; Ahn et al. §2), $\Lambda$ drawn from ``covariance`` once per
    prompt.

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        task = icl.tasks.LinearRegression(3, 10, icl.tasks.FixedCovariance(jnp.eye(3)), noise_std=0.1)
        prompts = task.sample(jax.random.PRNGKey(0), 64)  # a batch of 64 prompts
        assert prompts.x.shape == (64, 10, 3) and prompts.y.shape == (64, 10)
        test = task.with_context(100)  # the same distribution, M = 100 examples
        ```
    """

    d: int = eqx.field(static=True)
    n_context: int = eqx.field(static=True)
    covariance: CovariancePrior
    weights: str = eqx.field(static=True)
    noise_std: Float[Array, ""]

    def __init__(
        self,
        d: int,
        n_context: int,
        covariance: CovariancePrior | Array | None = None,
        weights: Literal["isotropic", "inverse_covariance"] = "isotropic",
        noise_std=0.0,
    ):
        d = _validate.integer("LinearRegression: d", d)
        n_context = _validate.integer("LinearRegression: n_context (N)", n_context)
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}.")
        if covariance is None:
            covariance = FixedCovariance(jnp.eye(int(d)))
        elif not isinstance(covariance, CovariancePrior):
            covariance = FixedCovariance(covariance)
        if covariance.d != int(d):
            raise ValueError(f"covariance is {covariance.d}-dimensional but the task has d={d}.")
        noise_std = jnp.asarray(_validate.real("LinearRegression: noise_std", noise_std, ge=0), dtype=float)
        self.d = int(d)
        self.n_context = int(n_context)
        self.covariance = covariance
        self.weights = weights
        self.noise_std = noise_std

    def with_context(self, n_context: int) -> "LinearRegression":
        """The same distribution with prompts of another length (test prompts of length M)."""
        return LinearRegression(self.d, n_context, self.covariance, self.weights, self.noise_std)

    def sample_with_weights(self, key: PRNGKeyArray) -> tuple[Prompt, Float[Array, " d"]]:
        """One prompt and the task vector w that generated it (for diagnostics and shifts)."""
        k_lam, k_w, k_x, k_eps = jax.random.split(key, 4)
        lam = self.covariance.sample(k_lam)
        chol = jnp.linalg.cholesky(lam)
        dtype = lam.dtype
        z = jax.random.normal(k_w, (self.d,), dtype)
        if self.weights == "isotropic":
            w = z
        else:  # w ~ N(0, Λ⁻¹): w = L⁻ᵀ z with Λ = L Lᵀ
            w = jax.scipy.linalg.solve_triangular(chol, z, lower=True, trans="T")
        xs = jax.random.normal(k_x, (self.n_context + 1, self.d), dtype) @ chol.T
        eps = self.noise_std.astype(dtype) * jax.random.normal(k_eps, (self.n_context + 1,), dtype)
        ys = xs @ w + eps
        return Prompt(x=xs[:-1], y=ys[:-1], x_query=xs[-1], y_query=ys[-1]), w

    @eqx.filter_jit  # one program, not one per operation when called eagerly
    def sample_one(self, key: PRNGKeyArray) -> Prompt:
        return self.sample_with_weights(key)[0]

    @eqx.filter_jit  # one program per task structure and batch; eager, vmap compiles every operation on its own
    def sample(self, key: PRNGKeyArray, batch: int) -> Prompt:
        """``batch`` iid prompts (each leaf has a leading batch axis)."""
        return jax.vmap(self.sample_one)(jax.random.split(key, batch))


def _orthonormal_rows(G: Float[Array, "d n"]) -> Float[Array, "d n"]:
    """Gram–Schmidt (twice, for round-off) on the rows of G (d ≤ n). Plain arithmetic, no LAPACK:
    QR or Cholesky calls next to another factorisation inside ``lax.scan`` hung XLA:CPU (jax 0.10.2)."""
    rows = []
    for i in range(G.shape[0]):
        v = G[i]
        for _ in range(2):
            for r in rows:
                v = v - (v @ r) * r
        rows.append(v / jnp.linalg.norm(v))
    return jnp.stack(rows)


class FixedGramRegression(eqx.Module):
    r"""The theorems' setting of Gatmiry et al. (§4.2, eq. 9): noiseless linear regression whose empirical
    covariance is *given*.

    Args:
        d: input dimension.
        n_context: number of in-context examples $n \ge d$ (a Gram matrix of rank $d$).
        covariance: a `CovariancePrior` of $\Sigma$ (``ScaledIdentityCovariance`` for Fig. 2's $\Sigma = sI$,
            ``RandomSpectrumCovariance`` for Definition 1's $\alpha I \preceq \Sigma \preceq \beta I$), or a fixed
            $d \times d$ matrix.

    Each prompt draws $\Sigma$ from ``covariance``, then $X \in \mathbb{R}^{d \times n}$ with
    $X X^\top / n = \Sigma$ *exactly*, $w^\star \sim N(0, \Sigma^{-1})$, $x_q \sim N(0, \Sigma)$ and
    $y = X^\top w^\star$ (realizable, noiseless). The paper writes $\Sigma = X X^\top$ with the $1/n$ of eq. (3)
    dropped; jaxicl keeps the $1/n$ in the model, so $\Sigma$ here is $X X^\top / n$ and all of the paper's
    statements about $\Sigma$ apply. Exact Gram matrices ($X = \sqrt{n}\, C R$ with $C C^\top = \Sigma$ and $R$
    with orthonormal rows) make Monte Carlo over prompts estimate the same loss as the exact formula
    (`jaxicl.losses.fixed_gram_population_loss`).

    ``sample(key, batch)`` returns a `Prompt` batch: ``x`` of shape (batch, n, d), ``y`` (batch, n), ``x_query``
    (batch, d), ``y_query`` (batch,).

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        Sigma = jnp.diag(jnp.array([1.0, 2.0, 4.0]))
        task = icl.tasks.FixedGramRegression(3, 10, Sigma)
        p = task.sample(jax.random.PRNGKey(0), 8)
        gram = jnp.einsum("bni,bnj->bij", p.x, p.x) / 10  # X Xᵀ / n of each prompt
        assert jnp.allclose(gram, Sigma, atol=1e-5) and p.y.shape == (8, 10)
        ```
    """

    d: int = eqx.field(static=True)
    n_context: int = eqx.field(static=True)
    covariance: CovariancePrior

    def __init__(self, d: int, n_context: int, covariance: CovariancePrior | Array):
        if int(d) < 1:
            raise ValueError(f"FixedGramRegression needs d >= 1, got d={d}.")
        if int(n_context) < int(d):
            raise ValueError(f"a fixed Gram matrix of rank d needs n_context >= d; got n={n_context}, d={d}.")
        if not isinstance(covariance, CovariancePrior):
            covariance = FixedCovariance(covariance)
        if covariance.d != int(d):
            raise ValueError(f"covariance is {covariance.d}-dimensional but the task has d={d}.")
        self.d, self.n_context, self.covariance = int(d), int(n_context), covariance

    def sample_with_weights(self, key: PRNGKeyArray) -> tuple[Prompt, Float[Array, " d"]]:
        k_lam, k_r, k_w, k_q = jax.random.split(key, 4)
        Sigma = self.covariance.sample(k_lam)
        dtype = Sigma.dtype
        R = _orthonormal_rows(jax.random.normal(k_r, (self.d, self.n_context), dtype))
        z_w, z_q = jax.random.normal(k_w, (self.d,), dtype), jax.random.normal(k_q, (self.d,), dtype)
        if isinstance(self.covariance, ScaledIdentityCovariance):  # Σ = s I: no factorisation
            root = jnp.sqrt(Sigma[0, 0])
            X, w, x_q = jnp.sqrt(self.n_context) * root * R, z_w / root, root * z_q
        else:
            chol = jnp.linalg.cholesky(Sigma)
            X = jnp.sqrt(self.n_context) * chol @ R  # (d, n): X Xᵀ / n = Σ
            w = jax.scipy.linalg.solve_triangular(chol, z_w, lower=True, trans="T")  # N(0, Σ⁻¹)
            x_q = chol @ z_q  # N(0, Σ)
        return Prompt(x=X.T, y=X.T @ w, x_query=x_q, y_query=x_q @ w), w

    @eqx.filter_jit  # one program, not one per operation when called eagerly
    def sample_one(self, key: PRNGKeyArray) -> Prompt:
        return self.sample_with_weights(key)[0]

    @eqx.filter_jit  # as LinearRegression.sample
    def sample(self, key: PRNGKeyArray, batch: int) -> Prompt:
        return jax.vmap(self.sample_one)(jax.random.split(key, batch))
