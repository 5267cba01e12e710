"""Covariance priors: distributions over the covariance Λ of the covariates x ~ N(0, Λ).

Every prior is an ``eqx.Module`` with ``sample(key) -> Λ`` (a ``d × d`` matrix). Priors whose
first moments are known in closed form expose them, so that exact population losses can use them:

- :class:`FixedCovariance` — Λ deterministic (Zhang et al. §3.3, Ahn et al. Thm 1).
- :class:`RandomDiagonalCovariance` — Λ = c · diag(λ_1, …, λ_d), λ_i iid Gamma(k, 1)
  (k = 1 is the Exponential(1) prior of Zhang et al. §4.3 and App. E).

Later priors subclass :class:`CovariancePrior` and implement ``sample``; everything that
consumes a prior (task sampling, ``mc_loss``) only calls ``sample``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_covariance(lam, name: str = "covariance") -> None:
    """Raise ``ValueError`` unless ``lam`` is a square, symmetric, positive-definite matrix.

    Only concrete arrays are checked (inside ``jit``/``vmap`` the values are unknown).
    """
    if not _is_concrete(lam):
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
        raise ValueError(
            f"{name} must be positive definite; its smallest eigenvalue is {eig_min:.3e}."
        )


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
    """Λ = scale · diag(λ_1, …, λ_d) with λ_i iid Gamma(shape, 1) (Zhang et al. §4.3, App. E).

    ``shape = 1`` (default) gives Exponential(1) entries. ``scale`` is the factor c of App. E.
    """

    d: int = eqx.field(static=True)
    scale: Float[Array, ""]
    shape: Float[Array, ""]

    def __init__(self, d: int, scale=1.0, shape=1.0):
        if int(d) < 1:
            raise ValueError(f"RandomDiagonalCovariance needs d >= 1, got d={d}.")
        self.d = int(d)
        self.scale = jnp.asarray(scale, dtype=float)
        self.shape = jnp.asarray(shape, dtype=float)
        for name, v in (("scale", self.scale), ("shape", self.shape)):
            if _is_concrete(v) and not float(v) > 0:
                raise ValueError(f"RandomDiagonalCovariance.{name} must be > 0, got {float(v)}.")

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
    if not _is_concrete(U):
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
        if _is_concrete(scales) and not np.all(np.asarray(scales) != 0):
            raise ValueError("scales must be non-zero, or Σ = UᵀD²U is singular.")
        self.scales = scales
        self.d = int(scales.shape[0])

    def rotation(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        """A Haar-uniform orthogonal U."""
        return jax.random.orthogonal(key, self.d, dtype=self.scales.dtype)

    def sample(self, key: PRNGKeyArray) -> Float[Array, "d d"]:
        U = self.rotation(key)
        return U.T @ (self.scales[:, None] ** 2 * U)
