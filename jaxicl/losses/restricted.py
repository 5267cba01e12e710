r"""Losses of the restricted linear transformer (Gatmiry et al. eq. 6 with $u = 0$, $\sigma$ = identity).

With $\hat\Sigma = X X^\top / n$ and layers $A_0, \dots, A_{L-1}$ (Gatmiry et al. Lemma 4, with jaxicl's $1/n$ kept):

$$
\hat y - y_q = -w_*^\top M x_q, \qquad M = (I - \hat\Sigma A_0)(I - \hat\Sigma A_1) \cdots (I - \hat\Sigma A_{L-1})
$$

Two loss conventions, both the paper's eq. (9) **without** the ½ of the rest of jaxicl
(``population_loss`` of the registry keeps ½ and returns half of `fixed_gram_loss`):

- **fixed Gram** — $\Sigma = \hat\Sigma$ given, $w_* \sim N(0, \Sigma^{-1})$, $x_q \sim N(0, \Sigma)$:
  $L = \mathbb{E}_\Sigma \operatorname{tr}(M \Sigma M^\top \Sigma^{-1})$ exactly; for $\Sigma = sI$ the expectation over
  $s$ is a quadrature that is exact (the integrand is a polynomial of degree $2L$ in $s$).
- **Gaussian X** — $x_i, x_q \sim N(0, \Sigma_\text{pop})$, $w_* \sim N(0, \Sigma_\text{pop}^{-1})$ (the paper's
  experiments): $\hat\Sigma$ is Wishart and the loss is a Monte-Carlo average over $(\Sigma_\text{pop}, X, w_*)$.
  `gaussian_x_loss` averages the *exact* conditional expectation over $x_q$: the prediction is $g^\top x_q$ with
  $g = \sum_t A_t^\top v_t$, $v_0 = X y / n$, $v_{t+1} = v_t - \hat\Sigma A_t^\top v_t$ (only prompt statistics), so
  $\mathbb{E}_{x_q}(\hat y - y_q)^2 = (w_* - g)^\top \Sigma_\text{pop} (w_* - g)$. Cost $O(L d^2)$ per prompt.

Why u = 0: the u-terms of eq. (6) add to ŷ a part that does not depend on w* (it only involves X
and x_q); under w* → −w* its cross term with the rest averages out, so u ≠ 0 can only raise the
loss. The estimators here take A only and refuse a model with u ≠ 0.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._validate import is_concrete
from ..models.linear_transformer import LinearTransformer, RestrictedWeights
from ..tasks.covariance import FixedCovariance, ScaledIdentityCovariance
from ..tasks.linear_regression import FixedGramRegression, LinearRegression
from .registry import no_closed_form, register_population_loss


def _check_restricted(model: LinearTransformer) -> None:
    """Refuse a model the closed forms do not describe (on the host, where u is known)."""
    if not isinstance(model.params, RestrictedWeights) or model.activation != "identity":
        raise ValueError(
            "these losses need a restricted (eq. 6), σ = identity model: LinearTransformer.restricted(A); "
            f"got {type(model.params).__name__} with σ = {model.activation}."
        )
    u = model.params.u
    if is_concrete(u) and np.any(np.asarray(u) != 0):
        raise ValueError("the closed forms assume u = 0 in eq. (6); this model has u ≠ 0.")


# The computations below are jitted after the host-side check: they are called eagerly, in Python loops over depth
# (Thms 6-8), where each jnp operation would be an XLA program of its own; jitted, they are one program per shape.
@eqx.filter_jit
def _layer_matrices(model: LinearTransformer) -> Float[Array, "L d d"]:
    _, Q = model.layer_weights()  # Q_t = diag(A_t, 0), already repeated for a looped model
    A = Q[:, 0, :-1, :-1]
    return A * model.layer_mask()[:, None, None].astype(A.dtype)


@eqx.filter_jit
def _residual_matrix(model: LinearTransformer, Sigma: Float[Array, "d d"]) -> Float[Array, "d d"]:
    A = _layer_matrices(model).astype(jnp.result_type(Sigma, model.params.A))
    I = jnp.eye(A.shape[-1], dtype=A.dtype)

    def step(M, A_t):
        return M - (M @ Sigma) @ A_t, None

    return jax.lax.scan(step, I, A)[0]


@eqx.filter_jit
def _fixed_gram_loss(model: LinearTransformer, Sigma: Float[Array, "d d"]) -> Float[Array, ""]:
    M = _residual_matrix(model, Sigma)
    return jnp.trace(M @ Sigma @ M.T @ jnp.linalg.inv(Sigma))


def _depth_curve(A: Float[Array, "L d d"], Sigma: Float[Array, "d d"]) -> Float[Array, " L"]:
    Sigma_inv = jnp.linalg.inv(Sigma)

    def step(M, A_t):
        M = M - (M @ Sigma) @ A_t
        return M, jnp.trace(M @ Sigma @ M.T @ Sigma_inv)

    return jax.lax.scan(step, jnp.eye(A.shape[-1], dtype=A.dtype), A)[1]


_depth_curves = jax.jit(jax.vmap(_depth_curve))


def fixed_gram_depth_curves(A: Float[Array, "B L d d"], Sigma: Float[Array, "B d d"]) -> Float[Array, "B L"]:
    r"""For each of B pairs $(A_0, \dots, A_{L-1}; \Sigma)$: the fixed-Gram loss
    $\operatorname{tr}(M_\ell \Sigma M_\ell^\top \Sigma^{-1})$ of the first $\ell$ layers,
    $M_\ell = \prod_{t<\ell}(I - \Sigma A_t)$ (Gatmiry et al. Lemma 4, eq. 9 without ½), for every
    $\ell = 1, \dots, L$, in one program.

    Zero layers leave M unchanged, so models of different depths share one program when their layers are padded with
    zeros to a common L (their loss is then the last entry); a looped model is its A repeated. Same numbers as
    `fixed_gram_loss` of each depth, one XLA program for all shapes (B, L, d) instead of one per depth."""
    A = jnp.asarray(A)
    Sigma = jnp.asarray(Sigma, A.dtype)
    if (
        A.ndim != 4
        or Sigma.ndim != 3
        or Sigma.shape[0] != A.shape[0]
        or Sigma.shape[1:] != A.shape[2:]
        or A.shape[2] != A.shape[3]
    ):
        raise ValueError(f"need A of shape (B, L, d, d) and Sigma of shape (B, d, d); got {A.shape} and {Sigma.shape}.")
    return _depth_curves(A, Sigma)


def layer_matrices(model: LinearTransformer) -> Float[Array, "L d d"]:
    """A_t for each of the ``max_depth`` layer applications, zero for the layers switched off
    (depth mask), the shared A repeated for a looped model."""
    _check_restricted(model)
    return _layer_matrices(model)


def residual_matrix(model: LinearTransformer, Sigma: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """M = Π_t (I − Σ A_t) (Gatmiry et al. Lemma 4), the error being −w*ᵀ M x_q."""
    _check_restricted(model)
    return _residual_matrix(model, Sigma)


def fixed_gram_loss(model: LinearTransformer, Sigma: Float[Array, "d d"]) -> Float[Array, ""]:
    r"""$\mathbb{E}_{w_*, x_q}(\hat y - y_q)^2 = \operatorname{tr}(M \Sigma M^\top \Sigma^{-1})$ for one given
    $\Sigma = X X^\top / n$ (eq. 9, no ½)."""
    _check_restricted(model)
    return _fixed_gram_loss(model, Sigma)


def scaled_identity_loss(model: LinearTransformer, s: Float[Array, " m"]) -> Float[Array, " m"]:
    """tr(M Σ Mᵀ Σ⁻¹) = ‖Π_t (I − s A_t)‖_F² at Σ = s·I, for each s of a vector."""
    d = model.d
    return jax.vmap(lambda si: jnp.sum(residual_matrix(model, si * jnp.eye(d, dtype=jnp.result_type(si))) ** 2))(s)


def fixed_gram_population_loss(model: LinearTransformer, covariance, n_nodes: int | None = None) -> Float[Array, ""]:
    r"""The fixed-Gram population loss of Gatmiry et al. (eq. 9, without its ½), exactly:
    $\mathbb{E}_\Sigma \operatorname{tr}(M \Sigma M^\top \Sigma^{-1})$, where $M$ is the model's error map on the
    task's Gram matrix $\Sigma$ ($M = \prod_\ell (I - A_\ell \Sigma)$ for the restricted layers of eq. 6).

    Args:
        model: a `LinearTransformer` (restricted or looped, depth $L$).
        covariance: a `FixedCovariance` (one $\Sigma$) or a `ScaledIdentityCovariance` ($\Sigma = sI$, $s$ from a
            `ScalePrior`: the loss is a polynomial of degree $2L$ in $s$, integrated by Gauss-Legendre quadrature on
            each piece of the prior's support, exact with $\lceil (2L + 1)/2 \rceil$ or more nodes).
        n_nodes: quadrature nodes per piece (default $L + 1$).

    Returns:
        The loss, a scalar; a `TypeError` for a prior with no exact form (average `fixed_gram_loss` over sampled
        $\Sigma$ instead).

    Example:
        ```python
        import jax.numpy as jnp
        import jaxicl as icl
        from jaxicl.models import LinearTransformer

        d, L, eta = 4, 3, 0.2
        model = LinearTransformer.restricted(jnp.stack([eta * jnp.eye(d)] * L))  # L steps of GD, step η
        # Σ = sI with s ~ Unif[1, 4]: E_s d(1 − ηs)^(2L), integrated by hand
        cov = icl.tasks.ScaledIdentityCovariance(d, icl.tasks.UniformScale(1.0, 4.0))
        exact = d * ((1 - eta) ** (2 * L + 1) - (1 - 4 * eta) ** (2 * L + 1)) / (3 * eta * (2 * L + 1))
        loss = icl.losses.fixed_gram_population_loss(model, cov)
        assert jnp.allclose(loss, exact, rtol=1e-5)
        ```
    """
    if isinstance(covariance, FixedCovariance):
        return fixed_gram_loss(model, covariance.matrix)
    if isinstance(covariance, ScaledIdentityCovariance):
        nodes, weights = covariance.scale.quadrature(n_nodes or model.max_depth + 1)
        return jnp.sum(weights * scaled_identity_loss(model, nodes))
    raise TypeError(
        f"no exact fixed-Gram loss for {type(covariance).__name__}; average fixed_gram_loss over "
        "sampled Σ (Monte Carlo over Σ, exact over w* and x_q)."
    )


@register_population_loss(LinearTransformer, FixedGramRegression)
def _registered_fixed_gram(model: LinearTransformer, task: FixedGramRegression) -> Float[Array, ""]:
    """½ of `fixed_gram_population_loss` (jaxicl's ½ convention)."""
    try:
        return 0.5 * fixed_gram_population_loss(model, task.covariance)
    except (TypeError, ValueError) as err:
        raise no_closed_form(model, task, str(err)) from err


class GaussianXBatch(eqx.Module):
    """Statistics of a batch of Gaussian-X prompts for `gaussian_x_loss`, batch first."""

    Sigma_hat: Float[Array, "B d d"]  # X Xᵀ / n
    w: Float[Array, "B d"]
    Sigma_pop: Float[Array, "B d d"]  # covariance the prompt was drawn from

    @classmethod
    def sample(cls, task: LinearRegression, key: PRNGKeyArray, batch: int) -> "GaussianXBatch":
        """``batch`` prompts of ``task`` (w* ~ N(0, Σ⁻¹), noiseless, as in Gatmiry et al. §4.2)."""
        if task.weights != "inverse_covariance":
            raise ValueError("Gatmiry et al.'s setting draws w* ~ N(0, Σ⁻¹): use weights='inverse_covariance'.")
        if is_concrete(task.noise_std) and float(task.noise_std) != 0:
            raise ValueError("gaussian_x_loss assumes noiseless labels (realizable instances).")

        def one(k):
            k_lam, k_w, k_x = jax.random.split(k, 3)
            if isinstance(task.covariance, ScaledIdentityCovariance):  # Σ = s I: no factorisation
                s = task.covariance.scale.sample(k_lam)
                root = jnp.sqrt(s)
                w = jax.random.normal(k_w, (task.d,), s.dtype) / root
                X = root * jax.random.normal(k_x, (task.d, task.n_context), s.dtype)
                return X @ X.T / task.n_context, w, s * jnp.eye(task.d, dtype=s.dtype)
            Sig = task.covariance.sample(k_lam)
            chol = jnp.linalg.cholesky(Sig)
            w = jax.scipy.linalg.solve_triangular(
                chol, jax.random.normal(k_w, (task.d,), Sig.dtype), lower=True, trans="T"
            )
            X = chol @ jax.random.normal(k_x, (task.d, task.n_context), Sig.dtype)
            return X @ X.T / task.n_context, w, Sig

        return cls(*jax.vmap(one)(jax.random.split(key, batch)))


def gaussian_x_errors(model: LinearTransformer, batch: GaussianXBatch) -> Float[Array, " B"]:
    r"""$\mathbb{E}_{x_q}(\hat y - y_q)^2$ for each prompt of the batch (exact in $x_q$; see the module docstring)."""
    A = layer_matrices(model).astype(batch.Sigma_hat.dtype)
    v0 = jnp.einsum("bij,bj->bi", batch.Sigma_hat, batch.w)  # X y / n

    def step(carry, A_t):
        v, g = carry
        h = v @ A_t  # rows: (A_tᵀ v)ᵀ
        return (v - jnp.einsum("bij,bj->bi", batch.Sigma_hat, h), g + h), None

    (_, g), _ = jax.lax.scan(step, (v0, jnp.zeros_like(v0)), A)
    e = batch.w - g
    return jnp.einsum("bi,bij,bj->b", e, batch.Sigma_pop, e)


def gaussian_x_loss(model: LinearTransformer, batch: GaussianXBatch) -> Float[Array, ""]:
    """Monte-Carlo estimate of eq. (9) (no ½) under Gaussian X from a batch of prompts."""
    return jnp.mean(gaussian_x_errors(model, batch))


def gaussian_x_mc(
    model: LinearTransformer, task: LinearRegression, key: PRNGKeyArray, batch: int = 100_000, chunk_size: int = 4096
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(mean, standard error) of `gaussian_x_errors` over ``batch`` fresh prompts, drawn
    ``chunk_size`` at a time inside a ``lax.scan`` so memory stays bounded (eq. 9, no ½)."""
    if batch < 1:
        raise ValueError(f"gaussian_x_mc needs batch >= 1, got {batch}.")
    chunk = min(int(chunk_size), int(batch))
    n_chunks = -(-int(batch) // chunk)

    def body(carry, inp):
        k, i = inp
        e = gaussian_x_errors(model, GaussianXBatch.sample(task, k, chunk))
        e = jnp.where(i * chunk + jnp.arange(chunk) < batch, e, 0.0)
        return (carry[0] + e.sum(), carry[1] + (e**2).sum()), None

    zero = jnp.zeros((), model.params.A.dtype)
    (s, s2), _ = jax.lax.scan(body, (zero, zero), (jax.random.split(key, n_chunks), jnp.arange(n_chunks)))
    mean = s / batch
    var = jnp.maximum(s2 / batch - mean**2, 0.0) * batch / max(batch - 1, 1)
    return mean, jnp.sqrt(var / batch)
