"""Where the time goes: compilation versus execution, per stage of a long computation.

JAX reports every tracing, lowering and XLA compilation through `jax.monitoring` as a time span.
`CompileMonitor` listens to those spans (once per process) and `StageTimer` splits each stage's
wall time into **compile** (the union of those spans, so nested traces are not counted twice) and **run**
(the rest: execution, host round trips, Python), with the number of XLA programs compiled and how many of
them came from the persistent compilation cache::

    timer = StageTimer(progress=True)
    ...                      # work
    timer.lap("Fig. 1")      # prints "  Fig. 1: 12.3 s (compile 8.1 s, 14 programs, 12 cached; run 4.2 s)"
    timer.stages             # [Stage(label, wall, compile, run, programs, cache_hits), ...]
"""

from __future__ import annotations

import dataclasses
import threading
import time

import jax

from . import placement

_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",  # includes reading the persistent cache
)
_PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class CompileMonitor:
    """Process-wide record of compilation spans (wall-clock ``time.time()`` intervals), programs compiled
    and persistent-cache hits. Use `monitor` to get the one instance."""

    def __init__(self):
        self._lock = threading.Lock()
        self.spans: list[tuple[float, float]] = []
        self.programs = 0
        self.cache_hits = 0
        jax.monitoring.register_event_time_span_listener(self._on_span)
        jax.monitoring.register_event_listener(self._on_event)

    def _on_span(self, event: str, start: float, end: float, **kwargs) -> None:
        if event in _COMPILE_EVENTS:
            with self._lock:
                self.spans.append((start, end))
                self.programs += event == _PROGRAM_EVENT

    def _on_event(self, event: str, **kwargs) -> None:
        if event == _CACHE_HIT_EVENT:
            with self._lock:
                self.cache_hits += 1

    def compile_seconds(self, since: float, until: float) -> float:
        """Length of the union of compilation spans within [since, until]."""
        with self._lock:
            spans = sorted((max(s, since), min(e, until)) for s, e in self.spans if e > since and s < until)
        total, end = 0.0, -float("inf")
        for s, e in spans:
            if e <= end:
                continue
            total += e - max(s, end)
            end = e
        return total

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.programs, self.cache_hits


_MONITOR: CompileMonitor | None = None


def monitor() -> CompileMonitor:
    """The process-wide `CompileMonitor` (created, and its listeners registered, on first use)."""
    global _MONITOR
    if _MONITOR is None:
        _MONITOR = CompileMonitor()
    return _MONITOR


@dataclasses.dataclass
class Stage:
    """One stage: ``wall`` seconds in all, of which ``compile`` tracing/lowering/compiling ``programs`` XLA
    programs (``cache_hits`` of them read from the persistent cache) and ``run`` the rest; ``device``: the platforms
    its work was placed on (`jaxicl.runtime.placement`: "cpu", "gpu", "cpu+gpu")."""

    label: str
    wall: float
    compile: float
    programs: int
    cache_hits: int
    device: str = ""

    @property
    def run(self) -> float:
        return max(self.wall - self.compile, 0.0)

    def describe(self) -> str:
        where = f" on {self.device}" if self.device else ""
        return (
            f"{self.label}{where}: {self.wall:.1f} s (compile {self.compile:.1f} s, {self.programs} programs, "
            f"{self.cache_hits} from cache; run {self.run:.1f} s)"
        )


class StageTimer:
    """``lap(label)`` closes a stage that began at the previous lap (or at creation): records a
    `Stage` in ``stages`` and prints it when ``progress``."""

    def __init__(self, progress: bool = False):
        self.progress = progress
        self.stages: list[Stage] = []
        self._monitor = monitor()
        self._start()

    def _start(self):
        self._wall0, self._time0 = time.perf_counter(), time.time()
        self._counts0 = self._monitor.counts()
        self._placed0 = placement.mark()

    def lap(self, label: str) -> Stage:
        now = time.time()
        programs, hits = self._monitor.counts()
        stage = Stage(
            label,
            time.perf_counter() - self._wall0,
            self._monitor.compile_seconds(self._time0, now),
            programs - self._counts0[0],
            hits - self._counts0[1],
            placement.platforms_since(self._placed0),
        )
        self.stages.append(stage)
        if self.progress:
            print(f"  {stage.describe()}", flush=True)
        self._start()
        return stage

    def __call__(self, label: str) -> Stage:
        return self.lap(label)


def total(stages: list[Stage], label: str = "total") -> Stage:
    """The sum of ``stages``."""
    return Stage(
        label,
        sum(s.wall for s in stages),
        sum(s.compile for s in stages),
        sum(s.programs for s in stages),
        sum(s.cache_hits for s in stages),
    )
