"""Reproduction of Gatmiry, Saunshi, Reddi, Jegelka & Kumar (2024), *On the role of depth and
looping for in-context learning with task diversity*.

Losses are the paper's eq. (9), E(ŷ − y)² **without** jaxicl's usual ½, in two conventions,
labelled everywhere: **fixed Gram** (Σ = XXᵀ/n given; exact, float64) and **Gaussian X** (the
paper's experiments, x_i ~ N(0, Σ); Monte Carlo, exact in x_q, trained in float32 with Adam on
fresh prompts). The model is the restricted linear transformer (eq. 6, u = 0, σ = identity),
multilayer (L different A_t) or looped (one A, L loops); both are one padded program with the
architecture and the depth as traced values.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from ... import dynamics, losses, tasks
from ...losses.restricted import GaussianXBatch, fixed_gram_population_loss, gaussian_x_errors, gaussian_x_mc
from ...models import LinearTransformer
from ...sweep import sweep
from ...theory import gatmiry as G
from ..report import (
    Check,
    PaperResult,
    checks_per_seed,
    fmt,
    lap_timer,
    learned_check,
    mean_and_se,
    paper_claim,
    relative_margin,
    save_dataset,
    save_paper_figure,
)

# the reproduction's names live in this package's modules (settings, theorem checks) and are all reachable from here
from ..settings import trains_as_long
from .config import LBFGS_FTOL, NAME, SETTINGS_DOCS, SIZES, TITLE, Config  # noqa: F401
from .theory_checks import (  # noqa: F401
    _depth_law_checks,
    _learned_checks,
    _monotone_from,
    _needs_two,
    check_constructions,
    check_lemma1,
    check_thm3,
    check_thm6_thm7,
    gd_relative_errors,
    learn_step_sizes,
    learned_steps_sweep,
    thm8_curves,
)

ARCH = ("multilayer", "looped")


# --- models ------------------------------------------------------------------------------------------
def padded_model(A, looped, depth) -> LinearTransformer:
    """Restricted model with ``A.shape[0]`` padded layers: ``looped`` (traced bool) ties every layer
    to A[0], ``depth`` (traced int) switches layers ≥ depth off."""
    A = jnp.where(looped, jnp.broadcast_to(A[:1], A.shape), A)
    return LinearTransformer.restricted(A, depth=depth)


def gaussian_x_task(cfg: Config, prior: tasks.ScalePrior) -> tasks.LinearRegression:
    """x_i, x_q ~ N(0, sI), w* ~ N(0, I/s), s ~ prior (§4.2, §5)."""
    return tasks.LinearRegression(cfg.d, cfg.n, tasks.ScaledIdentityCovariance(cfg.d, prior), "inverse_covariance")


def train_gaussian_x(key, cfg: Config, prior, looped, depth, max_depth: int):
    """Adam on fresh Gaussian-X prompts (cosine-decayed learning rate); returns (A, training curve).

    The curve is not checked here (an ``eqx.error_if`` would keep the sweep out of the persistent compilation
    cache): the sweeps return its `first_nonfinite_step` and the host raises on it."""
    k_init, k_train = jax.random.split(key)
    task = gaussian_x_task(cfg, prior)
    A0 = cfg.init_scale * jax.random.normal(k_init, (max_depth, cfg.d, cfg.d))

    def loss(A, k):
        return losses.gaussian_x_loss(padded_model(A, looped, depth), GaussianXBatch.sample(task, k, cfg.batch))

    opt = optax.adam(optax.cosine_decay_schedule(cfg.lr, cfg.steps, alpha=0.01))
    if cfg.clip > 0:
        opt = optax.chain(optax.clip_by_global_norm(cfg.clip), opt)
    return dynamics.optax_train(loss, A0, opt, cfg.steps, k_train, check_finite=False)


def _test(model, cfg: Config, prior, key):
    """Mean and standard error over ``test_batch`` fresh prompts, and the median of the per-prompt
    error over 8,192 of them (the Gaussian-X error is heavy-tailed: rare Wishart draws dominate the mean)."""
    task = gaussian_x_task(cfg, prior)
    k_mean, k_median = jax.random.split(key)
    mean, se = gaussian_x_mc(model, task, k_mean, cfg.test_batch, chunk_size=2048)
    return mean, se, jnp.median(gaussian_x_errors(model, GaussianXBatch.sample(task, k_median, 8192)))


# --- Fig. 1 ------------------------------------------------------------------------------------------
def fig1_sweep(cfg: Config, key, progress: bool = False) -> xr.Dataset:
    """The whole Fig. 1 grid (κ × L × architecture × seed) as **one** ``jaxicl.sweep`` call."""
    max_depth = max(cfg.depths)
    nw = cfg.curve_windows

    def run(kappa, depth, looped, seed, key):
        del seed
        k_train, k_test = jax.random.split(key)
        prior = tasks.UniformScale(1.0, kappa)
        A, curve = train_gaussian_x(k_train, cfg, prior, looped > 0, depth, max_depth)
        model = padded_model(A, looped > 0, depth)
        mean, se, median = _test(model, cfg, prior, k_test)
        fixed = fixed_gram_population_loss(model, tasks.ScaledIdentityCovariance(cfg.d, prior), max_depth + 1)
        return {
            "test_loss": mean,
            "test_se": se,
            "test_median": median,
            "fixed_gram_loss": fixed,
            "curve": curve[: nw * (cfg.steps // nw)].reshape(nw, -1).mean(1),
            "A": A,
            "diverged_at": dynamics.first_nonfinite_step(curve),
        }

    grid = {"kappa": list(cfg.kappas), "depth": list(cfg.depths), "looped": [0, 1], "seed": list(range(cfg.seeds))}
    ds = sweep(
        run,
        grid,
        key=key,
        progress=progress,
        meta={"paper": NAME, "figure": 1, "config": dataclasses.asdict(cfg)},
        output_dims={"curve": ("window",), "A": ("layer", "i", "j")},
    )
    dynamics.raise_if_diverged(ds.diverged_at, "the Fig. 1 training loss")
    return ds


def fig1_theory(cfg: Config, depths=None) -> xr.Dataset:
    """Fixed-Gram optimum (eq. 9, Σ = sI, s ~ U[1, κ]) for every κ and L: multilayer (best degree-L
    polynomial) and looped (best single step)."""
    depths = depths or tuple(range(1, max(cfg.depths) + 1))
    multi = np.zeros((len(cfg.kappas), len(depths)))
    loop = np.zeros_like(multi)
    for i, kappa in enumerate(cfg.kappas):
        x, w = (np.asarray(a) for a in tasks.UniformScale.kappa(kappa).quadrature(64))
        for j, L in enumerate(depths):
            multi[i, j] = cfg.d * G.optimal_polynomial(x, w, L)[1]
            loop[i, j] = cfg.d * G.looped_optimum(x, w, L)[1]
    return xr.Dataset(
        {"multilayer": (("kappa", "depth"), multi), "looped": (("kappa", "depth"), loop)},
        coords={"kappa": list(cfg.kappas), "depth": list(depths)},
    )


def fixed_gram_sweep(cfg: Config, key) -> xr.Dataset:
    """Train on the exact fixed-Gram loss (L-BFGS, float64) over κ × L × architecture."""
    max_depth = max(cfg.fg_depths)

    def run(kappa, depth, looped, seed, key):
        del seed
        cov = tasks.ScaledIdentityCovariance(cfg.d, tasks.UniformScale(1.0, kappa))
        A0 = 1e-2 * jax.random.normal(key, (max_depth, cfg.d, cfg.d))
        res = dynamics.lbfgs(
            lambda A: fixed_gram_population_loss(padded_model(A, looped > 0, depth), cov, max_depth + 1),
            A0,
            cfg.fg_steps,
            ftol=LBFGS_FTOL,
        )
        return {"loss": res.losses[-1]}

    grid = {"kappa": list(cfg.kappas), "depth": list(cfg.fg_depths), "looped": [0, 1], "seed": [0]}
    return sweep(
        run, grid, key=key, progress=False, meta={"paper": NAME, "figure": "fixed-gram", "steps": cfg.fg_steps}
    )


# --- Fig. 2 ------------------------------------------------------------------------------------------
def _padded_centers(k, k_max: int):
    """k values spread uniformly over [1, 8], padded to k_max by repeating the last (traced k)."""
    i = jnp.minimum(jnp.arange(k_max), k - 1).astype(float)
    return 1.0 + 7.0 * i / jnp.maximum(k - 1, 1), (jnp.arange(k_max) < k) / k


def fig2_sweep(cfg: Config, key, progress: bool = False) -> xr.Dataset:
    """Train on Unif{s_1..s_k} (k ∈ fig2_ks), test on Unif(∪[s_i − w, s_i + w]) for every w: one sweep."""
    k_max, L = max(cfg.fig2_ks), cfg.fig2_layers
    windows = jnp.asarray(cfg.fig2_windows)

    def run(k, looped, seed, key):
        del seed
        k_train, k_test = jax.random.split(key)
        centers, probs = _padded_centers(k, k_max)
        A, curve = train_gaussian_x(k_train, cfg, tasks.DiscreteScale(centers, probs), looped > 0, L, L)
        model = padded_model(A, looped > 0, L)

        def at_window(w):
            prior = tasks.WindowedScale(centers, w)
            mean, se, median = _test(model, cfg, prior, k_test)
            return (
                mean,
                se,
                median,
                fixed_gram_population_loss(model, tasks.ScaledIdentityCovariance(cfg.d, prior), L + 1),
            )

        mean, se, median, fixed = jax.vmap(at_window)(windows)
        return {
            "test_loss": mean,
            "test_se": se,
            "test_median": median,
            "fixed_gram_loss": fixed,
            "final_curve": curve[-cfg.steps // 10 :].mean(),
            "diverged_at": dynamics.first_nonfinite_step(curve),
        }

    grid = {"k": list(cfg.fig2_ks), "looped": [0, 1], "seed": list(range(cfg.seeds))}
    ds = sweep(
        run,
        grid,
        key=key,
        progress=progress,
        meta={"paper": NAME, "figure": 2, "config": dataclasses.asdict(cfg)},
        output_dims={n: ("w",) for n in ("test_loss", "test_se", "test_median", "fixed_gram_loss")},
        output_coords={"w": np.asarray(cfg.fig2_windows)},
    )
    dynamics.raise_if_diverged(ds.diverged_at, "the Fig. 2 training loss")
    theory = np.zeros((len(cfg.fig2_ks), len(cfg.fig2_windows)))
    for i, k in enumerate(cfg.fig2_ks):  # the looped fixed-Gram minimiser, evaluated exactly on each window
        a, _ = G.looped_optimum(np.linspace(1, 8, k), np.full(k, 1 / k), L)
        for j, w in enumerate(cfg.fig2_windows):
            x, wt = (np.asarray(v) for v in tasks.WindowedScale(np.linspace(1, 8, k), w).quadrature(64))
            theory[i, j] = cfg.d * np.sum(wt * (1 - a * x) ** (2 * L))
    ds["looped_fixed_gram_minimizer"] = (("k", "w"), theory)
    return ds


# --- stages a `jaxicl sweep --stage gatmiry2024:NAME` runs over a grid of settings (experiments.stage_sweep) ------
def fig1_gaussian_x_stage(cfg: Config) -> tuple[list[Check], xr.Dataset]:
    """Fig. 1's Gaussian-X models (every κ, L, architecture and ``cfg.seeds`` seeds) trained from the seed
    ``cfg.seed`` as `run` trains them: their checks and losses. A sweep over ``steps`` and ``seed`` finds the training
    at which each trained claim holds for every seed."""
    with jax.enable_x64(False):
        ds = fig1_sweep(cfg, jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 3))
    return _for_each_seed(_fig1_checks, ds, cfg), ds


def fig2_gaussian_x_stage(cfg: Config) -> tuple[list[Check], xr.Dataset]:
    """Fig. 2's models (trained on k scales, tested on widened windows) trained from the seed ``cfg.seed`` as `run`
    trains them: their checks and losses."""
    with jax.enable_x64(False):
        ds = fig2_sweep(cfg, jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 4))
    return _for_each_seed(_fig2_checks, ds, cfg), ds


SWEEPABLE = {
    "thm6_thm7": check_thm6_thm7,
    "constructions": check_constructions,
    "fig1_theory": fig1_theory,
    "learned_steps": learned_steps_sweep,
    "fig1_gaussian_x": fig1_gaussian_x_stage,
    "fig2_gaussian_x": fig2_gaussian_x_stage,
}


# --- run ---------------------------------------------------------------------------------------------
def run(
    size: str = "quick", out: Path = Path("jaxicl-report"), progress: bool = False, config: Config | None = None
) -> PaperResult:
    """Every figure and theorem check at ``size``, or at the settings ``config`` (e.g. ``dataclasses.replace(
    Config.quick(), kappas=(2.0, 16.0, 64.0))``)."""
    cfg = config or SIZES[size]
    out = Path(out)
    t_start = time.perf_counter()
    key = jax.random.PRNGKey(cfg.seed)
    checks, figures, data, notes = [], [], [], []
    lap = lap_timer(progress)

    def save(ds, name):
        save_dataset(ds, out / NAME / name)
        data.append(f"{NAME}/{name}")

    with jax.enable_x64(True):
        c, ds_con = check_constructions(cfg)
        checks += c
        save(ds_con, "constructions.nc")
        lap("constructions")
        theory = fig1_theory(cfg)
        ds_fg = fixed_gram_sweep(cfg, jax.random.fold_in(key, 1))
        checks += _fixed_gram_checks(ds_fg, theory)
        save(theory, "fig1_theory.nc")
        save(ds_fg, "fig1_fixed_gram_trained.nc")
        lap("fixed-Gram optimum and training")
        c, ds67 = check_thm6_thm7(cfg)
        checks += c
        save(ds67, "thm6_thm7.nc")
        c, ds3 = check_thm3(cfg, jax.random.fold_in(key, 2))
        checks += c
        save(ds3, "thm3.nc")
        lap("Thms 3, 6, 7")

    with jax.enable_x64(False):
        ds1 = fig1_sweep(cfg, jax.random.fold_in(key, 3), progress)
        lap("Fig. 1 (Gaussian X) sweep")
        ds2 = fig2_sweep(cfg, jax.random.fold_in(key, 4), progress)
        lap("Fig. 2 (Gaussian X) sweep")
    checks += _for_each_seed(_fig1_checks, ds1, cfg)
    checks += _for_each_seed(_fig2_checks, ds2, cfg)
    save(ds1, "fig1_gaussian_x.nc")
    save(ds2, "fig2_gaussian_x.nc")

    with jax.enable_x64(True):
        kmax, Lmax = max(cfg.kappas), max(cfg.depths)
        A_loop = np.asarray(ds1.A.sel(kappa=kmax, depth=Lmax, looped=1, seed=0).values[0], float)
        A_multi = (
            np.asarray(ds1.A.sel(kappa=kmax, depth=4, looped=0, seed=0).values, float)[:4] if 4 in cfg.depths else None
        )
        models = {"Chebyshev, κ = 8": G.chebyshev_model(1.0, 8.0, cfg.d, 4)}
        if A_multi is not None:
            models["trained multilayer (Gaussian X, κ = 8)"] = LinearTransformer.restricted(jnp.asarray(A_multi))
        c, scaling = check_lemma1(cfg, models, jax.random.fold_in(key, 5))
        checks += c
        c, ds8 = thm8_curves(cfg, A_loop, (1.0, 4.0, 8.0, 16.0, 32.0))
        checks += c
        save(ds8, "thm8.nc")
        lap("Lemma 1, Thm 8")
        ds_learned = learned_steps_sweep(cfg)
        checks += _learned_checks(ds_learned, cfg)
        save(ds_learned, "learned_steps.nc")
        lap("learned step sizes")

    notes.append(
        f"Losses are eq. (9), E(ŷ − y)² (no ½). **Gaussian X**: d = {cfg.d}, n = {cfg.n}, Adam (lr {cfg.lr:g}, cosine decay"
        + (f", the gradient clipped to global norm {cfg.clip:g}" if cfg.clip > 0 else "")
        + ") for "
        f"{cfg.steps} steps of {cfg.batch} fresh prompts, test on {cfg.test_batch} prompts, exact in x_q; A_t initialised "
        f"N(0, {cfg.init_scale:g}²), u = 0. **Fixed Gram**: Σ = XXᵀ/n = sI, exact (Gauss–Legendre in s). The fixed-Gram optimum "
        "is a lower bound for the fixed-Gram loss only; Gaussian-X losses are higher because XXᵀ/n fluctuates (its spectrum "
        "with n = 2d spans about [0.09 s, 2.9 s]). That spread makes the Gaussian-X error heavy-tailed for deep models: "
        "rare draws with a large eigenvalue of XXᵀ/n give |1 − a λ|^{2L} ≫ 1, so the mean (eq. 9) can sit well above the "
        "median (also reported). At L = 10 that mean is decided by prompts rarer than 1 in 10,000, so Fig. 1's comparisons "
        "on it are reported with their margins and asserted on losses the rare prompts do not move: depth and diversity "
        "on the fixed-Gram loss, on which every trained model is evaluated exactly (as Fig. 2's comparison is), each added "
        "layer and the looped model on the median error. Deep models train unevenly: a rare batch can throw one far off "
        "(a spike in its training curve) and leave it on a plateau above a shallower model's loss; at `--trained` clipping the "
        "gradient to about its norm at initialization (100) kept the multilayer models of all 12 draws measured off "
        "such a plateau, while tighter clipping (30 and less) made the deep looped models unstable "
        "(docs/reports/trained-size)."
    )
    figures += _figures(out, cfg, ds_con, theory, ds_fg, ds1, ds2, scaling, ds3, ds67, ds8)
    figures.append(_learned_figure(out, ds_learned, cfg))
    return PaperResult(NAME, TITLE, size, checks, figures, data, time.perf_counter() - t_start, notes, lap.stages)


def _learned_figure(out, ds: xr.Dataset, cfg: Config) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for i, kappa in enumerate(ds.kappa.values):
        color = f"C{i}"
        ax[0].plot(np.arange(1, cfg.learned_steps + 1), ds.chebyshev.values[i], "-", color=color, lw=1)
        ax[0].plot(
            np.arange(1, cfg.learned_steps + 1),
            ds.learned.values[i],
            "o",
            color=color,
            mfc="none",
            label=f"κ = {kappa:g}",
        )
    ax[0].set(
        yscale="log",
        xlabel="step (sorted)",
        ylabel="step size η_t",
        title="Learned step sizes (markers) vs Chebyshev 1/λ_t (lines)",
    )
    ax[0].legend(fontsize=8)
    k = ds.kappa.values
    ax[1].loglog(k, ds.gd_worst_error, "s--", color="gray", label="GD, best constant step ((κ−1)/(κ+1))^k")
    ax[1].loglog(k, ds.chebyshev_worst_error, "-", color="k", label="Chebyshev 1/T_k((κ+1)/(κ−1))")
    ax[1].loglog(k, ds.learned_worst_error, "o", mfc="none", color="C3", label="learned by differentiating GD")
    ax[1].set(
        xlabel="κ", ylabel=f"worst relative error over [1, κ] after {cfg.learned_steps} steps", title="Worst-case error"
    )
    ax[1].legend(fontsize=8)
    return save_paper_figure(fig, out, NAME, "learned_step_sizes.png")


def _fixed_gram_checks(ds_fg: xr.Dataset, theory: xr.Dataset) -> list[Check]:
    th_m = theory.multilayer.sel(depth=ds_fg.depth).values
    th_l = theory.looped.sel(depth=ds_fg.depth).values
    tr_m = ds_fg.loss.sel(looped=0, seed=0).values
    tr_l = ds_fg.loss.sel(looped=1, seed=0).values
    rel_l = np.abs(tr_l / th_l - 1)
    mth = theory.multilayer.values
    need = [
        int(theory.depth.values[np.argmax(row <= 0.01 * row[0])]) if np.any(row <= 0.01 * row[0]) else -1 for row in mth
    ]
    return [
        Check(
            "fixed Gram (theory): the optimal multilayer loss increases with κ at every L",
            "increasing in κ",
            "min ratio between successive κ " + (fmt(np.min(mth[1:] / mth[:-1]), 4) if len(mth) > 1 else "—"),
            "every L",
            bool(np.all(mth[1:] > mth[:-1])),
            kind="formulas",
            **_needs_two(theory.kappa.values, "kappas"),
        ),
        Check(
            "fixed Gram (theory): layers needed for 1 % of the 1-layer loss grow with κ",
            "increasing",
            f"{need} for κ = {[float(k) for k in theory.kappa.values]}",
            "—",
            bool(min(need) > 0 and np.all(np.diff(need) > 0)),
            kind="formulas",
            **_needs_two(theory.kappa.values, "kappas"),
        ),
        Check(
            "fixed Gram: trained looped model reaches the best single step min_a E(1 − as)^{2L}·d",
            fmt(th_l.ravel(), 4),
            f"max relative gap {rel_l.max():.1e}",
            "≤ 1e-6",
            bool(rel_l.max() <= 1e-6),
        ),
        Check(
            "fixed Gram: no trained multilayer model goes below the best degree-L polynomial d/K_L(0,0)",
            fmt(th_m.ravel(), 4),
            fmt(tr_m.ravel(), 4),
            "trained ≥ optimum·(1 − 1e-9)",
            bool(np.all(tr_m >= th_m * (1 - 1e-9))),
        ),
        Check(
            "fixed Gram: trained multilayer reaches that optimum (L-BFGS from small init)",
            "= optimum",
            f"max relative gap {np.max(tr_m / th_m - 1):.1e}",
            "≤ 1e-6",
            bool(np.max(tr_m / th_m - 1) <= 1e-6),
        ),
    ]


def trained_enough(cfg: Config) -> bool:
    """Whether Fig. 1's Gaussian-X models train at least as long as at ``--trained`` (2,000 Adam steps), over at
    least its three seeds: the smallest training at which each of Fig. 1's trained claims held for each of three seeds
    (``jaxicl sweep --stage gatmiry2024:fig1_gaussian_x``, docs/reports/trained-size). Only there are those claims
    asserted, for every seed; a shorter run shows them "not reproduced" where they fail, with their margin."""
    return _trained_as(cfg)[0]


def _trained_as(cfg: Config, at: str = "trained") -> tuple[bool, str]:
    """Whether ``cfg``'s models train at least as much as at the size ``at`` (steps, prompts per step, seeds), and the
    reason a claim asserted from there is not asserted at ``cfg`` (`trains_as_long`)."""
    t = SIZES[at]
    return trains_as_long(
        at, Adam_steps=(cfg.steps, t.steps), prompts_per_step=(cfg.batch, t.batch), seeds=(cfg.seeds, t.seeds)
    )


def _for_each_seed(checks_of, ds: xr.Dataset, cfg: Config) -> list[Check]:
    """``checks_of(ds, cfg)`` for each seed of ``ds`` apart (`checks_per_seed`) where the trained claims are asserted
    (`trained_enough`); elsewhere once, on the mean over the seeds."""
    if not trained_enough(cfg):
        return checks_of(ds, cfg)
    return checks_per_seed(lambda one: checks_of(one, cfg), ds, keep_dim=True)


# A Gaussian-X model has learned when its fixed-Gram loss is below this fraction of the zero estimator's, E y² = d
# (w* ~ N(0, Σ⁻¹), x_q ~ N(0, Σ)): an untrained A ≈ 0 sits at 1; one trained layer reaches 0.20-0.27 at κ = 2-8 (quick)
LEARNED_FRACTION = 0.6


def _learned_rows(ds: xr.Dataset, figure: str, cfg: Config, dims: tuple) -> Check:
    """`learned_check` for every model of a Gaussian-X sweep (its coordinates ``dims``, every seed): its fixed-Gram
    loss (exact) ÷ the zero estimator's, d. Not its Gaussian-X mean: at large L that mean is decided by rare prompts
    (`GAUSSIAN_X_MEAN`), so a model that learned can show a mean above d on one test set and far below it on another."""
    import itertools

    ratios = {}
    for point in itertools.product(*(ds[d].values for d in dims)):
        name = ", ".join(f"{d} = {v:g}" for d, v in zip(dims, point))
        ratios[name] = ds.fixed_gram_loss.sel(dict(zip(dims, point))).values / cfg.d
    worst = max(ratios, key=lambda k: np.max(ratios[k]))
    c = learned_check(
        figure, ratios, LEARNED_FRACTION, trivial="the zero estimator's (d)", where="on the fixed-Gram loss (exact)"
    )
    c.simulated = f"worst {worst}: {fmt(np.max(ratios[worst]), 3)} ({len(ratios)} models × {ds.sizes['seed']} seeds)"
    return c


# The Gaussian-X mean loss of the deep models is decided by rare prompts: a draw of XXᵀ/n with a large eigenvalue λ
# gives |1 − aλ|^{2L} ≫ 1. At --trained the largest 0.01 % of a million prompts carried 8-97 % of an L = 10 model's
# mean, and the Fig. 1 comparisons on that mean held on 20,000 test prompts and failed on 100,000 for a seed of each
# of four draws (docs/reports/trained-size). So they are reported with their margins, and each is asserted on a
# loss that does not depend on the rare prompts: depth and diversity on the fixed-Gram loss (Σ = XXᵀ/n = sI, §4.2;
# exact), whose optimum falls with L and rises with κ (Thms 2, 4; the fixed-Gram rows); each added layer and the
# looped model on the median per-prompt error on Gaussian-X prompts, because their reasons are about the loss the
# models train on (a deeper model can switch a layer off; looping shares the layers), not about the exact one, on
# which the optimal looped model is far above the multilayer one at large L.
GAUSSIAN_X_MEAN = (
    "the Gaussian-X mean of the deepest models is decided by prompts rarer than 1 in 10,000 (a large eigenvalue of "
    "XXᵀ/n), so it depends on which rare prompts the test set holds"
)
# the statistics Fig. 1's comparisons are read off, as each row's claim begins (short: a sweep's table shows the
# first 90 characters of a claim, and the comparison must be among them)
FIG1_BASES = {
    "mean": "Fig. 1 on the Gaussian-X mean (the paper's experiment, Monte Carlo)",
    "exact": "Fig. 1 on the fixed-Gram loss (Σ = XXᵀ/n = sI, §4.2; exact)",
    "median": "Fig. 1 on the median per-prompt error (Gaussian-X prompts)",
}


def _fig1_basis(cfg: Config, basis: str) -> dict:
    """What Fig. 1's comparisons are read off (`FIG1_BASES`): the fixed-Gram loss or the median per-prompt error
    (asserted from --trained), or the paper's Gaussian-X test loss (Monte Carlo; reported with its margin, asserted at
    no size: `GAUSSIAN_X_MEAN`)."""
    if basis != "mean":
        asserted, reason = _trained_as(cfg)
        return {"label": FIG1_BASES[basis], "assert_if": asserted, "reason": reason, "asserted_at": "--trained"}
    return {
        "label": FIG1_BASES[basis],
        "assert_if": False,
        "reason": GAUSSIAN_X_MEAN,
        "asserted_at": "no size: on 100,000 test prompts it failed for a seed of each of four draws that passed on "
        "20,000 (docs/reports/trained-size); a row on the fixed-Gram loss or on the median error asserts it",
    }


def _fig1_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    """Fig. 1's rows from the Gaussian-X models of ``ds`` (`fig1_sweep`'s), the losses averaged over its seeds: the
    comparisons on the paper's Gaussian-X test loss (reported), and each asserted on the fixed-Gram loss or on the
    median per-prompt error (`GAUSSIAN_X_MEAN`)."""

    def by_arch(v):  # (kappa, depth) arrays of the multilayer and the looped models, mean over the seeds
        m = v.mean("seed")
        return m.sel(looped=0).values, m.sel(looped=1).values

    multi, loop = by_arch(ds.test_loss)
    multi_se = np.sqrt((ds.test_se.sel(looped=0) ** 2).sum("seed")).values / ds.sizes["seed"]  # of the mean
    exact_multi, exact_loop = by_arch(ds.fixed_gram_loss)
    median_multi, median_loop = by_arch(ds.test_median)
    mean, exact, median = (_fig1_basis(cfg, b) for b in ("mean", "exact", "median"))
    return [
        _learned_rows(ds, "Fig. 1", cfg, ("kappa", "depth", "looped")),
        _fig1_diversity_at_one(multi, loop, cfg),
        _fig1_depth_check(multi, loop, cfg, mean),
        _fig1_each_layer_check(multi, multi_se, cfg, mean),
        _fig1_diversity_check(multi, loop, cfg, mean),
        _fig1_looped_check(multi, loop, mean),
        _fig1_depth_check(exact_multi, exact_loop, cfg, exact),
        _fig1_diversity_check(exact_multi, exact_loop, cfg, exact),
        _fig1_each_layer_check(median_multi, None, cfg, median),
        _fig1_looped_check(median_multi, median_loop, median),
        *_fig1_tables(multi, loop, median_multi, median_loop),
        *_fig1_convergence(ds),
    ]


def _claim(basis: dict, claim: str, *args, missing_premise: dict | None = None, **kwargs) -> Check:
    """`paper_claim` for one of Fig. 1's comparisons on ``basis`` (`_fig1_basis`); ``missing_premise``: a premise
    that does not hold at these settings (`_needs_two`'s arguments), else empty."""
    return paper_claim(
        f"{basis['label']}: {claim}",
        *args,
        assert_if=basis["assert_if"],
        reason=(missing_premise or {}).get("reason") or basis["reason"],
        applies=not missing_premise,
        asserted_at=basis["asserted_at"],
        **kwargs,
    )


def _fig1_depth_check(multi, loop, cfg: Config, basis: dict) -> Check:
    """Depth helps: the loss at the largest L below half the loss at the smallest (``multi``, ``loop``: (κ, L))."""
    i0, i1 = int(np.argmin(cfg.depths)), int(np.argmax(cfg.depths))
    return _claim(
        basis,
        "depth helps: loss at the largest L below half the loss at the smallest, every κ and architecture",
        "decreasing in L",
        f"L = {cfg.depths[i0]}: {fmt(multi[:, i0], 3)}; L = {cfg.depths[i1]}: {fmt(multi[:, i1], 3)} "
        f"(multilayer), {fmt(loop[:, i1], 3)} (looped)",
        "ratio < 0.5",
        bool(np.all(multi[:, i1] < 0.5 * multi[:, i0]) and np.all(loop[:, i1] < 0.5 * loop[:, i0])),
        missing_premise=_needs_two(cfg.depths, "depths"),
        margin=relative_margin(max(np.max(multi[:, i1] / multi[:, i0]), np.max(loop[:, i1] / loop[:, i0])), 0.5)
        + " (worst ratio against 0.5)",
    )


# On the Gaussian-X loss an added layer may raise the multilayer loss by at most this many standard errors of the
# difference of the two Monte-Carlo test losses (independent prompts); the deep models' Gaussian-X errors are
# heavy-tailed, so a model that learned can sit within a few standard errors of a shallower one (0.17 below it at
# --trained's training with the seed setting 1: κ = 8, L = 6 → 10, the deeper model's standard error 0.32;
# docs/reports/trained-size). The median error, asserted, may not rise at all: at --trained each added layer
# lowers it by a third or more.
EACH_LAYER_SE = 2.0


def _fig1_each_layer_check(multi, multi_se, cfg: Config, basis: dict) -> Check:
    """No added layer raises the multilayer model's loss: from each L of ``cfg.depths`` to the next it rises by at
    most `EACH_LAYER_SE` standard errors (``multi``, ``multi_se``: (κ, L); ``multi_se`` None: a statistic without
    one, the median error, which may not rise). At the optimum it never rises (a deeper multilayer model can switch
    a layer off, A_t = 0), and Fig. 1 shows it falling; a deep model that training left on a plateau above a
    shallower one's loss breaks it between two intermediate depths, where the row on the largest against the
    smallest L still passes. The looped model has no such argument (a loop cannot be switched off alone), and is
    left to the factor-2 comparison with the multilayer one."""
    order = np.argsort(cfg.depths)
    loss = multi[:, order]
    if multi_se is None:  # relative change
        rise, unit, limit = loss[:, 1:] / loss[:, :-1] - 1, "relative", 0.0
    else:
        se = multi_se[:, order]
        rise = (loss[:, 1:] - loss[:, :-1]) / np.hypot(se[:, :-1], se[:, 1:])
        unit, limit = "standard errors", EACH_LAYER_SE
    depths = [int(cfg.depths[j]) for j in order]
    worst, simulated = np.nan, "one depth"
    if rise.size:
        i, j = np.unravel_index(np.argmax(rise), rise.shape)
        worst = float(rise[i, j])
        simulated = (
            f"largest change {worst:+.3g} {unit}, at κ = {cfg.kappas[i]:g}, L = {depths[j]} → "
            f"{depths[j + 1]} ({fmt(loss[i, j], 3)} → {fmt(loss[i, j + 1], 3)})"
        )
    return _claim(
        basis,
        f"no added layer raises the multilayer model's loss (from every L to the next, {depths}, every κ; a deeper "
        "model can switch a layer off, so at the optimum the loss never rises)",
        "non-increasing in L",
        simulated,
        "no rise" if multi_se is None else f"rise ≤ {EACH_LAYER_SE:g} standard errors of the difference",
        bool(worst <= limit),
        missing_premise=_needs_two(cfg.depths, "depths"),
        margin=f"largest change {worst:+.3g} {unit} against {limit:+g}",
    )


def _successive_kappa_ratios(multi, loop, cfg: Config, j: int):
    """The loss at depth index ``j`` of each κ ÷ that of the next smaller κ, both architectures."""
    by_kappa = np.argsort(cfg.kappas)
    return np.concatenate([x[by_kappa, j][1:] / x[by_kappa, j][:-1] for x in (multi, loop)])


def _fig1_diversity_at_one(multi, loop, cfg: Config) -> Check:
    """More task diversity costs more at the smallest L (one layer: no heavy tail; asserted at every size)."""
    i0 = int(np.argmin(cfg.depths))
    L0 = cfg.depths[i0]
    one = " (one layer: the looped and the multilayer model are one model)" if L0 == 1 else " (both architectures)"
    return Check(
        f"Fig. 1: more task diversity costs more: at L = {L0} the loss increases with κ{one}",
        "increasing in κ",
        f"multilayer {fmt(multi[:, i0], 3)}, looped {fmt(loop[:, i0], 3)}",
        "strict",
        bool(len(cfg.kappas) > 1 and np.all(_successive_kappa_ratios(multi, loop, cfg, i0) > 1)),
        stochastic=True,
        **_needs_two(cfg.kappas, "kappas"),
    )


def _fig1_diversity_check(multi, loop, cfg: Config, basis: dict) -> Check:
    """More task diversity costs more at every L deeper than the smallest, both architectures."""
    L0 = min(cfg.depths)
    deeper = [j for j in range(len(cfg.depths)) if cfg.depths[j] != L0]
    worst = (
        min((float(_successive_kappa_ratios(multi, loop, cfg, j).min()) for j in deeper), default=np.nan)
        if len(cfg.kappas) > 1
        else np.nan
    )
    return _claim(
        basis,
        f"more task diversity costs more at every deeper L ({[cfg.depths[j] for j in deeper]}; both architectures)",
        "increasing in κ",
        f"smallest ratio between successive κ {fmt(worst, 3)}",
        "strict, every L and architecture",
        bool(worst > 1),
        missing_premise=_needs_two(cfg.kappas, "kappas") or ({} if deeper else {"reason": "one depth"}),
        margin=relative_margin(worst, 1.0, below=False) + " (smallest successive-κ ratio against 1)",
    )


def _fig1_looped_check(multi, loop, basis: dict) -> Check:
    """Fig. 1(b): the looped model with L loops is competitive with L layers — not more than twice the multilayer
    model's loss. One-sided: a looped model below the multilayer one does not contradict the claim."""
    ratio = loop / multi
    return _claim(
        basis,
        "looped with L loops is competitive with L layers (Fig. 1(b); every κ, L)",
        "looped ≤ 2 × multilayer",
        f"looped/multilayer {fmt(ratio.min(), 3)}–{fmt(ratio.max(), 3)}",
        "at most a factor 2 above",
        bool(np.all(ratio <= 2.0)),
        margin=f"{2.0 / ratio.max():.3g}× inside the factor 2",
    )


def _fig1_tables(multi, loop, median_multi, median_loop) -> list[Check]:
    """The reported tables: the mean loss and the median per-prompt error for every (κ, L) (each (κ, L), mean over
    the seeds)."""

    def rows(m, lp):
        return "multilayer " + "; ".join(fmt(r, 3) for r in m) + " — looped " + "; ".join(fmt(r, 3) for r in lp)

    return [
        Check(
            "Fig. 1: loss for every (κ, L) (Gaussian X, mean over seeds; rows κ, columns L)",
            "—",
            rows(multi, loop),
            "—",
            None,
        ),
        Check(
            "Fig. 1: median per-prompt error (robust to the heavy Gaussian-X tail), rows κ",
            "—",
            rows(median_multi, median_loop),
            "—",
            None,
        ),
    ]


def _fig1_convergence(ds: xr.Dataset) -> list[Check]:
    """How far the Gaussian-X training moved over its last two windows (reported)."""
    curve = ds.curve.mean("seed").values
    change = np.abs(curve[..., -1] / curve[..., -2] - 1)
    return [
        Check(
            "Gaussian X training has converged: change of the windowed training loss over the last two windows",
            "small",
            f"median {np.median(change):.2%}, max {change.max():.2%}",
            "—",
            None,
        )
    ]


# Thms 6-7's comparison on the trained models: the looped model's excess loss out of distribution (on the theorems'
# loss, Σ = sI exactly) is at most this fraction of the multilayer model's. At --trained and --full it is 0.58-0.78
# for each k and seed (docs/reports/trained-size); a looped model that lost its weight sharing sits at 1
FIG2_EXCESS_FRACTION = 0.9


def _fig2_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    """Fig. 2's rows from the models of ``ds`` (`fig2_sweep`'s), the losses averaged over its seeds: what they learned,
    the paper's experiment (the Gaussian-X test loss, Monte Carlo) and Thms 6-7's comparison on the theorems' loss
    (Σ = XX^⊤ = sI exactly, §4.2)."""
    learned = _learned_rows(ds.isel(w=0), "Fig. 2", cfg, ("k", "looped"))
    ks = [int(k) for k in ds.k.values]
    m = ds.test_loss.mean("seed")
    grow = m.isel(w=-1) / m.isel(w=0)
    g_m, g_l = grow.sel(looped=0).values, grow.sel(looped=1).values
    rel_se = float((ds.test_se / ds.test_loss).max())
    w_max = float(ds.w.values[-1])
    mean_over = f"mean over {ds.sizes['seed']} seeds; " if ds.sizes["seed"] > 1 else ""
    rows = [
        learned,
        paper_claim(
            "Fig. 2 (the paper's experiment: Gaussian-X test prompts, Monte Carlo): out-of-distribution degradation "
            "loss(w = max)/loss(w = 0), looped vs multilayer, per k",
            'looped ≤ multilayer ("much more robust", §5)',
            f"multilayer {fmt(g_m, 4)}, looped {fmt(g_l, 4)} for k = {ks} ({mean_over}Monte-Carlo standard error "
            f"of each loss up to {rel_se:.1%})",
            "every k",
            bool(np.all(g_l <= g_m)),
            assert_if=False,
            reason=f"both architectures degrade by {min(g_m.min(), g_l.min()) - 1:.1%}–"
            f"{max(g_m.max(), g_l.max()) - 1:.1%} at w = {w_max:g}, and the two degradations differ by about the "
            "Monte-Carlo error of the heavy-tailed Gaussian-X loss",
            margin=relative_margin(np.max(g_l / g_m), 1.0) + " (worst looped ÷ multilayer)",
            asserted_at="no size: at the paper's training (--full) too the two differ by about their Monte-Carlo "
            "error, in either direction for some seed; the row on Thms 6-7's loss asserts the comparison exactly",
        ),
    ]
    f = ds.fixed_gram_loss.mean("seed")
    excess = f.isel(w=-1) / f.isel(w=0) - 1
    e_m, e_l = excess.sel(looped=0).values, excess.sel(looped=1).values
    share = np.where(e_m > 0, e_l / np.where(e_m > 0, e_m, 1.0), np.inf)  # a multilayer model that does not degrade
    rows.append(
        paper_claim(
            "Fig. 2 on Thms 6-7's loss (Σ = XX^⊤ = sI exactly, §4.2; the trained models evaluated exactly): "
            "excess loss out of distribution, loss(w = max)/loss(w = 0) − 1, looped vs multilayer, per k",
            f"looped ≤ {FIG2_EXCESS_FRACTION:g} × multilayer",
            f"multilayer {fmt(e_m, 3)}, looped {fmt(e_l, 3)} for k = {ks} (looped ÷ multilayer {fmt(share, 3)})",
            "every k",
            bool(np.all(share <= FIG2_EXCESS_FRACTION)),
            trained_enough(cfg),
            _trained_as(cfg)[1],
            margin=relative_margin(np.max(share), FIG2_EXCESS_FRACTION) + " (worst looped ÷ multilayer)",
            asserted_at="--trained",
        )
    )
    return rows


def _figures(out, cfg, ds_con, theory, ds_fg, ds1, ds2, scaling, ds3, ds67, ds8):
    """The paper's figures, each from its datasets: Fig. 1 (depth), Fig. 2 (out of distribution), the constructions
    with Lemma 1 and Thm 3, and Thms 6-8."""
    import matplotlib

    matplotlib.use("Agg")
    return [
        _fig1_figure(out, cfg, theory, ds_fg, ds1),
        _fig2_figure(out, cfg, ds2),
        _constructions_figure(out, cfg, ds_con, scaling, ds3),
        _thm678_figure(out, ds67, ds8),
    ]


def _fig1_figure(out, cfg, theory, ds_fg, ds1) -> str:
    """Fig. 1: the Gaussian-X test loss over depth, multilayer and looped, against the fixed-Gram optimum; the
    fixed-Gram models trained by L-BFGS, and the Gaussian-X models' fixed-Gram loss (depth and diversity asserted)."""
    import matplotlib.pyplot as plt

    colors = dict(zip(cfg.kappas, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6), layout="constrained")
    for ax, arch, looped in ((axes[0], "multilayer (L layers)", 0), (axes[1], "looped (L loops)", 1)):
        for kappa in cfg.kappas:
            v = ds1.test_loss.sel(kappa=kappa, looped=looped)
            mean, se = mean_and_se(v, axis=v.get_axis_num("seed"))
            ax.errorbar(
                ds1.depth,
                mean,
                yerr=2 * se,
                marker="o",
                ms=3,
                capsize=2,
                color=colors[kappa],
                label=f"κ = {kappa:g}",
            )
            ax.plot(
                ds1.depth, ds1.test_median.sel(kappa=kappa, looped=looped).mean("seed"), ":", color=colors[kappa], lw=1
            )
            th = theory[ARCH[looped]].sel(kappa=kappa)
            ax.plot(th.depth, th, "--", color=colors[kappa], lw=1)
        ax.set(
            yscale="log",
            xlabel="L",
            ylabel="test loss E(ŷ − y)²",
            title=f"Fig. 1, {arch}:\nGaussian X mean (markers, ±2 s.e.), median error (dotted);\n"
            "dashed: fixed-Gram optimum (theory)",
        )
        ax.legend(fontsize=8)
    for kappa in cfg.kappas:
        for looped, mk in ((0, "o"), (1, "s")):
            tr = ds_fg.loss.sel(kappa=kappa, looped=looped, seed=0)
            axes[2].plot(tr.depth, tr, mk, color=colors[kappa], mfc="none" if looped else colors[kappa], ms=6)
            gx = ds1.fixed_gram_loss.sel(kappa=kappa, looped=looped).mean("seed")
            axes[2].plot(ds1.depth, gx, "+" if looped else "x", color=colors[kappa], ms=7)
            th = theory[ARCH[looped]].sel(kappa=kappa)
            axes[2].plot(
                th.depth,
                th,
                "-" if looped == 0 else ":",
                color=colors[kappa],
                lw=1,
                label=f"κ = {kappa:g}, {ARCH[looped]}",
            )
    axes[2].set(
        yscale="log",
        xlabel="L",
        ylabel="fixed-Gram loss (exact)",
        title="fixed Gram (exact): optimum (lines), trained by L-BFGS\n(o: filled multilayer, open looped), "
        "the Gaussian-X\nmodels (x multilayer, + looped: depth and diversity asserted)",
    )
    axes[2].legend(fontsize=7)
    return save_paper_figure(fig, out, NAME, "fig1_depth.png")


def _fig2_figure(out, cfg, ds2) -> str:
    """Fig. 2: for each number k of training scales, the test loss over the window half-width w (top) and the
    degradation loss(w)/loss(0) that the two Fig. 2 rows compare (bottom): on Gaussian-X prompts (the paper's
    experiment) and on Thms 6-7's loss (Σ = sI exactly)."""
    import matplotlib.pyplot as plt

    ks = cfg.fig2_ks
    fig, axes = plt.subplots(2, len(ks), figsize=(5 * len(ks), 7.2), layout="constrained", squeeze=False)
    for j, k in enumerate(ks):
        top, bottom = axes[0, j], axes[1, j]
        for looped, color in ((0, "tab:red"), (1, "tab:blue")):
            v = ds2.test_loss.sel(k=k, looped=looped)
            mean, se = mean_and_se(v, axis=v.get_axis_num("seed"))
            top.errorbar(
                ds2.w,
                mean,
                yerr=2 * se,
                marker="o",
                ms=3,
                capsize=2,
                color=color,
                label=f"{ARCH[looped]} (Gaussian X)",
            )
            for name, style, label in (("test_loss", "o-", "Gaussian X"), ("fixed_gram_loss", "s:", "Σ = sI exactly")):
                m = ds2[name].sel(k=k, looped=looped).mean("seed")
                bottom.plot(ds2.w, m / m.isel(w=0), style, ms=3, color=color, label=f"{ARCH[looped]} ({label})")
        top.plot(
            ds2.w,
            ds2.looped_fixed_gram_minimizer.sel(k=k),
            "--",
            color="tab:blue",
            lw=1,
            label="looped fixed-Gram minimiser (exact)",
        )
        top.set(
            yscale="log",
            xlabel="window half-width w",
            ylabel="test loss E(ŷ − y)²",
            title=f"Fig. 2: k = {k} training scales, L = {cfg.fig2_layers}",
        )
        bottom.set(xlabel="window half-width w", ylabel="loss(w) / loss(0)", title=f"degradation, k = {k}")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    return save_paper_figure(fig, out, NAME, "fig2_ood.png")


def _constructions_figure(out, cfg, ds_con, scaling, ds3) -> str:
    """The constructions (GD, Chebyshev, Newton: formulas and through the model), Lemma 1's scaling and Thm 3's
    adaptive depth."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), layout="constrained")
    Ls = np.arange(1, 65)
    for kappa, color in zip(cfg.construct_kappas, ("tab:blue", "tab:orange", "tab:green")):
        axes[0].semilogy(Ls, G.gd_worst_error(kappa, Ls), ":", color=color, label=f"GD, κ = {kappa:g}")
        axes[0].semilogy(Ls, G.chebyshev_worst_error(kappa, Ls), "-", color=color, label=f"Chebyshev, κ = {kappa:g}")
        axes[0].semilogy(
            np.arange(1, 16),
            G.newton_worst_error(kappa, np.arange(1, 16)),
            "--",
            color=color,
            label=f"Newton, κ = {kappa:g}",
        )
        sim = ds_con.simulated.sel(kappa=kappa)
        axes[0].plot(ds_con.depth, sim.sel(method="gd"), "v", color=color, ms=4)
        axes[0].plot(ds_con.depth, sim.sel(method="chebyshev"), "o", color=color, ms=4)
        axes[0].plot(ds_con.depth, sim.sel(method="newton"), "s", color=color, ms=4)
    axes[0].set(
        ylim=(1e-8, 2),
        xlabel="layers / loops / Newton steps L",
        ylabel="worst relative error over [1, κ]",
        title="constructions: formulas (lines), through the model (markers)",
    )
    axes[0].legend(fontsize=6, ncol=3)
    for name, (g, e) in scaling.items():
        axes[1].loglog(g, e, label=name)
    axes[1].axhline(0.25, color="k", ls="--", lw=1)
    axes[1].set(xlabel="scaling γ of (X, y)", ylabel="relative error", title="Lemma 1: error vs scaling, γ ∈ [1, 36L²]")
    axes[1].legend(fontsize=7)
    used = ds3.layers_used
    axes[2].errorbar(
        ds3.kappa,
        used.mean("instance"),
        yerr=[used.mean("instance") - used.min("instance"), used.max("instance") - used.mean("instance")],
        marker="o",
        capsize=3,
    )
    axes[2].set_xscale("log")
    axes[2].set_xticks(ds3.kappa.values, [f"{k:g}" for k in ds3.kappa.values])
    axes[2].minorticks_off()
    axes[2].set(
        xlabel=f"κ of the instance (spectrum in [{max(ds3.kappa.values):g}/κ, {max(ds3.kappa.values):g}])",
        ylabel="layers used (mean, min–max)",
        title=f"Thm 3: adaptive depth, ε = {ds3.attrs['eps']:g}",
    )
    return save_paper_figure(fig, out, NAME, "constructions_lemma1_thm3.png")


def _thm678_figure(out, ds67, ds8) -> str:
    """Thms 6-7 (the minimisers' out-of-distribution loss over L) and Thm 8 (monotonicity in depth)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    axes[0].semilogy(ds67.L, ds67.multilayer_ood, "o-", color="tab:red", label="multilayer minimiser (App. D.1)")
    axes[0].semilogy(ds67.L, ds67.bound_proved, "--", color="tab:red", label="εδ′²d·9^(L−1) (proved)")
    axes[0].semilogy(ds67.L, ds67.looped_ood, "s-", color="tab:blue", label="looped minimiser")
    axes[0].set(xlabel="L", ylabel="OOD loss (fixed Gram, exact)", title="Thms 6-7")
    axes[0].legend(fontsize=7)
    for s in ds8.s.values:
        (line,) = axes[1].semilogy(ds8.L, ds8.looped.sel(s=s), label=f"looped (trained, symmetric part), Σ = {s:g}I")
        axes[1].semilogy(ds8.L, ds8.looped_raw.sel(s=s), ":", color=line.get_color())
    axes[1].semilogy(
        ds8.L, ds8.multilayer_app_f, "k--", label=f"multilayer, App. F layers, Σ = {ds8.attrs['app_f_scale']:g}I"
    )
    axes[1].set(xlabel="loops / depth", ylabel="fixed-Gram loss", title="Thm 8: monotonicity in depth")
    axes[1].legend(fontsize=7)
    return save_paper_figure(fig, out, NAME, "thm6_7_8.png")
