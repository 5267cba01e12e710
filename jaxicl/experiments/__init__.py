"""Reproductions: one module per paper, each with ``run(size, out) -> PaperResult``."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from .._io import atomic_write_text
from .report import Check, PaperResult, render_markdown

# name -> (module, one-line description); later issues add their papers here.
REPRODUCTIONS = {
    "zhang2023": ("jaxicl.experiments.zhang2023", "Zhang, Frei & Bartlett: one-layer LSA trained by gradient flow"),
    "ahn2023": ("jaxicl.experiments.ahn2023", "Ahn, Cheng, Daneshmand & Sra: linear transformers learn preconditioned GD"),
    "gatmiry2024": ("jaxicl.experiments.gatmiry2024", "Gatmiry, Saunshi, Reddi, Jegelka & Kumar: depth vs looping under task diversity"),
    "yang2024": ("jaxicl.experiments.yang2024", "Yang, Huang, Liang & Chi: multi-head softmax attention learns ridge regression"),
    "algoformer": ("jaxicl.experiments.algoformer", "AlgoFormer: standard vs looped vs pre/loop/post transformers; vs GD and Newton"),
}


def available() -> list[str]:
    return list(REPRODUCTIONS)


def reproduce(names=None, size: str = "quick", out="jaxicl-report", progress: bool = False) -> list[PaperResult]:
    """Run reproductions and write ``out/report.md`` with checks tables, figures and data."""
    names = list(names) if names else available()
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        raise ValueError(f"unknown reproduction(s) {unknown}; available: {available()} (see `jaxicl list`).")
    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick' or 'full', got {size!r}.")
    out = Path(out)
    results = []
    for name in names:
        module = importlib.import_module(REPRODUCTIONS[name][0])
        t0 = time.perf_counter()
        print(f"[jaxicl] reproducing {name} ({size}) ...", flush=True)
        res = module.run(size=size, out=out, progress=progress)
        print(f"[jaxicl] {name}: {sum(c.passed is True for c in res.checks)}/{sum(c.passed is not None for c in res.checks)} "
              f"checks passed in {time.perf_counter() - t0:.1f} s", flush=True)
        results.append(res)
        atomic_write_text(out / "report.md", render_markdown(results))  # keep finished papers if interrupted
    return results


__all__ = ["Check", "PaperResult", "REPRODUCTIONS", "available", "reproduce"]
