"""Checks tables, figures and data files of a reproduction, and the markdown report that links them."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

from .._io import atomic_output
from ..runtime import planning
from ..runtime.profiling import Stage, StageTimer, total

VERDICTS = ("pass", "FAIL", "not reproduced", "not applicable", "reported")
KINDS = ("simulation", "formulas")
# what the headline counts apart: a claim that passed where it is not asserted, and the checks of the paper's
# formulas against each other (which no bug of the simulation can fail)
COUNTED = (
    "pass",
    "FAIL",
    "pass (not asserted)",
    "not reproduced",
    "not applicable",
    "reported",
    "formulas pass",
    "formulas FAIL",
)


@dataclasses.dataclass
class Check:
    """One row of a reproduction's table: a claim of a paper compared with simulation, or a measurement.

    Its `verdict` is one of `VERDICTS`:

    - ``passed`` True: **pass**; False and ``asserted``: **FAIL** (the reproduction fails);
    - ``passed`` False and not ``asserted``: **not reproduced**: a claim of the paper that this run contradicts,
      where it is not asserted (``reason`` says why: the size, the training steps, a partial run);
    - ``passed`` None: **reported**: a measurement the paper makes no claim about. A paper's claim is never
      reported: it is asserted, or it is not reproduced where it fails;
    - not ``applicable``: **not applicable**: the claim's premise does not hold at this run's settings (e.g. a
      theorem's condition on σ, after ``--set``), or its models are not trained at this size (a part of the paper
      that the size leaves to a larger one); ``reason`` says which. Never asserted, whatever the numbers.

    ``kind``: what an asserted row checks. ``"simulation"``: a number the simulation computed against the paper's
    prediction; a plausible bug of the simulation makes it FAIL (tests/test_mutations.py perturbs each such row's
    input alone and sees it fail). ``"formulas"``: the paper's formulas against each other (a closed form against
    a construction, a bound against its rate): no bug of the simulation can fail it, so the headline counts it apart.

    ``margin`` and ``asserted_at``: for a claim not asserted at this run's size, how far its measurement is from
    its threshold (positive: on the side the paper claims) and the size at which it is asserted.

    ``seeds``: for a claim asserted from a stochastic run, over how many seeds this run asserts it (each seed
    checked apart, `over_seeds`); shown in the tolerance column.

    ``stochastic``: a claim read off a stochastic run (trained models, sampled prompts) that the quick size asserts
    for its one seed; ``tests/test_seeds.py`` asserts it for seeds 0, 1 and 2 at quick size (slow), and the
    ``trained`` size for each of its three seeds in the run itself.
    """

    claim: str
    predicted: str
    simulated: str
    tolerance: str
    passed: bool | None
    asserted: bool = True
    reason: str = ""
    seeds: int | None = None
    applicable: bool = True
    kind: str = "simulation"
    margin: str = ""
    asserted_at: str = ""
    stochastic: bool = False

    def __post_init__(self):
        if self.passed is not None:
            self.passed = bool(self.passed)
        if self.kind not in KINDS:
            raise ValueError(f"the claim {self.claim!r}: kind must be one of {KINDS}, got {self.kind!r}.")
        if not self.applicable:
            if not self.reason:
                raise ValueError(
                    f"the claim {self.claim!r} is not applicable: give the reason (the premise that fails)."
                )
            self.asserted = False
        if self.passed is None:
            self.asserted = False
        elif not self.asserted and not self.reason:
            raise ValueError(f"the claim {self.claim!r} is not asserted: give the reason (size, steps, seeds).")

    @property
    def verdict(self) -> str:
        if not self.applicable:
            return "not applicable"
        if self.passed is None:
            return "reported"
        if self.passed:
            return "pass"
        return "FAIL" if self.asserted else "not reproduced"

    @property
    def counted_as(self) -> str:
        """The headline's category (`COUNTED`): the verdict, with a pass that is not asserted and the checks of the
        paper's formulas counted apart."""
        v = self.verdict
        if v == "pass" and not self.asserted:
            return "pass (not asserted)"
        if v in ("pass", "FAIL") and self.kind == "formulas":
            return f"formulas {v}"
        return v

    @property
    def status(self) -> str:
        """The result cell of the report's table."""
        v = self.verdict
        where = "".join(
            [
                f"; margin {self.margin}" if self.margin else "",
                f"; asserted at `{self.asserted_at}`" if self.asserted_at else "",
            ]
        )
        if v == "FAIL":
            return "**FAIL**"
        if v == "not reproduced":
            return f"{v}: {self.reason}{where}"
        if v == "not applicable":
            return f"{v}: {self.reason}"
        if v == "pass" and not self.asserted:
            return f"pass (not asserted: {self.reason}{where})"
        if self.kind == "formulas" and v == "pass":
            return "pass (formulas)"
        return v

    @property
    def tolerance_cell(self) -> str:
        if self.seeds is None:
            return self.tolerance
        return self.tolerance + f"; {'asserted' if self.asserted else 'measured'} over {self.seeds} seeds"


