"""Training throughput of the softmax transformers (standard, looped, AlgoFormer).

One training step = a fresh batch of prompts (regression with representation, Garg encoding) + loss
(eq. 6 for the looped models) + gradient + AdamW update, compiled in chunks of ``--chunk`` steps under
``lax.scan`` exactly as ``jaxicl.dynamics.train`` runs them. Reports the median over ``--repeats``
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
from jaxicl.dynamics import cast_floating
from jaxicl.experiments import algoformer as A


def step_chunk(model, task, loops, batch, chunk, compute_dtype):
    """A jitted function running ``chunk`` AdamW steps (the body of ``train``) and the initial state."""
    opt = optax.adamw(1e-4)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_of(p, k):
        m = eqx.combine(p, static)
        m = m if compute_dtype is None else cast_floating(m, compute_dtype)
        return losses.sequence_loss(m, task.prompts(k, batch), loops).astype(jnp.float32)

    @jax.jit
    def run(p, s, key):
        def one(c, k):
            p, s = c
            loss, g = jax.value_and_grad(loss_of)(p, k)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss

        return jax.lax.scan(one, (p, s), jax.random.split(key, chunk))

    return run, params, opt.init(params)


def bench(cfg, kind, chunk, repeats, compute_dtype):
    task = A.fig2_tasks(cfg, jax.random.PRNGKey(0))["regression"]
    model = A.build_model(kind, cfg, task, jax.random.PRNGKey(1))
    loops = None if kind == "standard" else tuple(cfg.loops)
    run, p, s = step_chunk(model, task, loops, cfg.batch, chunk, compute_dtype)
    key = jax.random.PRNGKey(2)
    jax.block_until_ready(run(p, s, key))
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(run(p, s, jax.random.fold_in(key, i)))
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
