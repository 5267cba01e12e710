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

from .. import dynamics, losses, tasks
from ..losses.restricted import GaussianXBatch, fixed_gram_population_loss, gaussian_x_errors, gaussian_x_mc
from ..models import LinearTransformer
from ..sweep import sweep
from ..theory import gatmiry as G
from .report import Check, PaperResult, fmt, lap_timer, paper_claim, save_dataset, save_paper_figure
from .settings import Sized

NAME = "gatmiry2024"
TITLE = "On the role of depth and looping for in-context learning with task diversity (Gatmiry et al.)"
ARCH = ("multilayer", "looped")


@dataclasses.dataclass(frozen=True)
class Config(Sized):
    d: int = 10
    n: int = 20
    kappas: tuple = (2.0, 4.0, 8.0)
    depths: tuple = (1, 2, 4, 6, 10)
    seeds: int = 2
    batch: int = 128
    steps: int = 400
    lr: float = 1e-3
    init_scale: float = 1e-3
    test_batch: int = 20_000
    curve_windows: int = 20
    fig2_ks: tuple = (2, 5, 9)
    fig2_layers: int = 6
    fig2_windows: tuple = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    fg_depths: tuple = (1, 2, 3, 4)
    fg_steps: int = 100
    construct_kappas: tuple = (10.0, 100.0, 1000.0)
    construct_depths: tuple = (1, 2, 4, 8)
    eps: float = 1e-6
    thm3_kappas: tuple = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
    thm3_instances: int = 64
    thm3_eps: float = 1e-3
    thm6_depths: tuple = (1, 2, 3, 4, 5, 6)
    thm7_depths: tuple = (6, 10, 20, 40)
    thm8_loops: int = 40
    learned_kappas: tuple = (2.0, 8.0, 32.0, 128.0)  # learned step sizes vs Chebyshev (issue: differentiable dynamics)
    learned_steps: int = 4
    learned_grid: int = 2001
    learned_powers: tuple = (8.0, 32.0, 128.0, 512.0, 2048.0)
    learned_iterations: int = 200
    seed: int = 0

    def contradictions(self) -> list[str]:
        wide = [w for w in self.fig2_windows if w >= 1]
        return [f"fig2_windows {wide} reach s ≤ 0: the training scales start at 1 (§5: [1, 8]), so every window "
                "w must be below 1"] if wide else []


# What each setting means (`jaxicl config gatmiry2024` prints them next to the values)
SETTINGS_DOCS = {
    "d": "input dimension d (§4.2)",
    "n": "examples per prompt n (§4.2)",
    "kappas": "Fig. 1: condition-number ranges κ of the training distribution, s ~ Unif[1, κ] (§5); each >= 1",
    "depths": "Fig. 1: model depths L trained (multilayer and looped)",
    "seeds": "Fig. 1, Fig. 2: independent trainings per point",
    "batch": "prompts per Adam step (fresh each step)",
    "steps": "Adam steps per training run (the paper's claims are asserted at --full's count)",
    "lr": "Adam learning rate (cosine-decayed)",
    "init_scale": "A_t initialised N(0, init_scale²) per entry",
    "test_batch": "Monte-Carlo test prompts per evaluation (exact in x_q)",
    "curve_windows": "Fig. 1: points of each training curve kept (window means)",
    "fig2_ks": "Fig. 2: numbers k of training scales, D_train uniform on k points of [1, 8] (§5)",
    "fig2_layers": "Fig. 2: layers L of the models",
    "fig2_windows": "Fig. 2: test windows w, D_test uniform on the union of [s_i − w, s_i + w]",
    "fg_depths": "fixed-Gram optimum: depths (Σ = sI exactly, Gauss–Legendre in s)",
    "fg_steps": "fixed-Gram optimum: L-BFGS iterations at most",
    "construct_kappas": "Thms 2, 4, 5: κ of the worst-case constructions (GD, Chebyshev, Newton)",
    "construct_depths": "Thms 2, 4, 5: depths L of the constructions",
    "eps": "Thms 2, 4: target worst-case error ε of the depth-needed law",
    "thm3_kappas": "Thm 3: κ of the adaptive-depth instances",
    "thm3_instances": "Thm 3: random instances per κ",
    "thm3_eps": "Thm 3: stopping accuracy ε",
    "thm6_depths": "Thm 6: multilayer depths L",
    "thm7_depths": "Thm 7: looped depths L",
    "thm8_loops": "Thm 8: loops T at least (raised to 10 past every L_0)",
    "learned_kappas": "learned step sizes vs Chebyshev: κ values",
    "learned_steps": "learned step sizes: steps (layers) learned",
    "learned_grid": "learned step sizes: grid points of [1, κ] for the worst case",
    "learned_powers": "learned step sizes: p of the smoothed max (p → ∞ is the worst case)",
    "learned_iterations": "learned step sizes: L-BFGS iterations per power at most",
    "seed": "PRNG seed of the whole reproduction",
}

SIZES = {
    "quick": Config(lr=3e-3),  # short training: a larger step (stable at 400 steps; 1e-3 is needed at 2,000, see run notes)
    "full": Config(depths=tuple(range(1, 11)), seeds=3, batch=256, steps=2000, test_batch=100_000,
                   thm3_instances=256, fg_steps=200, learned_kappas=(2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0),
                   learned_steps=8),
}


