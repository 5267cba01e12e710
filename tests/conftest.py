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
