"""Reproduction of Ahn, Cheng, Daneshmand & Sra (2023), *Transformers learn to implement
preconditioned gradient descent for in-context learning*.

Exact checks (Lemma 2, Thm 1, Thm 3) run in float64; the training experiments of §5.3, §6.1 and
the depth / context comparisons run in float32 on fixed training sets, several seeds vmapped
together, with the Gram-form kernel of ``LinearTransformer.predict_gram``. Losses are
½E(ŷ − y)² (half the paper's f of eq. 5).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from .. import dynamics, losses, tasks
from ..models import GramBatch, LinearTransformer
from ..runtime.xla_cpu import after
from ..sweep import sweep
from ..theory import ahn
from .report import (
    Check,
    PaperResult,
    PartResult,
    fmt,
    lap_timer,
    learned_check,
    mc_check,
    mean_and_se,
    premise,
    save_dataset,
    save_paper_figure,
    standard_error,
)
from .settings import Sized

NAME = "ahn2023"
TITLE = "Transformers learn to implement preconditioned gradient descent (Ahn, Cheng, Daneshmand & Sra)"
OPTIMIZERS = ("levenberg_marquardt", "lbfgs", "adam")


@dataclasses.dataclass(frozen=True)
class Config(Sized):
    d: int = 5
    n: int = 20
    n_thm5: int = 10
    scales: tuple = (1.0, 1.0, 0.5, 0.25, 1.0)
    n_layers: int = 3
    train_batch: int = 10_000
    test_batch: int = 200_000  # Fig. 1(d)'s excess over the Thm 4 point to a paired s.e. of about 0.5 %
    seeds: int = 2
    init_scale: float = 0.1
    lm_steps: int = 20
    lm_steps_thm5: int = 80
    restarts_thm5: int = 3
    lbfgs_steps: int = 80
    adam_steps: int = 150
    adam_lr: float = 1e-2
    family_mc: int = 200_000
    mc_batch: int = 200_000
    thm3_d: int = 3
    thm3_base: int = 1024
    depths: tuple = (1, 2, 3, 4)
    contexts: tuple = (2, 5, 10, 20)
    sweep_train_batch: int = 10_000
    sweep_test_batch: int = 100_000
    sweep_seeds: int = 2
    sweep_chunk: int = 1
    excess_target: float = 0.05  # test loss ≤ (1 + this) × the Thm 4 point's, same prompts
    dist_target: float = 0.15
    dist_target_thm5: float = 0.25
    seed: int = 0

    def largest_arrays(self) -> dict[str, int]:
        e = self.d + 1
        return {
            "the training prompts through the layers, every seed (float64)": 8
            * self.seeds
            * self.train_batch
            * (self.n + 1)
            * e
            * self.n_layers,
            "the test prompts (float64)": 8 * self.test_batch * (self.n + 1) * e,
            "the training prompts of one point of the depth/context sweep, through its layers (float64)": 8
            * self.sweep_train_batch
            * (max(self.n, *self.contexts) + 1)
            * e
            * max(self.n_layers, *self.depths),
            "the test prompts of one point of the depth/context sweep, every sweep seed (float64)": 8
            * self.sweep_seeds
            * self.sweep_test_batch
            * (max(self.n, *self.contexts) + 1)
            * e,
        }

    def contradictions(self) -> list[str]:
        out = (
            []
            if len(self.scales) == self.d
            else [
                f"scales has {len(self.scales)} entries but d = {self.d}: they are Σ's spectrum D (Σ = UᵀD²U), one per "
                "dimension"
            ]
        )
        if self.n_layers < 2:
            out.append(
                f"n_layers = {self.n_layers}: Figs. 3–4 (Thm 5) read B_i for i < L − 1 and ‖A_i‖ across "
                "layers, which need two layers or more"
            )
        return out


# What each setting means (`jaxicl config ahn2023` prints them next to the values)
SETTINGS_DOCS = {
    "d": "input dimension d (§5.3, §6.1)",
    "n": "examples per prompt n (Figs. 1-2)",
    "n_thm5": "examples per prompt for Figs. 3-4 (Thm 5)",
    "scales": "Σ = UᵀD²U with D = diag(scales), a fresh Haar U per seed",
    "n_layers": "layers of the linear transformer",
    "train_batch": "prompts of the fixed training set per seed",
    "test_batch": "prompts of the test set per seed",
    "seeds": "independent covariances and trainings (the training rows are asserted for each)",
    "init_scale": "every free parameter initialised N(0, init_scale²) (§5.3)",
    "lm_steps": "Levenberg-Marquardt iterations (Figs. 1-2)",
    "lm_steps_thm5": "Levenberg-Marquardt iterations (Figs. 3-4)",
    "restarts_thm5": "Gaussian inits per seed (Figs. 3-4; the lowest training loss is kept)",
    "lbfgs_steps": "L-BFGS iterations (optimizer comparison)",
    "adam_steps": "Adam steps (optimizer comparison)",
    "adam_lr": "Adam learning rate (optimizer comparison)",
    "family_mc": "Monte-Carlo prompts for the whitened Gram eigenvalues (Lemma 2, Thm 1)",
    "mc_batch": "Monte-Carlo prompts of the exact-vs-MC loss check",
    "thm3_d": "Thm 3: input dimension",
    "thm3_base": "Thm 3: sign-symmetrised prompts (×2^d for the raw estimate)",
    "depths": "depth sweep: layers L",
    "contexts": "context sweep: examples per prompt n",
    "sweep_train_batch": "depth and context sweeps: training prompts per point",
    "sweep_test_batch": "depth and context sweeps: test prompts per point",
    "sweep_seeds": "depth and context sweeps: seeds per point",
    "sweep_chunk": "depth and context sweeps: (n, L) points per compiled call, fewer where the device's memory asks "
    "(1: the least memory, and on a 2-core CPU the fastest)",
    "dist_target": "Thm 4 / Fig. 1: Dist(Σ^½AΣ^½, I) at the end must be at most this",
    "dist_target_thm5": "Thm 5 / Fig. 3: the same distance for the block parametrization",
    "seed": "PRNG seed of the whole reproduction",
}

SIZES = {
    "quick": Config(seeds=3),  # three seeds trained together: the training rows are asserted for each
    "trained": Config(seeds=3),  # every claim about trained models is asserted at quick size already
    "full": Config(
        seeds=5,
        train_batch=20_000,
        lm_steps=40,
        lm_steps_thm5=100,
        lbfgs_steps=600,
        adam_steps=5000,
        family_mc=1_000_000,
        mc_batch=2_000_000,
        thm3_d=4,
        thm3_base=2048,
        contexts=(2, 4, 6, 8, 10, 12, 14, 16, 18, 20),
        sweep_train_batch=20_000,
        sweep_test_batch=100_000,
        sweep_seeds=5,
        sweep_chunk=64,  # every point at once where the device's memory holds them (an accelerator)
    ),
}


# --- set-up of §5.3 / §6.1 ------------------------------------------------------------------------
def seed_problem(
    key, cfg: Config, n: int, parametrization: str = "preconditioner", n_layers=None, train_batch=None, test_batch=None
):
    """One seed: Σ = UᵀD²U with a fresh U, w ~ N(0, Σ⁻¹), a fixed training set and a test set (both
    as Gram statistics), and a Gaussian initialization. Returns (Σ, train, test, model)."""
    k_cov, k_train, k_test, k_init = jax.random.split(key, 4)
    Sigma = tasks.RandomRotationCovariance(jnp.asarray(cfg.scales)).sample(k_cov)
    task = tasks.LinearRegression(cfg.d, n, tasks.FixedCovariance(Sigma), "inverse_covariance")
    train = GramBatch.from_prompts(task.sample(k_train, train_batch or cfg.train_batch))
    # the test set is drawn after the training set (its batched triangular solve after theirs; xla_cpu.after)
    test = GramBatch.from_prompts(task.sample(after(k_test, train), test_batch or cfg.test_batch))
    model = LinearTransformer.init(k_init, cfg.d, n_layers or cfg.n_layers, parametrization, scale=cfg.init_scale)
    return Sigma, train, test, model


def distances(model: LinearTransformer, Sigma):
    r"""Per layer: $\operatorname{Dist}(\Sigma^{1/2}A_i\Sigma^{1/2}, I)$ (blue), $\operatorname{Dist}(A_i, I)$ (red), and for
    eq. (13) $\operatorname{Dist}(B_i, I)$."""
    R = ahn.sqrtm_psd(Sigma)
    A = model.params.matrices()
    out = {"blue": ahn.dist_to_identity(R @ A @ R), "red": ahn.dist_to_identity(A)}
    if hasattr(model.params, "B"):
        out["dist_B"] = ahn.dist_to_identity(model.params.B)
    return out


def fit(model, train: GramBatch, method: str, n_steps: int, cfg: Config, record=None):
    """Train on a fixed training set with one of ``OPTIMIZERS``."""
    if method == "levenberg_marquardt":
        return dynamics.levenberg_marquardt(
            lambda m: losses.sample_residuals(m, train),
            model,
            n_steps,
            record=record,
            jacobian_fn=lambda m: losses.sample_residuals_and_jacobian(m, train),
        )
    if method == "lbfgs":
        return dynamics.lbfgs(lambda m: losses.sample_loss(m, train), model, n_steps, record=record)
    if method == "adam":
        return dynamics.optax_fit(
            lambda m: losses.sample_loss(m, train), model, optax.adam(cfg.adam_lr), n_steps, record=record
        )
    raise ValueError(f"unknown optimizer {method!r}; choose from {OPTIMIZERS}.")


def family_model(Sigma, a):
    """The Thm 4 point A_i = −a_i Σ⁻¹ (eq. 9)."""
    return LinearTransformer.preconditioner(-a[:, None, None] * jnp.linalg.inv(Sigma)[None])


def _steps(cfg: Config, method: str) -> int:
    return {"levenberg_marquardt": cfg.lm_steps, "lbfgs": cfg.lbfgs_steps, "adam": cfg.adam_steps}[method]


def _stride(n_steps: int) -> int:
    return max(1, n_steps // 60)


def train_seeds(cfg: Config, keys, method: str, parametrization: str, n: int, a_star=None, restarts: int = 1):
    """Train one model per key (vmapped), recording the parameters at every iteration; then the
    distances at every iteration and the test loss at every ``_stride``-th iteration; at the end, the test loss and
    that of the Thm 4 point ``a_star`` on the same test prompts, with the s.e. of their per-prompt difference. With
    ``restarts`` > 1 each seed is trained from that many Gaussian inits (vmapped) and the lowest *training* loss is
    kept.
    Returns (the per-seed results, the stride, seconds)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(seed_trainer(cfg, method, parametrization, n, a_star, restarts)(keys))
    return out, _stride(_steps(cfg, method)), time.perf_counter() - t0