# L-BFGS (float64) stops once an iteration lowers the loss by ≤ this, relative: every run here then sits within
# float64 rounding of where 200 more iterations would leave it (learned steps: 4e-11 relative; fixed Gram: 1e-10)
LBFGS_FTOL = 1e-13


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
        return {"test_loss": mean, "test_se": se, "test_median": median, "fixed_gram_loss": fixed,
                "curve": curve[: nw * (cfg.steps // nw)].reshape(nw, -1).mean(1), "A": A,
                "diverged_at": dynamics.first_nonfinite_step(curve)}

    grid = {"kappa": list(cfg.kappas), "depth": list(cfg.depths), "looped": [0, 1], "seed": list(range(cfg.seeds))}
    ds = sweep(run, grid, key=key, progress=progress, meta={"paper": NAME, "figure": 1, "config": dataclasses.asdict(cfg)},
               output_dims={"curve": ("window",), "A": ("layer", "i", "j")})
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
    return xr.Dataset({"multilayer": (("kappa", "depth"), multi), "looped": (("kappa", "depth"), loop)},
                      coords={"kappa": list(cfg.kappas), "depth": list(depths)})


def fixed_gram_sweep(cfg: Config, key) -> xr.Dataset:
    """Train on the exact fixed-Gram loss (L-BFGS, float64) over κ × L × architecture."""
    max_depth = max(cfg.fg_depths)

    def run(kappa, depth, looped, seed, key):
        del seed
        cov = tasks.ScaledIdentityCovariance(cfg.d, tasks.UniformScale(1.0, kappa))
        A0 = 1e-2 * jax.random.normal(key, (max_depth, cfg.d, cfg.d))
        res = dynamics.lbfgs(lambda A: fixed_gram_population_loss(padded_model(A, looped > 0, depth), cov, max_depth + 1),
                             A0, cfg.fg_steps, ftol=LBFGS_FTOL)
        return {"loss": res.losses[-1]}

    grid = {"kappa": list(cfg.kappas), "depth": list(cfg.fg_depths), "looped": [0, 1], "seed": [0]}
    return sweep(run, grid, key=key, progress=False, meta={"paper": NAME, "figure": "fixed-gram", "steps": cfg.fg_steps})


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
            return mean, se, median, fixed_gram_population_loss(model, tasks.ScaledIdentityCovariance(cfg.d, prior), L + 1)

        mean, se, median, fixed = jax.vmap(at_window)(windows)
        return {"test_loss": mean, "test_se": se, "test_median": median, "fixed_gram_loss": fixed,
                "final_curve": curve[-cfg.steps // 10:].mean(), "diverged_at": dynamics.first_nonfinite_step(curve)}

    grid = {"k": list(cfg.fig2_ks), "looped": [0, 1], "seed": list(range(cfg.seeds))}
    ds = sweep(run, grid, key=key, progress=progress, meta={"paper": NAME, "figure": 2, "config": dataclasses.asdict(cfg)},
               output_dims={n: ("w",) for n in ("test_loss", "test_se", "test_median", "fixed_gram_loss")},
               output_coords={"w": np.asarray(cfg.fig2_windows)})
    dynamics.raise_if_diverged(ds.diverged_at, "the Fig. 2 training loss")
    theory = np.zeros((len(cfg.fig2_ks), len(cfg.fig2_windows)))
    for i, k in enumerate(cfg.fig2_ks):  # the looped fixed-Gram minimiser, evaluated exactly on each window
        a, _ = G.looped_optimum(np.linspace(1, 8, k), np.full(k, 1 / k), L)
        for j, w in enumerate(cfg.fig2_windows):
            x, wt = (np.asarray(v) for v in tasks.WindowedScale(np.linspace(1, 8, k), w).quadrature(64))
            theory[i, j] = cfg.d * np.sum(wt * (1 - a * x) ** (2 * L))
    ds["looped_fixed_gram_minimizer"] = (("k", "w"), theory)
    return ds


# --- theory checks (float64) -------------------------------------------------------------------------
def _depth_law_checks(cfg: Config, need: dict) -> list[Check]:
    """The depth each construction needs for worst error ≤ ε against Thms 2 and 4's laws. The closed forms give
    the depth exactly: the least L with ((κ−1)/(κ+1))^L ≤ ε (GD), with T_L((κ+1)/(κ−1)) ≥ 1/ε (Chebyshev), i.e.
    ⌈x(κ)⌉ for x = log(1/ε)/log((κ+1)/(κ−1)) and arccosh(1/ε)/arccosh((κ+1)/(κ−1)), which grow like κ·log(1/ε)/2 and
    √κ·log(2/ε)/2. Asserted: the slope of log L against log κ (least squares over ``cfg.construct_kappas``) equals
    the slope of log x(κ), within the largest change that rounding x up to an integer can make to it
    (Σ_i |w_i|·log(1 + 1/x_i), w the least-squares weights): a tolerance from the settings, not from one run. With a
    single κ there is no slope: "not applicable"."""
    kappas = np.asarray(cfg.construct_kappas, float)
    z = (kappas + 1) / (kappas - 1)
    laws = (("gd", 1.0, "κ·log(1/ε)", np.log(1 / cfg.eps) / np.log(z)),
            ("chebyshev", 0.5, "√κ·log(1/ε)", np.arccosh(1 / cfg.eps) / np.arccosh(z)))
    logk = np.log(kappas)
    checks = []
    for name, expo, law, x in laws:
        depth = np.array([need[(name, k)] for k in cfg.construct_kappas], float)
        claim = f"depth for worst error ≤ {cfg.eps:g} grows like {law} ({name})"
        if len(set(kappas)) < 2:
            checks.append(Check(claim, f"slope of log L vs log κ = {expo}", f"L = {fmt(depth, 5)}", "—", None,
                                applicable=False, reason=f"one κ ({kappas[0]:g}): a slope needs two or more"))
            continue
        w = (logk - logk.mean()) / np.sum((logk - logk.mean()) ** 2)
        slope, exact = float(w @ np.log(depth)), float(w @ np.log(x))
        tol = float(np.abs(w) @ np.log1p(1 / x))
        checks.append(Check(claim, f"slope {exact:.4f} (closed-form depths ⌈x(κ)⌉ = {fmt(np.ceil(x), 5)}; → {expo} as "
                            "κ → ∞)", f"L = {fmt(depth, 5)}, slope {slope:.4f}",
                            f"{tol:.1e} (rounding L up to an integer)", bool(abs(slope - exact) <= tol)))
    return checks


def check_constructions(cfg: Config):
    """Worst-case errors of GD / Chebyshev through the model, Newton through its matrix iteration;
    depth needed for ε and its growth with κ. Returns (checks, dataset)."""
    Lmax = max(cfg.construct_depths)
    rows, errs = [], []
    for kappa in cfg.construct_kappas:
        for L in cfg.construct_depths:
            steps = np.zeros(Lmax)
            steps[:L] = G.chebyshev_steps(1.0, kappa, L)
            cheb = G.restricted_model(steps, 3, depth=L)
            gd = G.restricted_model([G.gd_step(1.0, kappa)], 3, looped=True, depth=L, max_depth=Lmax)
            sim = [G.worst_case_error(G.model_scalar_error(m), 1.0, kappa) for m in (gd, cheb)]
            sig = np.diag(np.linspace(1.0, kappa, 5))
            sim.append(G.newton_iteration_error(1.0, kappa, L, sig))
            pred = [G.gd_worst_error(kappa, L), G.chebyshev_worst_error(kappa, L), G.newton_worst_error(kappa, L)]
            rows.append((kappa, L, sim, pred))
            errs.append(max(abs(s / p - 1) for s, p in zip(sim, pred)))
    checks = [Check("Thms 2, 4, 5: worst error over αI ≼ Σ ≼ βI of GD, Chebyshev (through the model) and Newton",
                    "((κ−1)/(κ+1))^L, 1/T_L((κ+1)/(κ−1)), ((κ²−1)/(κ²+1))^{2^L}",
                    f"max relative deviation {max(errs):.1e} over κ ∈ {list(cfg.construct_kappas)}, L ∈ {list(cfg.construct_depths)}",
                    "≤ 1e-8", bool(max(errs) <= 1e-8))]
    need = {}
    for kappa in cfg.construct_kappas:  # bisection brackets: twice the asymptotic depths
        a = G.gd_step(1.0, kappa)
        need[("gd", kappa)] = G.depth_needed(
            lambda L, k=kappa, a=a: G.worst_case_error(lambda s: (1 - a * s) ** L, 1.0, k, grid=4001), cfg.eps,
            L_max=int(kappa * np.log(1 / cfg.eps)) + 10)
        need[("chebyshev", kappa)] = G.depth_needed(
            lambda L, k=kappa: G.worst_case_error(lambda s: G.residual_polynomial(G.chebyshev_steps(1.0, k, L), s), 1.0, k, grid=4001),
            cfg.eps, L_max=int(np.sqrt(kappa) * np.log(2 / cfg.eps)) + 10)
    checks += _depth_law_checks(cfg, need)
    ds = xr.Dataset(
        {"simulated": (("kappa", "depth", "method"), np.array([r[2] for r in rows]).reshape(len(cfg.construct_kappas), -1, 3)),
         "formula": (("kappa", "depth", "method"), np.array([r[3] for r in rows]).reshape(len(cfg.construct_kappas), -1, 3)),
         "depth_needed": (("kappa", "algorithm"), np.array([[need[(a, k)] for a in ("gd", "chebyshev")] for k in cfg.construct_kappas]))},
        coords={"kappa": list(cfg.construct_kappas), "depth": list(cfg.construct_depths), "method": ["gd", "chebyshev", "newton"],
                "algorithm": ["gd", "chebyshev"]}, attrs={"eps": cfg.eps})
    return checks, ds


def check_lemma1(cfg: Config, models: dict, key):
    """Lemma 1 / Thm 1: some γ ∈ [1, 36L²] gives relative error ≥ 1/4 on (γX, w*, γy, x_q)."""
    task = tasks.FixedGramRegression(cfg.d, cfg.n, np.eye(cfg.d))
    prompt = task.sample_one(key)
    checks, curves = [], {}
    for name, model in models.items():
        L = int(model.depth)
        gammas = np.geomspace(1.0, 36.0 * L**2, 4000)
        err = np.asarray(G.scaling_errors(model, prompt, jnp.asarray(gammas)))
        curves[name] = (gammas, err)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], (err >= 1 / 8).astype(int), [0]]))).reshape(-1, 2)
        longest = max((gammas[e - 1] - gammas[s] for s, e in edges), default=0.0)
        checks.append(Check(f"Lemma 1: a scaling γ ∈ [1, 36L²] with relative error ≥ 1/4 ({name}, L = {L})", "max_γ error ≥ 1/4",
                            f"max {err.max():.3g} (at γ = {gammas[err.argmax()]:.3g}); error ≥ 1/8 on an interval of length {longest:.3g}",
                            "—", bool(err.max() >= 0.25)))
    return checks, curves


