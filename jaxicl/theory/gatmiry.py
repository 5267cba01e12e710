r"""Theory of Gatmiry, Saunshi, Reddi, Jegelka & Kumar, *On the role of depth and looping for
in-context learning with task diversity*: weight constructions, optima and bounds.

Everything is about the restricted linear transformer (eq. 6, $u = 0$, $\sigma$ = identity), whose error on
an instance with $\Sigma = X X^\top / n$ is $-w_*^\top M x_q$, $M = \prod_t (I - \Sigma A_t)$ (Lemma 4; see
`jaxicl.losses.restricted`). With $A_t = a_t I$, $M = p(\Sigma)$ for the *residual polynomial*
$p(s) = \prod_t (1 - a_t s)$, $p(0) = 1$, and the worst relative error
$|\mathrm{TF} - w_*^\top x_q| / (\|w_*\|\|x_q\|)$ over $\{\alpha I \preceq \Sigma \preceq \beta I\}$ is
$\max_{s\in[\alpha,\beta]} |p(s)|$. $\kappa = \beta/\alpha$.

- GD with a constant step (Thm 5, looped): $a = 2/(\alpha+\beta)$, worst error $((\kappa-1)/(\kappa+1))^L$.
- Chebyshev steps (Thm 2, multilayer): $a_t = 1/\lambda_t$ with $\lambda_t$ the roots of $T_L$ mapped to
  $[\alpha, \beta]$, worst error $1/T_L((\kappa+1)/(\kappa-1))$.
- Newton iteration (Thm 4, Fu et al.): $M_j = 2M_{j-1} - M_{j-1}\Sigma M_{j-1}$, $M_0 = c\Sigma$,
  $c = 2/(\alpha^2+\beta^2)$, so $I - M_L\Sigma = (I - c\Sigma^2)^{2^L}$: worst error
  $((\kappa^2-1)/(\kappa^2+1))^{2^L}$. (The paper's "$M_j = 2M_{j-1}\Sigma M_{j-1}$" drops the minus term.) An
  algorithm baseline: it is not a restricted model.
- Optima of the fixed-Gram loss for $\Sigma = sI$, $s \sim \mu$: loss$/d = \min_p \mathbb{E}_\mu\, p(s)^2$ over
  degree-$L$ $p$ with $p(0) = 1$ (multilayer) — the kernel polynomial $K_L(s, 0)/K_L(0, 0)$ with value
  $1/K_L(0, 0)$ — and $\min_a \mathbb{E}_\mu (1 - a s)^{2L}$ (looped; convex in $a$).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._validate import is_concrete
from ..models.linear_transformer import GramBatch, LinearTransformer
from ..tasks.covariance import host_array
from ..tasks.linear_regression import Prompt


def _check_interval(alpha, beta):
    if not 0 < alpha < beta:
        raise ValueError(f"need 0 < alpha < beta, got alpha={alpha}, beta={beta}.")


def _check_layers(L):
    if int(L) < 1:
        raise ValueError(f"the number of layers / loops must be >= 1, got {L}.")


# --- constructions ---------------------------------------------------------------------------------
def gd_step(alpha, beta) -> float:
    r"""The constant step $2/(\alpha+\beta)$ minimising $\max_{[\alpha,\beta]} |1 - a s|$ (Thm 5)."""
    _check_interval(alpha, beta)
    return 2.0 / (alpha + beta)


def chebyshev_steps(alpha, beta, L: int) -> np.ndarray:
    """a_t = 1/λ_t, λ_t = (β+α)/2 + (β−α)/2 · cos((2t+1)π/(2L)), t < L (proof of Thm 2)."""
    _check_interval(alpha, beta)
    _check_layers(L)
    t = np.arange(int(L))
    lam = (beta + alpha) / 2 + (beta - alpha) / 2 * np.cos((2 * t + 1) * np.pi / (2 * int(L)))
    return 1.0 / lam


def restricted_model(steps, d: int, looped: bool = False, depth=None, max_depth=None, dtype=None) -> LinearTransformer:
    """The restricted model with A_t = a_t I (``steps`` of length L; one step if ``looped``)."""
    dtype = dtype or jnp.result_type(float)
    if is_concrete(steps):  # built on the host: no XLA program for each shape
        steps = np.atleast_1d(np.asarray(steps, dtype=dtype))
        A = host_array(steps[:, None, None] * np.eye(int(d), dtype=dtype))
    else:
        steps = jnp.atleast_1d(jnp.asarray(steps, dtype=dtype))
        A = steps[:, None, None] * jnp.eye(int(d), dtype=steps.dtype)
    if looped:
        return LinearTransformer.restricted(A, looped=True, depth=depth, max_depth=max_depth)
    return LinearTransformer.restricted(A, depth=depth)


def gd_model(alpha, beta, d: int, L: int) -> LinearTransformer:
    """Thm 5: looped, A = 2/(α+β) · I, run for L loops."""
    _check_layers(L)
    return restricted_model([gd_step(alpha, beta)], d, looped=True, depth=int(L), max_depth=int(L))


def chebyshev_model(alpha, beta, d: int, L: int) -> LinearTransformer:
    """Thm 2: L layers with A_t = I/λ_t (Chebyshev roots)."""
    return restricted_model(chebyshev_steps(alpha, beta, L), d)


def gd_worst_error(kappa, L):
    """((κ−1)/(κ+1))^L."""
    return ((kappa - 1) / (kappa + 1)) ** np.asarray(L, float)


def chebyshev_worst_error(kappa, L):
    """1/T_L((κ+1)/(κ−1)), T_L(x) = cosh(L arccosh x) for x ≥ 1."""
    x = np.asarray(L, float) * np.arccosh((kappa + 1) / (kappa - 1))
    return 2 * np.exp(-x) / (1 + np.exp(-2 * x))  # 1/cosh x without overflow


def newton_residual(alpha, beta, L: int, s):
    r"""Residual $1 - m_L(s) s = (1 - c s^2)^{2^L}$, $c = 2/(\alpha^2+\beta^2)$, of $L$ Newton steps at eigenvalue $s$."""
    _check_interval(alpha, beta)
    c = 2.0 / (alpha**2 + beta**2)
    return (1 - c * np.asarray(s, float) ** 2) ** (2 ** int(L))


def newton_worst_error(kappa, L):
    r"""$((\kappa^2-1)/(\kappa^2+1))^{2^L}$."""
    return ((kappa**2 - 1) / (kappa**2 + 1)) ** (2.0 ** np.asarray(L, float))


def residual_polynomial(steps, s):
    """p(s) = Π_t (1 − a_t s) for each s (numpy, float64)."""
    steps, s = np.asarray(steps, float), np.asarray(s, float)
    return np.prod(1 - steps[:, None] * s[None, :], axis=0)


def worst_case_error(fn, alpha, beta, grid: int = 20001, refine: int = 60, candidates: int = 8) -> float:
    r"""$\max_{s\in[\alpha,\beta]} |\mathrm{fn}(s)|$ for a vectorised ``fn``: a grid, then golden-section refinement
    around each of the ``candidates`` best grid points (each local maximum is bracketed by its neighbours).
    The brackets are refined together, one call of ``fn`` per golden-section step (a jitted ``fn`` is then
    dispatched ``refine`` times, not ``candidates × refine`` times)."""
    _check_interval(alpha, beta)
    s = np.linspace(alpha, beta, grid)
    v = np.abs(np.asarray(fn(s), float))
    h = s[1] - s[0]
    cand = np.argsort(v)[-int(candidates) :]
    a, b = np.maximum(alpha, s[cand] - h), np.minimum(beta, s[cand] + h)
    g = (np.sqrt(5) - 1) / 2
    for _ in range(refine):
        c, d = b - g * (b - a), a + g * (b - a)
        fc, fd = np.split(np.abs(np.asarray(fn(np.concatenate([c, d])), float)), 2)
        a, b = np.where(fc >= fd, a, c), np.where(fc >= fd, d, b)
    return max(float(v.max()), float(np.max(np.abs(np.asarray(fn((a + b) / 2), float)))))


def model_relative_error(model: LinearTransformer, Sigma, w, x_q, n: int):
    """|TF − w*ᵀx_q| / (‖w*‖ ‖x_q‖) of ``model`` on the instance with X Xᵀ / n = Σ, through the
    model's own Gram-form forward pass (its input is Z M Zᵀ = n·[[Σ, Σw*], [w*ᵀΣ, w*ᵀΣw*]])."""
    Sigma, w, x_q = (jnp.asarray(a) for a in (Sigma, w, x_q))
    Sw = Sigma @ w
    top = jnp.concatenate([Sigma, Sw[:, None]], axis=1)
    C = n * jnp.concatenate([top, jnp.concatenate([Sw, (w @ Sw)[None]])[None]], axis=0)
    zq = jnp.concatenate([x_q, jnp.zeros((1,), x_q.dtype)])
    batch = GramBatch(C[..., None], zq[:, None], (x_q @ w)[None], jnp.asarray(n))
    pred = model.predict_gram(batch, reverse_kernel=False)[0]
    return jnp.abs(pred - x_q @ w) / (jnp.linalg.norm(w) * jnp.linalg.norm(x_q))