def seed_trainer(cfg: Config, method: str, parametrization: str, n: int, a_star=None, restarts: int = 1):
    """The compiled program behind `train_seeds`: keys -> per-seed results (``jit`` of a ``vmap``)."""
    n_steps = _steps(cfg, method)
    stride = _stride(n_steps)

    @jax.jit
    @jax.vmap
    def one(key):
        Sigma, train, test, model = seed_problem(key, cfg, n, parametrization)
        train, model = after((train, model), test)  # the fits' LU solves after the test set's triangular solve

        def fit_from(k):
            m = (
                model
                if restarts == 1
                else LinearTransformer.init(k, cfg.d, cfg.n_layers, parametrization, scale=cfg.init_scale)
            )
            return fit(m, train, method, n_steps, cfg, record=lambda m: m.params)

        runs = jax.vmap(fit_from)(jax.random.split(jax.random.fold_in(key, 99), restarts))
        best = jnp.argmin(jnp.where(jnp.isfinite(runs.losses[:, -1]), runs.losses[:, -1], jnp.inf))
        res = jax.tree_util.tree_map(lambda a: a[best], runs)
        traj = jax.vmap(lambda p: eqx.tree_at(lambda m: m.params, model, p))(res.records)
        dist = jax.vmap(lambda m: distances(m, Sigma))(traj)
        sub = jax.tree_util.tree_map(lambda a: a[::stride], traj)
        test_loss = jax.lax.map(lambda m: losses.sample_loss(m, test), sub)
        sq = 0.5 * (res.params.predict_gram(test) - test.y_query) ** 2
        if a_star is None:
            ref = paired_se = jnp.nan
        else:  # the Thm 4 point on the same test prompts, and the s.e. of the per-prompt difference
            sq_ref = 0.5 * (family_model(Sigma, a_star).predict_gram(test) - test.y_query) ** 2
            ref, paired_se = jnp.mean(sq_ref), standard_error(sq - sq_ref)
        return dict(
            Sigma=Sigma,
            losses=res.losses,
            test_loss=test_loss,
            final_test=jnp.mean(sq),
            ref_test=ref,
            paired_se=paired_se,
            median_test=jnp.median(sq),
            final=res.params,
            **dist,
        )

    return one