def check_thm3(cfg: Config, key):
    """Adaptive depth: stop at the first layer whose test statistic is ≤ ε; the error is then ≤ ε."""
    kmax = max(cfg.thm3_kappas)
    loops = int(np.ceil(kmax * np.log(1e3 * kmax / cfg.thm3_eps)))
    model = G.restricted_model([1.0 / kmax], cfg.d, looped=True, depth=loops, max_depth=loops)  # Thm 5's GD, step 1/β
    used, worst, ok = [], [], True
    adaptive = jax.jit(jax.vmap(lambda p: G.adaptive_depth(model, p, cfg.thm3_eps)))  # one program for every κ
    for i, kappa in enumerate(cfg.thm3_kappas):
        task = tasks.FixedGramRegression(cfg.d, cfg.n, tasks.RandomSpectrumCovariance(cfg.d, kmax / kappa, kmax))
        prompts = task.sample(jax.random.fold_in(key, i), cfg.thm3_instances)
        ell, err, _ = adaptive(prompts)
        ell, err = np.asarray(ell), np.asarray(err)
        ok &= bool(np.all(ell >= 0) and np.all(err <= cfg.thm3_eps))
        used.append(ell)
        worst.append(err.max())
    used = np.array(used)
    check = Check(f"Thm 3: stopping at the first layer with ‖y^(ℓ)‖·‖x_q‖_(XXᵀ)⁻¹ ≤ ε = {cfg.thm3_eps:g} (one looped GD model, step 1/{kmax:g}; instances with spectrum in [{kmax:g}/κ, {kmax:g}])",
                  "|TF_ℓ − y_q| ≤ ε", f"max error {max(worst):.2e}; mean layers used {fmt(used.mean(1), 3)} for κ = {list(cfg.thm3_kappas)}",
                  "every instance", ok)
    trend = Check("Thm 3: layers used grow with the instance's κ", "increasing", fmt(used.mean(1), 3), "—",
                  bool(np.all(np.diff(used.mean(1)) > 0)), **_needs_two(cfg.thm3_kappas, "thm3_kappas"))
    ds = xr.Dataset({"layers_used": (("kappa", "instance"), used)}, coords={"kappa": list(cfg.thm3_kappas)},
                    attrs={"eps": cfg.thm3_eps, "loops": loops})
    return [check, trend], ds


