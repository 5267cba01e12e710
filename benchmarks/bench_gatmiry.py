"""Benchmarks for depth versus looping (issue: Gatmiry et al.).

1. Gaussian-X loss + gradient of the restricted model (d = 10, n = 20, 10 layers, B = 4,096
   prompts, float32), three ways, same run: the O(L d²) statistics path of
   ``losses.gaussian_x_loss`` (exact in x_q), ``model.predict`` vmapped over prompts (the
   associative per-prompt layer) and ``predict(attention="direct")`` (eq. 3 literally). Median of ``--repeats`` runs
   after compilation.
2. The fixed-Gram version of Fig. 1: the exact optimum for every (κ, L, architecture) (theory
   lines) and the L-BFGS-trained grid (κ × L ≤ 4 × architecture, float64), median times.
3. The whole Fig. 1 Gaussian-X grid — 3 κ × 10 depths × 2 architectures × 3 seeds = 180
   trainings — as **one** ``jaxicl.sweep`` call at the ``full`` training length (2,000 Adam steps
   of 256 fresh prompts). One timed run (it takes minutes; compilation included); prints the convergence statistic
   (change of the windowed training loss over the last two
   windows) and the final test losses.

Run: ``python benchmarks/bench_gatmiry.py [--repeats 5] [--skip-grid]``. The results are recorded as
``bench_gatmiry_loss_grad``, ``bench_gatmiry_fixed_gram`` and ``bench_gatmiry_grid`` (``benchmarks/results.py``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from results import record  # benchmarks/results.py
from timing import median_time  # benchmarks/timing.py

import jaxicl as icl
from jaxicl.experiments import gatmiry2024 as g
from jaxicl.losses.restricted import GaussianXBatch


def loss_grad_bench(repeats: int):
    d, n, L, B = 10, 20, 10, 4096
    key = jax.random.PRNGKey(0)
    task = icl.tasks.LinearRegression(
        d, n, icl.tasks.ScaledIdentityCovariance(d, icl.tasks.UniformScale.kappa(8.0)), "inverse_covariance"
    )
    A = 0.02 * jnp.eye(d) + 1e-3 * jax.random.normal(key, (L, d, d))
    batch = GaussianXBatch.sample(task, jax.random.fold_in(key, 1), B)
    prompts = task.sample(jax.random.fold_in(key, 2), B)

    stats = jax.jit(
        jax.value_and_grad(lambda A: icl.losses.gaussian_x_loss(icl.models.LinearTransformer.restricted(A), batch))
    )
    plain = jax.jit(
        jax.value_and_grad(
            lambda A: jnp.mean(
                (jax.vmap(icl.models.LinearTransformer.restricted(A).predict)(prompts) - prompts.y_query) ** 2
            )
        )
    )
    direct = jax.jit(
        jax.value_and_grad(
            lambda A: jnp.mean(
                (
                    jax.vmap(lambda p: icl.models.LinearTransformer.restricted(A).predict(p, attention="direct"))(
                        prompts
                    )
                    - prompts.y_query
                )
                ** 2
            )
        )
    )
    t_stats = median_time(stats, A, repeats=repeats)
    t_plain = median_time(plain, A, repeats=repeats)
    t_direct = median_time(direct, A, repeats=repeats)
    print(f"loss+grad, d={d}, n={n}, L={L}, B={B} (float32):")
    print(f"  statistics path (gaussian_x_loss): {1e3 * t_stats:.2f} ms  ({B / t_stats:,.0f} prompts/s)")
    print(f"  model.predict, vmapped            : {1e3 * t_plain:.2f} ms  ({B / t_plain:,.0f} prompts/s)")
    print(f"  direct eq. (3), vmapped           : {1e3 * t_direct:.2f} ms  ({B / t_direct:,.0f} prompts/s)")
    print(f"  ratios: {t_plain / t_stats:.1f}x (predict), {t_direct / t_stats:.1f}x (direct)")
    record(
        "bench_gatmiry_loss_grad",
        [
            {
                "path": name,
                "d": d,
                "n": n,
                "L": L,
                "prompts": B,
                "ms": 1e3 * t,
                "prompts per s": B / t,
                "time ÷ statistics path": t / t_stats,
            }
            for name, t in (
                ("statistics (gaussian_x_loss)", t_stats),
                ("model.predict, vmapped", t_plain),
                ("direct eq. (3), vmapped", t_direct),
            )
        ],
    )


def fixed_gram_bench(repeats: int):
    cfg = g.SIZES["full"]
    t = time.perf_counter()
    g.fig1_theory(cfg)
    t_theory = time.perf_counter() - t
    with jax.enable_x64(True):
        g.fixed_gram_sweep(cfg, jax.random.PRNGKey(1))  # compile
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            g.fixed_gram_sweep(cfg, jax.random.PRNGKey(1))
            ts.append(time.perf_counter() - t)
    n = len(cfg.kappas) * len(cfg.fg_depths) * 2
    print(f"fixed Gram: exact optimum for {len(cfg.kappas)} κ × 10 L × 2 architectures: {t_theory:.3f} s")
    print(
        f"fixed Gram: {n} L-BFGS trainings ({cfg.fg_steps} iterations, float64, one sweep): median {statistics.median(ts):.2f} s"
    )
    record(
        "bench_gatmiry_fixed_gram",
        [
            {"work": f"exact optima, {len(cfg.kappas)} κ × {max(cfg.depths)} L × 2 (first call)", "seconds": t_theory},
            {
                "work": f"{n} L-BFGS trainings × {cfg.fg_steps} iterations, one sweep (median of {repeats})",
                "seconds": statistics.median(ts),
            },
        ],
    )


def grid_bench():
    cfg = g.SIZES["full"]
    print(
        f"Fig. 1 Gaussian-X grid: {len(cfg.kappas)} κ × {len(cfg.depths)} L × 2 × {cfg.seeds} seeds, "
        f"{cfg.steps} Adam steps × {cfg.batch} prompts, test {cfg.test_batch} prompts",
        flush=True,
    )
    with jax.enable_x64(False):
        t = time.perf_counter()
        ds = g.fig1_sweep(cfg, jax.random.PRNGKey(3), progress=False)
        wall = time.perf_counter() - t
    curve = ds.curve.values
    change = np.abs(curve[..., -1] / curve[..., -2] - 1)
    print(f"  wall time (one sweep call, compilation included): {wall:.1f} s")
    print(
        f"  convergence: change over the last two windows ({cfg.steps // cfg.curve_windows} steps each): "
        f"median {np.median(change):.2%}, max {change.max():.2%}"
    )
    record(
        "bench_gatmiry_grid",
        [
            {
                "trainings": curve[..., 0].size,
                "Adam steps": cfg.steps,
                "prompts per step": cfg.batch,
                "seconds (compilation included)": wall,
                "median change, last two windows": float(np.median(change)),
                "largest change": float(change.max()),
            }
        ],
    )
    m = ds.test_loss.mean("seed")
    for looped in (0, 1):
        print(f"  {g.ARCH[looped]} test loss (rows κ, columns L):")
        for kappa in cfg.kappas:
            print("   ", kappa, np.round(m.sel(kappa=kappa, looped=looped).values, 3))
    return ds


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-grid", action="store_true")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
    loss_grad_bench(args.repeats)
    fixed_gram_bench(min(args.repeats, 3))
    if not args.skip_grid:
        grid_bench()
