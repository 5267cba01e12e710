"""Worked sweep example: converged population loss of LSA gradient flow over N × κ × seed.

Λ has a geometric spectrum 1 … κ (condition number κ); each point integrates gradient flow from
Assumption 3.3 and returns the final loss next to Zhang et al.'s closed-form minimum
½trΛ − ½tr(Λ²Γ⁻¹) (Lemma 5.3). N and κ arrive traced, so the whole grid is one compilation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp

from ..dynamics import gradient_flow
from ..dynamics.descent import first_flagged_point
from ..losses import lsa_population_loss
from ..models import LinearSelfAttention
from ..theory import zhang
from .settings import Sized


def geometric_covariance(d: int, kappa):
    r"""$\operatorname{diag}(\kappa^{i/(d-1)})$, $i = 0, \dots, d-1$: eigenvalues from 1 to $\kappa$ (differentiable,
    traceable in $\kappa$)."""
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
        sol = gradient_flow(
            lambda m: lsa_population_loss(m, lam, n_context),
            m0,
            self.t1,
            n_save=self.n_save,
            rtol=self.rtol,
            atol=self.atol,
            solver=self.solver,
            check=False,
        )  # checked on the host (raise_if_any_flow_failed), which names the grid point
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
    (Checked inside the program, the error could not say which point.)"""
    failures = (
        ("flow_diverged", FloatingPointError, "diverged (non-finite or exploding loss, parameters or gradient)"),
        (
            "flow_solver_failed",
            RuntimeError,
            "stopped before t1 (solver failure: loosen rtol and atol, or shorten t1; "
            "the flow is stiff for explicit solvers)",
        ),
    )
    for var, error, what in failures:
        found = first_flagged_point(ds[var])
        if found is not None:
            _, point, n_bad = found
            raise error(f"gradient flow {what} at {point} ({n_bad} of {ds[var].size} grid points).")


# --- the LSA sweep as a stage: `jaxicl sweep --stage lsa:flow`, and `jaxicl sweep FILE.toml` -----------------------
@dataclasses.dataclass(frozen=True)
class Config(Sized):
    """The settings of the LSA flow sweep (``jaxicl sweep FILE.toml``'s keys, flattened): Λ = diag(1 … κ) in d
    dimensions, N = ``n_context`` examples, gradient flow from Assumption 3.3 to ``t1``."""

    d: int = 5  # task dimension
    kappa: float = 4.0  # condition number of Λ (geometric spectrum 1 … κ)
    n_context: int = 20  # in-context examples N
    sigma: float = 0.0  # balanced init scale σ; 0: "auto", σ²‖Γ‖√d = 1 (inside Thm 4.1's condition)
    t1: float = 5000.0  # flow end time
    rtol: float = 1e-8  # ODE solver relative tolerance
    atol: float = 1e-10  # ODE solver absolute tolerance
    n_save: int = 40  # loss samples along the flow
    seed: int = 0  # PRNG seed of the init, where the grid does not sweep it
    chunk_size: int = 64  # grid points per compiled chunk (resume granularity)

    def contradictions(self) -> list[str]:
        return [] if self.n_save >= 2 else [f"n_save = {self.n_save}: a loss curve needs two samples or more"]


SIZES = {"quick": Config(), "trained": Config(), "full": Config()}  # one size: the flow is exact either way
STAGE_X64 = True


def as_toml_config(cfg: Config, grid: dict, out) -> dict:
    """``jaxicl.sweep_config``'s validated dictionary for ``cfg``, the ``grid`` (any of kappa, n_context, seed) and the
    output directory ``out``."""
    grid = dict(grid) | ({} if "seed" in grid or not cfg.seed else {"seed": [cfg.seed]})
    return {
        "task": {"d": cfg.d, "kappa": cfg.kappa, "n_context": cfg.n_context},
        "model": {"sigma": cfg.sigma or "auto"},
        "dynamics": {"t1": cfg.t1, "rtol": cfg.rtol, "atol": cfg.atol, "n_save": cfg.n_save},
        "grid": grid,
        "outputs": {"dir": str(out), "chunk_size": cfg.chunk_size},
    }


def flow(cfg: Config, grid: dict | None = None, out=None, progress: bool = False):
    """Converged population loss of LSA gradient flow over a grid of κ, N and seeds, as one compiled program
    (``jaxicl.sweep``, resumable from ``out/chunks``): the final loss, the loss curve and Lemma 5.3's minimum
    ½trΛ − ½tr(Λ²Γ⁻¹) per point (``theory_min_loss``); writes ``out/dataset.nc`` and ``out/plot.png``."""
    import tempfile

    grid = grid or {"kappa": [cfg.kappa]}
    if out is not None:
        return run_config(as_toml_config(cfg, grid, out), progress=progress or None)
    with tempfile.TemporaryDirectory(prefix="jaxicl-lsa-") as tmp:
        return run_config(as_toml_config(cfg, grid, tmp), progress=progress or None).load()