def paper_claim(
    claim: str,
    predicted: str,
    simulated: str,
    tolerance: str,
    holds: bool,
    assert_if: bool = True,
    reason: str = "",
    seeds: int | None = None,
    applies: bool = True,
    margin: str = "",
    asserted_at: str = "",
) -> Check:
    """A claim of a paper: asserted where ``assert_if`` (the run's size is one where the claim is asserted),
    elsewhere "not reproduced" when it fails, for ``reason``, with its measured ``margin`` and the size where it is
    asserted (``asserted_at``: both required there); "not applicable", for ``reason``, where its premise does not
    hold at these settings (not ``applies``)."""
    if not assert_if and applies and not (margin and asserted_at):
        raise ValueError(
            f"the claim {claim!r} is not asserted at this size: give its measured margin and the size "
            "where it is asserted."
        )
    return Check(
        claim,
        predicted,
        simulated,
        tolerance,
        bool(holds),
        asserted=bool(assert_if),
        reason="" if assert_if and applies else reason,
        seeds=seeds,
        applicable=bool(applies),
        margin="" if assert_if else margin,
        asserted_at="" if assert_if else asserted_at,
    )


def learned_check(
    figure: str,
    ratios: dict,
    fraction: float,
    trivial: str = "the zero estimator's",
    where: str = "at the last example",
) -> Check:
    """The row that every trained model learned: for each model (``ratios``: name -> its error ÷ the trivial
    estimator's, one per seed it trains), the ratio is below ``fraction``. A model left on a plateau (ratio ≈ 1)
    FAILs it, at every size, so no claim is read off a model that learned nothing."""
    ratios = {name: np.atleast_1d(np.asarray(r, float)) for name, r in ratios.items()}
    seeds = {r.size for r in ratios.values()}
    worst = max(float(np.max(r)) for r in ratios.values())
    shown = ", ".join(f"{name} {fmt(r.max(), 3)}" for name, r in ratios.items())
    many = max(seeds) > 1  # the seeds this run trained (each asserted here, not in the slow tests' `seeds`)
    return Check(
        f"{figure}: every trained model learned — its error {where} ÷ {trivial}",
        f"< {fraction:g}",
        f"{shown} (max over the {max(seeds)} seeds trained)" if many else shown,
        f"< {fraction:g} for every model{' and seed' * many}",
        bool(worst < fraction and np.all(np.isfinite(np.concatenate(list(ratios.values()))))),
    )


def _margin_value(margin: str) -> float:
    """The number a margin starts with ("+12.0 %", "-3.1 %", "1.52× inside …"); +inf where it has none."""
    import re

    found = re.match(r"\s*([+-]?\d+(?:\.\d*)?)", margin)
    return float(found.group(1)) if found else float("inf")


