"""A watchdog for XLA:CPU's rare deadlock in a process that runs its work itself (``jaxicl reproduce`` without
``--jobs``, ``jaxicl sweep``).

jaxlib 0.10's CPU LAPACK kernels split a batch over XLA's intra-op thread pool and block the thread that runs them
until the pieces finish; run from a pool thread, that can leave every pool thread waiting (benchmarks/README.md,
"XLA:CPU's deadlock"). A deadlocked process uses (almost) no CPU time, which no jaxicl computation does for minutes.
``--jobs`` watches each paper's process from its parent (`jaxicl.runtime.jobs.run_watched`); this module
watches the process it runs in: a daemon thread reads the CPU time and state of every other thread from ``/proc``,
and when there has been no CPU time for ``stall_seconds`` while no thread waited to run (a starved process is
runnable, a deadlocked one sleeps) it prints every thread's Python stack and starts the same command again,
once (the compilation cache, checkpoints and a sweep's finished chunks make the second start cheap). A second stall
ends the process with `EXIT_DEADLOCKED` and a message. Linux only (elsewhere: no watchdog)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time

# No CPU time for this long: deadlocked. The reproductions' longest host-side waits (writing a figure, a checkpoint)
# take seconds, and a process that computes uses CPU time all along.
STALL_SECONDS = 180.0
EXIT_DEADLOCKED = 75  # sysexits' EX_TEMPFAIL: the same command again will most likely finish
RESTARTED_ENV = "JAXICL_DEADLOCK_RESTARTED"


def _stat_fields(path: str) -> list[str]:
    """The fields of a ``/proc/.../stat`` file after the command name (field 3, the state, first)."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _stat_cpu_seconds(path: str) -> float:
    """User + system CPU time in a ``/proc/.../stat`` file."""
    fields = _stat_fields(path)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int | str = "self", exclude_thread: int | None = None) -> float | None:
    """User + system CPU time of process ``pid`` from ``/proc`` (its ended threads' too), less that of its thread
    ``exclude_thread`` (a native thread id); None where there is no ``/proc``."""
    try:
        total = _stat_cpu_seconds(f"/proc/{pid}/stat")
        return total - (0.0 if exclude_thread is None else _stat_cpu_seconds(f"/proc/{pid}/task/{exclude_thread}/stat"))
    except OSError:
        return None


# A process counts as idle while it uses at most this share of one CPU. Not zero: a process deadlocked in XLA:CPU (both
# pool threads waiting in ParallelBatchMap) still gains a clock tick now and then, and a zero threshold never fires;
# a computing process uses 100 % or more.
IDLE_CPU_FRACTION = 0.01
_TICK = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01  # /proc's unit of CPU time


def process_stopped(pid: int | str = "self") -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, Ctrl-Z: state ``T``) or stopped by a tracer (``t``); False where
    there is no ``/proc``."""
    try:
        return _stat_fields(f"/proc/{pid}/stat")[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def process_runnable(pid: int | str = "self", exclude_thread: int | None = None) -> bool:
    """Whether a thread of process ``pid`` other than ``exclude_thread`` (a native thread id) is running or waiting
    for a CPU (state ``R``): a process that others starve of CPU (a busy machine, ``nice``) is runnable, a deadlocked
    one sleeps. False where there is no ``/proc``."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in threads:
        if exclude_thread is not None and int(tid) == exclude_thread:
            continue
        with contextlib.suppress(OSError, IndexError):  # the thread ended
            if _stat_fields(f"/proc/{pid}/task/{tid}/stat")[0] == "R":
                return True
    return False