def check_thm6_thm7(cfg: Config):
    """Thm 6 (multilayer minimiser blows up out of distribution) and Thm 7 (looped stays bounded)."""
    alpha, beta, d = 1.0, 100.0, cfg.d
    eps_mass, delta_p = 0.5, 0.5
    c = 8 * alpha  # the OOD covariance c·I, 8α ≤ c ≤ (1 − δ′)β
    # every loss of every depth in one program: layers padded with zeros to the largest depth (fixed_gram_depth_curves)
    depths = list(cfg.thm6_depths)
    L_max = max(depths)
    pad = lambda layers: np.concatenate([layers, np.zeros((L_max - len(layers), d, d))])  # noqa: E731
    A_batch, S_batch, parts = [], [], []
    for L in depths:
        B = G.thm6_training_covariances(alpha, beta, d, L)
        multi = np.asarray(G.thm6_minimizer(alpha, beta, d, L).params.A)  # its L layers A_t = B_t⁻¹
        A_loop = G.looped_minimizer_diagonal(np.stack([np.diag(b) for b in B]), np.full(L, 1 / L), L)
        pairs = [(multi, b) for b in B] + [(multi, c * np.eye(d)), (np.repeat(A_loop[None], L, 0), c * np.eye(d))]
        parts.append(len(pairs))
        A_batch += [pad(a) for a, _ in pairs]
        S_batch += [s for _, s in pairs]
    last = np.split(np.asarray(losses.fixed_gram_depth_curves(np.stack(A_batch), np.stack(S_batch)))[:, -1],
                    np.cumsum(parts)[:-1])
    rows = [(L, float(np.mean(v[:-2])), eps_mass * float(v[-2]), G.thm6_bound(eps_mass, delta_p, d, L),
             G.thm6_bound(eps_mass, delta_p, d, L, proved=False), eps_mass * float(v[-1])) for L, v in zip(depths, last)]
    r = np.array(rows)
    slope = np.polyfit(r[:, 0], np.log(r[:, 2]), 1)[0]
    checks = [
        Check("Thm 6: A_t = B_t⁻¹ is a global minimiser (zero training loss)", "0", fmt(r[:, 1].max(), 3),
              "≤ 1e-10 (round-off; the loss of A = 0 is d)", bool(r[:, 1].max() <= 1e-10)),
        Check(f"Thm 6: OOD loss (mass {eps_mass} on Σ = {c:g}I) ≥ εδ′²d·9^(L−1) as proved (statement: εδ′d·9^(L−1))",
              fmt(r[:, 3], 3), fmt(r[:, 2], 3) + f"; growth e^{slope:.2f} per layer (9 = e^{np.log(9):.2f})",
              f"every L (statement's bound {fmt(r[:, 4], 3)} holds too)",
              bool(np.all(r[:, 2] >= r[:, 3]) and np.all(r[:, 2] >= r[:, 4]) and slope >= np.log(9) - 1e-9)),
        Check("Thm 6 vs 7: the looped minimiser on the same training distribution stays below the multilayer one on "
              "the same OOD test, and its OOD loss does not grow with L", f"multilayer {fmt(r[:, 2], 3)}",
              "looped " + fmt(r[:, 5], 3), "looped < multilayer at every L > 1; looped non-increasing in L",
              bool(np.all(r[1:, 5] < r[1:, 2]) and np.all(np.diff(r[:, 5]) <= 1e-12 * r[:-1, 5]))),
    ]
    # Thm 7: A*⁻¹ ≽ ((1−δ)β/2)(1 − ln(d/ε)/L) I (eq. 13) and the OOD bound, ε = 1/L, δ = 0
    ok13, okb, vals = True, True, []
    for L in cfg.thm7_depths:
        B = G.thm6_training_covariances(alpha, beta, d, L)
        A = G.looped_minimizer_diagonal(np.stack([np.diag(b) for b in B]), np.full(L, 1 / L), L)
        eps = 1.0 / L
        lower = beta / 2 * (1 - np.log(d / eps) / L)
        inv_min = 1 / np.max(np.diag(A))
        top = (1 - np.log(d / eps) / L) * beta  # δ′ = ln(d/ε′)/L with ε′ = ε
        x, w = (np.asarray(v) for v in tasks.UniformScale(alpha, top).quadrature(64))
        ood = float(np.sum(w * np.sum((1 - np.outer(x, np.diag(A))) ** (2 * L), axis=1)))
        bound = d * (1 - min(2 * np.log(d / eps) / L, alpha / beta)) ** (2 * L)
        ok13 &= bool(inv_min >= lower)
        okb &= bool(ood <= bound)
        vals.append((L, inv_min, lower, ood, bound))
    v = np.array(vals)
    checks += [
        Check("Thm 7 (eq. 13): looped minimiser A*⁻¹ ≽ (β/2)(1 − ln(dL)/L) I on the (1/L, 0) right-spread-out P",
              fmt(v[:, 2], 3), "λ_min(A*⁻¹) = " + fmt(v[:, 1], 3) + f" for L = {list(cfg.thm7_depths)}", "every L", ok13),
        Check("Thm 7: its loss on Unif[α, (1 − δ′)β]·I, δ′ = ln(dL)/L", "≤ d(1 − (2ln(dL)/L ∧ α/β))^{2L} (App. B)",
              fmt(v[:, 3], 3) + " vs " + fmt(v[:, 4], 3), "every L", okb),
    ]
    ds = xr.Dataset({"train_loss": ("L", r[:, 1]), "multilayer_ood": ("L", r[:, 2]), "bound_proved": ("L", r[:, 3]),
                     "bound_stated": ("L", r[:, 4]), "looped_ood": ("L", r[:, 5])}, coords={"L": r[:, 0].astype(int)},
                    attrs={"alpha": alpha, "beta": beta, "ood_mass": eps_mass, "delta_prime": delta_p, "ood_scale": c})
    return checks, ds


def _monotone_from(vals, rtol: float = 1e-12) -> int:
    """Smallest L (1-based) from which ``vals`` is monotone (non-increasing or non-decreasing)."""
    for start in range(1, len(vals) + 1):
        diff = np.diff(vals[start - 1:])
        tol = rtol * np.abs(vals[start - 1:-1])
        if np.all(diff <= tol) or np.all(diff >= -tol):
            return start
    return len(vals)


