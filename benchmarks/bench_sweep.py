"""Sweep benchmarks (issue: sweeps).

1. A 1,000-point sweep vs a Python loop over the same points calling the jitted single-point
   function, same run, same machine. Two run functions:
   - ``loss_grad``: exact LSA population loss and its gradient (d = 10) at a balanced init over
     κ × N × seed (10 × 10 × 10) — cheap points, where per-call overhead matters;
   - ``flow``: a whole gradient flow per point (d = 3, t1 = 100, Tsit5) over κ × N × seed
     (10 × 10 × 2 = 200 points) — expensive points. The loop runs every 10th point (20 flows, every κ and N
     represented) and its time is scaled by 10: one flow is latency-bound on a GPU (about 0.16 s on an H200), where
     the whole loop, warm-up and repeats, would take minutes.
2. Throughput of the ``loss_grad`` sweep with 1, 2 and 4 forced host devices (subprocesses with
   ``XLA_FLAGS=--xla_force_host_platform_device_count=K``).
3. A grid smaller than its ``chunk_size``: the ``lsa:flow`` stage's point (Kvaerno5, float64, d = 3, t1 = 200) over
   κ × N = 2 × 2 with ``chunk_size = 64`` (the TOML sweep's default). The sweep compiles a chunk of the grid's 4
   points; before 748a9b1 it computed a chunk of 64, the last point repeated as padding: that program, on that padded
   chunk, is timed in the same run.

Run: ``python benchmarks/bench_sweep.py [--repeats 3] [--only loops|devices|padding]``. Float32 (the default dtype)
but for item 3. The results are recorded as ``bench_sweep`` (item 1), ``bench_sweep_devices`` (item 2) and
``bench_sweep_padding`` (item 3) (``benchmarks/results.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
from results import record  # benchmarks/results.py
from timing import median_time  # benchmarks/timing.py

import jaxicl as icl
from jaxicl.experiments.lsa_sweep import geometric_covariance
from jaxicl.losses import lsa_population_loss

GRID = {"kappa": [1.0 + i for i in range(10)], "n_context": [5 * (i + 1) for i in range(10)], "seed": list(range(10))}
GRIDS = {"loss_grad": GRID, "flow": {**GRID, "seed": [0, 1]}}  # flows: 200 points (each takes ~0.1 s)
LOOP_STRIDE = {"loss_grad": 1, "flow": 10}  # the loop runs every STRIDE-th point; its time is scaled by STRIDE


def loss_grad(kappa, n_context, key, d=10):
    lam = geometric_covariance(d, kappa)
    m = icl.models.LinearSelfAttention.balanced_init(d, 0.3, key)
    loss, g = jax.value_and_grad(lambda m: lsa_population_loss(m, lam, n_context))(m)
    return {"loss": loss, "grad_norm": jnp.sqrt(jnp.sum(g.W_kq**2) + jnp.sum(g.W_pv**2))}


def flow(kappa, n_context, key, d=3):
    lam = geometric_covariance(d, kappa)
    m = icl.models.LinearSelfAttention.balanced_init(d, 0.3, key)
    sol = icl.gradient_flow(lambda m: lsa_population_loss(m, lam, n_context), m, 100.0, n_save=2, rtol=1e-5, atol=1e-7)
    return {"final_loss": sol.losses[-1]}


FUNCS = {"loss_grad": loss_grad, "flow": flow}


def _point_loss_grad(kappa, n_context, seed, key):
    return loss_grad(kappa, n_context, key)


def _point_flow(kappa, n_context, seed, key):
    return flow(kappa, n_context, key)


POINTS = {"loss_grad": _point_loss_grad, "flow": _point_flow}


def run_sweep(name):
    return icl.sweep(POINTS[name], GRIDS[name], progress=False)


_SINGLE = {
    name: jax.jit(
        lambda kappa, n_context, seed, f=f: f(kappa, n_context, jax.random.fold_in(jax.random.PRNGKey(0), seed))
    )
    for name, f in FUNCS.items()
}


def run_loop(name):
    """The jitted single point over every ``LOOP_STRIDE[name]``-th grid point, in turn."""
    single = _SINGLE[name]
    out = [
        single(jnp.float32(k), jnp.int32(n), jnp.int32(s)) for k, n, s in run_loop_points(name)[:: LOOP_STRIDE[name]]
    ]
    jax.block_until_ready(out)
    return out


def run_loop_points(name):
    g = GRIDS[name]
    return [(k, n, s) for k in g["kappa"] for n in g["n_context"] for s in g["seed"]]


def devices_mode(repeats):
    t = median_time(run_sweep, "loss_grad", repeats=repeats)
    print(json.dumps({"devices": len(jax.devices()), "seconds": t, "points_per_second": 1000 / t}))


def padding(repeats):
    """Item 3: the sweep of a 4-point grid with ``chunk_size`` = 64 against the program for the padded chunk of 64."""
    import importlib

    from jaxicl.experiments.lsa_sweep import LSAFlowPoint

    S = importlib.import_module("jaxicl.sweep")  # the module (``jaxicl.sweep`` is also the function)
    point = LSAFlowPoint(d=3, t1=200.0)

    def run_fn(kappa, n_context, seed, key):
        return point(kappa, n_context, key)

    grid, chunk = {"kappa": [1.0, 4.0], "n_context": [5, 10], "seed": [0]}, 64
    with jax.enable_x64(True):
        t_sweep = median_time(lambda: icl.sweep(run_fn, grid, chunk_size=chunk, progress=False), repeats=repeats)
        devices = tuple(jax.devices())
        axes = S._grid_axes(grid)
        base_key = S._replicated_key(None, devices)
        padded = S._compiled(run_fn, True, devices, S._point_dtypes(axes), chunk, base_key)
        inputs = S._chunk_inputs(axes, 0, chunk, S._point_sharding(devices))
        t_padded = median_time(padded, inputs, base_key, repeats=repeats)
    row = {
        "point": "lsa:flow, d = 3, t1 = 200 (float64)",
        "grid points": 4,
        "chunk_size": chunk,
        "sweep seconds (chunk of 4)": t_sweep,
        "padded chunk of 64 seconds": t_padded,
        "padded ÷ sweep": t_padded / t_sweep,
    }
    record("bench_sweep_padding", [row])
    print(
        f"4-point grid, chunk_size {chunk}: sweep {t_sweep:.3f} s, padded chunk {t_padded:.3f} s, "
        f"ratio {t_padded / t_sweep:.1f}x",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices-mode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-devices", action="store_true", help="skip the forced-host-device runs (CPU only)")
    parser.add_argument("--only", choices=("loops", "devices", "padding"), help="run one item (default: all)")
    args = parser.parse_args()
    if args.devices_mode:
        return devices_mode(args.repeats)
    print(
        json.dumps(
            {
                "backend": jax.default_backend(),
                "jax": jax.__version__,
                "date": time.strftime("%Y-%m-%d"),
                "cpus": os.cpu_count(),
            }
        )
    )
    rows = []
    for name in FUNCS if args.only in (None, "loops") else ():
        reps = args.repeats
        t_sweep = median_time(run_sweep, name, repeats=reps)
        t_loop = median_time(run_loop, name, repeats=reps) * LOOP_STRIDE[name]
        n_pts = len(run_loop_points(name))
        rows.append(
            {
                "point": name,
                "points": n_pts,
                "sweep seconds": t_sweep,
                "loop seconds": t_loop,
                "loop points timed": n_pts // LOOP_STRIDE[name],
                "loop ÷ sweep": t_loop / t_sweep,
            }
        )
        record("bench_sweep", rows)  # after each: a run stopped at a time limit keeps what it measured
        scaled = "" if LOOP_STRIDE[name] == 1 else f" ({n_pts // LOOP_STRIDE[name]} points timed, x{LOOP_STRIDE[name]})"
        print(
            f"{name:9s}: {n_pts}-point sweep {t_sweep:.3f} s, Python loop of jitted single point {t_loop:.3f} s"
            f"{scaled}, ratio {t_loop / t_sweep:.1f}x",
            flush=True,
        )
    devices = []
    skip_devices = args.skip_devices or args.only not in (None, "devices") or jax.default_backend() != "cpu"
    for k in () if skip_devices else (1, 2, 4):
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={k}"}
        res = subprocess.run(
            [sys.executable, __file__, "--devices-mode", "--repeats", str(args.repeats)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(res.stdout.strip().splitlines()[-1])
        print(
            f"loss_grad sweep on {k} forced host device(s): {row['seconds']:.3f} s, "
            f"{row['points_per_second']:.0f} points/s",
            flush=True,
        )
        devices.append({"forced host devices": k, "seconds": row["seconds"], "points per s": row["points_per_second"]})
    if devices:
        record("bench_sweep_devices", devices)
    if args.only in (None, "padding"):
        padding(args.repeats)


if __name__ == "__main__":
    main()
