"""``jaxicl reproduce --plan``: while `planning` is active, `jaxicl.dynamics.train` measures each training run's step
time on a few steps instead of training it, and records a `PlannedRun` (`jaxicl.runtime.budget.plan_markdown` turns
them into the plan's table)."""

from __future__ import annotations

import contextlib
import dataclasses

from .. import _validate


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One training run as `planning` measured it: ``members`` models (an ensemble) of which ``steps_left`` of
    ``n_steps`` steps remain (a checkpoint may hold the rest), at ``seconds_per_step`` (one step of every member,
    compilation excluded, measured on ``platform``)."""

    label: str
    members: int
    n_steps: int
    steps_left: int
    seconds_per_step: float
    platform: str

    @property
    def seconds_left(self) -> float:
        return self.steps_left * self.seconds_per_step


_PLANNING: tuple[list, int] | None = None  # under `planning()`: (the runs measured, steps per chunk); None: train


@contextlib.contextmanager
def planning(steps: int = 4):
    """Within this context `train` measures instead of training: it compiles a chunk of ``steps`` steps, runs
    it twice (the second run is timed), records a `PlannedRun` in the list this yields and returns the model
    after those 2 × ``steps`` steps as a partial result (no checkpoint is written or read beyond the existing one's
    step). ``jaxicl reproduce --plan`` uses it to print each figure's ETA before a long run."""
    global _PLANNING
    outer, _PLANNING = _PLANNING, ([], _validate.integer("planning: steps", steps))
    try:
        yield _PLANNING[0]
    finally:
        _PLANNING = outer


def active() -> tuple[list, int] | None:
    """(the runs measured so far, steps per measured chunk) under `planning`; None when training."""
    return _PLANNING