def thm8_curves(cfg: Config, A_loop, scales):
    """Fixed-Gram loss at Σ = sI against the loop count for a looped A and, for App. F's unequal
    layers, against depth. Thm 8's proof diagonalises Σ^½AΣ^½, so its L_0 is for symmetric A: the
    check uses the symmetric part of the trained A; the raw (slightly non-symmetric) A is reported."""
    A_loop = np.asarray(A_loop, float)
    A_sym = (A_loop + A_loop.T) / 2
    L0s = [G.looped_monotone_from(A_sym, s * np.eye(cfg.d)) for s in scales]
    # loop counts past every L_0, so that the claim "monotone from L_0 on" is tested on at least 10 loops each
    T = max(cfg.thm8_loops, int(np.ceil(max(L0s))) + 10)
    depths = np.arange(1, T + 1)
    s_f = 4.0
    steps = G.nonmonotone_steps(s_f, T)
    # every curve in one program: the looped A repeated T times (symmetric part and raw, each s), App. F's T layers
    layers = [np.repeat(A[None], T, 0) for s in scales for A in (A_sym, A_loop)] + [steps[:, None, None] * np.eye(cfg.d)]
    Sigmas = [s * np.eye(cfg.d) for s in scales for _ in range(2)] + [s_f * np.eye(cfg.d)]
    curves = np.asarray(losses.fixed_gram_depth_curves(np.stack(layers), np.stack(Sigmas)))
    multi_curve = curves[-1]
    sym_curves, raw_curves, ok, starts, raw_starts = [], [], True, [], []
    for i, L0 in enumerate(L0s):
        vals, raw = curves[2 * i], curves[2 * i + 1]
        start = _monotone_from(vals)
        ok &= start <= max(1, int(np.ceil(L0)))
        sym_curves.append(vals), raw_curves.append(raw), starts.append(start), raw_starts.append(_monotone_from(raw))
    diffs = np.sign(np.diff(multi_curve))
    checks = [
        Check("Thm 8: looped loss monotone in the loop count from L_0 on (symmetric part of the trained looped A, Σ = sI)",
              f"L_0 = {fmt(np.array(L0s), 3)} for s = {list(scales)}", f"monotone from L = {starts} (raw trained A: from {raw_starts}) over {T} loops",
              "from ⌈L_0⌉ on, every s (≥ 10 loops past each L_0)", bool(ok)),
        Check("Thm 8 / App. F: unequal layers (γ_t = 3, ½, 3, …) give a loss that is not monotone in depth",
              "up and down", f"signs of successive changes: {''.join('+' if x > 0 else '-' for x in diffs[:8])}…", "—",
              bool(np.any(diffs > 0) and np.any(diffs < 0))),
    ]
    ds = xr.Dataset({"looped": (("s", "L"), np.array(sym_curves)), "looped_raw": (("s", "L"), np.array(raw_curves)), "multilayer_app_f": ("L", multi_curve), "L0": ("s", np.array(L0s))},
                    coords={"s": list(scales), "L": np.asarray(depths)}, attrs={"app_f_scale": s_f})
    return checks, ds


# --- learned step sizes (differentiating through gradient descent) -------------------------------------
def gd_relative_errors(etas, kappa, s_unit):
    """|w_k − w*| / |w* − w_0| after k = len(etas) steps of gradient descent with step sizes ``etas`` on the
    regression loss ½ s‖w − w*‖² (Σ = sI, the fixed-Gram setting), for every s = 1 + (κ − 1)·``s_unit`` in [1, κ].
    Each run is ``jaxicl.gradient_descent`` with the schedule ``k ↦ etas[k]``, so this is differentiable in the
    step sizes (and in κ). It equals |Π_t(1 − η_t s)|, the residual polynomial of Thm 2."""

    def run(s):
        loss = lambda w: 0.5 * s * jnp.sum((w - 1.0) ** 2)  # noqa: E731  w* = 1, w_0 = 0
        w, _ = dynamics.gradient_descent(loss, jnp.zeros(1, etas.dtype), lambda k: etas[k], etas.shape[0],
                                         check_finite=False)
        return jnp.abs(w[0] - 1.0)

    return jax.vmap(run)(1.0 + (kappa - 1.0) * s_unit)


def learn_step_sizes(kappa, cfg: Config):
    """Step sizes minimising the worst relative error over s ∈ [1, κ] after ``cfg.learned_steps`` GD steps, found by
    differentiating through the runs: L-BFGS on the smooth maximum (mean_s e(s)^p)^{1/p} over a uniform grid of s,
    with p raised through ``cfg.learned_powers`` (p → ∞ is the worst case), each for at most
    ``cfg.learned_iterations`` iterations (it stops once an iteration gains ≤ 1e-13 relative: 14–72 iterations at quick
    size). Starts from steps spread over [1/κ, 1] (equal steps are a symmetric point the gradient cannot leave).
    Traceable in κ."""
    k = cfg.learned_steps
    s_unit = jnp.linspace(0.0, 1.0, cfg.learned_grid)

    def smooth_worst(etas, p):
        log_e2 = jnp.log(gd_relative_errors(etas, kappa, s_unit) ** 2 + 1e-300)
        return (jax.scipy.special.logsumexp(p * log_e2 / 2) - jnp.log(s_unit.size)) / p

    def next_power(etas, p):  # one traced L-BFGS, scanned over the powers
        return dynamics.lbfgs(lambda e: smooth_worst(e, p), etas, cfg.learned_iterations, ftol=LBFGS_FTOL).params, None

    etas0 = jnp.linspace(1.0, 1.0 / kappa, k)
    etas, _ = jax.lax.scan(next_power, etas0, jnp.asarray(cfg.learned_powers, etas0.dtype))
    return jnp.sort(etas)


def learned_steps_sweep(cfg: Config) -> xr.Dataset:
    """Learned step sizes for every κ of ``cfg.learned_kappas`` as one ``jaxicl.sweep`` (one compiled program),
    against Chebyshev's (reciprocals of the Chebyshev nodes on [1, κ], sorted) and their worst-case errors."""
    ds = sweep(lambda kappa: {"learned": learn_step_sizes(kappa, cfg)}, {"kappa": list(cfg.learned_kappas)},
               meta={"paper": NAME, "figure": "learned step sizes", "config": dataclasses.asdict(cfg)},
               output_dims={"learned": ("step",)})
    kappas = np.asarray(cfg.learned_kappas)
    cheb = np.stack([np.sort(G.chebyshev_steps(1.0, k, cfg.learned_steps)) for k in kappas])
    worst = [G.worst_case_error(lambda s, e=e: G.residual_polynomial(e, s), 1.0, k) for e, k in zip(ds.learned.values, kappas)]
    ds["chebyshev"] = (("kappa", "step"), cheb)
    ds["learned_worst_error"] = ("kappa", np.asarray(worst))
    ds["chebyshev_worst_error"] = ("kappa", G.chebyshev_worst_error(kappas, cfg.learned_steps))
    ds["gd_worst_error"] = ("kappa", G.gd_worst_error(kappas, cfg.learned_steps))
    return ds


