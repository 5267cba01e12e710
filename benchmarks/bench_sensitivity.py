"""Cost of a derivative through a whole training run, against the run alone (issue: differentiable dynamics).

For each kind of run, the outcome is a scalar at the end of the run and the derivative is taken in a setting of the
run (reverse mode):
1. ``flow``: gradient flow of Zhang et al.'s LSA (d = 5, N = 10, float64, Tsit5, rtol 1e-8) from Assumption 3.3 to
   t1 ∈ {10, 100, 1000}; outcome the final loss, derivative in σ and Λ's spectrum; adjoints ``recursive`` and
   ``backsolve``.
2. ``gd``: gradient descent on the same population loss for n ∈ {100, 1,000, 10,000} steps; derivative in the two
   per-leaf step sizes; ``lax.scan`` (``checkpoints=None``) and online checkpointing (``checkpoints=16``).
3. ``adam``: ``optax_train`` of a small softmax transformer (2 layers, width 16) on fresh prompts for n ∈ {50, 200,
   800} Adam steps (float32); outcome a test loss, derivative in the learning rate; plain scan and ``checkpoints=8``.

Time: median of ``--repeats`` calls after compilation. Memory: XLA's buffer assignment of the compiled program
(arguments + outputs + temporaries; ``memory_analysis``), per program. The memory of a reverse pass through a plain
scan grows with the number of steps (every step's carry is kept); with checkpoints it should stay flat.

Run: ``python benchmarks/bench_sensitivity.py [--repeats 3] [--only flow|gd|adam]``. Each kind of run is recorded as
``bench_sensitivity``, variant ``flow``, ``gd`` or ``adam`` (``benchmarks/results.py``), as soon as it is measured.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import optax
from results import record
from timing import median_time

import jaxicl as icl
from jaxicl.sweep import program_bytes


def _bytes(fn, *args) -> float:
    """XLA's buffer assignment of the compiled program (the measure jaxicl.sweep chunks by)."""
    return float(program_bytes(jax.jit(fn).lower(*args).compile()))


def _row(kind, n, variant, t_run, t_grad, b_run, b_grad):
    r = {
        "kind": kind,
        "n": n,
        "variant": variant,
        "run_s": t_run,
        "grad_s": t_grad,
        "grad_over_run": t_grad / t_run,
        "run_MiB": b_run / 2**20,
        "grad_MiB": b_grad / 2**20,
    }
    print(
        f"{kind:5s} n={n:<6} {variant:12s} run {1e3 * t_run:9.2f} ms  grad {1e3 * t_grad:9.2f} ms  "
        f"ratio {t_grad / t_run:6.2f}   memory run {r['run_MiB']:8.2f} MiB  grad {r['grad_MiB']:8.2f} MiB",
        flush=True,
    )
    return r


def bench_flow(repeats):
    rows = []
    with jax.enable_x64(True):
        d, N, key = 5, 10, jax.random.PRNGKey(0)
        at = (jnp.asarray(0.3), jnp.geomspace(0.5, 2.0, d))

        def outcome(sigma, lam, t1, adjoint):
            task = icl.tasks.LinearRegression(d, N, icl.tasks.FixedCovariance(jnp.diag(lam)))
            m0 = icl.models.LinearSelfAttention.balanced_init(d, sigma, key)
            return icl.gradient_flow(
                lambda m: icl.population_loss(m, task),
                m0,
                t1,
                rtol=1e-8,
                atol=1e-10,
                n_save=2,
                adjoint=adjoint,
                max_steps=100_000,
            ).losses[-1]

        for t1 in (10.0, 100.0, 1000.0):
            run = jax.jit(lambda s, lam, t1=t1: outcome(s, lam, t1, "recursive"))
            t_run, b_run = median_time(run, *at, repeats=repeats), _bytes(run, *at)
            for adjoint in ("recursive", "backsolve"):
                grad = jax.jit(jax.grad(lambda s, lam, t1=t1, a=adjoint: outcome(s, lam, t1, a), argnums=(0, 1)))
                rows.append(
                    _row(
                        "flow",
                        int(t1),
                        adjoint,
                        t_run,
                        median_time(grad, *at, repeats=repeats),
                        b_run,
                        _bytes(grad, *at),
                    )
                )
    return rows