def _family_optimum(cfg: Config, key, n_layers: int):
    ev = ahn.whitened_gram_eigenvalues(key, cfg.d, cfg.n, cfg.family_mc)
    a, loss = ahn.thm4_family_optimum(ev, n_layers)
    per = 0.5 * jnp.sum(jnp.prod(1 - a[:, None, None] * ev[None], axis=0) ** 2, axis=-1)
    return a, float(loss), float(standard_error(per))


# --- checks ---------------------------------------------------------------------------------------
def check_thm1(cfg: Config, key) -> list[Check]:
    """Thm 1 in float64: optimum (8), its loss, exact loss = Monte Carlo, flow from random init."""
    d, n = cfg.d, cfg.n
    Sigma = tasks.RandomRotationCovariance(jnp.asarray(cfg.scales, jnp.float64)).sample(key)
    task = tasks.LinearRegression(d, n, tasks.FixedCovariance(Sigma))
    opt = ahn.thm1_model(Sigma, n)
    lmin = float(ahn.thm1_min_loss(Sigma, n))
    l_opt = float(losses.population_loss(opt, task))
    checks = [
        Check(
            "Thm 1: loss at (8) = ½(trΣ − trΣ²Γ⁻¹)",
            fmt(lmin, 10),
            fmt(l_opt, 10),
            "rel 1e-12",
            abs(l_opt - lmin) <= 1e-12 * abs(lmin),
        )
    ]
    k1, k2, k3 = jax.random.split(jax.random.fold_in(key, 1), 3)
    rand = LinearTransformer.init(k1, d, 1, "full", scale=0.3)
    noisy = tasks.LinearRegression(d, n, tasks.FixedCovariance(Sigma), noise_std=0.5)
    exact = float(losses.population_loss(rand, noisy))
    mc, se = (float(v) for v in losses.mc_loss(rand, noisy, k2, batch=cfg.mc_batch, return_stderr=True))
    checks.append(mc_check("one layer, full (P, Q), noise 0.5: exact loss = Monte Carlo", exact, mc, se))
    init = LinearTransformer.init(k3, d, 1, "single_layer", scale=0.5)
    # the library's default step-size tolerances (rtol 1e-8, atol 1e-10): Thm 1 is about where the flow ends, which a
    # stiff solver reaches from any accurate-enough path; 1e-10 took 6,869 steps to the same end point, 1e-8 2,546
    sol = dynamics.gradient_flow(
        lambda m: losses.population_loss(m, task), init, t1=1e5, solver="kvaerno5", steady_state_tol=1e-11
    )
    gap = float(losses.population_loss(sol.final, task)) - lmin
    b, A = np.asarray(sol.final.params.b), np.asarray(sol.final.params.A)  # on the host: no program per slice
    gam = float(b[d])
    target = -np.linalg.inv(np.asarray(ahn.gamma(Sigma, n)))
    err = float(np.abs(gam * A[:d] - target).max() / np.abs(target).max())
    side = max(float(np.abs(b[:d]).max()) * abs(1 / gam), float(np.abs(A[d]).max()) * abs(gam))
    checks += [
        Check(
            "Thm 1: gradient flow from random init → min loss",
            fmt(lmin, 10),
            f"gap {gap:.1e}",
            "gap ≤ 1e-8",
            -1e-12 <= gap <= 1e-8,
        ),
        Check(
            "Thm 1: γ·A → −Γ⁻¹ (γ = b_{d+1}), b_x → 0, a_y → 0",
            "0",
            f"{err:.1e}, {side:.1e}",
            "rel 1e-4",
            err <= 1e-4 and side <= 1e-4,
        ),
    ]
    return checks


def check_lemma2(cfg: Config, key) -> list[Check]:
    d, n, L = cfg.d, cfg.n, 4
    task = tasks.LinearRegression(
        d, n, tasks.RandomRotationCovariance(jnp.asarray(cfg.scales, jnp.float64)).sample(key), noise_std=0.1
    )
    prompts = task.sample(jax.random.fold_in(key, 1), 256)
    A = 0.3 * jax.random.normal(jax.random.fold_in(key, 2), (L, d, d), jnp.float64)
    model = LinearTransformer.preconditioner(A)
    gap = jax.jit(
        jax.vmap(
            lambda p: (
                model.layer_predictions(p, attention="direct")
                - ahn.preconditioned_gd_iterates(p, model.params.matrices()) @ p.x_query
            )
        )
    )  # one program
    err = float(np.max(np.abs(np.asarray(gap(prompts)))))
    return [
        Check(
            "Lemma 2: layer-i prediction = ⟨x_q, w_i^gd⟩ of (11), 4 layers, 256 prompts",
            "0",
            f"{err:.1e}",
            "abs 1e-10",
            err <= 1e-10,
        )
    ]


def check_thm3(cfg: Config, key) -> tuple[list[Check], dict]:
    """Two layers, isotropic data, sign-flip-symmetrised training set: A_0, A_1 diagonal."""
    d, n = cfg.thm3_d, cfg.n
    task = tasks.LinearRegression(d, n)
    prompts = ahn.sign_symmetrized(task.sample(key, cfg.thm3_base))
    data = GramBatch.from_prompts(prompts)
    model = LinearTransformer.init(jax.random.fold_in(key, 1), d, 2, "preconditioner", scale=0.3, dtype=jnp.float64)
    res = jax.jit(lambda m: fit(m, data, "levenberg_marquardt", 60, cfg))(model)
    A = res.params.params.matrices()
    off = np.asarray(ahn.off_diagonal_mass(A))
    raw = GramBatch.from_prompts(task.sample(jax.random.fold_in(key, 2), cfg.thm3_base * 2**d))
    res_raw = jax.jit(lambda m: fit(m, raw, "levenberg_marquardt", 60, cfg))(model)
    off_raw = np.asarray(ahn.off_diagonal_mass(res_raw.params.params.matrices()))
    checks = [
        Check(
            f"Thm 3: trained A_0, A_1 diagonal (d = {d}, sign-symmetrised set of {prompts.x.shape[0]})",
            "0",
            fmt(off, 2),
            "off-diagonal mass ≤ 1e-6",
            bool(np.all(off <= 1e-6)),
        ),
        Check("Thm 3, plain (unsymmetrised) training set of the same size", "O(B^{-1/2})", fmt(off_raw, 2), "—", None),
    ]
    return checks, {"A": np.asarray(A), "diag": np.asarray(jnp.diagonal(A, axis1=1, axis2=2))}


