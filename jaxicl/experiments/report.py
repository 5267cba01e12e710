"""Checks tables, figures and data files of a reproduction, and the markdown report that links them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._io import atomic_output
from ..profiling import Stage, StageTimer, total


@dataclasses.dataclass
class Check:
    """One claim of a paper compared with simulation.

    ``passed`` is ``None`` for claims the paper leaves open (reported, not asserted).
    """

    claim: str
    predicted: str
    simulated: str
    tolerance: str
    passed: bool | None

    @property
    def status(self) -> str:
        return {True: "pass", False: "**FAIL**", None: "report"}[self.passed]


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

    @property
    def complete(self) -> bool:
        return not self.partial

    @property
    def ok(self) -> bool:
        return all(c.passed is not False for c in self.checks)


@dataclasses.dataclass
class PartResult:
    """What one part of a reproduction computed (a paper's ``PARTS``: independent pieces of work that
    ``jaxicl reproduce --jobs`` runs in processes of their own): its datasets by name, before the paper's
    ``assemble`` turns them into checks, figures and data files, and where its time went."""

    name: str  # the paper
    part: str
    datasets: dict
    stages: list[Stage] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def fmt(x, digits: int = 4) -> str:
    x = np.asarray(x)
    if x.ndim == 0:
        return f"{float(x):.{digits}g}"
    return "[" + ", ".join(f"{float(v):.{digits}g}" for v in x.ravel()) + "]"


def save_dataset(ds, path: Path) -> None:
    """Write an ``xarray.Dataset`` as netCDF, atomically."""
    with atomic_output(path, ".nc") as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_output(path, ".png") as tmp:
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
    total = sum(len(r.checks) for r in results)
    failed = sum(c.passed is False for r in results for c in r.checks)
    lines += [f"{total} checks, {failed} failed.", ""]
    for r in results:
        lines += [f"## {r.name}: {r.title}", "", f"Size: `{r.size}`; wall time {r.seconds:.1f} s.", ""]
        lines += ["| claim | predicted | simulated | tolerance | result |", "|---|---|---|---|---|"]
        for c in r.checks:
            cells = [c.claim, c.predicted, c.simulated, c.tolerance, c.status]
            lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
        lines.append("")
        for note in r.notes:
            lines += [note, ""]
        for fig in r.figures:
            lines += [f"![{Path(fig).stem}]({fig})", ""]
            if fig in r.partial:
                lines += [f"*Drawn from a partial run ({r.partial[fig]}): run the same command again to resume "
                          "training; its checks are reported, not asserted, until it completes.*", ""]
        if r.stages:
            lines += timing_table(r.stages)
        if r.data:
            lines += ["Data (netCDF): " + ", ".join(f"[{Path(d).name}]({d})" for d in r.data), ""]
    return "\n".join(lines)


def timing_table(stages: list[Stage]) -> list[str]:
    """Markdown rows: per stage, wall time, compile time (tracing, lowering, XLA), run time and programs."""
    lines = ["Where the time went (compile: tracing, lowering and XLA compilation; run: the rest):", "",
             "| stage | wall (s) | compile (s) | run (s) | XLA programs | from cache |", "|---|---|---|---|---|---|"]
    for s in [*stages, total(stages)]:
        lines.append(f"| {s.label} | {s.wall:.1f} | {s.compile:.1f} | {s.run:.1f} | {s.programs} | {s.cache_hits} |")
    return lines + [""]
