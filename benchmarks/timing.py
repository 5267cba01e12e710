"""Shared timing helper of the benchmark scripts."""

from __future__ import annotations

import statistics
import time

import jax


def median_time(f, *args, repeats: int):
    """Median wall time of ``f(*args)`` over ``repeats`` calls, after one warm-up (compilation) call."""
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)