THEORY, FIG1_2, FIG3_4, SWEEPS = "theory", "fig1_2", "fig3_4", "sweeps"
# The parts that ``jaxicl reproduce --jobs`` runs in processes of their own (`run_parts`, then `assemble`): the exact
# checks (Lemma 2, Thms 1 and 3, float64), Figs. 1-2 with every optimizer, Figs. 3-4, and the depth and context
# sweeps; none waits for another (whole, the paper was the longest process of a warm GPU run: benchmarks/README.md).
PARTS = (THEORY, FIG1_2, FIG3_4, SWEEPS)


def run_parts(
    parts,
    size: str = "quick",
    out: Path = Path("jaxicl-report"),
    progress: bool = False,
    budget=None,
    config: Config | None = None,
) -> list[PartResult]:
    """Compute ``parts`` (of `PARTS`) in turn, each part's checks and what `assemble` needs of it; ``budget`` is
    ignored (nothing here trains a transformer). Each part draws its keys from the seed alone (``fold_in(PRNGKey(
    seed), i)``), so it computes the same numbers in any process."""
    cfg = config or SIZES[size]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown} of {NAME}; one of {list(PARTS)}.")
    key = jax.random.PRNGKey(cfg.seed)
    compute = {THEORY: _theory, FIG1_2: _fig1_2, FIG3_4: _fig3_4, SWEEPS: _sweeps}
    results = []
    for part in parts:
        t0, lap = time.perf_counter(), lap_timer(progress)
        checks, datasets = compute[part](cfg, key, lap)
        results.append(PartResult(NAME, part, datasets, lap.stages, time.perf_counter() - t0, checks))
    return results


def _theory(cfg: Config, key, lap) -> tuple[list[Check], dict]:
    """Lemma 2, Thm 1 and Thm 3 in float64: the checks, and Thm 3's matrices."""
    with jax.enable_x64(True):
        checks = check_lemma2(cfg, jax.random.fold_in(key, 1))
        checks += check_thm1(cfg, jax.random.fold_in(key, 2))
        lap("Lemma 2, Thm 1")
        c3, thm3 = check_thm3(cfg, jax.random.fold_in(key, 3))
        lap("Thm 3")
    return checks + c3, {"thm3": xr.Dataset({"A": (("layer", "i", "j"), np.asarray(thm3["A"]))})}


def _seed_keys(cfg: Config, key):
    """The seeds' keys, shared by Figs. 1-2 and 3-4 (the same Σ, training and test sets)."""
    return jax.random.split(jax.random.fold_in(key, 5), cfg.seeds)


def _fig1_2(cfg: Config, key, lap) -> tuple[list[Check], dict]:
    """Figs. 1-2 (Thm 4), float32: the Thm 4 point and each optimizer's runs (`train_seeds`), and Thm 4's checks."""
    with jax.enable_x64(False):  # training in float32, whatever the caller's setting
        a_star, fam_loss, fam_se = _family_optimum(cfg, jax.random.fold_in(key, 4), cfg.n_layers)
        results, seed_keys = {}, _seed_keys(cfg, key)
        for method in OPTIMIZERS:
            res, stride, seconds = train_seeds(cfg, seed_keys, method, "preconditioner", cfg.n, a_star)
            results[method] = (jax.device_get(res), stride, seconds)
            lap(f"Fig. 1-2 with {method}")
        a_star = np.asarray(a_star)
    checks = thm4_checks(results["levenberg_marquardt"][0], a_star, fam_loss, fam_se, cfg)
    return checks, {"results": results, "a_star": a_star, "fam_loss": fam_loss}


def _fig3_4(cfg: Config, key, lap) -> tuple[list[Check], dict]:
    """Figs. 3-4 (Thm 5), float32: the block-parametrised runs and their checks."""
    with jax.enable_x64(False):
        cfg5 = dataclasses.replace(cfg, n=cfg.n_thm5, lm_steps=cfg.lm_steps_thm5)
        blk, _, _ = train_seeds(
            cfg5, _seed_keys(cfg, key), "levenberg_marquardt", "block", cfg.n_thm5, restarts=cfg.restarts_thm5
        )
        lap("Fig. 3-4")
        checks = thm5_checks(blk, cfg)
    return checks, {"blk": jax.device_get(blk)}


def _sweeps(cfg: Config, key, lap) -> tuple[list[Check], dict]:
    """The depth and context sweeps, float32, and their checks."""
    with jax.enable_x64(False):
        ds_depth, ds_ctx = depth_and_context_sweeps(cfg, jax.random.fold_in(key, 6))
        lap("depth and context sweeps")
    return _sweep_checks(ds_depth, ds_ctx, cfg), {"depth": ds_depth, "context": ds_ctx}


def assemble(size: str, out: Path, parts: list[PartResult], config: Config | None = None) -> PaperResult:
    """The paper's checks, figures, notes and data files (``out/ahn2023/*.nc``) from the results of its `PARTS`, in
    any order: the optimizer comparison joins Figs. 1-2's runs."""
    t0 = time.perf_counter()
    cfg = config or SIZES[size]
    out = Path(out)
    by_part = {p.part: p for p in parts}
    missing = [p for p in PARTS if p not in by_part]
    if missing:
        raise ValueError(f"{NAME}: the results of part(s) {missing} are missing.")
    used = [by_part[p] for p in PARTS]
    f12, blk = by_part[FIG1_2].datasets, by_part[FIG3_4].datasets["blk"]
    results, a_star, fam_loss = f12["results"], f12["a_star"], f12["fam_loss"]

    opt_rows = []  # the optimizers: iterations to the Fig. 1 target, and each run's wall time
    for method in OPTIMIZERS:
        res, stride, seconds = results[method]
        opt_rows.append((method, _iterations_to_target(res, stride, cfg), _steps(cfg, method), seconds))
    best = min((r for r in opt_rows if r[1] is not None), key=lambda r: r[3] * r[1] / r[2], default=None)
    checks = [c for p in used[:3] for c in p.checks] + [optimizer_check(opt_rows, cfg)] + list(by_part[SWEEPS].checks)
    notes = [
        _optimizer_table(opt_rows, cfg),
        f"Σ = UᵀD²U, D = diag{cfg.scales}, a fresh Haar U per seed; d = {cfg.d}, n = {cfg.n} (Fig. 3–4: n = "
        f"{cfg.n_thm5}); {cfg.seeds} seeds trained together (vmap) on fixed training sets of {cfg.train_batch} "
        f"prompts; test losses on {cfg.test_batch} fresh prompts per seed. The infimum of the 3-layer (9) loss over "
        f"the Thm 4 set is {fam_loss:.4g} (½-convention; the paper's f is twice it), so a literal target 'test loss "
        "≤ 1e-3' is unreachable for this model; the target is a test loss within "
        f"{100 * cfg.excess_target:g} % of that point's (finite training sets leave a generalization gap of a few 1e-3).",
    ]
    if best is not None:
        notes.append(f"Fastest to target: **{best[0]}**.")

    ds_depth, ds_ctx = by_part[SWEEPS].datasets["depth"], by_part[SWEEPS].datasets["context"]
    datasets = {
        "fig1_thm4": _fig_dataset(results, a_star, fam_loss),
        "fig3_thm5": _fig_dataset({"levenberg_marquardt": (blk, _stride(cfg.lm_steps_thm5), 0.0)}, None, None),
        "thm3": by_part[THEORY].datasets["thm3"],
        "depth": ds_depth,
        "context": ds_ctx,
    }
    data = []
    for nm, ds in datasets.items():
        save_dataset(ds, out / NAME / f"{nm}.nc")
        data.append(f"{NAME}/{nm}.nc")
    R = jax.jit(jax.vmap(ahn.sqrtm_psd))(blk["Sigma"])
    figures = _figures(out, results, blk, R, ds_depth, ds_ctx, fam_loss, cfg)
    seconds = sum(p.seconds for p in used) + time.perf_counter() - t0
    return PaperResult(NAME, TITLE, size, checks, figures, data, seconds, notes, [s for p in used for s in p.stages])