class IdleClock:
    """Seconds a process has been idle, from successive readings of its CPU time: idle while it has used at most
    `IDLE_CPU_FRACTION` of one CPU, plus one clock tick, since the clock last restarted; a reading above that
    restarts it (None readings: never idle).

    Time in which the process could not run does not count: a reading taken while it is ``stopped`` (SIGSTOP,
    Ctrl-Z) or ``runnable`` (a thread waits for a CPU that others take: `process_runnable`), or more than ``max_gap``
    seconds after the previous one (the watcher itself was stopped with it, or the machine slept), restarts the clock.
    A process paused for minutes and continued with ``fg``, or starved by a busy machine, is not deadlocked."""

    def __init__(self, cpu: float | None, max_gap: float | None = None):
        self.cpu, self.since = cpu, time.monotonic()
        self.last, self.max_gap = self.since, max_gap

    def idle_seconds(self, cpu: float | None, stopped: bool = False, runnable: bool = False) -> float:
        now = time.monotonic()
        paused = stopped or runnable or (self.max_gap is not None and now - self.last > self.max_gap)
        self.last = now
        if paused or cpu is None or self.cpu is None or cpu - self.cpu > IDLE_CPU_FRACTION * (now - self.since) + _TICK:
            self.cpu, self.since = cpu, now
        return now - self.since


def poll_seconds(stall_seconds: float) -> float:
    """How often a watcher reads the CPU time: four times per stall, at least every 10 s."""
    return min(10.0, stall_seconds / 4)


def max_gap_seconds(stall_seconds: float) -> float:
    """Readings further apart than this (two polls and a second) mean the watcher did not run in between: the process
    (and the watcher with it) was stopped, or the machine slept."""
    return 2 * poll_seconds(stall_seconds) + 1.0


def restart_this_command(idle_seconds: float) -> None:
    """The default action on a stall: print why and every thread's Python stack, then replace this process by the
    same command (``sys.orig_argv``), marked in the environment; if it already was a restart, exit instead."""
    again = os.environ.get(RESTARTED_ENV) == "1"
    print(
        f"[jaxicl] this process has used (almost) no CPU time for {idle_seconds:.0f} s: deadlocked in XLA:CPU "
        "(benchmarks/README.md); its Python stacks follow",
        file=sys.stderr,
        flush=True,
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stdout.flush()
    if again:
        print(
            "[jaxicl] deadlocked a second time: giving up; run the same command again (the compilation cache and "
            "checkpoints keep what was done)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(EXIT_DEADLOCKED)
    print("[jaxicl] starting the same command again", file=sys.stderr, flush=True)
    os.environ[RESTARTED_ENV] = "1"
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


@contextlib.contextmanager
def watching(stall_seconds: float | None = None, on_stall=restart_this_command):
    """While the ``with`` block runs, a daemon thread calls ``on_stall(idle_seconds)`` once this process's other
    threads have used (almost) no CPU time (`IdleClock`) for ``stall_seconds`` (default
    `STALL_SECONDS`); it stops with the block. Time the process spends stopped (Ctrl-Z), or waiting for a CPU that
    others take, does not count. Nothing is watched where ``/proc`` is missing. Only for a process that does its
    work itself: one that waits on others (``--jobs``'s parent) looks idle."""
    stall = STALL_SECONDS if stall_seconds is None else float(stall_seconds)
    if not stall > 0:
        raise ValueError(f"stall_seconds must be a positive number of seconds, got {stall_seconds!r}")
    done = threading.Event()

    def watch():
        me = threading.get_native_id()
        clock = IdleClock(process_cpu_seconds(exclude_thread=me), max_gap_seconds(stall))
        while not done.wait(poll_seconds(stall)):
            idle = clock.idle_seconds(
                process_cpu_seconds(exclude_thread=me), runnable=process_runnable(exclude_thread=me)
            )
            if idle >= stall:
                on_stall(idle)
                clock = IdleClock(process_cpu_seconds(exclude_thread=me), max_gap_seconds(stall))  # watch anew

    thread = None
    if process_cpu_seconds() is not None:
        thread = threading.Thread(target=watch, name="jaxicl-deadlock-watchdog", daemon=True)
        thread.start()
    try:
        yield thread
    finally:
        done.set()
