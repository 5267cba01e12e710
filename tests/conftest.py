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


# The tests compile many programs, each once, and run most of them for milliseconds: compilation is most of the suite's
# time, and LLVM at optimisation level 0 compiles the large ones in about half the time of level 3, XLA's default (the
# ahn2023 programs of test_xla_cpu.py: 83 -> 37 s of CPU). The optimisation level changes how fast a kernel runs, not
# what it computes. `jaxicl reproduce` keeps level 1, whose kernels run as fast as level 3's on its long trainings
# (runtime.xla_options.CPU_XLA_FLAGS). Unless $XLA_FLAGS already names the level; the processes the tests start
# inherit it.
TEST_XLA_FLAGS = {"--xla_backend_optimization_level": "0"}


def pytest_configure(config):
    """The tests' XLA options (`TEST_XLA_FLAGS`), set before any test starts JAX's backend. Under pytest-xdist, each
    worker starts XLA:CPU with its share of the cores as intra-op threads (cores // workers), as ``jaxicl reproduce
    --jobs`` does for its processes (:func:`jaxicl.runtime.xla_options.size_cpu_thread_pool`)."""
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    extra = [f"{name}={value}" for name, value in TEST_XLA_FLAGS.items() if name not in flags]
    os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and hasattr(os, "sched_getaffinity"):
        from jaxicl.runtime.xla_options import size_cpu_thread_pool

        size_cpu_thread_pool(max(1, len(os.sched_getaffinity(0)) // workers))


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
    )
    return dataclasses.replace(A.SIZES["quick"], **(toy | changes))