def run(
    size: str = "quick", out: Path = Path("jaxicl-report"), progress: bool = False, config: Config | None = None
) -> PaperResult:
    """Every figure and theorem check at ``size``, or at the settings ``config`` (e.g. ``dataclasses.replace(
    Config.quick(), depths=(1, 2, 8))``): every part (`run_parts`), then `assemble`."""
    return assemble(size, out, run_parts(PARTS, size, out, progress, config=config), config)


def zero_loss(cfg: Config) -> float:
    """The zero estimator's test loss ½E y² = ½ tr(Σ⁻¹Σ) = d/2 (w ~ N(0, Σ⁻¹), the training tasks' weights): the
    trivial reference of the rows that say a trained model learned."""
    return cfg.d / 2


def _per_seed(values) -> dict:
    return {f"seed {i}": v for i, v in enumerate(np.asarray(values, float))}


def thm4_checks(lm: dict, a_star, fam_loss: float, fam_se: float, cfg: Config) -> list[Check]:
    """Figs. 1-2 (Thm 4) from the Levenberg-Marquardt runs' record ``lm`` (per seed: Dist curves "blue" =
    Dist(Σ^½A_iΣ^½, I) and "red" = Dist(A_i, I), "final_test" and "ref_test" losses, and "paired_se", the s.e. of
    their difference on the same test prompts)."""
    blue, red = np.asarray(lm["blue"][:, -1]), np.asarray(lm["red"][:, -1])
    excess = np.asarray(lm["final_test"] / lm["ref_test"] - 1)
    excess_se = np.asarray(lm["paired_se"] / lm["ref_test"])
    return [
        learned_check(
            "Figs. 1–2",
            {"every seed": np.asarray(lm["final_test"]) / zero_loss(cfg)},
            0.5,
            trivial=f"the zero estimator's (d/2 = {zero_loss(cfg):g})",
            where="on fresh prompts",
        ),
        Check(
            "Thm 4 / Fig. 1: Dist(Σ^½A_iΣ^½, I) at the end, every layer and seed",
            f"→ 0 (≤ {cfg.dist_target})",
            fmt(blue.max(axis=0), 3) + " (max over seeds)",
            f"≤ {cfg.dist_target}",
            bool(blue.max() <= cfg.dist_target),
            seeds=cfg.seeds,
        ),
        Check(
            "Fig. 1: Dist(A_i, I) stays large (not plain GD)",
            "≫ blue",
            fmt(red.min(axis=0), 3) + " (min over seeds)",
            "red ≥ 3 × blue",
            bool(np.all(red >= 3 * blue)),
            seeds=cfg.seeds,
        ),
        Check(
            "Fig. 1(d): test loss → the Thm 4 point A_i = −a_i*Σ⁻¹",
            f"{fam_loss:.4g} ± {fam_se:.1g} (a* = {fmt(a_star, 3)})",
            fmt(np.asarray(lm["final_test"]), 4)
            + f" (vs the point: {fmt(100 * excess, 2)} %, paired s.e. ≤ {100 * excess_se.max():.2g} %)",
            f"≤ {100 * cfg.excess_target:g} % above the point (same test prompts)",
            bool(np.all(excess <= cfg.excess_target)),
            seeds=cfg.seeds,
        ),
    ]


def thm5_checks(blk: dict, cfg: Config) -> list[Check]:
    """Figs. 3-4 (Thm 5) from the block-parametrised runs' record ``blk`` (per seed: "dist_B", "blue", "losses",
    "final" models, "median_test" and "final_test")."""
    dB = np.asarray(blk["dist_B"][:, -1, :-1])  # B_{L-1} does not enter the loss
    blue5 = np.asarray(blk["blue"][:, -1])
    A5 = blk["final"].params.matrices()
    normA = np.asarray(jnp.linalg.norm(A5, axis=(-2, -1)))
    increasing = bool(np.all(np.diff(normA, axis=1) > 0))
    return [
        learned_check(
            "Figs. 3–4",
            {"every seed": np.asarray(blk["median_test"]) / zero_loss(cfg)},
            0.5,
            trivial=f"the zero estimator's (d/2 = {zero_loss(cfg):g})",
            where="on fresh prompts (median: rare ill-conditioned prompts dominate the mean, last row)",
        ),
        Check(
            f"Thm 5 / Fig. 3(a,b): Dist(B_i, I), i < L−1 (best training loss of {cfg.restarts_thm5} inits per seed)",
            "→ 0",
            fmt(dB.max(axis=0), 3) + " (max over seeds)",
            f"≤ {cfg.dist_target_thm5}",
            bool(dB.max() <= cfg.dist_target_thm5),
            seeds=cfg.seeds,
        ),
        Check(
            "Thm 5 / Fig. 3(d–f): Dist(Σ^½A_iΣ^½, I)",
            "→ 0",
            fmt(blue5.max(axis=0), 3) + " (max over seeds)",
            f"≤ {cfg.dist_target_thm5}",
            bool(blue5.max() <= cfg.dist_target_thm5),
            seeds=cfg.seeds,
        ),
        Check(
            "Fig. 4: ‖A_0‖ < ‖A_1‖ < ‖A_2‖",
            "increasing",
            fmt(normA.mean(axis=0), 3) + " (mean over seeds)",
            "every seed",
            increasing,
            seeds=cfg.seeds,
        ),
        Check(
            f"Fig. 3(c): training loss of (13) at n = {cfg.n_thm5} → 0",
            "→ 0",
            fmt(np.asarray(blk["losses"][:, -1]), 3) + f" (from {fmt(np.asarray(blk['losses'][:, 0]), 3)})",
            "≤ 1 % of the initial loss, every seed",
            bool(np.all(np.asarray(blk["losses"][:, -1]) <= 0.01 * np.asarray(blk["losses"][:, 0]))),
            seeds=cfg.seeds,
        ),
        Check(
            "(13) on fresh prompts: median vs mean test loss",
            "—",
            f"median {fmt(np.asarray(blk['median_test']), 3)}, mean {fmt(np.asarray(blk['final_test']), 3)}",
            "heavy tail: rare ill-conditioned prompts",
            None,
        ),
    ]


