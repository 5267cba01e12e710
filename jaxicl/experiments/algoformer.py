"""AlgoFormer (pre-, looped and post-transformers, eq. 2): Figs. 2, 3 and 5.

- Fig. 2: validation error vs number of in-context examples for the standard transformer, the vanilla
  looped transformer and the AlgoFormer, on regression with representation, AR(q) with representation
  and CoT with MLPs.
- Fig. 3: AlgoFormers trained with several (T, ΔT) (eq. 6), evaluated at up to ``eval_loops`` loops,
  far more than trained.
- Fig. 5: the AlgoFormer against k steps of gradient descent and of Newton's method (eq. 4) on noisy
  linear regression, σ ∈ {0, 0.1, 1}, as a function of the iteration (loop) count.

Every model is trained by `jaxicl.dynamics.train` (AdamW) with a checkpoint under
``out/algoformer/checkpoints``: an interrupted reproduction picks up where it stopped. Fig. 5's models (one per
noise level, one shape) train as one vmapped ensemble; Fig. 3's (T, ΔT) settings train one by one (each computes
only the loop counts its loss weighs), and its (T, ΔT) = cfg.loops is Fig. 2's regression AlgoFormer.

The work comes in `PARTS` (Fig. 2 task by task, with Fig. 3 beside the regression task, and Fig. 5), which
`run_parts` computes and `assemble` turns into checks, figures and data files; ``jaxicl reproduce --jobs``
runs each part in a process of its own, so that this paper, two thirds of a quick run's training, is spread over
the cores.

Sizes: ``quick`` (2-core CPU, minutes) is far smaller than the paper; ``full`` is the paper's setting
(§5.1: d = 20, N = 40, D = 256, 12-layer standard transformer, one-layer pre/loop/post, (T, ΔT) = (20, 15),
Adam lr 1e-4, 500k steps, batch 64) and needs a GPU.
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

from .. import baselines, losses, models, tasks
from ..dynamics import Curriculum, member, train
from ..dynamics.checkpoint import checkpoint_header, continue_checkpoint
from ..runtime.budget import TimeBudget, next_deadline, plan
from .report import (
    Check,
    PaperResult,
    PartResult,
    checks_per_seed,
    fmt,
    lap_timer,
    learned_check,
    least_complete,
    mark_partial,
    mean_and_se,
    not_run,
    paper_claim,
    partial_status,
    relative_margin,
    save_dataset,
    save_paper_figure,
)
from .settings import Sized, trains_as_long, transformer_arrays

NAME = "algoformer"
TRANSFORMERS_ONLY = True  # every figure trains transformers: `jaxicl reproduce --skip-transformers` leaves it out
TITLE = "AlgoFormer: pre-, looped and post-transformers as algorithm learners (Figs. 2, 3, 5)"
MODELS = ("standard", "looped", "algoformer")
# Independent parts of the work, each trained and evaluated by a process of its own under `jaxicl reproduce --jobs`
# (`run_parts`; finer than the whole paper, so that the processes end together: benchmarks/README.md): Fig. 2
# one task at a time, the regression task with Fig. 3 (whose (T, ΔT) = cfg.loops is its AlgoFormer), and Fig. 5.
PARTS = ("regression", "ar", "cot", "fig5")
FIG2_TASKS = PARTS[:3]


def parts_of(cfg) -> tuple[str, ...]:
    """The parts a run at ``cfg`` computes: its ``parts`` setting (of `PARTS`)."""
    return tuple(cfg.parts)


@dataclasses.dataclass(frozen=True)
class Config(Sized):
    d: int  # regression input dimension (Figs. 2(a), 3, 5)
    N: int  # in-context examples
    phi_width: int  # hidden width of the 3-layer representation Φ*
    ar_d: int
    ar_q: int
    ar_N: int
    # the AR task's AdamW steps for Fig. 2's models (``steps``: the regression and CoT tasks'): at --trained's 3,000
    # steps seed 2's AR models were at 0.78-0.84 of the zero estimator's error on 16,384 test prompts, at 8,000 every
    # seed's at most 0.76 (docs/reports/trained-size)
    ar_steps: int
    cot_d: int
    cot_depth: int
    cot_N: int
    d_model: int
    n_heads: int
    std_layers: int
    loops: tuple  # (T, ΔT) of the looped models in Fig. 2
    fig3_loops: tuple  # (T, ΔT) settings of Fig. 3
    eval_loops: int  # Fig. 3: evaluate up to this many loops
    sigmas: tuple  # Fig. 5 noise levels
    fig5_loops: tuple  # Fig. 5's AlgoFormers: (T, ΔT) of each (the paper: (20, 15) and (10, 10), which trains t = 1 on)
    iterations: int  # Fig. 5: GD / Newton / loop counts 1…iterations
    steps: int
    batch: int
    lr: float
    test_prompts: int  # Figs. 3 and 5's (16,384 past quick, as Fig. 2's: their margins move with the test set too)
    # Fig. 2's test prompts: its comparisons of the architectures are decided by a few per cent, which the s.e. of 512
    # prompts does not resolve (the same --trained models' CoT margin of seed 0 was +0.84 % on 512 prompts and -0.43 %
    # on 16,384: docs/reports/trained-size)
    fig2_test_prompts: int
    chunk: int
    seed: int = 0
    seeds: int = 1  # independent trainings of every model (tasks, initialisations, prompts); trained claims need 3
    compute_dtype: str | None = None  # "bfloat16": mixed precision (float32 master weights and loss)
    parts: tuple = PARTS  # the parts to run (`PARTS`); the claims of those left out are "not applicable"
    fig3: bool = True  # train Fig. 3's models beside the regression part; false: its claims are "not applicable"
    # curriculum (Garg et al. §3): the active input dimension grows by 1 and the scored examples by 2 every this many
    # steps, from a quarter of each to the task's full size; 0: none
    curriculum_every: int = 0
    # Fig. 5's noisy linear regression leaves the loss's initial plateau later than Fig. 2's tasks: its own AdamW steps
    # (0: ``steps``) and curriculum. Quick size: without a curriculum σ = 0 and σ = 1 stayed at the zero estimator's
    # error after 1,500 steps; with one every 200 steps σ = 1 was still at 0.85-1.0 of it, and at 0.54-0.56 after 2,500
    fig5_steps: int = 0
    fig5_curriculum_every: int = 0
    # Fig. 3's own AdamW steps (0: ``steps``): its claim is read past the trained loops and needs longer training than
    # Fig. 2's comparisons. Where it differs from ``steps``, Fig. 3's (T, ΔT) = ``loops`` model is Fig. 2's AlgoFormer
    # (its initialisation and prompts) trained for these steps, under a checkpoint of its own
    fig3_steps: int = 0
    # the AR task's ρ: A ~ N(0, ρ²/(qk) I), with Φ* normalized to E‖Φ*(z)‖² = k. Unnormalized, one draw of the narrow
    # Φ* of --quick/--trained set the task's signal-to-noise ratio (E‖Φ*(z)‖² 2.2-15 over seeds 0-7), and a low draw
    # (seed 2) left every model on the loss's plateau; 0.7 is the effective ρ·√(E‖Φ*‖²/k) of the draws whose models
    # learned (seeds 0 and 1: 0.62, 0.70), and every seed's models learn at it (docs/reports/trained-size)
    ar_gain: float = 0.7

    def largest_arrays(self) -> dict[str, int]:
        tokens = max(2 * self.N, 2 * self.ar_N, self.cot_N * (self.cot_depth + 1)) + 1
        loops = max(T for T, *_ in (self.loops, *self.fig3_loops, *self.fig5_loops))
        return {
            **transformer_arrays(
                "the looped transformers", self.batch, tokens, self.d_model, 1, 4 * self.d_model, passes=loops
            ),
            **transformer_arrays(
                "the standard transformers", self.batch, tokens, self.d_model, self.std_layers, 4 * self.d_model
            ),
        }

    def unread(self) -> dict[str, str]:
        out = {}
        for part, keys in PART_SETTINGS.items():
            if part not in self.parts:
                out |= dict.fromkeys(keys, f"the part {part!r} is not in `parts`")
        if "regression" in self.parts and not self.fig3:
            out |= dict.fromkeys(
                PART_SETTINGS["regression"], "Fig. 3's models train only with `fig3` on: add `--set fig3=true`"
            )
        return out

    def contradictions(self) -> list[str]:
        out = []
        for key, pairs in (("loops", (self.loops,)), ("fig3_loops", self.fig3_loops), ("fig5_loops", self.fig5_loops)):
            for pair in pairs:
                if len(pair) != 2 or not 0 <= pair[1] <= pair[0]:
                    out.append(
                        f"{key}: {list(pair)} is not a (T, ΔT) with 0 ≤ ΔT ≤ T (eq. 6 averages the loops "
                        "max(T − ΔT, 1) … T)"
                    )
        if max(T for T, *_ in self.fig5_loops) > self.iterations:
            out.append(
                f"iterations = {self.iterations} is below a trained T of fig5_loops: Fig. 5 reads each model at its T"
            )
        if max(T for T, *_ in self.fig3_loops) > self.eval_loops:
            out.append(f"eval_loops = {self.eval_loops} is below a trained T of fig3_loops: Fig. 3 evaluates past T")
        if set(FIG2_TASKS) & set(self.parts) and self.fig2_test_prompts < 2:
            out.append(
                f"Fig. 2 has {self.fig2_test_prompts} test prompt: its comparisons need at least 2 "
                "for the standard error of a difference"
            )
        if self.d_model % self.n_heads:
            out.append(f"d_model = {self.d_model} is not divisible by n_heads = {self.n_heads}")
        if self.ar_N < self.ar_q + 2:
            out.append(
                f"ar_N = {self.ar_N} is below ar_q + 2 = {self.ar_q + 2}: an AR(q) prompt holds q starting steps "
                "and at least two to predict"
            )
        if not self.ar_gain > 0:
            out.append(f"ar_gain = {self.ar_gain} is not positive: the AR task's A ~ N(0, ar_gain²/(qk) I) would be 0")
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown or not self.parts or len(set(self.parts)) != len(self.parts):
            out.append(f"parts {list(self.parts)}: each at most once, of {list(PARTS)}")
        return out


# What each setting means where the Config's own comments do not say (`jaxicl config algoformer`)
SETTINGS_DOCS = {
    "ar_d": "AR(q) task (§5.1): dimension of the series",
    "ar_q": "AR(q) task: window q read by Φ*",
    "ar_N": "AR(q) task: steps of the series per prompt",
    "ar_gain": "AR(q) task: ρ of A ~ N(0, ρ²/(qk) I), Φ* normalized to E‖Φ*(z)‖² = k",
    "cot_d": "chain-of-thought MLP task (§5.1): dimension",
    "cot_depth": "chain-of-thought MLP task: layers of the chain",
    "cot_N": "chain-of-thought MLP task: chains per prompt",
    "d_model": "transformer width (every model)",
    "n_heads": "attention heads per layer",
    "std_layers": "layers of the standard transformer",
    "steps": "AdamW steps per model of Fig. 2's regression and CoT tasks (the AR task's: ar_steps)",
    "batch": "prompts per step",
    "lr": "AdamW learning rate",
    "test_prompts": "test prompts per evaluation of Figs. 3 and 5 (errors against the noise-free targets)",
    "chunk": "steps per compiled chunk (progress, checkpoints between chunks)",
    "seed": "PRNG seed of the whole reproduction",
}

# the settings only Fig. 5 reads and only Fig. 3's models read: left out of the other models' checkpoint fingerprints
# (`_fit`)
FIG5_SETTINGS = ("fig5_loops", "fig5_steps", "fig5_curriculum_every", "sigmas", "iterations")
FIG3_SETTINGS = ("fig3_steps",)
# the settings that only one part (`PARTS`) reads, the regression part's those of Fig. 3's models (trained with it,
# under `Config.fig3`): a run without that part refuses a change to them (`Config.unread`)
PART_SETTINGS = {
    "ar": ("ar_d", "ar_q", "ar_N", "ar_gain", "ar_steps"),
    "cot": ("cot_d", "cot_depth", "cot_N"),
    "fig5": FIG5_SETTINGS,
    "regression": ("fig3_loops", "eval_loops", *FIG3_SETTINGS),
}
# the settings that choose which figures a run computes, which no model reads: left out of every fingerprint
RUN_SELECTION = ("parts", "fig3")
# the test prompts of the evaluations, which no training reads: left out of every fingerprint
EVAL_SETTINGS = ("test_prompts", "fig2_test_prompts")
# test prompts evaluated at a time, so that a large test set (16,384 at --trained and --full) holds one batch's
# temporaries at once: EVAL_BATCH where a prompt's errors or iterates are all that is kept; LOOP_EVAL_BATCH where the
# hidden states of every loop are kept too (about 1 GiB per 128 prompts at the paper's size)
EVAL_BATCH = 1024
LOOP_EVAL_BATCH = 128

# quick: 1,500 AdamW steps per model. Fig. 2's asserted checks pass at 1,000-2,000 steps (seed 0), the AR task's
# "error decreases with the examples" with its widest margin of those at 1,500 (last / first 0.875-0.925 against
# 0.928-0.988 at 2,000); the reported orderings are those of 2,000 steps (benchmarks/README.md)
_QUICK = Config(
    d=5,
    N=10,
    phi_width=16,
    ar_d=3,
    ar_q=3,
    ar_N=16,
    ar_steps=1500,
    cot_d=4,
    cot_depth=3,
    cot_N=5,
    d_model=32,
    n_heads=4,
    std_layers=4,
    loops=(8, 6),
    # quick and trained: the pair with the same T that Fig. 3's claim compares (a third setting, which no claim
    # reads, would add a fifth of Fig. 3's training; the paper's three settings train at --full)
    fig3_loops=((8, 6), (8, 1)),
    eval_loops=40,
    sigmas=(0.0, 0.1, 1.0),
    # quick and trained: only the AlgoFormer whose loss weighs the first loops, the one Fig. 5's claims read (the
    # paper's second, (20, 15), trains at --full)
    fig5_loops=((4, 4),),
    iterations=40,
    steps=1500,
    batch=32,
    lr=1e-3,
    test_prompts=512,
    fig2_test_prompts=512,
    chunk=250,
    fig5_steps=2500,
    fig5_curriculum_every=200,
)
SIZES = {
    # quick: Fig. 2's three tasks. Figs. 3 and 5, whose comparisons hold from 10,000 steps of their own models (below),
    # are left to --trained: at quick their models (Fig. 5's needed 2,500 steps of their own to leave the loss's
    # plateau) took about a seventh of the run's CPU time (benchmarks/README.md), for four rows "not reproduced"
    "quick": dataclasses.replace(_QUICK, parts=FIG2_TASKS, fig3=False),
    # Fig. 2's models train 3,000 steps, the AR task's 8,000 (`Config.ar_steps`): every model learned for each seed
    # there, and its comparisons of the architectures, which do not hold for each seed at 3,000 nor at 8,000 steps,
    # are asserted at --full
    # (`FIG2_ASSERTED_AT`), shown here with their margins; Fig. 5's comparison held at 10,000 (`jaxicl
    # sweep --stage algoformer:fig5 --trained --grid fig5_steps=[5000,10000] --grid seed=[0,1,2]`: at 5,000 its σ = 1
    # row failed for each seed, at 2,500 every row), Fig. 3's at 10,000 (`--stage algoformer:regression --trained
    # --grid steps=[10000] --grid seed=[0,1,2]`: at 3,000 seed 0 showed the claim's opposite)
    "trained": dataclasses.replace(
        _QUICK,
        steps=3000,
        ar_steps=8000,
        # every figure evaluated on 16,384 test prompts: on 512, which prompts the test set held decided Fig. 2's CoT
        # verdict at this size and moved Fig. 5's σ = 1 margins by up to 13 points (docs/reports/trained-size)
        test_prompts=16_384,
        fig2_test_prompts=16_384,
        seeds=3,
        fig3_steps=10_000,
        fig5_steps=10_000,
    ),
    "full": Config(
        d=20,
        N=40,
        phi_width=64,
        ar_d=20,
        ar_q=3,
        ar_N=40,
        ar_steps=500_000,
        cot_d=20,
        cot_depth=6,
        cot_N=12,
        d_model=256,
        n_heads=8,
        std_layers=12,
        loops=(20, 15),
        fig3_loops=((20, 15), (20, 5), (10, 10)),
        eval_loops=100,
        sigmas=(0.0, 0.1, 1.0),
        fig5_loops=((20, 15), (10, 10)),
        iterations=100,
        steps=500_000,
        batch=64,
        lr=1e-4,
        test_prompts=16_384,
        fig2_test_prompts=16_384,
        chunk=1000,
        compute_dtype="bfloat16",
        fig5_steps=500_000,
        fig5_curriculum_every=2000,
        seeds=3,
    ),
}


def fig2_tasks(cfg: Config, key) -> dict:
    """The three representation tasks (§5.1); each Φ* is drawn once from ``key`` and kept fixed (the AR task's
    normalized, `Config.ar_gain`)."""
    k1, k2 = jax.random.split(key)
    h = cfg.phi_width
    ar_phi = tasks.LeakyReluMLP(k2, [cfg.ar_q * cfg.ar_d, h, h, cfg.ar_d], normalize=True)
    return {
        "regression": tasks.RepresentationRegression(cfg.d, cfg.N, tasks.LeakyReluMLP(k1, [cfg.d, h, h, cfg.d])),
        "ar": tasks.ARRepresentation(cfg.ar_d, cfg.ar_q, cfg.ar_N, ar_phi, gain=cfg.ar_gain),
        "cot": tasks.CoTMLP(cfg.cot_d, cfg.cot_depth, cfg.cot_N),
    }


def _task_size(cfg: Config, name: str) -> tuple[int, int]:
    """(input dimension, examples) of a Fig. 2 task, for its curriculum."""
    return {"regression": (cfg.d, cfg.N), "ar": (cfg.ar_d, cfg.ar_N), "cot": (cfg.cot_d, cfg.cot_N)}[name]


def _width(task):
    p = jax.eval_shape(lambda: task.prompt(jax.random.PRNGKey(0)))
    return p.tokens.shape[1], p.targets.shape[1], p.tokens.shape[0]


def build_model(kind: str, cfg: Config, task, key):
    """``standard`` (cfg.std_layers layers), ``looped`` (one layer, input injection) or ``algoformer``
    (one-layer pre/loop/post), all of width cfg.d_model with cfg.n_heads heads."""
    d_in, d_out, T = _width(task)
    common = dict(d_model=cfg.d_model, max_len=T)
    if kind == "standard":
        return models.StandardTransformer(key, d_in, d_out, n_layers=cfg.std_layers, n_heads=cfg.n_heads, **common)
    if kind == "looped":
        return models.LoopedTransformer(key, d_in, d_out, n_layers=1, n_heads=cfg.n_heads, **common)
    if kind == "algoformer":
        return models.AlgoFormer(key, d_in, d_out, layers=(1, 1, 1), heads=(cfg.n_heads,) * 3, **common)
    raise ValueError(f"unknown model {kind!r}; one of {MODELS}.")


def _fit(
    model,
    loss,
    cfg: Config,
    key,
    ckpt: Path,
    label: str,
    progress: bool,
    budget: TimeBudget | None = None,
    runs: list | None = None,
    member_data=None,
    figure: int = 2,
    continues: Path | None = None,
):
    """AdamW (lr cfg.lr) for cfg.steps steps with a checkpoint, within the next share of ``budget``; returns (model,
    losses, steps/s) and appends the training result to ``runs``. With ``member_data``, ``model`` is an ensemble and
    ``key`` one key per member (``train(ensemble=True)``). The checkpoint's fingerprint holds every setting of
    ``cfg`` but the settings of the figures other than ``figure`` (the figure whose model this is: `FIG5_SETTINGS`,
    `FIG3_SETTINGS`; the AR task's steps, which its models' ``cfg`` holds as ``steps``), the test prompts, and those
    that choose which figures run (`RUN_SELECTION`), which it never reads: a change to Fig. 5 leaves Figs. 2 and 3's
    checkpoints resumable, one to Fig. 3's steps Figs. 2 and 5's. ``continues``: the checkpoint of this trajectory's
    first steps, trained by a shorter run (Fig. 2's model, which Fig. 3 trains on for its own steps); a run without a
    checkpoint of its own starts where that one ended
    (`continue_checkpoint`)."""
    unread = {
        *RUN_SELECTION,
        *EVAL_SETTINGS,
        *(FIG5_SETTINGS if figure != 5 else ()),
        *(FIG3_SETTINGS if figure != 3 else ()),
        "ar_steps",  # read as ``steps`` by the AR task's models (`task_config`), by no other
    }
    config = {"run": label, **{k: str(v) for k, v in dataclasses.asdict(cfg).items() if k not in unread}}
    if continues is not None and continues.exists() and not ckpt.exists():
        if checkpoint_header(continues)["step"] <= cfg.steps:
            continue_checkpoint(continues, ckpt, config, may_differ=("run", "steps", *FIG3_SETTINGS))
    if progress:
        print(f"  training {label}", flush=True)
    res = train(
        loss,
        model,
        cfg.steps,
        key,
        optimizer=optax.adamw(cfg.lr),
        chunk_size=cfg.chunk,
        checkpoint=ckpt,
        config=config,
        progress=progress,
        label=label,
        deadline=next_deadline(budget),
        compute_dtype=cfg.compute_dtype and jnp.dtype(cfg.compute_dtype),
        ensemble=member_data is not None,
        member_data=member_data,
    )
    if runs is not None:
        runs.append(res)
    return res.model, res.losses, res.steps_per_second


def curriculum(cfg: Config, d: int, n: int):
    """The training curriculum of a task of dimension ``d`` and ``n`` examples (`Config.curriculum_every`), or None."""
    if not cfg.curriculum_every:
        return None
    return Curriculum(d=(max(1, d // 4), d, 1), n=(max(1, n // 4), n, 2), every=cfg.curriculum_every)


def training_prompts(task, cfg: Config, key, step, d: int, n: int):
    """A batch of training prompts of ``task`` at ``step``: the curriculum's active dimension and examples."""
    curr = curriculum(cfg, d, n)
    return task.prompts(key, cfg.batch) if curr is None else task.prompts(key, cfg.batch, *curr.at(step))


def _scored(prompts):
    """The positions of a prompt whose prediction is scored (the mask's nonzero entries; the same in every prompt)."""
    return np.flatnonzero(np.asarray(prompts.mask[0]) > 0)


def _scored_mean(sq_err, prompts):
    """The mean over the prompts of a squared error (batch, T) at every scored position, in order."""
    return np.asarray(jnp.mean((sq_err * prompts.mask)[:, _scored(prompts)], 0))


def _scored_errors(model, prompts, n_loops):
    """Squared error against the clean targets at every scored position (in order) of every prompt, (prompts,
    positions); `EVAL_BATCH` prompts at a time."""
    return np.asarray(_position_errors_batched(model, prompts, n_loops))[:, _scored(prompts)]


@eqx.filter_jit
def _position_errors_batched(model, prompts, n_loops):
    def one(p):
        return losses.position_errors(model, jax.tree_util.tree_map(lambda a: a[None], p), n_loops)[0]

    return jax.lax.map(one, prompts, batch_size=EVAL_BATCH)


def _zero_error(prompts):
    """Error of the zero estimator at every scored position: E‖y‖² (clean targets)."""
    return _scored_mean(jnp.sum(prompts.clean**2, -1), prompts)


@eqx.filter_jit
def _oracle_predictions(task, prompts):
    return jax.vmap(task.bayes_predictions)(prompts)


def _oracle_error(task, prompts):
    """Error of the AR task's Bayes oracle (`ARRepresentation.bayes_predictions`: it knows Φ* and the prior of A) at
    every scored position, against the clean targets: the smallest error expected of a model there."""
    return _scored_mean(jnp.sum((_oracle_predictions(task, prompts) - prompts.clean) ** 2, -1), prompts)


def fig2(
    cfg: Config,
    key,
    ckpt_dir: Path,
    progress: bool = False,
    budget: TimeBudget | None = None,
    only: tuple | None = None,
) -> tuple[xr.Dataset, dict, dict]:
    """Every model on every task of `fig2_tasks` (or on those named in ``only``; each task's models and test
    prompts are the same either way): (the curves, the tasks, each (task, model kind)'s training result)."""
    ts = fig2_tasks(cfg, jax.random.fold_in(key, 0))
    if only is not None and set(only) - set(ts):
        raise ValueError(f"unknown Fig. 2 task(s) {sorted(set(only) - set(ts))}; one of {list(ts)}.")
    data, speed, runs, trained = {}, {}, [], {}
    for ti, (tname, task) in enumerate(ts.items()):
        if only is not None and tname not in only:
            continue
        test = task.prompts(jax.random.fold_in(key, 100 + ti), cfg.fig2_test_prompts)
        curves = {"zero": _zero_error(test)}
        if isinstance(task, tasks.ARRepresentation):  # what is learnable in context: the Bayes oracle that knows Φ*
            curves["oracle"] = _oracle_error(task, test)
        relative = {}  # each prompt's error ÷ the zero estimator's, mean over its examples, per model
        for kind in MODELS:
            model, sps = fig2_model(
                cfg, key, tname, task, kind, ckpt_dir / f"fig2_{tname}_{kind}.ckpt", progress, budget, runs
            )
            trained[tname, kind] = runs[-1]
            err = _scored_errors(model, test, None if kind == "standard" else cfg.loops[0])  # (prompts, examples)
            curves[kind] = err.mean(0)
            relative[kind] = np.mean(err.astype(np.float64) / curves["zero"], 1)
            speed[f"{tname}_{kind}"] = sps
        n = len(curves["zero"])
        for name, c in curves.items():
            data[f"{tname}_{name}"] = (("example_" + tname,), c[:n])
        for other in MODELS[:2]:  # the s.e. of the AlgoFormer's mean minus the other's, the same prompts (paired)
            diff = relative["algoformer"] - relative[other]
            data[f"{tname}_paired_se_{other}"] = mean_and_se(diff)[1]
    ds = xr.Dataset(
        data, coords={f"example_{t}": np.arange(1, len(data[f"{t}_zero"][1]) + 1) for t in ts if f"{t}_zero" in data}
    )
    ds.attrs.update({f"steps_per_second_{k}": v for k, v in speed.items()})
    ds.attrs["status"] = partial_status(runs) or "complete"
    return ds, ts, trained


def task_config(cfg: Config, tname: str) -> Config:
    """The training settings of Fig. 2's models on the task ``tname``: ``cfg``, with the AR task's own steps
    (`Config.ar_steps`)."""
    return dataclasses.replace(cfg, steps=cfg.ar_steps) if tname == "ar" else cfg


def fig2_model(
    cfg: Config, key, tname: str, task, kind: str, ckpt: Path, progress, budget, runs, figure: int = 2, continues=None
):
    """Fig. 2's model ``kind`` (of `MODELS`) on its task ``tname`` (of `fig2_tasks`), built and trained from
    ``key`` (`fig2`'s) for the task's steps (`task_config`; `_fit`, from the checkpoint ``continues`` of its first steps where
    given); (model, steps/s)."""
    ti, mi = FIG2_TASKS.index(tname), MODELS.index(kind)
    cfg = task_config(cfg, tname)
    loops = None if kind == "standard" else tuple(cfg.loops)
    dn = _task_size(cfg, tname)
    loss = lambda m, k, s: losses.sequence_loss(m, training_prompts(task, cfg, k, s, *dn), loops)  # noqa: E731
    model = build_model(kind, cfg, task, jax.random.fold_in(key, 10 * ti + mi))
    model, _, sps = _fit(
        model,
        loss,
        cfg,
        jax.random.fold_in(key, 1000 + 10 * ti + mi),
        ckpt,
        f"fig2 {tname} {kind}" if figure == 2 else f"fig{figure} (T, ΔT) = {tuple(cfg.loops)}: fig2 {tname} {kind}",
        progress,
        budget,
        runs,
        figure=figure,
        continues=continues,
    )
    return model, sps


def _ensemble_fit(members, loss_one, member_args, cfg, key, ckpt, label, progress, budget=None, runs=None, figure=2):
    """Train a vmapped ensemble (members stacked on axis 0) as one program, member i on ``loss_one(m, member_args[i],
    k, step)`` with its own data stream (keys split from ``key``) and its own optimizer state (``train(ensemble=True)``)."""
    keys = jax.random.split(key, jax.tree_util.tree_leaves(eqx.filter(members, eqx.is_inexact_array))[0].shape[0])
    loss = lambda m, k, s, a: loss_one(m, a, k, s)  # noqa: E731
    return _fit(members, loss, cfg, keys, ckpt, label, progress, budget, runs, member_data=member_args, figure=figure)


def fig3_config(cfg: Config) -> Config:
    """Fig. 3's training settings: ``cfg`` with its own steps (`Config.fig3_steps`)."""
    return dataclasses.replace(cfg, steps=cfg.fig3_steps or cfg.steps)


def _fig3_to_train(cfg: Config) -> list[tuple]:
    """Fig. 3's (T, ΔT) settings that train an AlgoFormer of their own: all but cfg.loops, which is Fig. 2's
    model, unless Fig. 3 trains longer than Fig. 2 (`Config.fig3_steps`)."""
    shared = fig3_config(cfg).steps == cfg.steps
    return [tuple(s) for s in cfg.fig3_loops if not (shared and tuple(s) == tuple(cfg.loops))]


@eqx.filter_jit
def _last_query_error_per_loop(model, test, max_loops: int):
    """Mean squared error at the last query (position −2: the last x token) after 1…max_loops loops, from one pass
    of the loops; `LOOP_EVAL_BATCH` prompts at a time."""

    def one(p):
        return losses.position_errors_per_loop(model, jax.tree_util.tree_map(lambda a: a[None], p), max_loops)[0, :, -2]

    return jnp.mean(jax.lax.map(one, test, batch_size=LOOP_EVAL_BATCH), axis=0)


def fig3(
    cfg: Config,
    key,
    ckpt_dir: Path,
    task,
    trained: dict,
    progress: bool = False,
    budget: TimeBudget | None = None,
    fig2_key=None,
) -> xr.Dataset:
    """AlgoFormers trained with each (T, ΔT) of cfg.fig3_loops on Fig. 2's regression-with-representation task
    (``task``) for `Config.fig3_steps` steps, evaluated at 1…cfg.eval_loops loops. The setting Fig. 2 trained
    (cfg.loops) is Fig. 2's model: ``trained`` (`fig2`'s results) where Fig. 3 trains as long as Fig. 2, else
    Fig. 2's model (built from Fig. 2's key ``fig2_key``) trained on to Fig. 3's steps under a checkpoint of its own,
    from Fig. 2's checkpoint in ``ckpt_dir`` where it is there (else from the start: the same trajectory). Each other
    setting trains alone, so its loss computes only the loop counts eq. (6) weighs (T − ΔT … T), not a padded T_max."""
    runs, members, speed = [], [], {}
    own, cfg3 = _fig3_to_train(cfg), fig3_config(cfg)
    for i, (T, dT) in enumerate(cfg.fig3_loops):
        ckpt = ckpt_dir / f"fig3_T{T}_dT{dT}.ckpt"
        if (T, dT) not in own:
            res = trained["regression", "algoformer"]
            runs.append(res)
            model, sps = res.model, res.steps_per_second
        elif (T, dT) == tuple(cfg.loops):
            if fig2_key is None:
                raise ValueError("Fig. 3 trains Fig. 2's AlgoFormer for its own steps: give fig2_key, Fig. 2's key.")
            fig2s = ckpt_dir / "fig2_regression_algoformer.ckpt"  # its first cfg.steps: Fig. 2's training
            model, sps = fig2_model(
                cfg3, fig2_key, "regression", task, "algoformer", ckpt, progress, budget, runs, 3, continues=fig2s
            )
        else:
            loss = lambda m, k, s, loops=(T, dT): losses.sequence_loss(  # noqa: E731
                m, training_prompts(task, cfg3, k, s, cfg.d, cfg.N), loops
            )
            model = build_model("algoformer", cfg, task, jax.random.fold_in(key, 10 + i))
            model, _, sps = _fit(
                model,
                loss,
                cfg3,
                jax.random.fold_in(key, 20 + i),
                ckpt,
                f"fig3 (T, ΔT) = ({T}, {dT})",
                progress,
                budget,
                runs,
                figure=3,
            )
        members.append(model)
        speed[f"steps_per_second_T{T}_dT{dT}"] = sps
    test = task.prompts(jax.random.fold_in(key, 100), cfg.test_prompts)

    loops = np.arange(1, cfg.eval_loops + 1)
    err = np.stack([np.asarray(_last_query_error_per_loop(m, test, cfg.eval_loops)) for m in members])
    zero = float(_zero_error(test)[-1])
    return xr.Dataset(
        {"error": (("setting", "loops"), err), "zero_estimator": zero},
        coords={
            "setting": [f"(T, ΔT) = ({T}, {dT})" for T, dT in cfg.fig3_loops],
            "T": ("setting", [T for T, _ in cfg.fig3_loops]),
            "loops": loops,
        },
        attrs={**speed, "status": partial_status(runs) or "complete"},
    )


def fig5_config(cfg: Config) -> Config:
    """Fig. 5's training settings: ``cfg`` with its own steps and curriculum (`Config.fig5_steps`,
    `Config.fig5_curriculum_every`)."""
    return dataclasses.replace(cfg, steps=cfg.fig5_steps or cfg.steps, curriculum_every=cfg.fig5_curriculum_every)


@eqx.filter_jit
def _last_position_iterates(method, xs, ys, n_steps: int):
    """``method``'s (a `baselines` iteration's) predictions at the last position after 1…n_steps iterations, (prompts,
    n_steps, m); `EVAL_BATCH` prompts at a time, since the method iterates on every prefix (at the paper's size
    16,384 prompts at once held about 10 GB)."""
    return jax.lax.map(lambda xy: method(*xy, n_steps)[:, -1], (xs, ys), batch_size=EVAL_BATCH)


def fig5(cfg: Config, key, ckpt_dir: Path, progress: bool = False, budget: TimeBudget | None = None) -> xr.Dataset:
    """AlgoFormers on noisy linear regression, for each (T, ΔT) of cfg.fig5_loops one per σ (an ensemble per
    setting), against GD and Newton (eq. 4) on the same test prompts: error at the last position vs iteration /
    loop count."""
    base = tasks.RepresentationRegression(cfg.d, cfg.N)
    sig_tasks = eqx.filter_vmap(lambda s: tasks.RepresentationRegression(cfg.d, cfg.N, noise_std=s))(
        jnp.asarray(cfg.sigmas)
    )
    runs, trained, speed = [], [], {}
    for j, (T, dT) in enumerate(cfg.fig5_loops):
        keys = jax.random.split(jax.random.fold_in(key, 5 + 10 * j), len(cfg.sigmas))
        members = eqx.filter_vmap(lambda k: build_model("algoformer", cfg, base, k))(keys)
        loss_one = lambda m, t, k, s, loops=(T, dT): losses.sequence_loss(  # noqa: E731
            m, training_prompts(t, fig5_config(cfg), k, s, cfg.d, cfg.N), loops
        )
        # the first setting keeps the checkpoint name it had when Fig. 5 trained one setting
        name = "fig5_algoformer.ckpt" if j == 0 else f"fig5_T{T}_dT{dT}.ckpt"
        members, _, sps = _ensemble_fit(
            members,
            loss_one,
            sig_tasks,
            fig5_config(cfg),
            jax.random.fold_in(key, 6 + 10 * j),
            ckpt_dir / name,
            f"fig5 (T, ΔT) = ({T}, {dT}) σ ensemble",
            progress,
            budget,
            runs,
            figure=5,
        )
        trained.append(members)
        speed[f"steps_per_second_T{T}_dT{dT}"] = sps
    its = np.arange(1, cfg.iterations + 1)
    algo = np.zeros((len(cfg.fig5_loops), len(cfg.sigmas), len(its)))
    out = {m: np.zeros((len(cfg.sigmas), len(its))) for m in ("gd", "newton")}
    zero = np.zeros(len(cfg.sigmas))
    for i, sigma in enumerate(cfg.sigmas):
        task = tasks.RepresentationRegression(cfg.d, cfg.N, noise_std=sigma)
        tkey = jax.random.fold_in(key, 200 + i)
        xs, ys, clean, _ = jax.vmap(task.sample_xy)(jax.random.split(tkey, cfg.test_prompts))
        test = jax.vmap(tasks.garg_encoding)(xs, ys, clean)  # the model sees the prompts the baselines solve
        target = clean[:, -1]
        for name, fn in (("gd", baselines.gradient_descent_steps), ("newton", baselines.newton_steps)):
            pred = _last_position_iterates(fn, xs, ys, cfg.iterations)  # (P, k, m)
            out[name][i] = np.asarray(jnp.mean(jnp.sum((pred - target[:, None]) ** 2, -1), 0))
        for j, members in enumerate(trained):
            algo[j, i] = np.asarray(_last_query_error_per_loop(member(members, i), test, cfg.iterations))
        zero[i] = float(jnp.mean(jnp.sum(target**2, -1)))
    settings = [f"(T, ΔT) = ({T}, {dT})" for T, dT in cfg.fig5_loops]
    return xr.Dataset(
        {"algoformer": (("setting", "sigma", "iteration"), algo)}
        | {k: (("sigma", "iteration"), v) for k, v in out.items()}
        | {"zero": (("sigma",), zero)},
        coords={
            "setting": settings,
            "T": ("setting", [T for T, _ in cfg.fig5_loops]),
            "first_loop": ("setting", [losses.first_weighted_loop(T, dT) for T, dT in cfg.fig5_loops]),
            "sigma": list(cfg.sigmas),
            "iteration": its,
        },
        attrs={**speed, "status": partial_status(runs) or "complete"},
    )


def _trained_as(cfg: Config, at: str, figure: int = 2, task: str = "regression") -> tuple[bool, str]:
    """Whether ``cfg``'s models of ``figure`` (2: Fig. 2's on ``task``; 3 and 5 train for their own steps) train at
    least as long as at the size ``at``, over at least its seeds; and the reason a claim asserted from there is not
    asserted at ``cfg`` (`trains_as_long`)."""
    own = {2: lambda c: task_config(c, task), 3: fig3_config, 5: fig5_config}[figure]
    mine, theirs = own(cfg), own(SIZES[at])
    return trains_as_long(at, training_steps=(mine.steps, theirs.steps), seeds=(cfg.seeds, SIZES[at].seeds))


# The size at which Fig. 2's comparisons of the architectures are asserted. At --trained's 3,000 steps the regression
# comparison's margin is within what the float rounding of training moves it: the same models trained on another CPU,
# or with an ensemble's members in turn rather than batched, move the standard transformer's error by 2-5 % and seed
# 1's verdict with it (AlgoFormer 1.9 % below it in one run, 2.9 % above in the other). The AR comparison did not hold
# at 3,000 nor at 8,000 steps (AlgoFormer 0.3-3 % above the standard transformer for two seeds of three, where both
# learned). The CoT comparison held for each seed on 512 test prompts at 3,000 steps, but on 16,384 failed for seed 0
# there (-0.43 %) and at 8,000 steps (the AlgoFormer 7 % above the standard transformer, 46 paired s.e.; 5 and 68 s.e.
# below it for seeds 1 and 2): the order of the architectures at this width is the seed's (docs/reports/trained-size)
FIG2_ASSERTED_AT = "full"
# Fig. 2's AlgoFormer is below another architecture where its mean error is lower by more than this many standard
# errors of the difference over the test prompts (paired: the same prompts); a tie passes with probability 0.13 %
FIG2_PAIRED_SE = 3


def fig2_checks(cfg: Config, ds2, task_names) -> list[Check]:
    """Fig. 2's rows for each task of ``task_names`` (`_checks`)."""
    checks = []
    for t in task_names:
        asserted, why = _trained_as(cfg, FIG2_ASSERTED_AT, task=t)
        zero = ds2[f"{t}_zero"].values
        last = {m: ds2[f"{t}_{m}"].values[-1] / zero[-1] for m in MODELS}  # error ÷ the zero estimator's, last example
        checks.append(learned_check(f"Fig. 2 ({t})", last, LEARNED_FRACTION))
        if f"{t}_oracle" in ds2:
            oracle = ds2[f"{t}_oracle"].values / zero
            checks.append(
                Check(
                    f"Fig. 2 ({t}): what is learnable in context — the Bayes oracle that knows Φ* and the prior of A "
                    "(posterior-mean A from the earlier steps), error ÷ zero estimator's, first → last example",
                    "—",
                    f"{fmt(oracle[0], 3)} → {fmt(oracle[-1], 3)}; the models at the last example: "
                    + ", ".join(f"{m} {fmt(r, 3)}" for m, r in last.items()),
                    "—",
                    None,
                )
            )
        rel = {m: ds2[f"{t}_{m}"].values / zero for m in MODELS}  # error ÷ the zero estimator's, per position
        checks.append(
            Check(
                f"Fig. 2 ({t}): the error decreases with the number of in-context examples (error ÷ zero estimator's, "
                "first vs last example)",
                "last < first",
                ", ".join(f"{m} {fmt(r[0], 3)} → {fmt(r[-1], 3)}" for m, r in rel.items()),
                "strict",
                bool(all(r[-1] < r[0] for r in rel.values())),
                stochastic=True,
            )
        )
        mean = {m: float(np.mean(ds2[f"{t}_{m}"].values / zero)) for m in MODELS}
        gap = {o: mean["algoformer"] - mean[o] for o in MODELS[:2]}  # below the other: negative
        se = {o: float(ds2[f"{t}_paired_se_{o}"]) for o in MODELS[:2]}
        closest = max(gap, key=lambda o: gap[o] / se[o])  # the other model the AlgoFormer is least clearly below
        checks.append(
            paper_claim(
                f"Fig. 2 ({t}): AlgoFormer below the standard and the looped transformer (error ÷ zero estimator's, "
                "mean over examples; AlgoFormer minus each, ± its s.e. over the test prompts, paired)",
                f"algoformer < standard, looped by > {FIG2_PAIRED_SE} s.e.",
                ", ".join(f"{m} {fmt(v, 3)}" for m, v in mean.items())
                + "; "
                + ", ".join(f"algoformer − {o} {gap[o]:+.4f} ± {se[o]:.4f}" for o in gap),
                f"strict, by more than {FIG2_PAIRED_SE} paired s.e.",
                all(gap[o] < -FIG2_PAIRED_SE * se[o] for o in gap),
                asserted,
                why,
                margin=f"{relative_margin(mean['algoformer'], mean[closest])} of {closest}'s "
                f"({-gap[closest] / se[closest]:+.1f} s.e.)",
                asserted_at=f"--{FIG2_ASSERTED_AT}",
            )
        )
    return checks


# A trained model has learned when its error is below this fraction of the zero estimator's (at the last example; for
# the looped models of Figs. 3 and 5, at the loop count they were trained to): a model left on the loss's initial
# plateau sits at about 1 (the quick models reach 0.33-0.71 in Fig. 2)
LEARNED_FRACTION = 0.8

# What each part's claims are about, for the "not applicable" rows of the parts a run leaves out (`Config.parts`)
PART_CLAIMS = {"regression": "Figs. 2 (regression) and 3", "ar": "Fig. 2 (ar)", "cot": "Fig. 2 (cot)", "fig5": "Fig. 5"}


def _checks(cfg: Config, ds2, ds3, ds5) -> list[Check]:
    """Every claim of Figs. 2, 3 and 5 (of the parts run: a dataset is None, and the claims of a part are one "not
    applicable" row, where ``cfg.parts`` leaves it out), for each seed of the datasets' ``seed`` dimension apart
    (`over_seeds`). The paper's orderings of the architectures are asserted where the models train long enough:
    Fig. 2's (AlgoFormer below the standard and the looped transformer, by more than `FIG2_PAIRED_SE` s.e. of the
    test prompts) at ``--full`` (`FIG2_ASSERTED_AT`), Fig. 5's (AlgoFormer below GD and Newton in the first
    iterations) and Fig. 3's (larger ΔT more stable) from ``--trained``'s steps of their own models (`_trained_as`);
    elsewhere "not reproduced" where they fail. The errors are read per position relative to the zero estimator's at
    that position, so that a sequence whose scale grows along the prompt (the AR task) does not hide what the model
    learns."""
    given = [ds for ds in (ds2, ds3, ds5) if ds is not None]
    if given and "seed" in given[0].dims:
        return checks_per_seed(lambda *one: _checks(cfg, *one), ds2, ds3, ds5)
    checks = fig2_checks(cfg, ds2, [t for t in FIG2_TASKS if t in cfg.parts]) if ds2 is not None else []
    if ds3 is not None:
        T = ds3["T"].values
        at_T = ds3.error.values[np.arange(len(T)), T - 1] / float(ds3.zero_estimator)
        checks.append(
            learned_check(
                "Fig. 3",
                dict(zip(ds3.setting.values.tolist(), at_T)),
                LEARNED_FRACTION,
                where="at the last example after T loops",
            )
        )
        checks.append(_fig3_check(cfg, ds3))
    elif "regression" in cfg.parts and not cfg.fig3:
        checks.append(
            not_run("Fig. 3", "`fig3` is off at these settings (`--trained` and `--full` train Fig. 3's models)")
        )
    if ds5 is not None:
        checks += _fig5_checks(cfg, ds5)
    return checks + [
        not_run(
            PART_CLAIMS[p], f"the part {p!r} is not in this run's `parts` (`--trained` and `--full` run every part)"
        )
        for p in PARTS
        if p not in cfg.parts
    ]


def _fig3_check(cfg: Config, ds3) -> Check:
    """Fig. 3's claim: a larger ΔT gives more stable inference past the trained T; asserted from ``--trained``
    (Fig. 3's 10,000 steps, three seeds: `SIZES`)."""
    asserted, why = _trained_as(cfg, "trained", figure=3)
    err = ds3.error.values
    T = ds3["T"].values
    dT = np.array([int(s.rstrip(")").split(", ")[-1]) for s in ds3.setting.values])
    at_T = err[np.arange(len(T)), T - 1]
    ratio = err[:, -1] / at_T
    pairs = [(i, j) for i in range(len(T)) for j in range(len(T)) if T[i] == T[j] and dT[i] > dT[j]]
    return paper_claim(
        f"Fig. 3: larger ΔT gives more stable long-loop inference (error at loop {cfg.eval_loops} ÷ error at T, "
        "same T)",
        "smaller ratio for larger ΔT",
        ", ".join(f"{s}: {fmt(r)}" for s, r in zip(ds3.setting.values, ratio)),
        f"strict, {len(pairs)} pair(s) of settings with the same T",
        bool(pairs) and all(ratio[i] < ratio[j] for i, j in pairs),
        asserted,
        why,
        margin=(relative_margin(max(ratio[i] / ratio[j] for i, j in pairs), 1.0) + " (worst ratio of ratios)")
        if pairs
        else "no pair",
        asserted_at="--trained",
    )


def _fig5_checks(cfg: Config, ds5) -> list[Check]:
    """Fig. 5's claims: every AlgoFormer learned (at its T); Newton (eq. 4) converges, faster than GD; the AlgoFormer
    below both in the first iterations, read from the setting whose loss weighs the earliest loops (the paper's
    (T, ΔT) = (10, 10), trained from t = 1 on)."""
    asserted, why = _trained_as(cfg, "trained", figure=5)
    Ts = ds5["T"].values
    ratios = {
        f"{setting}, σ = {s:g}": ds5.algoformer.values[j, i, Ts[j] - 1] / ds5.zero.values[i]
        for j, setting in enumerate(ds5.setting.values)
        for i, s in enumerate(ds5.sigma.values)
    }
    checks = [learned_check("Fig. 5", ratios, LEARNED_FRACTION, where="at the last example after its T loops")]
    early = int(np.argmin(ds5.first_loop.values))  # the setting trained on the first loops
    i0 = list(ds5.sigma.values).index(0.0) if 0.0 in list(ds5.sigma.values) else None
    if i0 is not None:
        rel = ds5.newton.values[i0, -1] / ds5.zero.values[i0]
        checks.append(
            Check(
                f"Fig. 5 (σ = 0): Newton's method (eq. 4) reaches machine-level error within {cfg.iterations} iterations",
                "relative error < 1e-6",
                fmt(rel),
                "1e-6",
                bool(rel < 1e-6),
            )
        )
        gd_rel = ds5.gd.values[i0, -1] / ds5.zero.values[i0]
        checks.append(
            Check(
                "Fig. 5 (σ = 0): GD converges more slowly than Newton (error at the last iteration)",
                "gd > newton",
                f"gd {fmt(gd_rel)} vs newton {fmt(rel)}",
                "strict",
                bool(gd_rel > rel),
            )
        )
    for i, s in enumerate(ds5.sigma.values):
        a, g, n = ds5.algoformer.values[early, i], ds5.gd.values[i], ds5.newton.values[i]
        checks.append(
            paper_claim(
                f"Fig. 5 (σ = {s:g}): AlgoFormer ({ds5.setting.values[early]}) below GD and Newton in the first iterations "
                "(t = 1, 2, 3)",
                "algoformer < gd, newton",
                f"algo {fmt(a[:3], 3)}, gd {fmt(g[:3], 3)}, newton {fmt(n[:3], 3)}",
                "strict, each t",
                bool(np.all(a[:3] < np.minimum(g[:3], n[:3]))),
                asserted,
                why,
                margin=relative_margin(np.max(a[:3] / np.minimum(g[:3], n[:3])), 1.0) + " (worst t)",
                asserted_at="--trained",
            )
        )
    return checks


def _figures(out, cfg: Config, ds2, ds3, ds5) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    ds2, ds3, ds5 = (ds.isel(seed=0) if ds is not None and "seed" in ds.dims else ds for ds in (ds2, ds3, ds5))
    if ds2 is not None:
        figs.append(_fig2_figure(out, ds2, [t for t in FIG2_TASKS if t in cfg.parts], plt))
    if ds3 is not None:
        figs.append(_fig3_figure(out, ds3, plt))
    if ds5 is not None:
        figs.append(_fig5_figure(out, cfg, ds5, plt))
    return figs


def _fig2_figure(out, ds2, shown, plt) -> str:
    titles = {"regression": "regression with representation", "ar": "AR(q) with representation", "cot": "CoT with MLPs"}
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 4), squeeze=False)
    for ax, t in zip(axes[0], shown):
        title = titles[t]
        x = ds2[f"example_{t}"].values
        for m in MODELS:
            ax.semilogy(x, ds2[f"{t}_{m}"], label=m)
        ax.semilogy(x, ds2[f"{t}_zero"], "k--", label="zero estimator")
        if f"{t}_oracle" in ds2:
            ax.semilogy(x, ds2[f"{t}_oracle"], "k:", label="Bayes oracle (knows Φ*)")
        ax.set(xlabel="in-context example (scored position)", ylabel="squared error", title=f"Fig. 2: {title}")
        ax.legend(fontsize=8)
    _mark_figure(fig, ds2)
    return save_paper_figure(fig, out, NAME, "fig2_models.png")