flow.grid_axes = ("kappa", "n_context", "seed")  # swept by the stage itself, as one program
SWEEPABLE = {"flow": flow}


def run_config(cfg: dict, progress: bool | None = None):
    """Run the sweep of a validated config; writes dataset.nc and plot.png; returns the dataset."""
    import jax

    from ..sweep import sweep
    from .report import save_dataset, save_figure

    task, dyn, out = cfg["task"], cfg["dynamics"], Path(cfg["outputs"]["dir"])
    sigma = None if cfg["model"]["sigma"] == "auto" else cfg["model"]["sigma"]
    point = LSAFlowPoint(
        d=task["d"], t1=dyn["t1"], rtol=dyn["rtol"], atol=dyn["atol"], n_save=dyn["n_save"], sigma=sigma
    )
    grid = {"kappa": [task["kappa"]], "n_context": [task["n_context"]], "seed": [0]}
    grid.update(cfg["grid"])
    order = list(cfg["grid"]) + [k for k in grid if k not in cfg["grid"]]  # the config's axes first
    grid = {k: grid[k] for k in order}

    def run_fn(kappa, n_context, seed, key):
        return point(kappa, n_context, key)

    with jax.enable_x64(True):
        ds = sweep(
            run_fn,
            grid,
            chunk_size=cfg["outputs"]["chunk_size"],
            out=out / "chunks",
            meta={k: cfg[k] for k in ("task", "model", "dynamics")},
            output_dims={"loss_curve": ("save",)},
            progress=progress,
        )
    raise_if_any_flow_failed(ds)
    save_dataset(ds, out / "dataset.nc")
    save_figure(default_plot(ds), out / "plot.png")
    return ds


_AXIS_LABELS = {"kappa": "κ (condition number of Λ)", "n_context": "N (examples in the prompt)", "seed": "seed"}


def default_plot(ds):
    """Simulation beside theory. Left: each point's loss at t1 (a marker per seed) against the grid's first axis, a
    colour per value of its second, with Lemma 5.3's minimum ½trΛ − ½tr(Λ²Γ⁻¹) as a dashed line of that colour.
    Right: the relative distance of the loss at t1 to that minimum (how far each flow converged). Further axes are
    shown at their first value (named in the title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    axes = [d for d in ds["final_loss"].dims if d != "seed"] or ["seed"]
    x, colour = axes[0], (axes[1] if len(axes) > 1 else None)
    fixed = {d: 0 for d in axes[2:]}
    sim, theory = ds["final_loss"].isel(fixed), ds["theory_min_loss"].isel(fixed)
    if x != "seed":
        theory = theory.isel(seed=0)
    gap = np.maximum(np.abs((sim - theory) / theory), 1e-16)  # a flow that reached the minimum to rounding
    sim, gap = sim.transpose(x, ...), gap.transpose(x, ...)  # x first, then the seeds: a point's seeds side by side
    values = ds[x].values
    xs = np.repeat(values, 1 if x == "seed" else ds.sizes["seed"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, v in enumerate(ds[colour].values if colour else [None]):
        at = {colour: v} if colour else {}
        c, label = f"C{i % 10}", (f"{colour} = {v}" if colour else None)
        left.plot(xs, sim.sel(at).values.ravel(), "o", color=c, label=label)
        left.plot(values, theory.sel(at), "--", color=c)
        right.plot(xs, gap.sel(at).values.ravel(), "o", color=c, label=label)
    left.plot([], [], "k--", label="Lemma 5.3 minimum")
    left.plot([], [], "ko", label="gradient flow at t1")
    for ax in (left, right):
        if x != "seed" and values.min() > 0 and values.max() >= 10 * values.min():
            ax.set_xscale("log")
        elif np.issubdtype(values.dtype, np.integer):
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel(_AXIS_LABELS.get(x, x))
    left.set(ylabel="population loss", title="converged loss: flow and theory")
    right.set(yscale="log", ylabel="|loss(t1) − minimum| / minimum", title="distance to the minimum at t1")
    left.legend(fontsize=8)
    if fixed:
        fig.suptitle(", ".join(f"{d} = {ds[d].values[0]}" for d in fixed), fontsize=9)
    fig.tight_layout()
    return fig