def optimizer_check(opt_rows, cfg: Config) -> Check:
    """The second-order optimizer (Levenberg-Marquardt, ``opt_rows[0]``: (method, iterations to the Fig. 1 target or
    None, iterations run, seconds)) reaches the target."""
    method, k, _, _ = opt_rows[0]
    return Check(
        "second-order optimizer reaches the Fig. 1 target",
        "reached",
        f"{method}: " + (f"{k} iterations" if k is not None else "not reached"),
        f"test loss ≤ {1 + cfg.excess_target:g} × point, Dist ≤ {cfg.dist_target}",
        k is not None,
        seeds=cfg.seeds,
    )


def _iterations_to_target(res, stride: int, cfg: Config):
    """First recorded iteration where every seed has excess test loss ≤ target and every blue
    Dist ≤ target (None if never)."""
    excess = np.asarray(res["test_loss"]) / np.asarray(res["ref_test"])[:, None] - 1  # (seed, iter/stride)
    blue = np.asarray(res["blue"])[:, ::stride]  # (seed, iter/stride, layer)
    ok = np.all(excess <= cfg.excess_target, axis=0) & np.all(blue <= cfg.dist_target, axis=(0, 2))
    idx = np.flatnonzero(ok)
    return None if idx.size == 0 else int(idx[0] * stride)


def _optimizer_table(rows, cfg: Config) -> str:
    lines = [
        f"Optimizers on the Fig. 1 set-up ({cfg.seeds} seeds together, {cfg.train_batch} training prompts, "
        "float32; wall times include compilation — see benchmarks/README.md for times after compilation):",
        "",
        "| optimizer | iterations to target | iterations run | wall time of the run (s) |",
        "|---|---|---|---|",
    ]
    for method, k, n_steps, seconds in rows:
        lines.append(f"| {method} | {'not reached' if k is None else k} | {n_steps} | {seconds:.1f} |")
    return "\n".join(lines)


# --- depth and context sweeps ---------------------------------------------------------------------
def _mask_context(prompts, n_ctx):
    keep = (jnp.arange(prompts.x.shape[1]) < n_ctx).astype(prompts.x.dtype)
    return eqx.tree_at(lambda p: (p.x, p.y), prompts, (prompts.x * keep[None, :, None], prompts.y * keep[None, :]))


def _sweep_point(key, cfg: Config, n_ctx, depth, n_max: int, max_depth: int):
    """One grid point, ``n_ctx`` and ``depth`` traced (prompts padded to ``n_max`` examples and the
    model to ``max_depth`` layers, with masks): train a depth-``depth`` transformer (eq. 9) by LM
    and return its test loss (and s.e.) with the test losses of ``depth``-step GD and
    Σ⁻¹-preconditioned GD (best constant steps, tuned on the training prompts) and OLS, and the paired s.e. of
    the transformer's loss minus preconditioned GD's on the same test prompts."""
    k_cov, k_train, k_test, k_init = jax.random.split(key, 4)
    Sigma = tasks.RandomRotationCovariance(jnp.asarray(cfg.scales)).sample(k_cov)
    task = tasks.LinearRegression(cfg.d, n_max, tasks.FixedCovariance(Sigma), "inverse_covariance")
    # one LAPACK-heavy part after the other (xla_cpu.after): the training set's triangular solve, the test set's, the
    # fit (a loop of batched LU solves), then the OLS baseline on the test prompts (one batched SVD of them all).
    # XLA:CPU ran the fit and the SVD at once, and jaxlib 0.10's kernels deadlocked on them (benchmarks/README.md).
    ptrain = _mask_context(task.sample(k_train, cfg.sweep_train_batch), n_ctx)
    ptest = _mask_context(task.sample(after(k_test, ptrain), cfg.sweep_test_batch), n_ctx)
    train, test = GramBatch.from_prompts(ptrain, n_ctx), GramBatch.from_prompts(ptest, n_ctx)
    model = LinearTransformer.init(k_init, cfg.d, max_depth, "preconditioner", scale=cfg.init_scale)
    model, train = after((LinearTransformer(model.params, depth=depth), train), ptest)
    res = fit(model, train, "levenberg_marquardt", cfg.lm_steps, cfg)
    sq = 0.5 * (res.params.predict_gram(test) - test.y_query) ** 2
    Sinv = jnp.linalg.inv(Sigma)
    s_gd = ahn.best_gd_step(ptrain, depth, max_steps=max_depth)
    s_pgd = ahn.best_gd_step(ptrain, depth, Sinv, max_steps=max_depth)
    sq_pgd = 0.5 * (jax.vmap(lambda p: ahn.gd_prediction(p, s_pgd, depth, Sinv, max_depth))(ptest) - ptest.y_query) ** 2
    return (
        jnp.mean(sq),
        standard_error(sq),
        ahn.gd_loss(ptest, s_gd, depth, max_steps=max_depth),
        jnp.mean(sq_pgd),
        standard_error(sq - sq_pgd),
        ahn.ols_loss(after(ptest, res)),
    )


