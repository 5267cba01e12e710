"""Training-step time, throughput and memory of the softmax transformers of the three papers that train them.

One training step = a fresh batch of prompts + loss (eq. 6 for the looped models) + gradient + optimizer
update, compiled in chunks of ``--chunk`` steps under ``lax.scan`` exactly as ``jaxicl.dynamics.train``
runs them (``jaxicl.dynamics.step_seconds``: median over ``--repeats`` chunks after compilation).

Also printed, per step:
- FLOPs, counted analytically (XLA's cost analysis counts a ``scan`` body once): 6 × batch × tokens ×
  block applications × (4 d² + 2 d d_ff + 2 T d) — the QKV/output projections, the MLP and the T × T
  attention products of every block, forward (×2) and backward (×4); read-in/out and LayerNorms are
  left out (< 1 %). Block applications: L for the standard transformer, T·L_loop for the looped one
  (eq. 6 reads every loop), L_pre + T·(L_loop + L_post) for the AlgoFormer. Achieved FLOP/s = FLOPs /
  step time, to compare with the device's peak.
- the peak memory of the compiled one-step program (``memory_analysis`` of the backend it runs on):
  whether the paper's size fits one device.

Configs (``quick``: the CPU reproduction sizes; ``paper``: the papers' sizes):
- ``algoformer``: standard / looped / AlgoFormer on regression with representation (AlgoFormer §5.1;
  paper: d = 20, N = 40, width 256, 8 heads, 12-layer standard, (T, ΔT) = (20, 15), batch 64);
- ``zhang-fig1``: GPT-2 on linear regression with random covariance (Zhang et al. App. E; paper: d = 20,
  N = 100, 12 layers, width 256, 8 heads, batch 64);
- ``yang-fig5``: the 4-layer transformer on the template task (Yang et al. §4; paper: K = 200, d = 100,
  width 256, MLP 512, H = 8, batch 256).

Also printed: the seconds XLA took to compile the chunk program (tracing, lowering and compilation, with an
empty compilation cache), which a short training must repay. ``--unroll`` and ``--autotune-level`` set the two
things that trade compilation for step time (``jaxicl.models.transformer.UNROLL``, the GPU's GEMM autotuning of
``jaxicl.runtime.xla_options.TRAINING_COMPILER_OPTIONS``), so that one command per setting measures whether a quick run
(700–3,000 steps) repays them; XLA:CPU has no autotuning. Both default to the library's settings, which
``$JAXICL_UNROLL`` and ``$JAXICL_TRAINING_AUTOTUNE_LEVEL`` set (README, "Command line", XLA options).

Run: ``python benchmarks/bench_transformer.py [--config quick|paper|both] [--repeats 3] [--chunk N]
[--dtype float32|bfloat16] [--unroll auto|on|off] [--autotune-level N] [--ensemble K|auto[,...]] [--peak-tflops P]``
(chunk default: 20 steps at quick size, 2
at paper size). The results are recorded as ``bench_transformer`` (``benchmarks/results.py``), one row per model,
size, compute dtype and ensemble size; a run under ``$XLA_FLAGS`` (XLA:CPU's compiler options, say) is its own
variant, named with them.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import tempfile
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from results import record  # benchmarks/results.py

from jaxicl import losses, models, tasks
from jaxicl.dynamics import ensemble_size_that_fits, stack_members, step_seconds
from jaxicl.dynamics.train import chunk_runner
from jaxicl.experiments import algoformer as A
from jaxicl.experiments import yang2024 as Yx
from jaxicl.experiments import zhang2023 as Z
from jaxicl.runtime import compilation_cache, xla_options

train_module = importlib.import_module("jaxicl.dynamics.train")  # the module (jaxicl.dynamics.train is the function)
SWITCH = {"auto": None, "on": True, "off": False}  # --unroll, --batch-members -> the library's switch


def step_flops(batch, tokens, d_model, d_ff, block_applications):
    return 6 * batch * tokens * block_applications * (4 * d_model**2 + 2 * d_model * d_ff + 2 * tokens * d_model)


def algoformer_case(size, kind):
    cfg = A.SIZES[size]
    task = A.fig2_tasks(cfg, jax.random.PRNGKey(0))["regression"]
    model = A.build_model(kind, cfg, task, jax.random.PRNGKey(1))
    loops = None if kind == "standard" else tuple(cfg.loops)
    loss = lambda m, k, s: losses.sequence_loss(m, task.prompts(k, cfg.batch), loops)  # noqa: E731
    T = cfg.loops[0]
    # the AlgoFormer's TF_post runs after the loop counts eq. (6) weighs, first_weighted_loop … T
    posts = T - losses.first_weighted_loop(*cfg.loops) + 1
    blocks = {"standard": cfg.std_layers, "looped": T, "algoformer": 1 + T + posts}[kind]
    return loss, model, step_flops(cfg.batch, 2 * cfg.N, cfg.d_model, 4 * cfg.d_model, blocks)


def zhang_case(size):
    g = Z.SIZES[size].gpt2
    N = max(g.Ns)
    task = tasks.RepresentationRegression(g.d, N, covariance=tasks.RandomDiagonalCovariance(g.d))
    model = Z._fig1_model(g, jax.random.PRNGKey(1), 2 * N)
    loss = lambda m, k, s: losses.sequence_loss(m, task.prompts(k, g.batch))  # noqa: E731
    return loss, model, step_flops(g.batch, 2 * N, g.d_model, 4 * g.d_model, g.n_layers)


def yang_case(size):
    tc = Yx.SIZES[size].transformer
    task = jax.tree_util.tree_map(
        lambda a: a.astype(jnp.float32) if eqx.is_inexact_array(a) else a,
        Yx.transformer_task(tc, jax.random.PRNGKey(0)),
    )
    model = models.StandardTransformer(
        jax.random.PRNGKey(1),
        tc.d + 1,
        1,
        n_layers=tc.n_layers,
        d_model=tc.d_model,
        n_heads=tc.heads,
        d_ff=tc.d_ff,
        max_len=tc.K,
    )
    loss = lambda m, k, s: 0.5 * losses.sequence_loss(m, tasks.template_encoding(task.sample(k, tc.batch)))  # noqa: E731
    return loss, model, step_flops(tc.batch, tc.K, tc.d_model, tc.d_ff, tc.n_layers)


def compiled_step(loss, model, compute_dtype, chunk, members=None):
    """Compile the chunk program that ``step_seconds`` then times (the persistent compilation cache hands it back to
    it): (seconds to trace, lower and compile it, peak bytes, whether cuDNN's fused attention is in it). With
    ``members``, ``model`` is a stack of that many and the program is ``train(ensemble=True)``'s."""
    opt = optax.adamw(1e-4)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    run = chunk_runner(loss, static, opt, compute_dtype, ensemble=members is not None)
    state = jax.vmap(opt.init)(params) if members else opt.init(params)
    key = jax.random.split(jax.random.PRNGKey(0), members) if members else jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    compiled = run.lower(params, state, key, jnp.arange(chunk)).compile()
    seconds = time.perf_counter() - t0
    fused = "cudnn$fmha" in compiled.as_text()
    mem = compiled.memory_analysis()
    if mem is None:
        return seconds, math.nan, fused
    peak = getattr(mem, "peak_memory_in_bytes", 0)
    return seconds, peak or (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes), fused


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["quick", "paper", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument(
        "--attention",
        choices=["auto", "xla"],
        default="auto",
        help="auto: cuDNN fused attention where it applies (GPU, bf16); xla: never",
    )
    ap.add_argument(
        "--only",
        default=None,
        help="run only the configs whose label contains this (_ for a space; several, comma-separated)",
    )
    ap.add_argument(
        "--unroll",
        choices=["auto", "on", "off"],
        default=None,
        help="the layer and loop scans: auto unrolls them on accelerators only (default: $JAXICL_UNROLL, else auto)",
    )
    ap.add_argument(
        "--batch-members",
        choices=["auto", "on", "off"],
        default=None,
        help="--ensemble K: on batches the members into one step (vmap), off runs them one after another in the "
        "chunk (lax.map); auto batches on accelerators only (default: $JAXICL_BATCH_MEMBERS, else auto)",
    )
    ap.add_argument(
        "--autotune-level",
        type=int,
        default=None,
        help="XLA:GPU GEMM autotuning of the training programs (default: the library's, "
        f"{xla_options.TRAINING_COMPILER_OPTIONS['xla_gpu_autotune_level']})",
    )
    ap.add_argument(
        "--ensemble",
        default="1",
        help="train K copies of each model as one vmapped program (train(ensemble=True)) and print the "
        "aggregate throughput; 'auto': the largest K whose compiled chunk fits in 75 %% of the "
        "device's memory, from one compilation (jaxicl.dynamics.ensemble_size_that_fits); several, "
        "comma-separated (1,auto), measure each in one process",
    )
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's peak for the compute dtype, to print the fraction reached",
    )
    args = ap.parse_args()
    ensembles = args.ensemble.split(",")
    if not all(e == "auto" or (e.isdigit() and int(e) >= 1) for e in ensembles):
        ap.error(f"--ensemble takes positive integers or 'auto', comma-separated, not {args.ensemble!r}")
    args.ensemble = [e if e == "auto" else int(e) for e in ensembles]
    compute = None if args.dtype == "float32" else jnp.bfloat16
    models.transformer.ATTENTION_IMPLEMENTATION = args.attention
    if args.unroll is not None:
        models.transformer.UNROLL = SWITCH[args.unroll]
    if args.batch_members is not None:
        train_module.BATCH_MEMBERS = SWITCH[args.batch_members]
    if args.autotune_level is not None:
        xla_options.TRAINING_COMPILER_OPTIONS = {"xla_gpu_autotune_level": args.autotune_level}
    with tempfile.TemporaryDirectory() as cache:  # step_seconds reads back the program compiled_step compiled cold
        compilation_cache.enable(cache, min_compile_seconds=0.0)
        run_configs(args, compute)


def run_configs(args, compute):
    print(
        f"backend {jax.default_backend()}, devices {jax.devices()}, compute {args.dtype}, unroll "
        f"{models.transformer._unroll()}, remat {models.transformer._remat()}, members batched "
        f"{train_module._batch_members()}, "
        f"training programs' compiler options {xla_options.TRAINING_COMPILER_OPTIONS}"
    )
    rows = []
    only = [o.replace("_", " ") for o in args.only.split(",")] if args.only else None
    for name in ["quick", "paper"] if args.config == "both" else [args.config]:
        size = "quick" if name == "quick" else "full"
        chunk = args.chunk or (20 if name == "quick" else 2)
        cases = {f"algoformer {k}": (lambda k=k: algoformer_case(size, k)) for k in A.MODELS}
        cases |= {"zhang-fig1 gpt2": lambda: zhang_case(size), "yang-fig5 H=8": lambda: yang_case(size)}
        for label, make in cases.items():
            if only and not any(o in label for o in only):
                continue
            loss, model, flops = make()
            for ensemble in args.ensemble:
                rows.append(measure(args, compute, name, label, loss, model, flops, chunk, ensemble))
                # after every row, so that a run stopped at a time limit keeps the rows it measured
                record(
                    "bench_transformer",
                    rows,
                    variant=f"{args.config} {args.dtype} {args.only or 'all'} "
                    f"ensemble {','.join(map(str, args.ensemble))}"
                    + (f" batch-members {args.batch_members}" if args.batch_members else "")
                    + (f" XLA_FLAGS {os.environ['XLA_FLAGS']}" if os.environ.get("XLA_FLAGS") else ""),
                )


def measure(args, compute, name, label, loss, model, flops, chunk, ensemble):
    """One row: ``model`` alone (``ensemble`` 1) or an ensemble of ``ensemble`` copies ('auto': the largest that
    fits, from one compilation's memory: `ensemble_size_that_fits`)."""
    members = None
    if ensemble == "auto":
        members = ensemble_size_that_fits(loss, model, chunk=chunk, compute_dtype=compute)[0]
        print(f"{name:5s} {label:22s} the largest ensemble that fits: {members}", flush=True)
    elif ensemble > 1:
        members = ensemble
    if members:
        model, flops = stack_members([model] * members), flops * members
    compile_s, mem, fused = compiled_step(loss, model, compute, chunk, members)
    sec = step_seconds(
        loss,
        model,
        optimizer=optax.adamw(1e-4),
        chunk=chunk,
        repeats=args.repeats,
        compute_dtype=compute,
        ensemble=members is not None,
    )
    peak = f", {100 * flops / sec / 1e12 / args.peak_tflops:5.1f} % of peak" if args.peak_tflops else ""
    if members:
        label = f"{label} x{members}" + ("" if train_module._batch_members() else " in turn")
        print(
            f"{name:5s} {label:22s} ensemble of {members}: {members / sec:9.2f} member-steps/s in aggregate", flush=True
        )
    print(
        f"{name:5s} {label:22s} {args.dtype:8s}: {1e3 * sec:9.2f} ms/step = {1 / sec:8.2f} steps/s | "
        f"{flops / 1e9:8.2f} GFLOP/step, {flops / sec / 1e9:8.1f} GFLOP/s{peak} | peak memory "
        f"{mem / 2**20:8.1f} MiB | fused attention {'yes' if fused else 'no'} | compile {compile_s:6.1f} s | "
        f"chunk {chunk} x {args.repeats}",
        flush=True,
    )
    return {
        "size": name,
        "model": label,
        "dtype": args.dtype,
        "members": members or 1,
        "ms per step": 1e3 * sec,
        "member-steps per s": (members or 1) / sec,
        "TFLOP/s": flops / sec / 1e12,
        "share of peak": flops / sec / 1e12 / args.peak_tflops if args.peak_tflops else "",
        "peak memory (MiB)": mem / 2**20,
        "fused attention": "yes" if fused else "no",
        "compile (s)": compile_s,
        "unrolled": "yes" if models.transformer._unroll() else "no",
    }


if __name__ == "__main__":
    main()
