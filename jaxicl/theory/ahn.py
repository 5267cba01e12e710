r"""Theory of Ahn, Cheng, Daneshmand & Sra: linear transformers learn preconditioned GD.

Losses here follow jaxicl's convention $\tfrac12\mathbb{E}(\hat y - y_q)^2$; the paper's $f$ of eq. (5) is twice that.

- Thm 1 (one layer, $x \sim N(0, \Sigma)$, $w \sim N(0, I)$): the optimum (8) is $b = e_{d+1}$,
  $A = -[\Gamma^{-1}; 0]$ with $\Gamma = \frac{n+1}{n} \Sigma + \frac{\operatorname{tr} \Sigma}{n} I$, up to
  $(b, A) \mapsto (\gamma b, A/\gamma)$; its loss is $\tfrac12(\operatorname{tr} \Sigma - \operatorname{tr}(\Sigma^2
  \Gamma^{-1}))$ (derived from the closed form of ``jaxicl.losses.linear_transformer``).
- Lemma 2: with eq. (9) the prediction after layer $i$ is $\langle x_q, w_i\rangle$, where $w_0 = 0$ and
  $w_{i+1} = w_i + A_i \nabla R(w_i)$ (eq. 11), $R(w) = \frac1{2n} \sum_j (w^\top x_j - y_j)^2$ (eq. 10).
- Thm 4: with $w \sim N(0, \Sigma^{-1})$ the set $A_i = a_i \Sigma^{-1}$ contains (near-)critical points. In whitened
  coordinates such a model runs $w \mapsto w - a_i \bar S (w - \bar w_*)$ with $\bar S$ the whitened Gram matrix, so
  its loss $\tfrac12\mathbb{E} \sum_k \prod_i (1 - a_i \lambda_k(\bar S))^2$ depends on $a$, $d$ and $n$ only
  (`thm4_family_loss`).
- Baselines: $L$-step GD with its best constant step, $L$-step GD preconditioned by $\Sigma^{-1}$ (best constant
  step), and ordinary least squares.
- $\operatorname{Dist}(M, I) = \min_\alpha \|M - \alpha I\|_F / \|M\|_F$ (§5.3).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..models.linear_transformer import LinearTransformer
from ..tasks.linear_regression import Prompt
from .zhang import gamma  # Γ = ((n+1)/n) Σ + (tr Σ / n) I (Thm 1, eq. 8 after rotation): Zhang et al.'s Γ


# The closed forms below are jitted: the checks call them eagerly, where each jnp operation would compile a program of
# its own for every shape.
@jax.jit
def thm1_optimum(Sigma, n) -> tuple[Float[Array, " D"], Float[Array, "D d"]]:
    r"""$(b, A)$ of eq. (8): $b = e_{d+1}$, $A = -[\Gamma^{-1}; 0]$."""
    Sigma = jnp.asarray(Sigma)
    d = Sigma.shape[0]
    b = jnp.zeros(d + 1, Sigma.dtype).at[d].set(1.0)
    A = jnp.zeros((d + 1, d), Sigma.dtype).at[:d].set(-jnp.linalg.inv(gamma(Sigma, n)))
    return b, A


def thm1_model(Sigma, n) -> LinearTransformer:
    """The single-layer transformer (7) at the optimum (8)."""
    return LinearTransformer.single_layer(*thm1_optimum(Sigma, n))


@jax.jit
def thm1_min_loss(Sigma, n) -> Float[Array, ""]:
    """½(tr Σ − tr(Σ² Γ⁻¹)): the loss at the optimum (8) (half the paper's f)."""
    Sigma = jnp.asarray(Sigma)
    return 0.5 * (jnp.trace(Sigma) - jnp.trace(Sigma @ Sigma @ jnp.linalg.inv(gamma(Sigma, n))))


@jax.jit
def dist_to_identity(M: Float[Array, "... d d"]) -> Float[Array, "..."]:
    """Dist(M, I) = ‖M − αI‖_F / ‖M‖_F with α = tr(M)/d (Ahn et al. §5.3)."""
    d = M.shape[-1]
    alpha = jnp.trace(M, axis1=-2, axis2=-1) / d
    resid = M - alpha[..., None, None] * jnp.eye(d, dtype=M.dtype)
    return jnp.linalg.norm(resid, axis=(-2, -1)) / jnp.linalg.norm(M, axis=(-2, -1))


def sqrtm_psd(Sigma: Float[Array, "d d"]) -> Float[Array, "d d"]:
    r"""$\Sigma^{1/2}$ of a symmetric positive-definite matrix."""
    lam, V = jnp.linalg.eigh(Sigma)
    return (V * jnp.sqrt(lam)) @ V.T


def least_squares_gradient(prompt: Prompt, w: Float[Array, " d"]) -> Float[Array, " d"]:
    """∇R(w) = (1/n) Σ_j x_j (x_jᵀ w − y_j) of eq. (10)."""
    return prompt.x.T @ (prompt.x @ w - prompt.y) / prompt.x.shape[0]


def preconditioned_gd_iterates(prompt: Prompt, A: Float[Array, "L d d"]) -> Float[Array, "L+1 d"]:
    r"""$w_0 = 0$, $w_{i+1} = w_i + A_i \nabla R(w_i)$ (eq. 11). Lemma 2: $\langle x_q, w_i\rangle$ is the
    transformer's prediction after layer $i$ for the parametrization (9)."""

    def step(w, Ai):
        w = w + Ai @ least_squares_gradient(prompt, w)
        return w, w

    w0 = jnp.zeros(prompt.x.shape[-1], prompt.x.dtype)
    _, ws = jax.lax.scan(step, w0, A)
    return jnp.concatenate([w0[None], ws])


def gd_prediction(prompt: Prompt, step, n_steps, preconditioner=None, max_steps: int | None = None) -> Float[Array, ""]:
    """⟨x_q, w_L⟩ after ``n_steps`` of w ← w − step · H ∇R(w) from w = 0 (H = I or ``preconditioner``).

    With ``max_steps`` (static) ``n_steps`` may be traced: steps ≥ ``n_steps`` are skipped. Context
    examples that are all zeros do not change ∇R except for its 1/n, i.e. the step size, so a
    prompt padded with zero rows gives the same *best-step* loss as the shorter prompt."""
    d = prompt.x.shape[-1]
    H = jnp.eye(d, dtype=prompt.x.dtype) if preconditioner is None else preconditioner
    max_steps = int(n_steps) if max_steps is None else int(max_steps)
    active = (jnp.arange(max_steps) < n_steps).astype(prompt.x.dtype)
    A = -step * active[:, None, None] * H[None]
    return preconditioned_gd_iterates(prompt, A)[-1] @ prompt.x_query


def _half_mse(pred, y):
    return 0.5 * jnp.mean((pred - y) ** 2)


def gd_loss(prompts: Prompt, step, n_steps, preconditioner=None, max_steps: int | None = None) -> Float[Array, ""]:
    """½ mean (ŷ − y_q)² of L-step (preconditioned) GD over a batch of prompts."""
    pred = jax.vmap(lambda p: gd_prediction(p, step, n_steps, preconditioner, max_steps))(prompts)
    return _half_mse(pred, prompts.y_query)


def best_gd_step(
    prompts: Prompt, n_steps, preconditioner=None, max_steps: int | None = None, n_grid: int = 48, n_refine: int = 3
) -> Float[Array, ""]:
    """The constant step minimizing `gd_loss` on ``prompts``: a log-spaced grid over
    [1e-3, 10], then ``n_refine`` rounds of a finer grid around the best point."""
    losses_at = jax.vmap(lambda s: gd_loss(prompts, s, n_steps, preconditioner, max_steps))
    grid = jnp.logspace(-3, 1, n_grid, dtype=prompts.x.dtype)
    for _ in range(n_refine + 1):
        values = losses_at(grid)
        values = jnp.where(jnp.isfinite(values), values, jnp.inf)
        i = jnp.argmin(values)
        lo, hi = grid[jnp.maximum(i - 1, 0)], grid[jnp.minimum(i + 1, n_grid - 1)]
        best = grid[i]
        grid = jnp.linspace(lo, hi, n_grid)
    return best


def ols_prediction(prompt: Prompt) -> Float[Array, ""]:
    """⟨x_q, ŵ⟩ with ŵ the minimum-norm least-squares solution on the context."""
    w = jnp.linalg.pinv(prompt.x) @ prompt.y
    return w @ prompt.x_query


def ols_loss(prompts: Prompt) -> Float[Array, ""]:
    """½ mean (ŷ − y_q)² over a batch of prompts of least squares on each prompt's examples (`ols_prediction`)."""
    return _half_mse(jax.vmap(ols_prediction)(prompts), prompts.y_query)


def whitened_gram_eigenvalues(key: PRNGKeyArray, d: int, n: int, batch: int, dtype=None) -> Float[Array, "batch d"]:
    """Eigenvalues of S̄ = (1/n) Σ_j x̄_j x̄_jᵀ, x̄_j ~ N(0, I_d): a Monte-Carlo sample."""
    dtype = dtype or jnp.result_type(float)
    X = jax.random.normal(key, (batch, n, d), dtype)
    return jnp.linalg.eigvalsh(jnp.einsum("bni,bnj->bij", X, X) / n)


def thm4_family_loss(a: Float[Array, " L"], eigenvalues: Float[Array, "batch d"]) -> Float[Array, ""]:
    """½E Σ_k Π_i (1 − a_i λ_k)²: the loss of A_i = −a_i Σ⁻¹ (eq. 9, w ~ N(0, Σ⁻¹)), any Σ,
    estimated with a sample of whitened Gram eigenvalues (`whitened_gram_eigenvalues`)."""
    p = jnp.prod(1 - a[:, None, None] * eigenvalues[None], axis=0)
    return 0.5 * jnp.mean(jnp.sum(p**2, axis=-1))


def eigenvalue_power_sums(eigenvalues: Float[Array, "batch d"], max_power: int) -> np.ndarray:
    """μ_m = mean over the sample of Σ_k λ_k^m, m = 0 … ``max_power`` (numpy, float64)."""
    ev = np.asarray(eigenvalues, np.float64)
    return np.array([np.mean(np.sum(ev**m, axis=-1)) for m in range(int(max_power) + 1)])


def thm4_family_optimum(eigenvalues, n_layers: int, n_steps: int = 200):
    """argmin_a and min of `thm4_family_loss` (L-BFGS from a spread start: the loss is
    symmetric in the a_i, so a start with equal entries would stay on the diagonal a_i = a).

    Π_i (1 − a_i λ)² is a polynomial of degree 2L in λ, so the sample loss is ½ Σ_m c_m(a) μ_m with the
    power sums μ_m of `eigenvalue_power_sums`: the same function of a, evaluated in float64 at O(L²)
    cost whatever the sample size (on 200,000 samples in float32 each L-BFGS iteration re-read the sample,
    up to 20 times per line search once converged: 50 s for Ahn et al.'s quick reproduction). ``n_steps`` is an upper
    bound: L-BFGS stops at the first iteration that does not lower the loss (converged; iterating on at the optimum,
    where the curvature pairs s·y vanish, can send the update to 1e43). Returns a and the loss in the eigenvalues'
    dtype."""
    from ..dynamics import lbfgs

    L = int(n_layers)
    mu = eigenvalue_power_sums(eigenvalues, 2 * L)
    dtype = jnp.asarray(eigenvalues).dtype
    with jax.enable_x64(True):
        mu = jnp.asarray(mu, jnp.float64)

        def f(a):  # coefficients of p(λ) = Π_i (1 − a_i λ), lowest power first, then of p²
            c = jnp.ones(1, a.dtype)
            for i in range(L):
                c = jnp.convolve(c, jnp.stack([jnp.ones((), a.dtype), -a[i]]))
            return 0.5 * jnp.convolve(c, c) @ mu

        a = lbfgs(f, jnp.linspace(0.3, 1.5, L, dtype=jnp.float64), n_steps, ftol=0.0).params
        loss = f(a)
    return jnp.asarray(a, dtype), jnp.asarray(loss, dtype)


@jax.jit
def off_diagonal_mass(A: Float[Array, "... d d"]) -> Float[Array, "..."]:
    """‖A − diag(A)‖_F / ‖A‖_F (Thm 3: the two-layer isotropic optimum is diagonal)."""
    diag = jnp.eye(A.shape[-1], dtype=A.dtype) * A
    return jnp.linalg.norm(A - diag, axis=(-2, -1)) / jnp.linalg.norm(A, axis=(-2, -1))


@jax.jit  # one program, not one per operation
def sign_symmetrized(prompts: Prompt) -> Prompt:
    """Every prompt under all 2^d coordinate sign flips x ↦ s∘x (labels unchanged, w ↦ s∘w).

    For isotropic data the population is invariant under these flips; a training set closed under
    them makes the sample loss invariant under A_i ↦ D A_i D too, the symmetry that Thm 3's proof
    averages over. (B prompts become 2^d B.)"""
    d = prompts.x.shape[-1]
    signs = jnp.asarray(np.array(np.meshgrid(*[[1.0, -1.0]] * d, indexing="ij")).reshape(d, -1).T, prompts.x.dtype)

    def flip(s):
        return Prompt(prompts.x * s, prompts.y, prompts.x_query * s, prompts.y_query)

    flipped = jax.vmap(flip)(signs)
    return jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), flipped)