def over_seeds(per_seed: list[list[Check]]) -> list[Check]:
    """The checks of one figure computed for each seed of a run (``per_seed[s]``: the same rows, seed ``s``'s numbers;
    seed 0 first) as one row per claim, asserted over the seeds: it passes where every seed passes, its margin is the
    smallest seed's, its simulated value is seed 0's with the seeds that failed and their values (where none failed,
    every other seed's values). A reported row (no verdict) shows seed 0's value; a row the same for every seed
    (computed from theory alone) is kept as it is. One seed: the checks unchanged."""
    if len(per_seed) == 1:
        return per_seed[0]
    n = len(per_seed)
    if len({len(rows) for rows in per_seed}) != 1:
        raise ValueError("every seed must give the same checks.")
    merged = []
    for rows in zip(*per_seed):
        first = rows[0]
        if all(r.simulated == first.simulated and r.passed == first.passed for r in rows):
            merged.append(first)  # the same for every seed (a line drawn from theory): no seed's
            continue
        if first.passed is None:
            merged.append(dataclasses.replace(first, simulated=f"{first.simulated} (seed 0 of {n})"))
            continue
        failed = [(s, r) for s, r in enumerate(rows) if not r.passed]
        shown = f"{first.simulated} (seed 0)"
        if failed:
            shown += "; fails for " + "; ".join("seed 0" if s == 0 else f"seed {s}: {r.simulated}" for s, r in failed)
        else:  # every seed's numbers: a thin margin of one seed is not hidden behind seed 0's
            others = "; ".join(f"seed {s}: {r.simulated}" for s, r in enumerate(rows) if s)
            shown += f"; holds for all {n} seeds ({others})"
        margins = [r.margin for r in rows if r.margin]
        merged.append(
            dataclasses.replace(
                first,
                simulated=shown,
                passed=not failed,
                seeds=n,
                margin=min(margins, key=_margin_value) if margins else "",
            )
        )
    return merged


def checks_per_seed(checks_of, *datasets, keep_dim: bool = False) -> list[Check]:
    """``checks_of(*datasets)`` for each seed of the datasets' ``seed`` dimension apart, one row per claim asserted
    over the seeds (`over_seeds`); once, unchanged, where the first dataset given has no such dimension. A dataset may
    be None (a part the run left out). ``keep_dim``: each seed's datasets keep a ``seed`` dimension of length 1 (for
    ``checks_of`` that average over it)."""
    given = [ds for ds in datasets if ds is not None]
    if not given or "seed" not in given[0].dims:
        return checks_of(*datasets)

    def one(s):
        pick = [s] if keep_dim else s
        return [None if ds is None else ds.sel(seed=pick) for ds in datasets]

    return over_seeds([checks_of(*one(s)) for s in given[0].seed.values])


def relative_margin(value, threshold, below: bool = True) -> str:
    """How far ``value`` is on the claimed side of ``threshold``, relative to it: "+12 %" (``below``: the claim is
    value < threshold), negative where the claim fails."""
    value, threshold = float(value), float(threshold)
    m = (threshold - value) / abs(threshold) if below else (value - threshold) / abs(threshold)
    return f"{100 * m:+.1f} %"


def premise(holds: bool, reason: str) -> dict:
    """The keyword arguments of a `Check` whose premise ``holds`` or not: nothing, or ``applicable=False`` with the
    ``reason`` (the premise that fails at these settings), so that it is "not applicable" whatever its numbers."""
    return {} if holds else {"applicable": False, "reason": reason}


def not_run(claims: str, reason: str) -> Check:
    """The one "not applicable" row that stands for every claim of ``claims`` (a figure, a part) that a run leaves out
    at its settings, with the ``reason`` (the setting that leaves them out, and the sizes that run them)."""
    return Check(f"{claims}: every claim", "—", "not run", "—", None, applicable=False, reason=reason)


def count_verdicts(checks) -> dict[str, int]:
    """How many checks fall in each category of the headline (`COUNTED`, zeros included)."""
    counts = dict.fromkeys(COUNTED, 0)
    for c in checks:
        counts[c.counted_as] += 1
    return counts