def _fig3_figure(out, ds3, plt) -> str:
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, s in enumerate(ds3.setting.values):
        (line,) = ax.semilogy(ds3.loops, ds3.error[i], label=str(s))
        ax.axvline(int(ds3["T"].values[i]), color=line.get_color(), ls=":")
    ax.axhline(float(ds3.zero_estimator), c="k", ls="--", label="zero estimator")
    ax.set(xlabel="loops at evaluation", ylabel="squared error (last example)", title="Fig. 3: effect of T and ΔT")
    ax.legend(fontsize=8)
    _mark_figure(fig, ds3)
    return save_paper_figure(fig, out, NAME, "fig3_loops.png")


def _fig5_figure(out, cfg: Config, ds5, plt) -> str:
    fig, axes = plt.subplots(1, len(ds5.sigma), figsize=(5 * len(ds5.sigma), 4))
    for ax, (i, s) in zip(np.atleast_1d(axes), enumerate(ds5.sigma.values)):
        for j, setting in enumerate(ds5.setting.values):
            ax.semilogy(ds5.iteration, np.maximum(ds5.algoformer.values[j, i], 1e-16), label=f"AlgoFormer {setting}")
        for k, label in (("gd", "gradient descent"), ("newton", "Newton (eq. 4)")):
            ax.semilogy(ds5.iteration, np.maximum(ds5[k].values[i], 1e-16), label=label)
        ax.axhline(ds5.zero.values[i], c="k", ls="--", label="zero estimator")
        ax.set(xlabel="iteration / loop", ylabel="squared error (last example)", title=f"Fig. 5: σ = {s:g}")
        ax.legend(fontsize=8)
    _mark_figure(fig, ds5)
    return save_paper_figure(fig, out, NAME, "fig5_newton_gd.png")


