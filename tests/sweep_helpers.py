"""Run functions shared by the sweep tests and their subprocesses (same code -> same fingerprint)."""

import time

import jax
import jax.numpy as jnp

MAX_DEPTH = 10


def depth_product(depth, scale):
    """A depth-L computation padded to MAX_DEPTH and masked: one program for every depth."""
    a = jnp.where(jnp.arange(MAX_DEPTH) < depth, scale * jnp.linspace(0.1, 1.0, MAX_DEPTH), 0.0)
    return {"prod": jnp.prod(1 - a), "curve": jnp.cumprod(1 - a)}


def noisy_point(x, seed, key):
    return {"value": x + jax.random.normal(key, ())}


def slow_point(x, seed, key):
    jax.debug.callback(lambda: time.sleep(0.25))
    return {"value": jnp.sin(x) + jax.random.normal(key, (3,)).sum()}


GRID = {"x": [0.1 * i for i in range(8)], "seed": [0, 1]}


def memory_hungry(scale, seed):
    """Reverse mode through a 20-step scan over 128×128 matrices: XLA keeps every step's matrices (about 10 MB
    per point in float64), so the program's memory grows linearly with the points of a chunk."""

    def loss(s):
        def body(h, _):
            h = jnp.tanh(h @ h.T / 128.0 + s)
            return h, None

        h0 = jnp.outer(jnp.linspace(-1, 1, 128), jnp.linspace(0.5, 1.5, 128)) + 0.01 * seed
        return jnp.sum(jax.lax.scan(body, h0, None, length=20)[0])

    return {"grad": jax.grad(loss)(scale)}
