"""XLA's options for the command line's work: the flags ``jaxicl reproduce`` and ``jaxicl sweep`` add to $XLA_FLAGS
(GPU GEMM autotuning off for the many small programs; LLVM's optimisation level 1 where JAX runs on the CPU alone),
the size of XLA:CPU's thread pool for a ``--jobs`` process, and the environment switches of how training programs compile
(`switch_from_env`: ``$JAXICL_UNROLL``, ``$JAXICL_REMAT``, ``$JAXICL_BATCH_MEMBERS``)."""

from __future__ import annotations

import contextlib
import os

# XLA options the command sets unless the user's XLA_FLAGS already name them:
# - GEMM autotuning took most of the GPU compilation of the reproductions' many small programs (gatmiry2024's Fig. 1
#   sweep: 34.7 s → 8.3 s on an H100, same numbers and run time); training programs ask for it back
#   (TRAINING_COMPILER_OPTIONS below).
DEFAULT_XLA_FLAGS = {"--xla_gpu_autotune_level": "0"}
# - where JAX can only use the CPU: LLVM at optimisation level 1 instead of 3 (a cold `make reproduce` compiled for
#   25 % less time; 18 min 22 s -> 17 min 41 s), and the kernels run as fast on these programs (benchmarks/README.md).
CPU_XLA_FLAGS = {"--xla_backend_optimization_level": "1"}


def cpu_only() -> bool:
    """Whether JAX will run on the CPU alone: ``$JAX_PLATFORMS`` names only ``cpu``, or it is unset and no accelerator
    plugin (CUDA, ROCm, TPU) is installed. Decided without starting a backend."""
    import importlib.metadata
    import importlib.util
    import os

    platforms = {p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    if platforms:
        return platforms == {"cpu"}
    if importlib.metadata.entry_points(group="jax_plugins") or importlib.util.find_spec("jax_plugins") is not None:
        return False
    return importlib.util.find_spec("libtpu") is None


@contextlib.contextmanager
def default_xla_flags(cpu_flags: dict = CPU_XLA_FLAGS):
    """Within the block, DEFAULT_XLA_FLAGS (and ``cpu_flags``, the command's CPU_XLA_FLAGS unless given, where
    `cpu_only`) are added to $XLA_FLAGS, each unless already named there (read when JAX creates its backend, i.e.
    before any computation, and by the processes the command starts); after it, $XLA_FLAGS is as it was (a test that
    calls `main` leaves no flags behind for the processes it starts later). The tests give their own ``cpu_flags``
    (tests/conftest.py)."""
    import os

    before = os.environ.get("XLA_FLAGS")
    flags = before or ""
    defaults = {**DEFAULT_XLA_FLAGS, **(cpu_flags if cpu_only() else {})}
    extra = [f"{k}={v}" for k, v in defaults.items() if k not in flags]
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = before


def size_cpu_thread_pool(threads: int) -> None:
    """Start JAX's CPU backend with an XLA intra-op thread pool of ``threads`` threads, then let every thread run on
    all of this process's CPUs again. XLA:CPU sizes that pool from the CPUs the process may run on when the backend
    starts, and has no option for it. ``jaxicl reproduce --jobs N`` gives each paper's process its share (cores // N):
    two processes with a pool of two threads each on two cores wait on each other's threads, and one thread each
    trains the quick transformers 8-13 % faster (benchmarks/README.md). Linux only (elsewhere: nothing changes);
    must run before the backend starts."""
    import os

    if not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if not 1 <= threads < len(cpus):
        return
    import jax

    os.sched_setaffinity(0, cpus[:threads])
    try:
        jax.devices("cpu")  # the backend starts here, its pool threads inheriting the narrowed set
    finally:
        for tid in os.listdir("/proc/self/task"):  # every thread, the pool's too, back on all the CPUs
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:  # a thread that ended meanwhile
                pass


def switch_from_env(name: str) -> bool | None:
    """A process-wide switch from the environment: None (decided by the backend) when ``$name`` is unset, empty or
    ``auto``; True for ``1``/``on``/``true``; False for ``0``/``off``/``false``."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("1", "on", "true"):
        return True
    if value in ("0", "off", "false"):
        return False
    raise ValueError(f"${name} = {os.environ[name]!r}: use 1/on, 0/off or auto (unset: auto).")


def _autotune_level_from_env(name: str = "JAXICL_TRAINING_AUTOTUNE_LEVEL", default: int = 4) -> int:
    """XLA:GPU's GEMM autotuning level (0 = off … 4) for training programs: ``$name``, else ``default``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if value not in {str(i) for i in range(5)}:
        raise ValueError(f"${name} = {value!r}: use an autotuning level 0 (off) … 4.")
    return int(value)


# XLA options for training programs: the ``jaxicl`` command turns GPU GEMM autotuning off for its many small programs
# (it took most of their compilation), but a transformer's training step is 3× slower without it (paper size).
# $JAXICL_TRAINING_AUTOTUNE_LEVEL sets the level for a whole run, the `--jobs` processes included.
TRAINING_COMPILER_OPTIONS = {"xla_gpu_autotune_level": _autotune_level_from_env()}