@eqx.filter_jit
def _scalar_errors(model: LinearTransformer, s, n):
    d = model.d
    e1 = jnp.zeros(d, s.dtype).at[0].set(1.0)
    return jax.vmap(lambda si: model_relative_error(model, si * jnp.eye(d, dtype=s.dtype), e1, e1, n))(s)


def model_scalar_error(model: LinearTransformer, n: int = 1):
    """s ↦ |p(s)|: the model's relative error at Σ = s·I, w* = x_q = e_1 (a vectorised numpy
    function of s). For A_t = a_t I this is the residual polynomial, computed by the model itself.
    Models of the same shape share one compilation (depth is an array leaf)."""
    return lambda x: np.asarray(_scalar_errors(model, jnp.asarray(x, float), n))


def newton_iteration_error(alpha, beta, L: int, Sigma) -> float:
    r"""$\|I - M_L \Sigma\|_2$ after $L$ Newton steps $M_j = 2M_{j-1} - M_{j-1} \Sigma M_{j-1}$, $M_0 = c\Sigma$ (Thm 4)."""
    _check_interval(alpha, beta)
    Sigma = np.asarray(Sigma, float)
    M = 2.0 / (alpha**2 + beta**2) * Sigma
    for _ in range(int(L)):
        M = 2 * M - M @ Sigma @ M
    return float(np.linalg.norm(np.eye(Sigma.shape[0]) - M @ Sigma, 2))