def bench_gd(repeats):
    rows = []
    with jax.enable_x64(True):
        d, N = 5, 10
        task = icl.tasks.LinearRegression(d, N, icl.tasks.FixedCovariance(jnp.diag(jnp.geomspace(0.5, 2.0, d))))
        m0 = icl.models.LinearSelfAttention.balanced_init(d, 0.3, jax.random.PRNGKey(0))
        loss = lambda m: icl.population_loss(m, task)  # noqa: E731
        etas = (jnp.asarray(0.2), jnp.asarray(0.05))

        def outcome(eta_kq, eta_pv, n, checkpoints):
            steps = icl.models.LinearSelfAttention(jnp.full_like(m0.W_kq, eta_kq), jnp.full_like(m0.W_pv, eta_pv))
            final, _ = icl.gradient_descent(loss, m0, steps, n, record_every=n // 10, checkpoints=checkpoints)
            return loss(final)

        for n in (100, 1000, 10_000):
            run = jax.jit(lambda a, b, n=n: outcome(a, b, n, None))
            t_run, b_run = median_time(run, *etas, repeats=repeats), _bytes(run, *etas)
            for checkpoints in (None, 16):
                grad = jax.jit(jax.grad(lambda a, b, n=n, c=checkpoints: outcome(a, b, n, c), argnums=(0, 1)))
                rows.append(
                    _row(
                        "gd",
                        n,
                        "scan" if checkpoints is None else f"checkpoints={checkpoints}",
                        t_run,
                        median_time(grad, *etas, repeats=repeats),
                        b_run,
                        _bytes(grad, *etas),
                    )
                )
    return rows


def bench_adam(repeats):
    rows = []
    task = icl.tasks.RepresentationRegression(3, 8)
    model = icl.models.StandardTransformer(jax.random.PRNGKey(0), 3, 1, n_layers=2, n_heads=2, d_model=16, max_len=16)
    test = task.prompts(jax.random.PRNGKey(1), 256)
    batch_loss = lambda m, k: icl.losses.sequence_loss(m, task.prompts(k, 32))  # noqa: E731
    lr = jnp.asarray(3e-3)

    def outcome(lr, n, checkpoints):
        trained, _ = icl.optax_train(
            batch_loss, model, optax.adam(lr, eps_root=1e-12), n, jax.random.PRNGKey(2), checkpoints=checkpoints
        )
        return icl.losses.sequence_loss(trained, test)

    for n in (50, 200, 800):
        run = jax.jit(lambda lr, n=n: outcome(lr, n, None))
        t_run, b_run = median_time(run, lr, repeats=repeats), _bytes(run, lr)
        for checkpoints in (None, 8):
            grad = jax.jit(jax.grad(lambda lr, n=n, c=checkpoints: outcome(lr, n, c)))
            rows.append(
                _row(
                    "adam",
                    n,
                    "scan" if checkpoints is None else f"checkpoints={checkpoints}",
                    t_run,
                    median_time(grad, lr, repeats=repeats),
                    b_run,
                    _bytes(grad, lr),
                )
            )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["flow", "gd", "adam"], default=None)
    args = ap.parse_args()
    print(json.dumps({"backend": jax.default_backend(), "jax": jax.__version__, "date": time.strftime("%Y-%m-%d")}))
    for name, fn in (("flow", bench_flow), ("gd", bench_gd), ("adam", bench_adam)):
        if args.only in (None, name):  # each kind of run is a variant of its own, recorded as soon as it is measured
            record("bench_sensitivity", fn(args.repeats), variant=name)


if __name__ == "__main__":
    main()