def depth_and_context_sweeps(cfg: Config, key) -> tuple[xr.Dataset, xr.Dataset]:
    """Depth L = 1…4 at n = cfg.n, and context n = 2…20 at L = cfg.n_layers, × seeds: one ``jaxicl.sweep``
    over the (n, L) cases, each vmapping its seeds (layers padded to the largest depth, examples to the
    longest context), so one compiled program, called on ``cfg.sweep_chunk`` points at a time and on fewer where the
    device's memory asks (the paper-size grid asks for about 60 GiB as one program). On a CPU one point at a time
    is the fastest and holds a fraction of the memory of all at once (docs/reports/trained-size).

    The seeds stay an inner ``vmap`` rather than a sweep axis: XLA:CPU (jax 0.10.2) deadlocked, all threads
    idle, on this program with (case, seed) flattened into one batch axis (same numbers as one
    ``jit(vmap(vmap(...)))``). The cause, found later: the fits' batched LU solves and the OLS baseline's batched
    SVD could run at once, and jaxlib 0.10's LAPACK kernels deadlock on two such calls; `_sweep_point` now
    orders them (``xla_cpu.after``)."""
    keys = jax.random.split(key, cfg.sweep_seeds)  # seed s uses the same Σ and data at every (n, L)
    n_max, max_depth = max(cfg.n, *cfg.contexts), max(cfg.n_layers, *cfg.depths)
    ns = np.array([cfg.n] * len(cfg.depths) + list(cfg.contexts))
    depths = np.array(list(cfg.depths) + [cfg.n_layers] * len(cfg.contexts))
    names = ("transformer", "transformer_se", "gd", "preconditioned_gd", "transformer_minus_pgd_se", "ols")

    def run(case):
        n_ctx, depth = jnp.asarray(ns)[case], jnp.asarray(depths)[case]
        out = jax.vmap(lambda k: _sweep_point(k, cfg, n_ctx, depth, n_max, max_depth))(keys)
        return dict(zip(names, out))

    ds = sweep(
        run,
        {"case": np.arange(len(ns))},
        output_dims={k: ("seed",) for k in names},
        output_coords={"seed": np.arange(cfg.sweep_seeds)},
        meta={"paper": NAME, "figure": "depth and context", "config": dataclasses.asdict(cfg)},
        chunk_size=cfg.sweep_chunk,
    )
    nd = len(cfg.depths)

    def dataset(sl, dim, values, attrs):
        return xr.Dataset(
            {k: ((dim, "seed"), ds[k].values[sl]) for k in names}, coords={dim: np.asarray(values)}, attrs=attrs
        )

    return (
        dataset(slice(0, nd), "depth", cfg.depths, {"n": cfg.n}),
        dataset(slice(nd, None), "n", cfg.contexts, {"layers": cfg.n_layers}),
    )


# Σ⁻¹-preconditioned GD against plain GD on the anisotropic Σ (condition number 16): at most this ratio (quick: 0.13-0.88)
PGD_MARGIN = 0.95
# The trained transformer against Σ⁻¹-preconditioned GD (a point of its own parametrization, eq. 9) on fresh prompts:
# at most this ratio, for the generalization gap of a fixed training set. Measured on 10⁶ fresh prompts per model
# (docs/reports/trained-size, "Ahn et al.'s sweeps"): with 10,000 training prompts 0.97-1.003 where the two are
# closest (n = 2; one layer, where the optimum is a multiple of Σ⁻¹), with 2,000 the n = 2 models overfit (1.13-1.19).
TF_PGD_MARGIN = 1.02


def _sweep_checks(ds_depth: xr.Dataset, ds_ctx: xr.Dataset, cfg: Config) -> list[Check]:
    ratios = {f"L = {L}": ds_depth.transformer.sel(depth=L).values / zero_loss(cfg) for L in ds_depth.depth.values}
    ratios |= {f"n = {n}": ds_ctx.transformer.sel(n=n).values / zero_loss(cfg) for n in ds_ctx.n.values}
    # at n < d no predictor built from the prompt gets far below the zero estimator (preconditioned GD with its best
    # step: 0.68 of it at n = 2, d = 5), hence a looser fraction than the figures' models trained at n = 20
    checks = [
        learned_check(
            "depth and context sweeps",
            ratios,
            0.9,
            trivial=f"the zero estimator's (d/2 = {zero_loss(cfg):g})",
            where="on fresh prompts",
        )
    ]
    for ds, dim in ((ds_depth, "depth"), (ds_ctx, "n")):
        # per seed and paired (the same test prompts): the transformer's mean error at most TF_PGD_MARGIN × preconditioned
        # GD's, within 3 s.e. of the per-prompt difference, which the rare ill-conditioned prompts dominate
        tf, pgd, se = (
            ds[k].transpose(dim, "seed").values
            for k in ("transformer", "preconditioned_gd", "transformer_minus_pgd_se")
        )
        ratio, pgd_mean, gd_mean = tf / pgd, pgd.mean(axis=1), ds.gd.mean("seed").values
        ok = bool(np.all(tf <= TF_PGD_MARGIN * pgd + 3 * se))
        checks.append(
            Check(
                f"trained transformer ≤ Σ⁻¹-preconditioned GD, every {dim}",
                "TF ≤ PGD",
                f"TF ÷ PGD {fmt(ratio.max(axis=1), 3)} (max over seeds; paired s.e. ≤ {fmt((se / pgd).max(), 1)}), "
                f"PGD {fmt(pgd_mean, 3)}",
                f"≤ {TF_PGD_MARGIN:g} × PGD + 3 paired s.e., every seed (finite training set)",
                ok,
                seeds=ds.seed.size,
            )
        )
        # Σ has condition number 16 (cfg.scales): the preconditioner must show, by a margin a dropped or wrong
        # preconditioner (PGD = GD) does not meet
        checks.append(
            Check(
                f"Σ⁻¹-preconditioned GD below plain GD (best steps), every {dim}",
                "PGD < GD",
                f"PGD ÷ GD {fmt(pgd_mean / gd_mean, 3)} (GD {fmt(gd_mean, 3)})",
                f"≤ {PGD_MARGIN:g} at every {dim}",
                bool(np.all(pgd_mean <= PGD_MARGIN * gd_mean)),
            )
        )
    tf_depth = ds_depth.transformer.mean("seed").values
    order = np.argsort(ds_depth.depth.values)
    checks.append(
        Check(
            "test loss decreases with depth",
            "decreasing",
            fmt(tf_depth, 3),
            "—",
            bool(np.all(np.diff(tf_depth[order]) < 0)),
            **premise(len(order) > 1, "one depth: a trend needs two or more"),
        )
    )
    return checks


def _fig_dataset(results, a_star, fam_loss):
    data_vars = {}
    for method, (res, stride, seconds) in results.items():
        it = f"iteration_{method}"
        data_vars[f"loss_{method}"] = (("seed", it), np.asarray(res["losses"]))
        data_vars[f"blue_{method}"] = (("seed", it, "layer"), np.asarray(res["blue"]))
        data_vars[f"red_{method}"] = (("seed", it, "layer"), np.asarray(res["red"]))
        if "dist_B" in res:
            data_vars[f"dist_B_{method}"] = (("seed", it, "layer"), np.asarray(res["dist_B"]))
        data_vars[f"test_loss_{method}"] = (("seed", f"tested_{method}"), np.asarray(res["test_loss"]))
        data_vars[f"final_test_{method}"] = ("seed", np.asarray(res["final_test"]))
    ds = xr.Dataset(data_vars)
    if a_star is not None:
        ds.attrs.update(a_star=np.asarray(a_star), family_loss=fam_loss)
    return ds


