"""Worked sweep example: converged population loss of LSA gradient flow over N × κ × seed.

Λ has a geometric spectrum 1 … κ (condition number κ); each point integrates gradient flow from
Assumption 3.3 and returns the final loss next to Zhang et al.'s closed-form minimum
½trΛ − ½tr(Λ²Γ⁻¹) (Lemma 5.3). N and κ arrive traced, so the whole grid is one compilation.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..dynamics import gradient_flow
from ..dynamics.descent import first_flagged_point
from ..losses import lsa_population_loss
from ..models import LinearSelfAttention
from ..theory import zhang


def geometric_covariance(d: int, kappa):
    """diag(κ^{i/(d−1)}), i = 0 … d−1: eigenvalues from 1 to κ (differentiable, traceable in κ)."""
    frac = jnp.linspace(0.0, 1.0, d) if d > 1 else jnp.zeros(1)
    return jnp.diag(jnp.exp(frac * jnp.log(kappa)))


@dataclasses.dataclass(frozen=True)
class LSAFlowPoint:
    """``run_fn`` for ``jaxicl.sweep``: one noiseless gradient flow per (κ, N, seed)."""

    d: int = 5
    t1: float = 5000.0
    rtol: float = 1e-8
    atol: float = 1e-10
    n_save: int = 40
    solver: str = "kvaerno5"  # large κ makes the flow stiff for explicit solvers
    sigma: float | None = None  # None: σ² ‖Γ‖_op √d = 1, inside Thm 4.1's condition

    def __call__(self, kappa, n_context, key):
        lam = geometric_covariance(self.d, kappa)
        gam_op = jnp.linalg.norm(zhang.gamma(lam, n_context), 2)
        sigma = (1.0 / (gam_op * jnp.sqrt(self.d))) ** 0.5 if self.sigma is None else self.sigma
        m0 = LinearSelfAttention.balanced_init(self.d, 1.0, key)
        m0 = jax.tree_util.tree_map(lambda w: sigma * w, m0)  # σ traced: scale the unit-σ init
        sol = gradient_flow(lambda m: lsa_population_loss(m, lam, n_context), m0, self.t1,
                            n_save=self.n_save, rtol=self.rtol, atol=self.atol, solver=self.solver,
                            check=False)  # checked on the host (raise_if_any_flow_failed): the program stays cacheable
        return {
            "final_loss": sol.losses[-1],
            "theory_min_loss": zhang.min_population_loss(lam, n_context),
            "loss_curve": sol.losses,
            "flow_diverged": sol.diverged,
            "flow_solver_failed": sol.solver_failed,
        }


def raise_if_any_flow_failed(ds) -> None:
    """The host half of the flows' check, for a dataset of `LSAFlowPoint` outputs: ``FloatingPointError``
    naming the first grid point whose flow diverged, ``RuntimeError`` for one whose solver stopped before t1.
    (Checked inside the program, the check would be a host callback, and JAX does not cache such programs.)"""
    failures = (("flow_diverged", FloatingPointError, "diverged (non-finite or exploding loss, parameters or gradient)"),
                ("flow_solver_failed", RuntimeError, "stopped before t1 (solver failure: loosen rtol and atol, or shorten t1; "
                                                     "the flow is stiff for explicit solvers)"))
    for var, error, what in failures:
        found = first_flagged_point(ds[var])
        if found is not None:
            _, point, n_bad = found
            raise error(f"gradient flow {what} at {point} ({n_bad} of {ds[var].size} grid points).")
