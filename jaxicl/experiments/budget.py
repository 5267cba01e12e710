"""Wall-clock budgets for reproductions that train transformers (``jaxicl reproduce NAME --full --budget MINUTES``).

A paper-size figure trains for 500k steps, more than any one sitting: each call trains every unfinished model for
a fair share of what is left of the budget, checkpoints it, and draws the figures from what is there; the next
call resumes every model where it stopped (the trajectory is the uninterrupted one). A figure drawn from a
partial run says so ("partial, step s of S") and its claims are not asserted: each passes or is "not reproduced".
"""

from __future__ import annotations

import dataclasses
import math
import time

from .report import Check


class TimeBudget:
    """``seconds`` of wall clock from creation, shared by the training runs under it. A reproduction announces its
    runs (`plan`) and asks for each one's `next_deadline`: an equal share of what is left among the runs
    still to come (itself included), so time a run does not use (it finishes early, or had finished already) goes
    to the ones after it."""

    def __init__(self, seconds: float):
        if not seconds > 0:
            raise ValueError(f"a budget must be positive, got {seconds} s.")
        self.seconds = float(seconds)
        self.end = time.time() + self.seconds
        self.runs_left = 0

    def left(self) -> float:
        return max(self.end - time.time(), 0.0)

    def plan(self, runs: int) -> None:
        self.runs_left += int(runs)

    def next_deadline(self) -> float:
        """``time.time()`` by which the next run should stop."""
        share = self.left() / max(self.runs_left, 1)
        self.runs_left = max(self.runs_left - 1, 0)
        return time.time() + share


def plan(budget: TimeBudget | None, runs: int) -> None:
    if budget is not None:
        budget.plan(runs)


def next_deadline(budget: TimeBudget | None) -> float | None:
    """The next run's deadline, or None without a budget."""
    return None if budget is None else budget.next_deadline()


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
    (each passes, or is "not reproduced" for the partial run), its measurements reported as they are."""
    if status is None:
        return checks
    return [dataclasses.replace(c, claim=f"{c.claim} [{status}]", asserted=False,
                                reason=c.reason or f"training {status}") for c in checks]


def plan_markdown(runs, budget_minutes: float | None = None) -> str:
    """The training plan of ``jaxicl reproduce --plan`` as a markdown table: per run (`jaxicl.dynamics.PlannedRun`)
    its models × steps, the measured step time, the time left and, with a ``--budget``, the slices it would take
    (each call of ``--budget M`` minutes gives every run still unfinished an equal share; the whole takes
    ⌈Σ time left / M⌉ calls when the papers' shares are used up in full)."""
    lines = ["| training run | models × steps (left) | step time (all models) | device | time left |",
             "|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.label} | {r.members} × {r.n_steps:,} ({r.steps_left:,}) | {1e3 * r.seconds_per_step:.3g} ms "
                     f"| {r.platform} | {_duration(r.seconds_left)} |")
    total = sum(r.seconds_left for r in runs)
    lines.append(f"| **total** | {sum(r.members for r in runs)} models | | | **{_duration(total)}** |")
    if budget_minutes:
        lines.append(f"\nWith `--budget {budget_minutes:g}`: about {math.ceil(total / (60 * budget_minutes))} call(s) "
                     "of the same command (each resumes the checkpoints).")
    else:
        lines.append(f"\nIn slices of `--budget 60` (minutes): about {math.ceil(total / 3600)} call(s) of the same command.")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if not seconds == seconds:  # nan: nothing measured
        return "not measured"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