def _mark_figure(fig, ds) -> None:
    if ds.attrs.get("status", "complete") != "complete":
        fig.suptitle(f"[{ds.attrs['status']}]")


def _mark_partial_checks(checks, ds2, ds3, ds5):
    """Checks that read a partially trained model are not asserted (Fig. 5's GD and Newton baselines need no
    training)."""
    status = {
        fig: ds.attrs["status"] for fig, ds in (("Fig. 2", ds2), ("Fig. 3", ds3), ("Fig. 5", ds5)) if ds is not None
    }
    out = []
    for c in checks:
        fig = next((f for f in status if c.claim.startswith(f) and c.applicable), None)
        trained = fig is not None and (fig != "Fig. 5" or "AlgoFormer" in c.claim or "trained model" in c.claim)
        out += mark_partial([c], status[fig] if trained and status[fig] != "complete" else None)
    return out


def _part_runs(cfg: Config, part: str) -> int:
    """Training runs of a part (an ensemble counts as one)."""
    return (
        len(cfg.fig5_loops)
        if part == "fig5"
        else len(MODELS) + (len(_fig3_to_train(cfg)) if part == "regression" and cfg.fig3 else 0)
    )


def run_parts(
    parts,
    size: str = "quick",
    out: Path = Path("jaxicl-report"),
    progress: bool = False,
    budget: TimeBudget | None = None,
    config: Config | None = None,
) -> list[PartResult]:
    """Train and evaluate ``parts`` (of `PARTS`) in turn, each model checkpointed under
    ``out/algoformer/checkpoints``; their datasets go to `assemble`. Under a ``budget`` every run of these
    parts gets its share."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown} of {NAME}; one of {list(PARTS)}.")
    cfg = config or SIZES[size]
    ckpt = Path(out) / NAME / "checkpoints" / size
    plan(budget, cfg.seeds * sum(_part_runs(cfg, p) for p in parts))
    results = []
    for part in parts:
        t0, lap = time.perf_counter(), lap_timer(progress)
        per_seed = []
        for s in range(cfg.seeds):  # seed s: the run of --set seed=(seed + s), its checkpoints apart
            key, where = jax.random.PRNGKey(cfg.seed + s), (ckpt if s == 0 else ckpt / f"seed{s}")
            after = "" if cfg.seeds == 1 else f", seed {s}"
            if part == "fig5":
                per_seed.append({"fig5": fig5(cfg, jax.random.fold_in(key, 5), where, progress, budget)})
                lap(f"Fig. 5{after}")
                continue
            ds2, tasks2, trained2 = fig2(cfg, jax.random.fold_in(key, 2), where, progress, budget, only=(part,))
            per_seed.append({"fig2": ds2})
            lap(f"Fig. 2 ({part}){after}")
            if part == "regression" and cfg.fig3:
                per_seed[-1]["fig3"] = fig3(
                    cfg,
                    jax.random.fold_in(key, 3),
                    where,
                    tasks2["regression"],
                    trained2,
                    progress,
                    budget,
                    fig2_key=jax.random.fold_in(key, 2),
                )
                lap(f"Fig. 3{after}")
        datasets = {name: _stack_seeds([d[name] for d in per_seed]) for name in per_seed[0]}
        results.append(PartResult(NAME, part, datasets, lap.stages, time.perf_counter() - t0))
    return results


def _stack_seeds(datasets: list[xr.Dataset]) -> xr.Dataset:
    """One figure's datasets of each seed along a ``seed`` dimension (seed 0 first), the least complete's status."""
    ds = xr.concat(datasets, "seed", combine_attrs="drop_conflicts").assign_coords(seed=np.arange(len(datasets)))
    ds.attrs["status"] = least_complete([d.attrs["status"] for d in datasets])
    return ds


def assemble(size: str, out: Path, parts: list[PartResult], config: Config | None = None) -> PaperResult:
    """The paper's checks, figures and data files (``out/algoformer/fig{2,3,5}.nc``) from the results of the
    parts ``cfg.parts`` (every one of `PARTS` by default), in any order: Fig. 2's dataset joins its tasks'."""
    t0 = time.perf_counter()
    cfg = config or SIZES[size]
    out = Path(out)
    by_part = {p.part: p for p in parts}
    missing = [p for p in cfg.parts if p not in by_part]
    if missing:
        raise ValueError(f"{NAME}: the results of part(s) {missing} are missing.")
    parts = [by_part[p] for p in PARTS if p in cfg.parts]
    fig2_parts = [p.datasets["fig2"] for p in parts if "fig2" in p.datasets]
    ds2 = xr.merge(fig2_parts, combine_attrs="drop_conflicts") if fig2_parts else None
    if ds2 is not None:
        ds2.attrs["status"] = least_complete([d.attrs["status"] for d in fig2_parts])
    ds3, ds5 = (
        by_part[p].datasets.get(f) if p in by_part else None for p, f in (("regression", "fig3"), ("fig5", "fig5"))
    )
    data = []
    for ds, name in ((ds2, "fig2.nc"), (ds3, "fig3.nc"), (ds5, "fig5.nc")):
        if ds is not None:
            save_dataset(ds, out / NAME / name)
            data.append(f"{NAME}/{name}")
    fig2_prompts, trained = cfg.fig2_test_prompts, SIZES["trained"]
    notes = [
        f"Size `{size}`: regression d = {cfg.d}, N = {cfg.N} (Φ*: {cfg.d}→{cfg.phi_width}→{cfg.phi_width}→{cfg.d} "
        f"leaky ReLU); AR(q) d = {cfg.ar_d}, q = {cfg.ar_q}, {cfg.ar_N} steps; CoT d = {cfg.cot_d}, depth "
        f"{cfg.cot_depth}, {cfg.cot_N} chains. Width {cfg.d_model}, {cfg.n_heads} heads, standard transformer "
        f"{cfg.std_layers} layers, looped and AlgoFormer one layer per part, (T, ΔT) = {tuple(cfg.loops)}; AdamW lr "
        f"{cfg.lr:g}, batch {cfg.batch}, {cfg.steps:,} steps"
        + (f" (the AR task's models {cfg.ar_steps:,})" if cfg.ar_steps != cfg.steps else "")
        + f"; {fig2_prompts:,} test prompts"
        + (f" for Fig. 2, {cfg.test_prompts:,} for Figs. 3 and 5" if fig2_prompts != cfg.test_prompts else "")
        + ", errors against the noise-free targets. The paper's size is `--full` (500k steps, GPU).",
        "The looped models average the loss over t = max(T − ΔT, 1) … T loops (eq. 6 with a mean over its terms). "
        f"AR(q): A ~ N(0, {cfg.ar_gain**2:g}/(qk) I) instead of N(0, I), which makes the series explode with a unit-scale "
        "Φ*, and Φ* rescaled to E‖Φ*(z)‖² = k (z ~ N(0, I)) so that its draw does not set the signal-to-noise ratio; "
        "even so a rare prompt's series grows large and carries much of the mean error (the paper's measure, kept here), "
        "and the Bayes oracle that knows Φ* and the prior of A (dotted) shows what is learnable in context. "
        "Fig. 2's comparisons of the architectures read each model's error ÷ the zero estimator's, mean over the "
        f"examples: the AlgoFormer is below another architecture where its mean is lower by more than {FIG2_PAIRED_SE} "
        f"standard errors of the difference over the same test prompts. They are asserted at `--{FIG2_ASSERTED_AT}`: at "
        f"`--trained`'s {trained.steps:,} steps (every model from three seeds, each seed checked apart) the order of "
        "the architectures is the seed's, and it stays so at 8,000 steps on the CoT and AR tasks. Figs. 3 and 5's "
        f"comparisons are asserted from `--trained`'s {fig3_config(trained).steps:,} steps of their own models. Where "
        'a comparison is not asserted it is shown with its margin, "not reproduced" where it does not hold.'
        + "".join(
            f" Fig. {n}'s models trained {own.steps:,} steps."
            for n, own, ds in ((3, fig3_config(cfg), ds3), (5, fig5_config(cfg), ds5))
            if ds is not None and own.steps != cfg.steps
        )
        + (f" Every model here trained from {cfg.seeds} seeds; the figures draw seed 0's." if cfg.seeds > 1 else ""),
    ]
    figures = _figures(out, cfg, ds2, ds3, ds5)
    drawn = [ds for ds in (ds2, ds3, ds5) if ds is not None]
    partial = {fig: ds.attrs["status"] for fig, ds in zip(figures, drawn) if ds.attrs["status"] != "complete"}
    seconds = sum(p.seconds for p in parts) + time.perf_counter() - t0
    return PaperResult(
        NAME,
        TITLE,
        size,
        _mark_partial_checks(_checks(cfg, ds2, ds3, ds5), ds2, ds3, ds5),
        figures,
        data,
        seconds,
        notes,
        [s for p in parts for s in p.stages],
        partial,
    )


def _part_stage(part: str):
    def stage(cfg: Config) -> tuple[list[Check], xr.Dataset]:
        import tempfile

        cfg = dataclasses.replace(cfg, parts=(part,))  # this part's checks alone
        with jax.enable_x64(False), tempfile.TemporaryDirectory() as tmp:
            (res,) = run_parts([part], out=Path(tmp), config=cfg)
        ds2, ds3, ds5 = (res.datasets.get(f) for f in ("fig2", "fig3", "fig5"))
        prefixed = [ds.rename({n: f"{f}_{n}" for n in {*ds.variables, *ds.dims}}) for f, ds in res.datasets.items()]
        return _checks(cfg, ds2, ds3, ds5), xr.merge(prefixed, combine_attrs="drop")

    stage.__doc__ = (
        f"{PART_CLAIMS[part]}: the models of the part {part!r}, trained from the seed ``cfg.seed`` as `run` trains them "
        "(no checkpoints kept), their checks and errors (each variable named after its figure). A sweep over "
        "``steps`` (``fig3_steps`` for Fig. 3, ``fig5_steps`` for Fig. 5) and ``seed`` finds the training at which "
        "each claim holds for every seed."
    )
    return stage


# stages a `jaxicl sweep --stage algoformer:NAME` runs over a grid of settings (experiments.stage_sweep)
SWEEPABLE = {part: _part_stage(part) for part in PARTS}


def run(
    size: str = "quick",
    out: Path = Path("jaxicl-report"),
    progress: bool = False,
    budget: TimeBudget | None = None,
    config: Config | None = None,
) -> PaperResult:
    """Every part of ``cfg.parts`` (`run_parts`), then `assemble`; at ``size``, or at the settings ``config``."""
    parts = (config or SIZES[size]).parts
    return assemble(size, out, run_parts(parts, size, out, progress, budget, config), config)
