"""The processes of ``jaxicl reproduce --jobs N``: which starts first, how many XLA:CPU threads each gets, how they
share an accelerator, and the watch that restarts one XLA:CPU deadlocked.

``--jobs`` starts the longest jobs first, so that the machine is not left to one long job at the end. How long a job
takes is measured data, not a constant: each ``--jobs`` run at quick size records every job's wall time beside its
compilation cache (`record_seconds`, ``job-seconds.json``), and the next run reads it; before any run on a machine,
the times of the reference runs shipped with the package (``job_seconds.json``: one run per size, with its machine,
date and commit) order the jobs. A size's jobs are not those of another in the same proportions (at ``--trained`` the
AlgoFormer's Fig. 3 trains longer than its Fig. 2), so each size is ordered by its own reference run where one is
shipped (quick's where none is: ``--full``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from pathlib import Path

from .watchdog import (
    STALL_SECONDS,
    IdleClock,
    max_gap_seconds,
    poll_seconds,
    process_cpu_seconds,
    process_runnable,
    process_stopped,
)

REFERENCE = Path(__file__).with_name("job_seconds.json")  # the reference run's times, shipped with the package
LOCAL_NAME = "job-seconds.json"  # this machine's last quick --jobs run, beside its compilation cache


def _local_file() -> Path | None:
    """Where this machine's measured job times live: beside the compilation cache in use (None without one)."""
    import jax

    cache = jax.config.jax_compilation_cache_dir
    return None if not cache else Path(cache).parent / LOCAL_NAME


def reference_seconds(size: str = "quick") -> dict[str, float]:
    """Each job's wall time ("paper" or "paper/part") in the reference run of ``size`` shipped with the package (the
    quick run's where none of that size is)."""
    runs = json.loads(REFERENCE.read_text())
    return dict(runs.get(size, runs["quick"])["seconds"])


def _recorded(local: Path | None) -> dict[str, float]:
    """The job times recorded in ``local`` (none where there is no file, or it cannot be read; an entry that is not a
    finite, non-negative number of seconds is left out)."""
    try:
        recorded = dict(json.loads(local.read_text())["seconds"]) if local is not None and local.is_file() else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {
        str(job): float(s)
        for job, s in recorded.items()
        if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0
    }


def job_seconds(size: str = "quick") -> dict[str, float]:
    """Each job's wall time ("paper" or "paper/part") at ``size``: the reference run's (`reference_seconds`), at quick
    size updated by this machine's last quick ``--jobs`` run where one was recorded."""
    return reference_seconds(size) | (_recorded(_local_file()) if size == "quick" else {})


def record_seconds(seconds: dict[str, float]) -> None:
    """Record the wall times of a quick ``--jobs`` run's jobs for the next run on this machine (merged into what was
    recorded before; nothing without a compilation cache)."""
    from .._io import atomic_output

    local = _local_file()
    if local is None or not seconds:
        return
    known = _recorded(local)
    try:
        local.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(local) as tmp:
            Path(tmp).write_text(
                json.dumps({"seconds": known | {k: round(v, 1) for k, v in seconds.items()}}, indent=1, sort_keys=True)
            )
    except OSError:
        pass  # a read-only cache: the next run orders its jobs by the times it has


def _seconds(job: str, times: dict[str, float]) -> float:
    """A job's quick wall time; a paper's is the sum of its parts'."""
    return times.get(job, sum(v for k, v in times.items() if k.startswith(f"{job}/")))


def longest_first(jobs: list[str], times: dict[str, float] | None = None, size: str = "quick") -> list[str]:
    """``jobs`` (papers, or "paper/part") in the order ``--jobs`` starts them at ``size``: longest first (``times``,
    default `job_seconds` of ``size``; unknown ones last, in the order given)."""
    times = job_seconds(size) if times is None else times
    return sorted(jobs, key=lambda n: -_seconds(n, times))