def headline(checks) -> str:
    """ "72 pass, 0 fail, 6 pass (not asserted), 10 not reproduced, 8 reported; formulas: 20 pass, 0 fail": the
    report's and the CLI's summary of ``checks``. The first two count the asserted checks of the simulation; the
    checks of the paper's formulas against each other are counted after the semicolon."""
    n = count_verdicts(checks)
    na = f", {n['not applicable']} not applicable" if n["not applicable"] else ""  # changed settings, parts not run
    formulas = (
        f"; formulas: {n['formulas pass']} pass, {n['formulas FAIL']} fail"
        if n["formulas pass"] + n["formulas FAIL"]
        else ""
    )
    return (
        f"{n['pass']} pass, {n['FAIL']} fail, {n['pass (not asserted)']} pass (not asserted), "
        f"{n['not reproduced']} not reproduced{na}, {n['reported']} reported{formulas}"
    )


def mc_power(pred, se, n_se: float = 3.0, error: float = 0.05):
    """Probability that a Monte-Carlo comparison ``|sim − pred| ≤ n_se·se`` FAILs when the simulation is off by a
    relative ``error`` (``sim`` ~ N((1 + error)·pred, se²)): Φ(e − n_se) + Φ(−e − n_se), e = error·|pred|/se."""
    e = error * np.abs(np.asarray(pred, float)) / np.asarray(se, float)
    phi = np.vectorize(NormalDist().cdf)
    return phi(e - n_se) + phi(-e - n_se)


def standard_error(x, axis: int | None = None):
    """The standard error of the mean of the samples ``x``, over every entry or along ``axis``: their standard
    deviation (ddof 1) over √n. Written with the array's own methods, so that it serves a traced jax array inside a
    compiled program as well as a numpy array (`mean_and_se` is the host-side form)."""
    n = x.size if axis is None else x.shape[axis]
    return x.std(axis=axis, ddof=1) / math.sqrt(n)


def mean_and_se(x, axis: int | None = None):
    """The mean of the samples ``x`` and its standard error (`standard_error`); over every entry as two floats, or
    along ``axis`` as two arrays. One sample has no measured spread: its standard error is NaN (a plot draws no
    bar)."""
    x = np.asarray(x, float)
    if axis is None:
        x, axis = x.ravel(), 0
    mean = x.mean(axis)
    se = standard_error(x, axis) if x.shape[axis] > 1 else np.full_like(mean, np.nan)
    return (float(mean), float(se)) if np.ndim(mean) == 0 else (mean, se)


def powered_mean_and_se(
    draw, key, pred, n_se: float = 3.0, power: float = 0.95, error: float = 0.05, max_blocks: int = 64
) -> tuple[float, float]:
    """Mean and standard error of per-sample values ``draw(key)`` (a 1-D array of a fixed size: one block), drawn
    block after block until a comparison with ``pred`` at ``n_se`` standard errors would fail a relative ``error``
    with probability ``power`` (`mc_power`): the first block (``key`` itself) estimates the spread, and
    ⌈(se / se_needed)²⌉ blocks in all (keys ``fold_in(key, i)``, at most ``max_blocks``) reach the needed se. Every
    block has the same shape, so one compiled program draws them all."""
    import jax

    blocks = [np.asarray(draw(key), float)]
    se_needed = error * abs(float(pred)) / (n_se + NormalDist().inv_cdf(power))
    se = mean_and_se(blocks[0])[1]
    for i in range(1, min(max_blocks, int(np.ceil((se / se_needed) ** 2)))):
        blocks.append(np.asarray(draw(jax.random.fold_in(key, i)), float))
    return mean_and_se(np.concatenate(blocks))


