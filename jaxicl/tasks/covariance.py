"""Covariance priors: distributions over the covariance Λ of the covariates x ~ N(0, Λ).

Every prior is an ``eqx.Module`` with ``sample(key) -> Λ`` (a ``d × d`` matrix). Priors whose
first moments are known in closed form expose them, so that exact population losses can use them:

- `FixedCovariance` — Λ deterministic (Zhang et al. §3.3, Ahn et al. Thm 1).
- `RandomDiagonalCovariance` — Λ = c · diag(λ_1, …, λ_d), λ_i iid Gamma(k, 1)
  (k = 1 is the Exponential(1) prior of Zhang et al. §4.3 and App. E).

Later priors subclass `CovariancePrior` and implement ``sample``; everything that
consumes a prior (task sampling, ``mc_loss``) only calls ``sample``.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate
from .._validate import is_concrete


def host_array(x, dtype=None) -> Array:
    """Host data (numpy array, list, scalar) as a JAX array of ``dtype`` (default: its own, canonicalised), copied to
    the device without an XLA program: with float64 enabled, ``jnp.asarray`` compiles one per shape (jax 0.10.2)."""
    return jax.device_put(np.asarray(x, dtype=dtype))


def check_covariance(lam, name: str = "covariance") -> None:
    """Raise ``ValueError`` unless ``lam`` is a square, symmetric, positive-definite matrix.

    Only concrete arrays are checked (inside ``jit``/``vmap`` the values are unknown).
    """
    dtype = getattr(lam, "dtype", np.float64)
    if jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits < 32:
        raise TypeError(
            f"{name} is {np.dtype(dtype).name}: JAX's linear algebra (Cholesky, eigenvalues, solves) has no half precision; "
            "pass it as float32 or float64, e.g. Λ.astype(jnp.float32)."
        )
    if not is_concrete(lam):
        return
    lam = np.asarray(lam)
    if lam.ndim != 2 or lam.shape[0] != lam.shape[1]:
        raise ValueError(f"{name} must be a square (d, d) matrix, got shape {lam.shape}.")
    if lam.shape[0] < 1:
        raise ValueError(f"{name} must have d >= 1, got shape {lam.shape}.")
    if not np.all(np.isfinite(lam)):
        raise ValueError(f"{name} has non-finite entries.")
    scale = max(np.abs(lam).max(), 1e-300)
    asym = np.abs(lam - lam.T).max() / scale
    if asym > 1e-6:
        raise ValueError(
            f"{name} must be symmetric; max |Λ - Λᵀ| / max |Λ| = {asym:.2e}. "
            "Pass (Λ + Λᵀ)/2 if the asymmetry is round-off."
        )
    eig_min = np.linalg.eigvalsh((lam + lam.T) / 2).min()
    if eig_min <= 0:
        raise ValueError(f"{name} must be positive definite; its smallest eigenvalue is {eig_min:.3e}.")


class CovariancePrior(eqx.Module):
    """Base class: a distribution over d × d covariance matrices."""

    d: eqx.AbstractVar[int]

    def sample(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        raise NotImplementedError

    def sample_batch(self, key: PRNGKeyArray, batch: int) -> Float[Array, "batch d d"]:
        return jax.vmap(self.sample)(jax.random.split(key, batch))


class FixedCovariance(CovariancePrior):
    """Λ fixed. ``matrix`` is an array leaf, so Λ can be vmapped over or differentiated."""

    matrix: Float[Array, "d d"]
    d: int = eqx.field(static=True)

    def __init__(self, matrix):
        matrix = jnp.asarray(matrix)
        check_covariance(matrix, "FixedCovariance matrix")
        self.matrix = matrix
        self.d = int(matrix.shape[-1])

    def sample(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        del key
        return self.matrix


class RandomDiagonalCovariance(CovariancePrior):
    r"""A random diagonal covariance $\Lambda = c \operatorname{diag}(\lambda_1, \dots, \lambda_d)$ with
    $\lambda_i$ iid $\text{Gamma}(k, 1)$ (Zhang et al. §4.3, App. E: the "random covariance" training of Fig. 1).

    Args:
        d: dimension.
        scale: the factor $c > 0$ of App. E (the test covariances $c = 1, 4, 9$).
        shape: the Gamma shape $k > 0$; $k = 1$ (default) gives Exponential(1) entries, as in the paper.

    ``sample(key)`` returns one $d \times d$ matrix; ``raw_moments()`` the first three moments of an entry, which
    the exact losses of Thm 4.5 (eq. 4.12) use.

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        prior = icl.tasks.RandomDiagonalCovariance(5, scale=4.0)
        Lam = prior.sample(jax.random.PRNGKey(0))
        assert Lam.shape == (5, 5) and bool(jnp.all(jnp.diag(Lam) > 0))
        task = icl.tasks.LinearRegression(5, 20, prior)  # a new Λ for every prompt
        ```
    """

    d: int = eqx.field(static=True)
    scale: Float[Array, ""]
    shape: Float[Array, ""]

    def __init__(self, d: int, scale=1.0, shape=1.0):
        self.d = _validate.integer("RandomDiagonalCovariance: d", d)
        self.scale = jnp.asarray(scale, dtype=float)
        self.shape = jnp.asarray(shape, dtype=float)
        for name, v in (("scale", self.scale), ("shape", self.shape)):
            _positive_scalar(v, f"RandomDiagonalCovariance.{name}")

    def sample_eigenvalues(self, key: PRNGKeyArray) -> Float[Array, " d"]:
        return self.scale * jax.random.gamma(key, self.shape, (self.d,), dtype=self.scale.dtype)

    def sample(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        return jnp.diag(self.sample_eigenvalues(key))

    def raw_moments(self) -> tuple[Array, Array, Array]:
        """E[λ], E[λ²], E[λ³] of one diagonal entry (Gamma(k, c): c k, c² k(k+1), c³ k(k+1)(k+2))."""
        k, c = self.shape, self.scale
        return c * k, c**2 * k * (k + 1), c**3 * k * (k + 1) * (k + 2)

    def mean(self) -> Float[Array, "d d"]:
        return self.raw_moments()[0] * jnp.eye(self.d)

    def gauss_rule(self) -> tuple[Float[Array, "2"], Float[Array, "2"]]:
        """Two-node Gauss rule (nodes, weights) for one entry: exact for polynomials of degree ≤ 3."""
        return gauss_rule_two_nodes(*self.raw_moments())


def gauss_rule_two_nodes(m1, m2, m3):
    """Nodes ξ and weights ω with Σ ω ξ^j = m_j for j = 0..3 (m_0 = 1).

    The nodes are the roots of the monic degree-2 orthogonal polynomial x² + a x + b, whose
    coefficients solve E[p] = 0 and E[x p] = 0.
    """
    det = m2 - m1**2  # variance > 0
    a = (m1 * m2 - m3) / det
    b = (m3 * m1 - m2**2) / det
    disc = jnp.sqrt(a**2 - 4 * b)
    nodes = jnp.stack([(-a - disc) / 2, (-a + disc) / 2])
    w2 = (m1 - nodes[0]) / (nodes[1] - nodes[0])
    weights = jnp.stack([1 - w2, w2])
    return nodes, weights


def check_orthogonal(U, name: str = "U", tol: float = 1e-6) -> None:
    """Raise ``ValueError`` unless ``U`` is a square matrix with UᵀU = I (checked when concrete)."""
    if not is_concrete(U):
        return
    U = np.asarray(U)
    if U.ndim != 2 or U.shape[0] != U.shape[1]:
        raise ValueError(f"{name} must be a square (d, d) matrix, got shape {U.shape}.")
    err = np.abs(U.T @ U - np.eye(U.shape[0])).max()
    if not err <= tol:
        raise ValueError(
            f"{name} must be orthogonal; max |UᵀU − I| = {err:.2e} > {tol:g}. "
            "Orthonormalise it first (e.g. the Q factor of a QR decomposition)."
        )


def rotated_covariance(U, scales) -> "FixedCovariance":
    """Σ = Uᵀ D² U with D = diag(``scales``) and U orthogonal (Ahn et al. §5.3)."""
    U, scales = jnp.asarray(U), jnp.asarray(scales)
    check_orthogonal(U)
    if scales.shape != U.shape[:1]:
        raise ValueError(f"scales must have shape ({U.shape[0]},) to match U, got {scales.shape}.")
    return FixedCovariance(U.T @ jnp.diag(scales**2) @ U)


class RandomRotationCovariance(CovariancePrior):
    """Σ = Uᵀ D² U with U Haar-uniform on the orthogonal group and D = diag(``scales``) fixed
    (Ahn et al. §5.3: d = 5, D = diag(1, 1, 0.5, 0.25, 1)). Eigenvalues of Σ: ``scales²``."""

    scales: Float[Array, " d"]
    d: int = eqx.field(static=True)

    def __init__(self, scales):
        scales = jnp.asarray(scales, dtype=float)
        if scales.ndim != 1 or scales.shape[0] < 1:
            raise ValueError(f"scales must be a non-empty vector (the diagonal of D), got shape {scales.shape}.")
        if is_concrete(scales) and not np.all(np.asarray(scales) != 0):
            raise ValueError("scales must be non-zero, or Σ = UᵀD²U is singular.")
        self.scales = scales
        self.d = int(scales.shape[0])

    def rotation(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        """A Haar-uniform orthogonal U."""
        return jax.random.orthogonal(key, self.d, dtype=self.scales.dtype)

    @eqx.filter_jit  # one program, not one per operation when called eagerly
    def sample(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        U = self.rotation(key)
        return U.T @ (self.scales[:, None] ** 2 * U)


# --- scalar priors and scaled-identity / random-spectrum covariances (Gatmiry et al. §4.2, §5) ----
def _positive_scalar(x, name: str):
    if is_concrete(x):
        _validate.real(name, x, gt=0, scalar=False)


@functools.partial(jax.jit, static_argnums=0)  # eager calls (theory curves, checks): one program, not one per operation
def gauss_legendre(n_nodes: int, low, high):
    """Gauss–Legendre nodes and weights for the uniform distribution on [low, high] (weights sum to
    1): exact for polynomials of degree ≤ 2·n_nodes − 1. ``low``/``high`` may be traced."""
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    low, high = jnp.asarray(low), jnp.asarray(high)
    dtype = jnp.result_type(low, high, float)
    half = (high - low) / 2
    return (low + half * (jnp.asarray(x, dtype) + 1)), jnp.asarray(w / 2, dtype)


class ScalePrior(eqx.Module):
    """A distribution of a scalar s > 0 (the scale of Σ = s·I). ``quadrature(n)`` returns nodes and
    weights (summing to 1) that integrate polynomials of degree ≤ 2n − 1 in s exactly."""

    def sample(self, key: PRNGKeyArray) -> Float[Array, ""]:
        raise NotImplementedError

    def quadrature(self, n_nodes: int = 32) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
        raise NotImplementedError

    def support(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        raise NotImplementedError


class UniformScale(ScalePrior):
    """s ~ Unif[low, high]. ``UniformScale.kappa(κ)`` is Unif[1, κ] (Gatmiry et al. §5, Fig. 1)."""

    low: Float[Array, ""]
    high: Float[Array, ""]

    def __init__(self, low, high):
        self.low, self.high = jnp.asarray(low, dtype=float), jnp.asarray(high, dtype=float)
        _positive_scalar(self.low, "UniformScale.low")
        _positive_scalar(self.high, "UniformScale.high")
        if is_concrete(self.low) and is_concrete(self.high) and not float(self.high) >= float(self.low):
            raise ValueError(f"UniformScale needs low <= high, got [{float(self.low)}, {float(self.high)}].")

    @classmethod
    def kappa(cls, kappa):
        """Unif[1, κ]; κ ≥ 1 (κ = 1 is the single task s = 1)."""
        kappa = jnp.asarray(kappa, dtype=float)
        if is_concrete(kappa):
            _validate.real("the condition-number range κ", kappa, ge=1)
        return cls(1.0, kappa)

    def sample(self, key):
        return jax.random.uniform(key, (), self.low.dtype, self.low, self.high)

    def quadrature(self, n_nodes: int = 32):
        return gauss_legendre(n_nodes, self.low, self.high)

    def support(self):
        return self.low, self.high


class DiscreteScale(ScalePrior):
    """s uniform on {s_1, …, s_k} (Gatmiry et al. §5, D_train), or with ``probs`` a weighted set
    (zero weights let a sweep pad k to a common length)."""

    values: Float[Array, " k"]
    probs: Float[Array, " k"]

    def __init__(self, values, probs=None):
        values = jnp.atleast_1d(jnp.asarray(values, dtype=float))
        probs = (
            jnp.full(values.shape, 1.0 / values.shape[0], values.dtype)
            if probs is None
            else jnp.asarray(probs, values.dtype)
        )
        if values.ndim != 1 or probs.shape != values.shape:
            raise ValueError(
                f"DiscreteScale needs 1-D values and probs of the same shape, got {values.shape}, {probs.shape}."
            )
        if is_concrete(values):
            _validate.real("DiscreteScale: values", values, gt=0, scalar=False)
        if is_concrete(probs):
            p = np.asarray(probs)
            if np.any(p < 0) or abs(p.sum() - 1) > 1e-6:
                raise ValueError(f"DiscreteScale probs must be >= 0 and sum to 1, got {p}.")
        self.values, self.probs = values, probs

    def sample(self, key):
        return jax.random.choice(key, self.values, p=self.probs)

    def quadrature(self, n_nodes: int = 32):
        del n_nodes  # exact for every degree
        return self.values, self.probs

    def support(self):
        big = jnp.finfo(self.values.dtype).max
        live = self.probs > 0
        return jnp.min(jnp.where(live, self.values, big)), jnp.max(jnp.where(live, self.values, -big))


class WindowedScale(ScalePrior):
    r"""The scale $s$ of $\Sigma = sI$, uniform on $\bigcup_i [s_i - w, s_i + w]$ (Gatmiry et al. §5, the test
    distribution $D_\text{test}$ of Fig. 2; $w = 0$ is the training distribution $\text{Unif}\{s_1, \dots, s_k\}$).

    Args:
        centers: the $k$ training scales $s_i$ (any order; repeats allowed).
        width: the window half-width $w \ge 0$, with $\min_i s_i - w > 0$.

    Overlapping windows are merged: the density is uniform on the union, not a mixture. Sorted centres split the
    union into pieces $[\max(s_i - w, s_{i-1} + w), s_i + w]$, each weighted by its share of the union's length
    (`masses`). At $w = 0$ every piece is a point and each *distinct* centre weighs $1/k$ ($k$ distinct centres), so
    $D_\text{test}$ at $w = 0$ is $D_\text{train}$. A repeated centre adds nothing at any $w$: padding the centres
    to a fixed length by repeating one (a traced $k$, in a sweep) leaves the distribution unchanged.

    Example:
        ```python
        import jax, jax.numpy as jnp
        import jaxicl as icl

        train = icl.tasks.WindowedScale(jnp.array([1.0, 8.0, 8.0, 8.0]), 0.0)  # k = 2, padded to 4
        assert jnp.allclose(train.masses(), jnp.array([0.5, 0.5, 0.0, 0.0]))
        test = icl.tasks.WindowedScale(jnp.array([1.0, 8.0]), 0.5)
        s = jax.vmap(test.sample)(jax.random.split(jax.random.PRNGKey(0), 1000))
        assert bool(jnp.all((jnp.abs(s - 1.0) <= 0.5) | (jnp.abs(s - 8.0) <= 0.5)))
        ```
    """

    centers: Float[Array, " k"]
    width: Float[Array, ""]

    def __init__(self, centers, width):
        dtype = jnp.result_type(float)
        if is_concrete(centers):  # sorted on the host: no XLA program
            centers = host_array(np.sort(np.atleast_1d(np.asarray(centers, dtype))))
        else:
            centers = jnp.sort(jnp.atleast_1d(jnp.asarray(centers, dtype)))
        width = jnp.asarray(width, dtype=centers.dtype)
        if centers.ndim != 1:
            raise ValueError(f"WindowedScale centers must be 1-D, got shape {centers.shape}.")
        if is_concrete(width) and not float(width) >= 0:
            raise ValueError(f"the window half-width w must be >= 0, got {float(width)}.")
        if is_concrete(width) and is_concrete(centers):
            s_min, w = float(np.asarray(centers)[0]), float(width)
            if not s_min - w > 0:
                raise ValueError(
                    f"the window [{s_min - w:g}, …] leaves (0, ∞): s_min − w must be > 0 "
                    f"(s_min = {s_min:g}, w = {w:g})."
                )
        self.centers, self.width = centers, width

    def pieces(self):
        """Disjoint pieces (lo_i, hi_i) of the union, one per centre (possibly empty)."""
        return _window_pieces(self.centers, self.width)

    def masses(self):
        """The probability of each piece (`pieces`): its share of the union's length; at w = 0, 1/k for the first
        of each distinct centre and 0 for its repeats."""
        return _window_masses(self.centers, self.width)

    def sample(self, key):
        lo, hi = self.pieces()
        k1, k2 = jax.random.split(key)
        i = jax.random.choice(k1, lo.shape[0], p=self.masses())
        return lo[i] + (hi[i] - lo[i]) * jax.random.uniform(k2, (), lo.dtype)

    def quadrature(self, n_nodes: int = 32):
        return _window_quadrature(int(n_nodes), self.centers, self.width)

    def support(self):
        return self.centers[0] - self.width, self.centers[-1] + self.width


@jax.jit
def _window_pieces(centers, width):
    prev_hi = jnp.concatenate([jnp.full((1,), -jnp.inf, centers.dtype), centers[:-1] + width])
    hi = centers + width
    lo = jnp.minimum(jnp.maximum(centers - width, prev_hi), hi)
    return lo, hi


@jax.jit
def _window_masses(centers, width):
    """`WindowedScale.masses`: length shares of the pieces; at w = 0 (every piece a point), the distinct centres
    equally (sorted centres: a repeat equals its predecessor)."""
    lo, hi = _window_pieces(centers, width)
    length = hi - lo
    total = jnp.sum(length)
    distinct = jnp.concatenate([jnp.ones((1,), bool), centers[1:] != centers[:-1]]).astype(centers.dtype)
    return jnp.where(total > 0, length / jnp.maximum(total, 1e-300), distinct / jnp.sum(distinct))


@functools.partial(jax.jit, static_argnums=0)
def _window_quadrature(n_nodes: int, centers, width):
    """`WindowedScale.quadrature`: Gauss–Legendre on each piece, weighted by its probability (`_window_masses`)."""
    lo, hi = _window_pieces(centers, width)
    x, w = gauss_legendre(n_nodes, lo[:, None], hi[:, None])
    return x.ravel(), (_window_masses(centers, width)[:, None] * w).ravel()


class ScaledIdentityCovariance(CovariancePrior):
    """Σ = s·I_d with s drawn from a `ScalePrior` (Gatmiry et al. §5: Σ = sI, s ~ D)."""

    scale: ScalePrior
    d: int = eqx.field(static=True)

    def __init__(self, d: int, scale: ScalePrior):
        if int(d) < 1:
            raise ValueError(f"ScaledIdentityCovariance needs d >= 1, got d={d}.")
        if not isinstance(scale, ScalePrior):
            raise TypeError(
                f"scale must be a ScalePrior (UniformScale, DiscreteScale, WindowedScale), got {type(scale).__name__}."
            )
        self.d, self.scale = int(d), scale

    def sample(self, key):
        s = self.scale.sample(key)
        return s * jnp.eye(self.d, dtype=s.dtype)


class RandomSpectrumCovariance(CovariancePrior):
    """Σ = Uᵀ diag(λ) U with λ_i iid Unif[α, β] and U Haar-orthogonal: a random member of
    {α I ≼ Σ ≼ β I} (Gatmiry et al. Definition 1)."""

    alpha: Float[Array, ""]
    beta: Float[Array, ""]
    d: int = eqx.field(static=True)

    def __init__(self, d: int, alpha, beta):
        if int(d) < 1:
            raise ValueError(f"RandomSpectrumCovariance needs d >= 1, got d={d}.")
        self.alpha, self.beta = jnp.asarray(alpha, dtype=float), jnp.asarray(beta, dtype=float)
        _positive_scalar(self.alpha, "alpha")
        if is_concrete(self.alpha) and is_concrete(self.beta) and not float(self.alpha) < float(self.beta):
            raise ValueError(
                f"the spectrum interval needs alpha < beta, got alpha={float(self.alpha)}, beta={float(self.beta)}."
            )
        self.d = int(d)

    def sample(self, key):
        k1, k2 = jax.random.split(key)
        lam = jax.random.uniform(k1, (self.d,), self.alpha.dtype, self.alpha, self.beta)
        U = jax.random.orthogonal(k2, self.d, dtype=self.alpha.dtype)
        return U.T @ (lam[:, None] * U)