def cpu_threads_per_process(jobs: int) -> int | None:
    """XLA:CPU threads for each of ``jobs`` processes sharing this machine: its share of the CPUs this process may
    use (at least one), or None where that is all of them (jobs = 1) or unknown (no ``os.sched_getaffinity``)."""
    if jobs <= 1 or not hasattr(os, "sched_getaffinity"):
        return None
    return max(1, len(os.sched_getaffinity(0)) // jobs)


def child_environment(processes: int = 1) -> dict[str, str]:
    """The environment of one of ``processes`` ``--jobs`` processes that share this machine: this one's, with
    Python's faulthandler on (`run_watched`) and, unless the user set them, JAX's GPU memory allocated as needed
    rather than 75 % of the device preallocated by each process (which would leave the second one sharing a GPU
    out of memory), and each process's allocator limited to an equal share of 90 % of the device
    (``XLA_PYTHON_CLIENT_MEM_FRACTION``, the name every jaxlib reads; newer ones also read ``XLA_CLIENT_MEM_FRACTION``
    and refuse both at once): what a process reads as its device's memory (`jaxicl.sweep.device_memory_budget`,
    ``--ensemble auto``) is then its own share, so that the processes together never ask for more than the device
    has."""
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", **os.environ, "PYTHONFAULTHANDLER": "1"}
    if not {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"} & set(os.environ):
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / max(processes, 1):.3f}"
    return env


class Stopped(Exception):
    """The ``--jobs`` run was stopped by a signal (`stopping_children_on_signals`): no new child starts."""


_children: set = set()  # the child processes running now (`run_watched`)
_children_lock = threading.Lock()
_stopping = threading.Event()  # set by a signal: every child is stopped and none starts any more


def stop_children() -> None:
    """Send SIGTERM to every child process running now, and start no more."""
    import signal

    _stopping.set()
    with _children_lock:
        for proc in _children:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)


@contextlib.contextmanager
def stopping_children_on_signals():
    """Within the block (from the main thread), SIGTERM and SIGINT stop every ``--jobs`` child first (`stop_children`)
    and then end this process: SIGINT as ``KeyboardInterrupt``, SIGTERM as ``SystemExit(143)``, so that the blocks
    being left clean up after themselves (the temporary folder of the children's results among them). A child never
    outlives its parent, and no child starts once a signal came."""
    import signal

    def stop(signum, frame):
        stop_children()
        print(
            f"[jaxicl] stopped by {signal.Signals(signum).name}: every process of the run stopped; training "
            "checkpoints are kept (the same command resumes)",
            flush=True,
        )
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    _stopping.clear()
    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if _stopping.is_set():
            stop_children()  # any started between the signal and here


def run_watched(cmd: list[str], name: str, env: dict[str, str] | None = None) -> int | None:
    """Run ``cmd`` (in ``env``, else `child_environment`); its exit status, or None if it used no CPU time for
    `STALL_SECONDS` (Linux; time in which it or this process was stopped, e.g. by Ctrl-Z, or in which it waited for a
    CPU that others took, does not count): then it is sent SIGABRT, which makes Python's faulthandler (on in the
    child) print every thread's stack, and waited for.
    Raises `Stopped` instead of starting it once a signal stopped the run (`stopping_children_on_signals`)."""
    import signal
    import subprocess

    with _children_lock:
        if _stopping.is_set():
            raise Stopped(f"{name}: not started, the run was stopped")
        proc = subprocess.Popen(cmd, env=env or child_environment())
        _children.add(proc)
    try:
        clock = IdleClock(process_cpu_seconds(proc.pid), max_gap_seconds(STALL_SECONDS))
        while True:
            try:
                return proc.wait(timeout=poll_seconds(STALL_SECONDS))
            except subprocess.TimeoutExpired:
                pass
            idle = clock.idle_seconds(
                process_cpu_seconds(proc.pid), stopped=process_stopped(proc.pid), runnable=process_runnable(proc.pid)
            )
            if idle >= STALL_SECONDS:
                print(
                    f"[jaxicl] {name}: its process has used no CPU time for {idle:.0f} s, deadlocked in "
                    "XLA:CPU; stopping it (its Python stacks follow)",
                    flush=True,
                )
                proc.send_signal(signal.SIGABRT)
                proc.wait()
                return None
    finally:
        with _children_lock:
            _children.discard(proc)