def mc_check(
    claim: str,
    pred,
    sim,
    se,
    n_se: float = 3.0,
    min_power: float = 0.9,
    error: float = 0.05,
    predicted: str | None = None,
    simulated: str | None = None,
    max_excursions: int = 0,
) -> Check:
    """A Monte-Carlo estimate ``sim ± se`` (scalars or arrays) against an exact ``pred``, at ``n_se`` standard errors
    (up to ``max_excursions`` points beyond them, for many points). It passes only if the comparison has the power
    to see a relative ``error`` of 5 %: at least ``min_power`` probability of failing, at every point, had the
    simulation been off by that much (`mc_power`). The tolerance column states that power."""
    pred, sim, se = (np.asarray(a, float) for a in (pred, sim, se))
    z = np.abs(sim - pred) / se
    power = float(np.min(mc_power(pred, se, n_se, error)))
    excursions = int(np.sum(z > n_se))
    ok = excursions <= max_excursions and power >= min_power
    tol = (
        f"{n_se:g} s.e.{'' if pred.ndim == 0 else ' per point'}"
        + (f" (≤ {max_excursions} excursion{'s' * (max_excursions > 1)})" if max_excursions else "")
        + f"; fails a {error:.0%} error with probability ≥ {power:.3f} (required {min_power:g})"
    )
    if simulated is None:
        simulated = (
            f"{float(sim):.6g} ± {float(se):.2g}"
            if sim.ndim == 0
            else f"max |z| = {z.max():.2f}, {excursions} points beyond {n_se:g} s.e."
        )
    return Check(claim, fmt(pred, 6) if predicted is None else predicted, simulated, tol, ok)


@dataclasses.dataclass
class PaperResult:
    name: str
    title: str
    size: str
    checks: list[Check]
    figures: list[str]  # paths relative to the output directory
    data: list[str]
    seconds: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)
    stages: list[Stage] = dataclasses.field(default_factory=list)  # where the time went (compile vs run)
    partial: dict[str, str] = dataclasses.field(default_factory=dict)  # figure -> "partial, step s of S"
    settings: dict = dataclasses.field(default_factory=dict)  # setting -> (value, the size's value), where changed
    # built under `jaxicl.runtime.planning` (`--plan`; `mark_partial` reads the same): its partial figures hold only
    # the few steps that timed the training
    planned: bool = dataclasses.field(default_factory=lambda: planning.active() is not None)

    @property
    def complete(self) -> bool:
        return not self.partial

    @property
    def ok(self) -> bool:
        """No asserted check failed."""
        return all(c.verdict != "FAIL" for c in self.checks)


@dataclasses.dataclass
class PartResult:
    """What one part of a reproduction computed (a paper's ``PARTS``: independent pieces of work that
    ``jaxicl reproduce --jobs`` runs in processes of their own): its datasets by name, before the paper's
    ``assemble`` turns them into checks, figures and data files, and where its time went; the checks and notes a
    part computes as it goes (Zhang et al.'s theory and simulations), where it has them."""

    name: str  # the paper
    part: str
    datasets: dict
    stages: list[Stage] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    checks: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)


def fmt(x, digits: int = 4) -> str:
    x = np.asarray(x)
    if x.ndim == 0:
        return f"{float(x):.{digits}g}"
    return "[" + ", ".join(f"{float(v):.{digits}g}" for v in x.ravel()) + "]"


_SETTINGS: list[str] = []  # the JSON of the effective settings of the reproduction running (see recording)


@contextlib.contextmanager
def recording(settings: dict):
    """Within the block, every dataset `save_dataset` writes carries ``settings`` (a reproduction's effective
    settings, setting -> value) in its ``jaxicl_settings`` attribute, as JSON."""
    _SETTINGS.append(json.dumps(settings, default=str))
    try:
        yield
    finally:
        _SETTINGS.pop()


# the folder of an output directory where a run's results wait until the run is complete (`staged_results`)
INCOMPLETE = "incomplete-run"
_STAGED: list[tuple[Path, Path]] = []  # (output directory, its run's staging folder), innermost last


