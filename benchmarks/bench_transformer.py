"""Training throughput of the softmax transformers (standard, looped, AlgoFormer).

One training step = a fresh batch of prompts (regression with representation, Garg encoding) + loss
(eq. 6 for the looped models) + gradient + AdamW update, compiled in chunks of ``--chunk`` steps under
``lax.scan`` by ``jaxicl.dynamics.train.chunk_runner``, the body of ``train``. Reports the median over ``--repeats``
chunks after compilation, in steps per second. (XLA's cost analysis counts a ``while``/``scan`` body
once, so it cannot give the FLOPs of a step here; a fraction of peak needs an analytic FLOP count.)

Configs:
- ``quick``: the CPU reproduction size of ``jaxicl reproduce algoformer`` (d = 5, N = 10, width 32,
  4 heads, 4-layer standard, one-layer looped / AlgoFormer with (T, ΔT) = (8, 6), batch 32);
- ``paper``: the AlgoFormer paper's §5.1 (d = 20, N = 40, width 256, 8 heads, 12-layer standard,
  (T, ΔT) = (20, 15), batch 64).

Run: ``python benchmarks/bench_transformer.py [--config quick|paper|both] [--repeats 5] [--chunk 20]
[--dtype float32|bfloat16]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from jaxicl import losses
from jaxicl.dynamics.train import chunk_runner
from jaxicl.experiments import algoformer as A


def bench(cfg, kind, chunk, repeats, compute_dtype):
    task = A.fig2_tasks(cfg, jax.random.PRNGKey(0))["regression"]
    model = A.build_model(kind, cfg, task, jax.random.PRNGKey(1))
    loops = None if kind == "standard" else tuple(cfg.loops)
    loss = lambda m, k, s: losses.sequence_loss(m, task.prompts(k, cfg.batch), loops)  # noqa: E731
    opt = optax.adamw(1e-4)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    run, state, key = chunk_runner(loss, static, opt, compute_dtype), opt.init(params), jax.random.PRNGKey(2)
    steps = jnp.arange(chunk)
    jax.block_until_ready(run(params, state, key, steps))
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(run(params, state, jax.random.fold_in(key, i), steps))
        times.append(time.perf_counter() - t)
    return statistics.median(times) / chunk


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["quick", "paper", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=20)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = ap.parse_args()
    compute = None if args.dtype == "float32" else jnp.bfloat16
    print(f"backend {jax.default_backend()}, devices {jax.devices()}, compute {args.dtype}, chunk {args.chunk}")
    configs = ["quick", "paper"] if args.config == "both" else [args.config]
    for name in configs:
        cfg = A.SIZES["quick" if name == "quick" else "full"]
        for kind in A.MODELS:
            sec = bench(cfg, kind, args.chunk, args.repeats, compute)
            print(f"{name:5s} {kind:10s}: {1e3 * sec:8.2f} ms/step = {1 / sec:8.1f} steps/s", flush=True)


if __name__ == "__main__":
    main()
