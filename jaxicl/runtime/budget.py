"""Wall-clock budgets for reproductions that train transformers (``jaxicl reproduce NAME --full --budget MINUTES``).

A paper-size figure trains for 500k steps, more than any one sitting: each call trains every unfinished model for
a fair share of what is left of the budget, checkpoints it, and draws the figures from what is there; the next
call resumes every model where it stopped (the trajectory is the uninterrupted one). A figure drawn from a
partial run says so ("partial, step s of S") and its claims are not asserted (`jaxicl.experiments.report.mark_partial`).
"""

from __future__ import annotations

import math
import time


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
    """Announce ``runs`` more training runs under ``budget`` (`TimeBudget.plan`); nothing without a budget."""
    if budget is not None:
        budget.plan(runs)


def next_deadline(budget: TimeBudget | None) -> float | None:
    """The next run's deadline, or None without a budget."""
    return None if budget is None else budget.next_deadline()


def plan_markdown(runs, budget_minutes: float | None = None) -> str:
    """The training plan of ``jaxicl reproduce --plan`` as a markdown table: per run (`jaxicl.dynamics.PlannedRun`)
    its models × steps, the measured step time, the time left and, with a ``--budget``, the slices it would take
    (each call of ``--budget M`` minutes gives every run still unfinished an equal share; the whole takes
    ⌈Σ time left / M⌉ calls when the papers' shares are used up in full)."""
    lines = [
        "| training run | models × steps (left) | step time (all models) | device | time left |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.label} | {r.members} × {r.n_steps:,} ({r.steps_left:,}) | {1e3 * r.seconds_per_step:.3g} ms "
            f"| {r.platform} | {_duration(r.seconds_left)} |"
        )
    total = sum(r.seconds_left for r in runs)
    lines.append(f"| **total** | {sum(r.members for r in runs)} models | | | **{_duration(total)}** |")
    if budget_minutes:
        lines.append(
            f"\nWith `--budget {budget_minutes:g}`: about {math.ceil(total / (60 * budget_minutes))} call(s) "
            "of the same command (each resumes the checkpoints)."
        )
    else:
        lines.append(
            f"\nIn slices of `--budget 60` (minutes): about {math.ceil(total / 3600)} call(s) of the same command."
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if not seconds == seconds:  # nan: nothing measured
        return "not measured"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