def _learned_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    """The learned steps against Chebyshev's. Their worst-case error is asserted within what the objective allows:
    the smooth maximum (mean_s e(s)^p)^{1/p} over n grid points lies between n^{−1/p}·max e and max e, so steps that
    minimise it at the largest p have a worst error at most n^{1/p} times Chebyshev's (the minimax optimum): the
    tolerance is n^{1/p} − 1 for ``cfg.learned_grid`` and ``cfg.learned_powers``, not a constant."""
    step_dev = np.abs(ds.learned.values / ds.chebyshev.values - 1)
    err_dev = np.abs(ds.learned_worst_error.values / ds.chebyshev_worst_error.values - 1)
    err_tol = cfg.learned_grid ** (1 / max(cfg.learned_powers)) - 1
    return [
        Check(f"Learned step sizes (∂ of the error after k = {cfg.learned_steps} GD steps, through the runs) recover "
              "Chebyshev's a_t = 1/λ_t (Thm 2), κ = " + ", ".join(f"{k:g}" for k in ds.kappa.values),
              "reciprocal Chebyshev nodes on [1, κ]", f"max relative deviation {step_dev.max():.1e} (per κ: "
              f"{fmt(step_dev.max(axis=1), 2)})", "≤ 1e-2", bool(step_dev.max() <= 1e-2)),
        Check("Their worst-case error over [1, κ] reaches 1/T_k((κ+1)/(κ−1))", fmt(ds.chebyshev_worst_error.values, 4),
              fmt(ds.learned_worst_error.values, 4) + f" (max relative excess {err_dev.max():.1e}; GD with the best "
              f"constant step: {fmt(ds.gd_worst_error.values, 3)})",
              f"≤ {err_tol:.1e} (n^(1/p) − 1: smooth maximum over n = {cfg.learned_grid} points, p = "
              f"{max(cfg.learned_powers):g})", bool(err_dev.max() <= err_tol)),
    ]


# --- stages a `jaxicl sweep --stage gatmiry2024:NAME` runs over a grid of settings (experiments.stage_sweep) ------
SWEEPABLE = {"thm6_thm7": check_thm6_thm7, "constructions": check_constructions, "fig1_theory": fig1_theory,
             "learned_steps": learned_steps_sweep}


# --- run ---------------------------------------------------------------------------------------------
def run(size: str = "quick", out: Path = Path("jaxicl-report"), progress: bool = False,
        config: Config | None = None) -> PaperResult:
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
    checks += _fig1_checks(ds1, cfg)
    checks += _fig2_checks(ds2, cfg)
    save(ds1, "fig1_gaussian_x.nc")
    save(ds2, "fig2_gaussian_x.nc")

    with jax.enable_x64(True):
        kmax, Lmax = max(cfg.kappas), max(cfg.depths)
        A_loop = np.asarray(ds1.A.sel(kappa=kmax, depth=Lmax, looped=1, seed=0).values[0], float)
        A_multi = np.asarray(ds1.A.sel(kappa=kmax, depth=4, looped=0, seed=0).values, float)[:4] if 4 in cfg.depths else None
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
        f"Losses are eq. (9), E(ŷ − y)² (no ½). **Gaussian X**: d = {cfg.d}, n = {cfg.n}, Adam (lr {cfg.lr:g}, cosine decay) for "
        f"{cfg.steps} steps of {cfg.batch} fresh prompts, test on {cfg.test_batch} prompts, exact in x_q; A_t initialised "
        f"N(0, {cfg.init_scale:g}²), u = 0. **Fixed Gram**: Σ = XXᵀ/n = sI, exact (Gauss–Legendre in s). The fixed-Gram optimum "
        "is a lower bound for the fixed-Gram loss only; Gaussian-X losses are higher because XXᵀ/n fluctuates (its spectrum "
        "with n = 2d spans about [0.09 s, 2.9 s]). That spread makes the Gaussian-X error heavy-tailed for deep models: "
        "rare draws with a large eigenvalue of XXᵀ/n give |1 − a λ|^{2L} ≫ 1, so the mean (eq. 9) can sit well above the "
        "median (also reported) and training with a larger step or gradient clipping was unstable at 2,000 steps.")
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
        ax[0].plot(np.arange(1, cfg.learned_steps + 1), ds.learned.values[i], "o", color=color, mfc="none",
                   label=f"κ = {kappa:g}")
    ax[0].set(yscale="log", xlabel="step (sorted)", ylabel="step size η_t",
              title="Learned step sizes (markers) vs Chebyshev 1/λ_t (lines)")
    ax[0].legend(fontsize=8)
    k = ds.kappa.values
    ax[1].loglog(k, ds.gd_worst_error, "s--", color="gray", label="GD, best constant step ((κ−1)/(κ+1))^k")
    ax[1].loglog(k, ds.chebyshev_worst_error, "-", color="k", label="Chebyshev 1/T_k((κ+1)/(κ−1))")
    ax[1].loglog(k, ds.learned_worst_error, "o", mfc="none", color="C3", label="learned by differentiating GD")
    ax[1].set(xlabel="κ", ylabel=f"worst relative error over [1, κ] after {cfg.learned_steps} steps",
              title="Worst-case error")
    ax[1].legend(fontsize=8)
    return save_paper_figure(fig, out, NAME, "learned_step_sizes.png")


def _fixed_gram_checks(ds_fg: xr.Dataset, theory: xr.Dataset) -> list[Check]:
    th_m = theory.multilayer.sel(depth=ds_fg.depth).values
    th_l = theory.looped.sel(depth=ds_fg.depth).values
    tr_m = ds_fg.loss.sel(looped=0, seed=0).values
    tr_l = ds_fg.loss.sel(looped=1, seed=0).values
    rel_l = np.abs(tr_l / th_l - 1)
    mth = theory.multilayer.values
    need = [int(theory.depth.values[np.argmax(row <= 0.01 * row[0])]) if np.any(row <= 0.01 * row[0]) else -1 for row in mth]
    return [
        Check("fixed Gram (theory): the optimal multilayer loss increases with κ at every L", "increasing in κ",
              "min ratio between successive κ " + (fmt(np.min(mth[1:] / mth[:-1]), 4) if len(mth) > 1 else "—"), "every L",
              bool(np.all(mth[1:] > mth[:-1])), **_needs_two(theory.kappa.values, "kappas")),
        Check("fixed Gram (theory): layers needed for 1 % of the 1-layer loss grow with κ", "increasing",
              f"{need} for κ = {[float(k) for k in theory.kappa.values]}", "—", bool(min(need) > 0 and np.all(np.diff(need) > 0)),
              **_needs_two(theory.kappa.values, "kappas")),
        Check("fixed Gram: trained looped model reaches the best single step min_a E(1 − as)^{2L}·d", fmt(th_l.ravel(), 4),
              f"max relative gap {rel_l.max():.1e}", "≤ 1e-6", bool(rel_l.max() <= 1e-6)),
        Check("fixed Gram: no trained multilayer model goes below the best degree-L polynomial d/K_L(0,0)",
              fmt(th_m.ravel(), 4), fmt(tr_m.ravel(), 4), "trained ≥ optimum·(1 − 1e-9)", bool(np.all(tr_m >= th_m * (1 - 1e-9)))),
        Check("fixed Gram: trained multilayer reaches that optimum (L-BFGS from small init)", "= optimum",
              f"max relative gap {np.max(tr_m / th_m - 1):.1e}", "≤ 1 %", bool(np.max(tr_m / th_m - 1) <= 0.01),
              asserted=False, reason="the loss is non-convex in the layers and L-BFGS from a small init can stop short "
              "of the optimum (the optimum itself is the row above)"),
    ]