@contextlib.contextmanager
def staged_results(out, into=None):
    """Within the block, every result written under ``out`` (`save_dataset`, `save_figure`, the report through
    `result_path`) goes to ``out/incomplete-run/`` instead, and replaces ``out``'s files only when the block ends
    without an error: ``out`` holds the results of one complete run, never a mix of two (a run refused half-way, e.g.
    by a checkpoint of other settings, an interrupt or a failed process, leaves every earlier result as it was).
    Training checkpoints are not results: they are written in place, so that the same command resumes.

    A run that does not complete leaves what it finished in ``out/incomplete-run/`` (its report included), and says
    so; the next run on ``out`` (which holds ``out``'s lock, `jaxicl._io.exclusive_output`) starts that folder anew.
    ``into``: the staging folder of a run already under way (a ``--jobs`` child writes into its parent's, and the
    parent moves the results into place); nothing is moved at the end. Nested blocks on the same ``out`` are one."""
    out = Path(out).resolve()
    if _STAGED and _STAGED[-1][0] == out:
        yield _STAGED[-1][1]
        return
    own = into is None
    into = Path(out / INCOMPLETE if own else into).resolve()
    if own and into.exists():
        shutil.rmtree(into)
    _STAGED.append((out, into))
    try:
        yield into
    except BaseException:
        if own and into.exists() and any(p.is_file() for p in into.rglob("*")):
            print(
                f"[jaxicl] the run did not complete: the results in {out} are those of the last complete run; what "
                f"this one finished is in {into} (training checkpoints are kept: the same command resumes)",
                file=sys.stderr,
                flush=True,
            )
        raise
    else:
        if own and into.exists():
            for staged in sorted(p for p in into.rglob("*") if p.is_file()):
                final = out / staged.relative_to(into)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, final)
            shutil.rmtree(into)
    finally:
        _STAGED.pop()


def staging_folder(out) -> Path | None:
    """The staging folder of the run under way on ``out`` (`staged_results`), or None."""
    if _STAGED and _STAGED[-1][0] == Path(out).resolve():
        return _STAGED[-1][1]
    return None


def result_path(path) -> Path:
    """Where a result meant for ``path`` is written now: in the staging folder of the run under way when ``path`` is
    in its output directory (`staged_results`), else ``path`` itself."""
    path = Path(path)
    if _STAGED:
        out, into = _STAGED[-1]
        full = path.resolve()
        if full.is_relative_to(out) and not full.is_relative_to(into):
            return into / full.relative_to(out)
    return path