def _figures(out, results, blk, R_blk, ds_depth, ds_ctx, fam_loss, cfg):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return [
        _fig1_figure(plt, out, results, fam_loss, cfg),
        _weights_figure(plt, out, results["levenberg_marquardt"][0], blk, cfg),
        _fig3_figure(plt, out, blk, cfg),
        _depth_context_figure(plt, out, ds_depth, ds_ctx, cfg),
    ]


def _fig1_figure(plt, out, results, fam_loss, cfg) -> str:
    """Fig. 1: each layer's distances Dist(Σ½AΣ½, I) and Dist(A, I) over LM and L-BFGS iterations, and every
    optimizer's training loss against the Thm 4 point's."""
    lm = results["levenberg_marquardt"][0]
    L = cfg.n_layers
    fig, axes = plt.subplots(1, L + 1, figsize=(4 * (L + 1), 3.4), layout="constrained")
    for i in range(L):
        for res, style, label in ((lm, "-", "LM"), (results["lbfgs"][0], ":", "L-BFGS")):
            it = np.arange(np.asarray(res["blue"]).shape[1])
            axes[i].plot(
                it, np.asarray(res["blue"])[:, :, i].mean(0), style, color="tab:blue", label=f"Dist(Σ½AΣ½, I) {label}"
            )
            axes[i].plot(
                it, np.asarray(res["red"])[:, :, i].mean(0), style, color="tab:red", label=f"Dist(A, I) {label}"
            )
        axes[i].set(xscale="log", xlabel="iteration", title=f"layer {i}", ylim=(0, 1))
    axes[0].legend(fontsize=7)
    for method, res in ((m, results[m][0]) for m in OPTIMIZERS):
        axes[L].loglog(
            np.arange(1, np.asarray(res["losses"]).shape[1] + 1), np.asarray(res["losses"]).mean(0), label=method
        )
    axes[L].axhline(fam_loss, color="k", ls="--", label="Thm 4 point (population)")
    axes[L].set(xlabel="iteration", ylabel="training loss", title="loss (mean over seeds)")
    axes[L].legend(fontsize=7)
    fig.suptitle(f"Fig. 1: 3-layer (9), {cfg.seeds} seeds")
    return save_paper_figure(fig, out, NAME, "fig1_thm4.png")


def _weights_figure(plt, out, lm, blk, cfg) -> str:
    """Fig. 2: heat maps of Σ^½ A_i Σ^½ (seed 0), and Fig. 4: A_i of (13)."""
    L = cfg.n_layers
    Rs = jax.jit(jax.vmap(ahn.sqrtm_psd))(lm["Sigma"])
    A = lm["final"].params.matrices()
    fig, axes = plt.subplots(2, L, figsize=(3.2 * L, 6), layout="constrained")
    for i in range(L):
        M = np.asarray(Rs[0] @ A[0, i] @ Rs[0])
        im = axes[0, i].imshow(M, cmap="RdBu_r", vmin=-np.abs(M).max(), vmax=np.abs(M).max())
        axes[0, i].set_title(f"Fig. 2: Σ½A_{i}Σ½")
        fig.colorbar(im, ax=axes[0, i], shrink=0.8)
        A5 = np.asarray(blk["final"].params.matrices()[0, i])
        vmax = np.abs(np.asarray(blk["final"].params.matrices()[0])).max()
        im = axes[1, i].imshow(A5, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        axes[1, i].set_title(f"Fig. 4: A_{i} of (13) (shared scale)")
        fig.colorbar(im, ax=axes[1, i], shrink=0.8)
    return save_paper_figure(fig, out, NAME, "fig2_fig4_weights.png")


def _fig3_figure(plt, out, blk, cfg) -> str:
    """Fig. 3: Dist(B_i, I) and Dist(Σ½A_iΣ½, I) of (13) over LM iterations, and its training loss."""
    L = cfg.n_layers
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    it = np.arange(np.asarray(blk["blue"]).shape[1])
    for i in range(L - 1):
        axes[0].plot(it, np.asarray(blk["dist_B"])[:, :, i].mean(0), label=f"Dist(B_{i}, I)")
    for i in range(L):
        axes[0].plot(it, np.asarray(blk["blue"])[:, :, i].mean(0), "--", label=f"Dist(Σ½A_{i}Σ½, I)")
    axes[0].set(xlabel="LM iteration", ylim=(0, 1), title=f"Fig. 3: eq. (13), n = {cfg.n_thm5}")
    axes[0].legend(fontsize=7)
    axes[1].semilogy(it, np.asarray(blk["losses"]).mean(0))
    axes[1].set(xlabel="LM iteration", ylabel="training loss", title="Fig. 3(c)")
    return save_paper_figure(fig, out, NAME, "fig3_thm5.png")


def _depth_context_figure(plt, out, ds_depth, ds_ctx, cfg) -> str:
    """Test loss against depth and context length: the trained transformer, preconditioned GD, GD and OLS."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    for ax, ds, dim, label in (
        (axes[0], ds_depth, "depth", "layers / steps L"),
        (axes[1], ds_ctx, "n", "context length n"),
    ):
        x = ds[dim].values
        for var, name in (
            ("transformer", "trained transformer (9)"),
            ("preconditioned_gd", "Σ⁻¹-preconditioned GD"),
            ("gd", "GD (best step)"),
            ("ols", "OLS (noise-free: exact once n ≥ d, off the axis)"),
        ):
            mean, se = mean_and_se(ds[var].values, axis=1)
            ax.errorbar(x, mean, yerr=2 * se, marker="o", ms=3, capsize=2, label=name)
        iterative = np.concatenate([ds[v].values.ravel() for v in ("transformer", "preconditioned_gd", "gd")])
        ax.set(
            yscale="log",
            xlabel=label,
            ylabel="test loss ½E(ŷ−y)² (±2 s.e. over seeds)",
            ylim=(0.5 * iterative.min(), 2 * iterative.max()),
        )
        ax.legend(fontsize=7)
    axes[0].set_title(f"depth, n = {cfg.n}")
    axes[1].set_title(f"context, L = {cfg.n_layers}")
    return save_paper_figure(fig, out, NAME, "depth_context.png")
