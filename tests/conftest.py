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


def pytest_configure(config):
    """Under pytest-xdist, each worker starts XLA:CPU with its share of the cores as intra-op threads (cores //
    workers), as ``jaxicl reproduce --jobs`` does for its processes (:func:`jaxicl.runtime.xla_options.size_cpu_thread_pool`)."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and hasattr(os, "sched_getaffinity"):
        from jaxicl.runtime.xla_options import size_cpu_thread_pool

        size_cpu_thread_pool(max(1, len(os.sched_getaffinity(0)) // workers))
