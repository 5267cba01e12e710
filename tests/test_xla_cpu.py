"""XLA:CPU's LAPACK deadlock (jaxlib 0.10) and what keeps jaxicl's programs out of it: one pool thread per process
(``--jobs``, the test workers), :func:`jaxicl.runtime.xla_cpu.after` where a program holds two large batched LAPACK calls
that could run at once, and :func:`jaxicl.runtime.xla_cpu.concurrent_lapack_calls`, which finds such pairs in a compiled
program."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxicl.runtime.xla_cpu import after, concurrent_lapack_calls

# Two batched solves (16 systems of 100 × 100) in one loop body, independent unless SEQUENCED: on a 2-core machine
# with XLA's default pool of two threads, jaxlib 0.10's LAPACK kernels deadlock on the independent ones (run five
# times, in every one of six runs there; benchmarks/README.md).
_TWO_SOLVES = """
import jax, jax.numpy as jnp
from jaxicl.runtime.xla_cpu import after
k = jax.random.split(jax.random.PRNGKey(0), 3)
A1, A2 = (jax.random.normal(kk, (16, 100, 100)) + 100 * jnp.eye(100) for kk in k[:2])
b = jax.random.normal(k[2], (16, 100, 1))
def body(i, c):
    y1 = jnp.linalg.solve(A1 + 1e-3 * i, c[0])
    A = A2 - 1e-3 * i
    y2 = jnp.linalg.solve(after(A, y1) if SEQUENCED else A, c[1])
    return c[0] + 1e-3 * y1, c[1] + 1e-3 * y2
f = jax.jit(lambda b: jax.lax.fori_loop(0, 300, body, (b, b)))
"""


def _run_two_solves(sequenced: bool, setup: str = ""):
    """Run the program five times in a fresh process (its own XLA pool), which must finish within two minutes."""
    program = (
        f"{setup}\nSEQUENCED = {sequenced}\n{_TWO_SOLVES}\n"
        "print(all(bool(jnp.all(jnp.isfinite(x))) for _ in range(5) for x in f(b)))"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True"]


def _two_solves_hlo(sequenced: bool) -> str:
    namespace = {"SEQUENCED": sequenced}
    exec(_TWO_SOLVES, namespace)
    return namespace["f"].lower(namespace["b"]).compile().as_text()


def test_one_pool_thread_runs_independent_batched_linear_solves_without_deadlocking():
    """jaxlib 0.10's CPU LAPACK kernels split a large enough batch over XLA's intra-op pool and block their thread
    until the pieces are done: two independent batched solves, each on a thread of a two-thread pool, wait for each
    other forever. With one pool thread, as ``--jobs`` and the test workers give each process on two cores, the
    kernels run their batch inline and the program finishes."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs Linux CPU affinity")
    _run_two_solves(False, "from jaxicl.runtime.xla_options import size_cpu_thread_pool\nsize_cpu_thread_pool(1)")


def test_after_orders_two_batched_solves_so_that_xla_default_pool_does_not_deadlock():
    """``after`` makes the second solve's matrix depend on the first solve's result, so XLA runs one LU at a time and
    the program finishes with XLA's default pool."""
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs for a pool of two threads")
    _run_two_solves(True)


def test_after_changes_no_value_and_no_derivative():
    x, dep, key = jnp.array([1.5, -2.0]), jnp.array([jnp.nan, 3.0]), jax.random.PRNGKey(3)
    for fn in (after, jax.jit(after)):
        y, k = fn((x, key), dep)
        assert jnp.array_equal(y, x) and jnp.array_equal(k, key) and k.dtype == key.dtype
    gx, gdep = jax.grad(lambda x, d: jnp.sum(after(x, d) ** 2), argnums=(0, 1))(x, dep)
    assert jnp.array_equal(gx, 2 * x) and jnp.array_equal(gdep, jnp.zeros(2))


def test_concurrent_lapack_calls_finds_the_two_solves_and_not_once_they_are_ordered():
    independent, ordered = _two_solves_hlo(False), _two_solves_hlo(True)
    found = concurrent_lapack_calls(independent, min_work=1e6)  # the LUs (16 × 100³), not the solves (16 × 100²)
    assert len(found) == 1 and all(name.startswith("lu") for name in found[0][1:])  # in the loop body
    assert len(concurrent_lapack_calls(independent, min_work=1e4)) > 1  # with the triangular solves
    assert concurrent_lapack_calls(ordered, min_work=1e4) == []
    assert concurrent_lapack_calls(independent, min_work=1e8) == []


def test_ahn2023_programs_hold_no_two_large_lapack_calls_that_could_run_at_once():
    """The programs in which a hung ahn2023 was caught (2026-11-24 and -26): the seeds' fits (training and test sets
    drawn with a batched triangular solve each, then Levenberg–Marquardt's batched LU solves) and the depth/context
    sweep (the fits, then OLS on the test prompts: one batched SVD). Before ``after`` ordered them, the analysis found
    the two sets' solves independent of each other and of the fits, and the SVD independent of the fits."""
    from jaxicl.experiments import ahn2023 as E

    cfg = E.SIZES["quick"]
    keys = jax.random.split(jax.random.PRNGKey(0), cfg.seeds)
    fits = E.seed_trainer(
        E.dataclasses.replace(cfg, n=cfg.n_thm5, lm_steps=cfg.lm_steps_thm5),
        "levenberg_marquardt",
        "block",
        cfg.n_thm5,
        restarts=cfg.restarts_thm5,
    )
    n_max, max_depth = max(cfg.n, *cfg.contexts), max(cfg.n_layers, *cfg.depths)
    point = jax.jit(jax.vmap(lambda k, n, L: E._sweep_point(k, cfg, n, L, n_max, max_depth), in_axes=(0, None, None)))
    for program in (fits.lower(keys), point.lower(keys, jnp.int32(cfg.n), jnp.int32(cfg.n_layers))):
        assert concurrent_lapack_calls(program.compile().as_text(), min_work=1e4) == []