def _needs_two(values, key: str) -> dict:
    """A trend across ``values`` (the setting ``key``) has no premise with fewer than two of them: the arguments that
    make such a claim "not applicable" (an empty comparison would pass whatever the numbers)."""
    n = len(set(np.asarray(values).tolist()))
    return {} if n >= 2 else {"applicable": False, "reason": f"{key} has {n} value: a trend needs two or more"}


def trained_as_paper(cfg: Config) -> bool:
    """Whether Figs. 1-2's Gaussian-X models train as long as ``--full`` (2,000 Adam steps): only then are the
    claims that need converged training asserted; a shorter run shows them "not reproduced" where they fail."""
    return cfg.steps >= SIZES["full"].steps


def _shorter_training(cfg: Config) -> str:
    """Why a claim that needs converged training is not asserted at ``cfg``'s size."""
    return f"{cfg.steps} Adam steps (--full: {SIZES['full'].steps})"


def _fig1_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    m = ds.test_loss.mean("seed")
    checks = []
    multi, loop = m.sel(looped=0).values, m.sel(looped=1).values  # (kappa, depth)
    few = _needs_two(cfg.depths, "depths")
    i0, i1 = int(np.argmin(cfg.depths)), int(np.argmax(cfg.depths))
    checks.append(paper_claim(
        "Fig. 1: depth helps: loss at the largest L below half the loss at the smallest, every κ and architecture",
        "decreasing in L", f"L = {cfg.depths[i0]}: {fmt(multi[:, i0], 3)}; L = {cfg.depths[i1]}: {fmt(multi[:, i1], 3)} "
        f"(multilayer), {fmt(loop[:, i1], 3)} (looped)", "ratio < 0.5",
        bool(np.all(multi[:, i1] < 0.5 * multi[:, i0]) and np.all(loop[:, i1] < 0.5 * loop[:, i0])), trained_as_paper(cfg),
        few.get("reason") or _shorter_training(cfg) + "; at this length the looped model's heavy-tailed Gaussian-X loss "
        "at κ = 8 stays above half for some seeds", applies=not few))
    by_kappa = np.argsort(cfg.kappas)
    checks.append(Check(f"Fig. 1: more task diversity costs more: at L = {cfg.depths[i0]} the loss increases with κ "
                        "(both architectures)", "increasing in κ",
                        f"multilayer {fmt(multi[:, i0], 3)}, looped {fmt(loop[:, i0], 3)}", "strict",
                        bool(np.all(np.diff(multi[by_kappa, i0]) > 0) and np.all(np.diff(loop[by_kappa, i0]) > 0)),
                        seeds=3, **_needs_two(cfg.kappas, "kappas")))
    checks.append(Check("Fig. 1: loss for every (κ, L) (Gaussian X, mean over seeds; rows κ, columns L)", "—",
                        "multilayer " + "; ".join(fmt(r, 3) for r in multi) + " — looped " + "; ".join(fmt(r, 3) for r in loop),
                        "—", None))
    med = ds.test_median.mean("seed")
    checks.append(Check("Fig. 1: median per-prompt error (robust to the heavy Gaussian-X tail), rows κ", "—",
                        "multilayer " + "; ".join(fmt(r, 3) for r in med.sel(looped=0).values) + " — looped "
                        + "; ".join(fmt(r, 3) for r in med.sel(looped=1).values), "—", None))
    ratio = loop / multi
    checks.append(paper_claim("Fig. 1(b): looped with L loops is competitive with L layers (every κ, L)", "≈ 1",
                              f"looped/multilayer {fmt(ratio.min(), 3)}–{fmt(ratio.max(), 3)}", "within a factor 2",
                              bool(np.all((ratio >= 0.5) & (ratio <= 2.0))), trained_as_paper(cfg),
                              _shorter_training(cfg)))
    curve = ds.curve.mean("seed").values
    change = np.abs(curve[..., -1] / curve[..., -2] - 1)
    checks.append(Check("Gaussian X training has converged: change of the windowed training loss over the last two windows",
                        "small", f"median {np.median(change):.2%}, max {change.max():.2%}", "—", None))
    return checks


def _fig2_checks(ds: xr.Dataset, cfg: Config) -> list[Check]:
    m = ds.test_loss.mean("seed")
    grow = (m.isel(w=-1) / m.isel(w=0))
    g_m, g_l = grow.sel(looped=0).values, grow.sel(looped=1).values
    return [paper_claim("Fig. 2: out-of-distribution degradation loss(w = max)/loss(w = 0), looped vs multilayer, per k",
                        "looped ≤ multilayer (Thms 6-7)", f"multilayer {fmt(g_m, 3)}, looped {fmt(g_l, 3)} for k = "
                        f"{[int(k) for k in ds.k.values]} (mean over {ds.seed.size} seeds)", "every k",
                        bool(np.all(g_l <= g_m)), trained_as_paper(cfg),
                        _shorter_training(cfg))]


