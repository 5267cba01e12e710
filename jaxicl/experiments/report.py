"""Checks tables, figures and data files of a reproduction, and the markdown report that links them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._io import atomic_output


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

    @property
    def ok(self) -> bool:
        return all(c.passed is not False for c in self.checks)


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


def lap_timer(progress: bool):
    """``lap(label)``: print the seconds since the previous call (or creation) when ``progress``."""
    import time

    tick = [time.perf_counter()]

    def lap(label: str) -> None:
        if progress:
            print(f"  {label}: {time.perf_counter() - tick[0]:.1f} s", flush=True)
        tick[0] = time.perf_counter()

    return lap


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
        if r.data:
            lines += ["Data (netCDF): " + ", ".join(f"[{Path(d).name}]({d})" for d in r.data), ""]
    return "\n".join(lines)
