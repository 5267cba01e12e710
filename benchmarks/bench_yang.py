"""Benchmarks for multi-head softmax attention (issue: Yang et al.).

1. One GD step (exact loss (9) + gradient + update with two step sizes, eq. 10) at the paper's size
   (N = 30, K = 200, d = 100, m = 20, float32) for H = 64 and H = 400, against the Monte-Carlo loss on
   a batch of 256 prompts (the paper's batch) for the same model. Median of ``--repeats`` runs after
   compilation; the ratio is measured in the same run.
2. The Fig. 4 sweep at the ``full`` size: 9 head counts × 600 GD steps (``yang2024.fig4_sweep``: the heads padded
   to powers of two and masked, one ``jaxicl.sweep`` call per padded width). One run; its wall time, and the time
   after compilation: the wall time less the compilation spans that ``jax.monitoring`` reports
   (``jaxicl.runtime.profiling.StageTimer``). Prints iterations per second and the step at which every stable
   H ≥ N reached Δ/Δ(0) < 2e-3.

Run: ``python benchmarks/bench_yang.py [--repeats 5] [--skip-sweep]``. The results are recorded as ``bench_yang_step``
(item 1) and ``bench_yang_sweep`` (item 2) (``benchmarks/results.py``).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from results import record  # benchmarks/results.py
from timing import median_time  # benchmarks/timing.py

import jaxicl as icl
from jaxicl.experiments import yang2024 as Yx
from jaxicl.models import MultiHeadSoftmaxICL
from jaxicl.runtime.profiling import StageTimer
from jaxicl.theory import yang as Y


def step_bench(repeats: int, task64):
    cfg = Yx.SIZES["full"]
    A = Y.optimal_prediction_matrix(task64).astype(jnp.float32)
    with jax.enable_x64(False):
        task = Yx._cast(task64, jnp.float32)
        print(f"one GD step (float32, N={cfg.N}, K={cfg.K}, d={cfg.d}, m={cfg.m}):")
        rows = []
        for H in (64, 400):
            m0 = MultiHeadSoftmaxICL.init(jax.random.PRNGKey(0), H, cfg.d, cfg.K, dtype=jnp.float32)
            steps = m0.step_sizes(cfg.eta_Q, cfg.eta_w)
            exact = jax.jit(lambda m: icl.gradient_descent(Yx._excess_fn(task, A), m, steps, 10)[1])
            mc = jax.jit(
                lambda m: icl.optax_train(
                    lambda mm, k: icl.mc_loss(mm, task, key=k, batch=256), m, optax.sgd(1e-3), 10, jax.random.PRNGKey(1)
                )[1]
            )
            t_exact = median_time(exact, m0, repeats=repeats) / 10
            t_mc = median_time(mc, m0, repeats=repeats) / 10
            print(
                f"  H={H:4d}: exact loss {1e3 * t_exact:6.2f} ms/step ({1 / t_exact:6.1f} it/s); Monte Carlo, 256 prompts "
                f"{1e3 * t_mc:6.2f} ms/step; ratio {t_mc / t_exact:.2f}x"
            )
            rows.append(
                {
                    "H": H,
                    "N": cfg.N,
                    "K": cfg.K,
                    "d": cfg.d,
                    "exact loss, ms per step": 1e3 * t_exact,
                    "Monte Carlo (256 prompts), ms per step": 1e3 * t_mc,
                    "Monte Carlo ÷ exact": t_mc / t_exact,
                }
            )
    record("bench_yang_step", rows)


def sweep_bench(task64):
    cfg = Yx.SIZES["full"]
    timer = StageTimer()
    ds = Yx.fig4_sweep(cfg, task64, jax.random.PRNGKey(6), progress=False)
    stage = timer.lap("Fig. 4 sweep")
    total, after_compile = stage.wall, stage.run  # run: the wall time less the compilation spans (jax.monitoring)
    n = len(cfg.fig4_heads)
    per_head = after_compile / n
    iters = n * cfg.fig4_steps
    diverged, first_bad, ratio, limit = Yx._fig4_summary(ds, cfg)
    H = ds.heads.values
    ok = ~diverged & (H >= cfg.N)
    ex = ds.excess.values[ok]
    reached = np.all(ex <= 2e-3 * ex[:, :1], axis=0)
    conv_step = int(ds.iteration.values[np.argmax(reached)]) if reached.any() else None
    print(
        f"Fig. 4 sweep, {n} head counts {[int(h) for h in H]} padded to powers of two, {cfg.fig4_steps} GD steps each (float32):"
    )
    print(
        f"  wall time {total:.1f} s in all; after compilation {after_compile:.1f} s ({per_head:.2f} s per head count, "
        f"{iters / after_compile:.1f} GD iterations/s over the grid)"
    )
    print(f"  diverged: H = {H[diverged].tolist()} (predicted by 2/λ_max < η_w: {H[cfg.eta_w > limit].tolist()})")
    print(
        f"  every stable H >= N at Δ/Δ(0) < 2e-3 from step {conv_step}; Δ(T)/Δ(0) = "
        + ", ".join(f"H={h}: {r:.2g}" for h, r in zip(H, ratio))
    )
    if conv_step:
        print(f"  time to that convergence after compilation: {after_compile * conv_step / cfg.fig4_steps:.1f} s")
    record(
        "bench_yang_sweep",
        [
            {
                "head counts": n,
                "largest H": int(max(H)),
                "GD steps": cfg.fig4_steps,
                "seconds (compilation included)": total,
                "seconds after compilation": after_compile,
                "GD iterations per s": iters / after_compile,
                "converged (Δ/Δ(0) < 2e-3) at step": conv_step if conv_step else "not reached",
                "diverged H": " ".join(str(int(h)) for h in H[diverged]) or "none",
            }
        ],
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-sweep", action="store_true")
    args = ap.parse_args()
    print(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    with jax.enable_x64(True):
        task64 = Yx.paper_task(Yx.SIZES["full"], jax.random.PRNGKey(3))
        step_bench(args.repeats, task64)
        if not args.skip_sweep:
            sweep_bench(task64)


if __name__ == "__main__":
    main()