def _figures(out, cfg, ds_con, theory, ds_fg, ds1, ds2, scaling, ds3, ds67, ds8):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    colors = dict(zip(cfg.kappas, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
    for ax, arch, looped in ((axes[0], "multilayer (L layers)", 0), (axes[1], "looped (L loops)", 1)):
        for kappa in cfg.kappas:
            v = ds1.test_loss.sel(kappa=kappa, looped=looped)
            se = v.std("seed") / np.sqrt(v.sizes["seed"])
            ax.errorbar(ds1.depth, v.mean("seed"), yerr=2 * se, marker="o", ms=3, capsize=2, color=colors[kappa], label=f"κ = {kappa:g}")
            ax.plot(ds1.depth, ds1.test_median.sel(kappa=kappa, looped=looped).mean("seed"), ":", color=colors[kappa], lw=1)
            th = theory[ARCH[looped]].sel(kappa=kappa)
            ax.plot(th.depth, th, "--", color=colors[kappa], lw=1)
        ax.set(yscale="log", xlabel="L", ylabel="test loss E(ŷ − y)²", title=f"Fig. 1, {arch}: Gaussian X mean (markers, ±2 s.e.),\n"
               "median error (dotted); dashed: fixed-Gram optimum (theory)")
        ax.legend(fontsize=8)
    for kappa in cfg.kappas:
        for looped, mk in ((0, "o"), (1, "s")):
            tr = ds_fg.loss.sel(kappa=kappa, looped=looped, seed=0)
            axes[2].plot(tr.depth, tr, mk, color=colors[kappa], mfc="none" if looped else colors[kappa], ms=6)
            th = theory[ARCH[looped]].sel(kappa=kappa)
            axes[2].plot(th.depth, th, "-" if looped == 0 else ":", color=colors[kappa], lw=1,
                         label=f"κ = {kappa:g}, {ARCH[looped]}")
    axes[2].set(yscale="log", xlabel="L", ylabel="fixed-Gram loss (exact)",
                title="fixed Gram: optimum (lines), trained by L-BFGS (markers;\nfilled multilayer, open looped)")
    axes[2].legend(fontsize=7)
    paths.append(save_paper_figure(fig, out, NAME, "fig1_depth.png"))

    fig, axes = plt.subplots(1, len(cfg.fig2_ks), figsize=(5 * len(cfg.fig2_ks), 3.8), layout="constrained", squeeze=False)
    for ax, k in zip(axes[0], cfg.fig2_ks):
        for looped, color in ((0, "tab:red"), (1, "tab:blue")):
            v = ds2.test_loss.sel(k=k, looped=looped)
            se = v.std("seed") / np.sqrt(v.sizes["seed"])
            ax.errorbar(ds2.w, v.mean("seed"), yerr=2 * se, marker="o", ms=3, capsize=2, color=color, label=f"{ARCH[looped]} (Gaussian X)")
        ax.plot(ds2.w, ds2.looped_fixed_gram_minimizer.sel(k=k), "--", color="tab:blue", lw=1, label="looped fixed-Gram minimiser (exact)")
        ax.set(yscale="log", xlabel="window half-width w", ylabel="test loss E(ŷ − y)²", title=f"Fig. 2: k = {k} training scales, L = {cfg.fig2_layers}")
        ax.legend(fontsize=7)
    paths.append(save_paper_figure(fig, out, NAME, "fig2_ood.png"))

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), layout="constrained")
    Ls = np.arange(1, 65)
    for kappa, color in zip(cfg.construct_kappas, ("tab:blue", "tab:orange", "tab:green")):
        axes[0].semilogy(Ls, G.gd_worst_error(kappa, Ls), ":", color=color, label=f"GD, κ = {kappa:g}")
        axes[0].semilogy(Ls, G.chebyshev_worst_error(kappa, Ls), "-", color=color, label=f"Chebyshev, κ = {kappa:g}")
        axes[0].semilogy(np.arange(1, 16), G.newton_worst_error(kappa, np.arange(1, 16)), "--", color=color, label=f"Newton, κ = {kappa:g}")
        sim = ds_con.simulated.sel(kappa=kappa)
        axes[0].plot(ds_con.depth, sim.sel(method="gd"), "v", color=color, ms=4)
        axes[0].plot(ds_con.depth, sim.sel(method="chebyshev"), "o", color=color, ms=4)
        axes[0].plot(ds_con.depth, sim.sel(method="newton"), "s", color=color, ms=4)
    axes[0].set(ylim=(1e-8, 2), xlabel="layers / loops / Newton steps L", ylabel="worst relative error over [1, κ]",
                title="constructions: formulas (lines), through the model (markers)")
    axes[0].legend(fontsize=6, ncol=3)
    for name, (g, e) in scaling.items():
        axes[1].loglog(g, e, label=name)
    axes[1].axhline(0.25, color="k", ls="--", lw=1)
    axes[1].set(xlabel="scaling γ of (X, y)", ylabel="relative error", title="Lemma 1: error vs scaling, γ ∈ [1, 36L²]")
    axes[1].legend(fontsize=7)
    used = ds3.layers_used
    axes[2].errorbar(ds3.kappa, used.mean("instance"), yerr=[used.mean("instance") - used.min("instance"), used.max("instance") - used.mean("instance")],
                     marker="o", capsize=3)
    axes[2].set_xscale("log")
    axes[2].set_xticks(ds3.kappa.values, [f"{k:g}" for k in ds3.kappa.values])
    axes[2].minorticks_off()
    axes[2].set(xlabel=f"κ of the instance (spectrum in [{max(ds3.kappa.values):g}/κ, {max(ds3.kappa.values):g}])", ylabel="layers used (mean, min–max)",
                title=f"Thm 3: adaptive depth, ε = {ds3.attrs['eps']:g}")
    paths.append(save_paper_figure(fig, out, NAME, "constructions_lemma1_thm3.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    axes[0].semilogy(ds67.L, ds67.multilayer_ood, "o-", color="tab:red", label="multilayer minimiser (App. D.1)")
    axes[0].semilogy(ds67.L, ds67.bound_proved, "--", color="tab:red", label="εδ′²d·9^(L−1) (proved)")
    axes[0].semilogy(ds67.L, ds67.looped_ood, "s-", color="tab:blue", label="looped minimiser")
    axes[0].set(xlabel="L", ylabel="OOD loss (fixed Gram, exact)", title="Thms 6-7")
    axes[0].legend(fontsize=7)
    for s in ds8.s.values:
        line, = axes[1].semilogy(ds8.L, ds8.looped.sel(s=s), label=f"looped (trained, symmetric part), Σ = {s:g}I")
        axes[1].semilogy(ds8.L, ds8.looped_raw.sel(s=s), ":", color=line.get_color())
    axes[1].semilogy(ds8.L, ds8.multilayer_app_f, "k--", label=f"multilayer, App. F layers, Σ = {ds8.attrs['app_f_scale']:g}I")
    axes[1].set(xlabel="loops / depth", ylabel="fixed-Gram loss", title="Thm 8: monotonicity in depth")
    axes[1].legend(fontsize=7)
    paths.append(save_paper_figure(fig, out, NAME, "thm6_7_8.png"))
    return paths

