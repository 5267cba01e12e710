import jax
import pytest


@pytest.fixture(autouse=True)
def float64():
    """Theorem checks run in float64, scoped to each test."""
    with jax.enable_x64(True):
        yield


def random_spd(key, d, floor=0.5):
    a = jax.random.normal(key, (d, d))
    return a @ a.T / d + floor * jax.numpy.eye(d)


# Where JAX runs on the CPU alone the default suite compiles with XLA:CPU's cheapest settings, not the command's
# (`jaxicl.runtime.xla_options.CPU_XLA_FLAGS`): LLVM at optimisation level 0, and fusions emitted by the elemental IR
# emitter instead of the fusion emitters. Its time is mostly compilation of programs that run for milliseconds, and
# these settings cut it by about a third. The command keeps its own, under which its training kernels run faster
# (benchmarks/README.md, "Findings behind the library's settings"); so do the slow tests, which run it at quick size.
TESTS_CPU_XLA_FLAGS = {"--xla_backend_optimization_level": "0", "--xla_cpu_use_fusion_emitters": "false"}


def pytest_configure(config):
    """The tests' XLA options, set before any test starts JAX's backend, for the whole session and the processes the
    tests start: the command's (:func:`jaxicl.runtime.xla_options.default_xla_flags`), with `TESTS_CPU_XLA_FLAGS`
    for the CPU's in the default selection (``-m 'not slow'``; any other, e.g. ``make test-slow``, compiles as the
    command does). A flag already named in $XLA_FLAGS is left as it is. Under pytest-xdist, each worker starts XLA:CPU
    with its share of the cores as intra-op threads (cores // workers), as ``jaxicl reproduce --jobs`` does for its
    processes (:func:`jaxicl.runtime.xla_options.size_cpu_thread_pool`)."""
    import contextlib
    import os

    from jaxicl.runtime import xla_options

    options = contextlib.ExitStack()
    default_selection = config.getoption("markexpr") == "not slow"
    options.enter_context(
        xla_options.default_xla_flags(TESTS_CPU_XLA_FLAGS if default_selection else xla_options.CPU_XLA_FLAGS)
    )
    config.add_cleanup(options.close)
    _isolate_the_compilation_cache(config)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and hasattr(os, "sched_getaffinity"):
        xla_options.size_cpu_thread_pool(max(1, len(os.sched_getaffinity(0)) // workers))


def _isolate_the_compilation_cache(config):
    """The runs the tests start through the command (``cli.main(["reproduce", ...])`` without ``--cache-dir`` or
    ``--no-cache``, and the ``jaxicl`` processes they start) keep their compilation cache, and the timings recorded
    beside it, in a directory of the session (``$JAXICL_CACHE_DIR``), removed at its end: never in the user's
    ``~/.cache/jaxicl/xla``. The first process of the session makes it; pytest-xdist's workers, started after, inherit
    it."""
    import os
    import tempfile

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    session_dir = tempfile.TemporaryDirectory(prefix="jaxicl-tests-xla-")
    env = pytest.MonkeyPatch()
    env.setenv("JAXICL_CACHE_DIR", session_dir.name)
    config.add_cleanup(session_dir.cleanup)
    config.add_cleanup(env.undo)  # cleanups run last-added first: the variable restored, then the directory removed


@pytest.fixture(autouse=True)
def shared_compilation_cache():
    """Every test reads and writes the session's compilation cache (``$JAXICL_CACHE_DIR``, above), as the command
    does: the tests build many of the same programs (the same toy models and flows, in tests, examples and notebooks
    alike), and a program compiled once is read back (about 1 ms) wherever it recurs, in either worker. JAX's key
    hashes the program, its compile options and the XLA flags, so no test gets another's program. Set before each
    test, since one may have pointed it elsewhere or turned it off (``--cache-dir``, `compilation_cache.disable`).
    (One file alone, test_transformer.py on 2 workers: 579 s of tests without, 358 s with.)"""
    from jaxicl.runtime import compilation_cache

    session = compilation_cache.default_dir()
    if jax.config.jax_compilation_cache_dir != str(session):
        compilation_cache.enable(session)
    yield


def tiny_algoformer(**changes):
    """The AlgoFormer reproduction's quick settings at toy size (width 8, a few steps, (T, ΔT) = (2, 1) everywhere),
    with ``changes``: for tests of its pipeline, whose checks are not meaningful at this size."""
    import dataclasses

    from jaxicl.experiments import algoformer as A

    toy = dict(
        steps=4,
        chunk=2,
        d_model=8,
        n_heads=2,
        loops=(2, 1),
        fig3_loops=((2, 1),),
        fig5_loops=((2, 1),),
        eval_loops=4,
        iterations=20,
        test_prompts=16,
        batch=4,
        fig5_steps=0,
        fig5_curriculum_every=0,
        parts=A.PARTS,  # every figure (the quick size itself leaves Figs. 3 and 5 to --trained)
        fig3=True,
    )
    return dataclasses.replace(A.SIZES["quick"], **(toy | changes))