def depth_needed(worst_error_of_L, eps: float, L_max: int = 1 << 16) -> int:
    """Smallest L with worst_error_of_L(L) ≤ ε (bisection; the error must be non-increasing in L)."""
    if worst_error_of_L(L_max) > eps:
        raise ValueError(f"error {worst_error_of_L(L_max):.3g} > ε = {eps:g} even at L_max = {L_max}.")
    lo, hi = 0, int(L_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if worst_error_of_L(mid) <= eps:
            hi = mid
        else:
            lo = mid
    return hi


# --- optima of the fixed-Gram loss for Σ = s I ------------------------------------------------------
def _recurrence(nodes, weights, L):
    r"""Monic orthogonal polynomials of the discrete measure $\sum_i w_i \delta_{x_i}$ (Stieltjes): recurrence
    coefficients $\alpha_0, \dots, \alpha_L$, $\beta_1, \dots, \beta_L$, squared norms $\|p_k\|^2$, and $p_k(0)$ for
    $k \le L+1$."""
    x, w = np.asarray(nodes, float), np.asarray(weights, float)
    p_prev, p = np.zeros_like(x), np.ones_like(x)
    at0_prev, at0 = 0.0, 1.0
    alphas, betas, norms, at0s = [], [], [], [1.0]
    norm_prev = None
    for k in range(L + 1):
        norm = float(np.sum(w * p * p))
        norms.append(norm)
        if norm <= 1e-28 * norms[0] * max(1.0, float(np.max(np.abs(x)))) ** (2 * k):
            break  # the measure has only k atoms: p_k vanishes on its support
        a = float(np.sum(w * x * p * p)) / norm
        b = 0.0 if k == 0 else norm / norm_prev
        alphas.append(a)
        if k > 0:
            betas.append(b)
        p_prev, p = p, (x - a) * p - b * p_prev
        at0_prev, at0 = at0, (0 - a) * at0 - b * at0_prev
        at0s.append(at0)
        norm_prev = norm
    return np.array(alphas), np.array(betas), np.array(norms), np.array(at0s)


def optimal_polynomial(nodes, weights, L: int):
    r"""$\min$ over degree-$L$ $p$ with $p(0) = 1$ of $\sum_i w_i p(x_i)^2$ (= loss$/d$ of the best $L$-layer model
    $A_t = a_t I$ at $\Sigma = sI$, $s \sim \sum_i w_i \delta_{x_i}$); returns (steps $a_t$, minimum).

    The minimiser is the kernel polynomial $K_L(s, 0)/K_L(0, 0)$, minimum $1/K_L(0, 0)$ with
    $K_L(0, 0) = \sum_{k\le L} p_k(0)^2/\|p_k\|^2$. Its roots are the Gauss–Radau nodes with 0 prescribed:
    eigenvalues of the Jacobi matrix whose last diagonal entry is $\alpha_L + p_{L+1}(0)/p_L(0)$, less 0."""
    _check_layers(L)
    alphas, betas, norms, at0 = _recurrence(nodes, weights, int(L))
    m = len(alphas)  # number of well-defined orthogonal polynomials
    if m <= L:  # a measure with m ≤ L atoms: p vanishing on every atom, loss 0
        atoms = np.unique(np.asarray(nodes, float)[np.asarray(weights) > 0])
        steps = np.concatenate([1.0 / atoms, np.zeros(int(L) - atoms.size)])
        return steps, 0.0
    K00 = float(np.sum(at0[: L + 1] ** 2 / norms[: L + 1]))
    J = np.diag(alphas[: L + 1].copy()) + np.diag(np.sqrt(betas[:L]), 1) + np.diag(np.sqrt(betas[:L]), -1)
    J[L, L] += at0[L + 1] / at0[L]
    ev = np.linalg.eigvalsh(J)
    roots = np.delete(ev, np.argmin(np.abs(ev)))
    return 1.0 / np.sort(roots)[::-1], 1.0 / K00


def looped_optimum(nodes, weights, L: int, iters: int = 200):
    r"""$\min_a \sum_i w_i (1 - a x_i)^{2L}$ (convex in $a$), by bisection on the derivative;
    returns $(a^*, \text{minimum})$ (= loss$/d$ of the best $L$-loop model $A = aI$ at $\Sigma = sI$)."""
    _check_layers(L)
    x, w = np.asarray(nodes, float), np.asarray(weights, float)
    live = w > 0
    x, w = x[live], w[live]
    lo, hi = 0.0, 2.0 / x.min()
    for _ in range(iters):
        mid = (lo + hi) / 2
        if np.sum(w * x * (1 - mid * x) ** (2 * L - 1)) > 0:  # derivative < 0
            lo = mid
        else:
            hi = mid
    a = (lo + hi) / 2
    return a, float(np.sum(w * (1 - a * x) ** (2 * L)))


# --- Lemma 1 / Thm 1, Thm 3 -------------------------------------------------------------------------
@eqx.filter_jit  # eager, the vmap below would compile each operation of the forward pass on its own
def scaling_errors(model: LinearTransformer, prompt: Prompt, gammas):
    """Relative error |TF − w*ᵀx_q| / |w*ᵀx_q| on the scaled instances (γX, w*, γy, x_q) (Lemma 1)."""
    gammas = jnp.asarray(gammas)

    def one(g):
        p = Prompt(x=g * prompt.x, y=g * prompt.y, x_query=prompt.x_query, y_query=prompt.y_query)
        return jnp.abs(model.predict(p) - prompt.y_query) / jnp.abs(prompt.y_query)

    return jax.vmap(one)(gammas)


def adaptive_depth(model: LinearTransformer, prompt: Prompt, eps):
    r"""Thm 3 (as proved in App. E): stop at the first layer $\ell$ with
    $\|y^{(\ell)}\| \cdot \|x_q\|_{(XX^\top)^{-1}} \le \varepsilon$, where $y^{(\ell)}$ is the label row of $Z_\ell$; then
    $|\mathrm{TF}_\ell - y_q| \le \varepsilon$. (The statement's $\varepsilon/\|x_q\|_{XX^\top}$ should read
    $\varepsilon/\|x_q\|_{(XX^\top)^{-1}}$; Cauchy–Schwarz in the proof needs the inverse.)

    Returns $(\ell, |\mathrm{TF}_\ell - y_q|$, the per-layer test statistic); $\ell = -1$ if no layer passes."""
    Zs = model.all_layers(
        jnp.concatenate(
            [
                jnp.concatenate([prompt.x, prompt.x_query[None]]).T,
                jnp.concatenate([prompt.y, jnp.zeros(1, prompt.y.dtype)])[None],
            ]
        )
    )
    n = prompt.x.shape[0]
    y_rows = Zs[:, -1, :n]
    G = prompt.x.T @ prompt.x
    xq_norm = jnp.sqrt(prompt.x_query @ jnp.linalg.solve(G, prompt.x_query))
    stat = jnp.linalg.norm(y_rows, axis=1) * xq_norm
    errs = jnp.abs(-Zs[:, -1, -1] - prompt.y_query)
    passed = stat <= eps
    ell = jnp.where(jnp.any(passed), jnp.argmax(passed), -1)
    return ell, errs[jnp.maximum(ell, 0)], stat


# --- Thm 6, Thm 7, Thm 8 ----------------------------------------------------------------------------
def thm6_training_covariances(alpha, beta, d: int, L: int) -> np.ndarray:
    r"""The $L$ diagonal matrices of App. D.1: $B_t$ with $Ld$ distinct entries in $[\alpha, 2\alpha]$ for
    $t \le L-2$, and $B_{L-1} = \beta I$. $P = \frac1L \sum_t \delta_{B_t}$ is $(1/L, 0)$ right-spread-out."""
    _check_interval(alpha, beta)
    _check_layers(L)
    if beta / alpha < 10:
        raise ValueError(f"Thm 6 needs β/α >= 10, got {beta / alpha}.")
    idx = np.arange((L - 1) * d).reshape(L - 1, d) if L > 1 else np.zeros((0, d))
    diag = alpha * (1 + (idx + 1) / ((L - 1) * d + 1))
    B = np.concatenate([diag, np.full((1, d), float(beta))])
    return np.stack([np.diag(b) for b in B])


def thm6_minimizer(alpha, beta, d: int, L: int) -> LinearTransformer:
    r"""$A_t = B_t^{-1}$: zero loss on every training covariance, so a global minimiser."""
    B = thm6_training_covariances(alpha, beta, d, L)
    return LinearTransformer.restricted(np.linalg.inv(B))


def thm6_bound(eps, delta_prime, d: int, L: int, proved: bool = True) -> float:
    r"""Lower bound on the OOD loss: $\varepsilon \delta'^2 d\, 9^{L-1}$ as App. D.1 proves ($(1 - \Sigma/\beta)^2 \ge
    \delta'^2$), or the statement's $\varepsilon \delta' d\, 9^{L-1}$ (``proved=False``), which the proof does not give
    for $\delta' < 1$."""
    return eps * (delta_prime**2 if proved else delta_prime) * d * 9.0 ** (L - 1)


def looped_minimizer_diagonal(diagonals, probs, L: int) -> np.ndarray:
    r"""Looped minimiser $A^*$ of $\mathbb{E} \operatorname{tr}((I - \Sigma^{1/2} A \Sigma^{1/2})^{2L})$ over a finite
    set of *diagonal* $\Sigma$: the loss is convex in $A$ and invariant under $A \mapsto DAD$ ($D = \operatorname{diag}(\pm 1)$),
    so $A^*$ is diagonal and each entry solves the scalar problem `looped_optimum`."""
    diagonals, probs = np.asarray(diagonals, float), np.asarray(probs, float)
    return np.diag([looped_optimum(diagonals[:, i], probs, L)[0] for i in range(diagonals.shape[1])])


def thm7_bound(eps_prime, alpha, beta, d: int, L: int) -> float:
    r"""Upper bound on the OOD loss of the looped minimiser, as App. B proves it:
    $\varepsilon' \vee d(1 - \alpha/\beta)^L$ (the statement writes $\varepsilon' \wedge (1 - \alpha/\beta)^{2L}$)."""
    return max(eps_prime, d * (1 - alpha / beta) ** L)


def looped_monotone_from(A, Sigma) -> float:
    r"""$L_0$ of Thm 8: beyond it the looped loss $\operatorname{tr}((I - \Sigma^{1/2}A\Sigma^{1/2})^{2L})$ is monotone in
    $L$. With $\beta_j$ the eigenvalues of $\Sigma^{1/2}A\Sigma^{1/2}$: 1 if every $|1 - \beta_j| \le 1$ (then it
    decreases from the start), else $\max_j \ln(d/(|1-\beta_j| - 1)) / \ln|1 - \beta_j|$ over $|1 - \beta_j| > 1$."""
    A, Sigma = np.asarray(A, float), np.asarray(Sigma, float)
    ev, V = np.linalg.eigh(Sigma)
    R = (V * np.sqrt(ev)) @ V.T
    r = np.abs(1 - np.linalg.eigvalsh(R @ ((A + A.T) / 2) @ R))
    d = A.shape[0]
    big = r[r > 1]
    if big.size == 0:
        return 1.0
    return float(max(1.0, np.max(np.log(d / (big - 1)) / np.log(big))))


def nonmonotone_steps(s, L: int, gammas=(3.0, 0.5)) -> np.ndarray:
    """App. F: unequal layers a_t = γ_t / s with γ_t alternating above and below 2, so at Σ = s I
    the loss d Π_t (1 − γ_t)² goes up and down with depth."""
    _check_layers(L)
    g = np.resize(np.asarray(gammas, float), int(L))
    return g / s