def save_dataset(ds, path: Path) -> None:
    """Write an ``xarray.Dataset`` as netCDF, atomically, with the effective settings of the reproduction running
    (`recording`) in its attributes (in the run's staging folder while it runs: `staged_results`)."""
    if _SETTINGS:
        ds = ds.assign_attrs(jaxicl_settings=_SETTINGS[-1])
    with atomic_output(result_path(path), ".nc") as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_output(result_path(path), ".png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)


def save_paper_figure(fig, out, paper: str, name: str) -> str:
    """Save ``fig`` as ``out/paper/name``; return the path relative to ``out`` (for the report)."""
    save_figure(fig, Path(out) / paper / name)
    return f"{paper}/{name}"


def lap_timer(progress: bool) -> StageTimer:
    """``lap(label)`` closes a stage begun at the previous call (or creation): its wall time split into compile
    and run time, and the XLA programs compiled (``lap.stages``; printed when ``progress``)."""
    return StageTimer(progress)


def render_markdown(results: list[PaperResult]) -> str:
    lines = ["# jaxicl reproduction report", ""]
    lines += [
        headline([c for r in results for c in r.checks]) + ".",
        "",
        "Verdicts: pass or FAIL: a claim of the paper, asserted, checked against the simulation; pass (not "
        "asserted): a claim that holds where it is not asserted (its margin and the size where it is asserted "
        "are given); not reproduced: a claim this run contradicts where it is not asserted (the reason is given: "
        "the size, the training steps, an unfinished run); not applicable: a claim whose premise fails at "
        "changed settings, or whose models this size does not train (the reason is given); reported: a "
        "measurement the paper makes no claim about. "
        "Formulas: a check of the paper's formulas against each other, which no bug of the simulation could "
        "fail, counted apart.",
        "",
    ]
    for r in results:
        lines += [
            f"## {r.name}: {r.title}",
            "",
            f"Size: `{r.size}`; wall time {r.seconds:.1f} s; {headline(r.checks)}.",
            "",
        ]
        if r.settings:
            changed = ", ".join(f"`{k} = {v!r}` ({r.size}: {was!r})" for k, (v, was) in r.settings.items())
            lines += [
                f"**Settings changed** from `{r.size}`: {changed}. Every check below ran at these settings, not "
                "the paper's; the data files' `jaxicl_settings` attribute holds them all.",
                "",
            ]
        lines += ["| claim | predicted | simulated | tolerance | result |", "|---|---|---|---|---|"]
        for c in r.checks:
            cells = [c.claim, c.predicted, c.simulated, c.tolerance_cell, c.status]
            lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
        lines.append("")
        for note in r.notes:
            lines += [note, ""]
        for fig in r.figures:
            lines += [f"![{Path(fig).stem}]({fig})", ""]
            if fig in r.partial:
                drawn, then = (
                    (
                        "the few steps that `--plan` trained to time them",
                        "the same command without `--plan` trains the models, and asserts their claims once it completes",
                    )
                    if r.planned
                    else (
                        "a partial run",
                        "run the same command again to resume training; its claims are not asserted until it completes",
                    )
                )
                lines += [f"*Drawn from {drawn} ({r.partial[fig]}): {then}.*", ""]
        if r.stages:
            lines += timing_table(r.stages)
        if r.data:
            lines += ["Data (netCDF): " + ", ".join(f"[{Path(d).name}]({d})" for d in r.data), ""]
    return "\n".join(lines)


def timing_table(stages: list[Stage]) -> list[str]:
    """Markdown rows: per stage, the device it ran on (`jaxicl.runtime.placement`), wall time, compile time (tracing,
    lowering, XLA), run time and programs."""
    lines = [
        "Where the time went (compile: tracing, lowering and XLA compilation; run: the rest):",
        "",
        "| stage | device | wall (s) | compile (s) | run (s) | XLA programs | from cache |",
        "|---|---|---|---|---|---|---|",
    ]
    devices = "+".join(sorted({p for s in stages for p in s.device.split("+") if p}))
    for s in [*stages, dataclasses.replace(total(stages), device=devices)]:
        lines.append(
            f"| {s.label} | {s.device} | {s.wall:.1f} | {s.compile:.1f} | {s.run:.1f} | {s.programs} | {s.cache_hits} |"
        )
    return lines + [""]


def partial_status(results) -> str | None:
    """None if every training result is complete, else "partial, step s of S" of the least advanced one (an
    ensemble counts as one run)."""
    runs = [r for r in results if not r.complete]
    return None if not runs else min(runs, key=lambda r: r.step / max(r.n_steps, 1)).status()


def least_complete(statuses) -> str:
    """Of figure statuses ("complete" or "partial, step s of S"), the least advanced: "complete" if all are (a
    figure whose datasets come from several parts, each with its own `partial_status`)."""
    import re

    def done(status: str) -> float:
        m = re.fullmatch(r"partial, step ([\d,]+) of ([\d,]+)", status)
        return 1.0 if m is None else int(m[1].replace(",", "")) / max(int(m[2].replace(",", "")), 1)

    return min(statuses, key=done, default="complete")


def mark_partial(checks: list[Check], status: str | None) -> list[Check]:
    """Checks of a figure drawn from partially trained models, labelled with ``status``: its claims not asserted
    (each passes, or is "not reproduced" for the partial run), its measurements reported as they are. Under
    `jaxicl.runtime.planning` (``--plan``: a few steps, trained to time them) such a claim is asserted by the same
    command without ``--plan``, else by the same command run to its end."""
    if status is None:
        return checks
    where = "the same command without --plan" if planning.active() is not None else "the same command, run to its end"
    return [
        dataclasses.replace(
            c,
            claim=f"{c.claim} [{status}]",
            asserted=False,
            reason=c.reason or f"training {status}",
            asserted_at=c.asserted_at or where,
        )
        for c in checks
    ]
