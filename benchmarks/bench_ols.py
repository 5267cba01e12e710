"""Least squares at every prefix, Zhang et al.'s Fig. 1 reference at paper size (M = 201 positions, d = 20): the
SVD of every prefix (``jaxicl.baselines.ols``) against the prefix Gram matrices' eigendecompositions
(``jaxicl.baselines.ols_gram``, what Fig. 1 uses), on every backend present (the accelerator and the host CPU), in
float64 as Fig. 1 computes it. Prints the median of ``--repeats`` runs after compilation, seconds for ``--prompts``
prompts, the time that extrapolates to the paper's 4 test distributions × 4,096 prompts, and the largest difference
between the two methods' predictions.

Run: ``python benchmarks/bench_ols.py [--prompts 256] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from results import record

from jaxicl import baselines

jax.config.update("jax_enable_x64", True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--M", type=int, default=201)
    ap.add_argument("--d", type=int, default=20)
    args = ap.parse_args()
    # the host first: float64 LAPACK on a GPU may take far longer, and each platform is recorded as it finishes
    platforms = ["cpu"] + [p for p in dict.fromkeys(d.platform for d in jax.devices()) if p != "cpu"]
    key = jax.random.PRNGKey(0)
    xs = jax.random.normal(key, (args.prompts, args.M, args.d))
    ys = xs @ jax.random.normal(jax.random.fold_in(key, 1), (args.prompts, args.d, 1)) + 0.1 * jax.random.normal(
        jax.random.fold_in(key, 2), (args.prompts, args.M, 1)
    )
    print(
        f"jax {jax.__version__}, devices {jax.devices()}; {args.prompts} prompts of M = {args.M}, d = {args.d}, float64"
    )
    rows = []
    for platform in platforms:
        device = jax.devices(platform)[0]
        x, y = jax.device_put(xs, device), jax.device_put(ys, device)
        out = {}
        for name, f in (("svd (ols)", baselines.ols), ("gram (ols_gram)", baselines.ols_gram)):
            run = jax.jit(lambda a, b, f=f: jax.lax.map(lambda p: f(p[0], p[1]), (a, b), batch_size=64))
            out[name] = jax.block_until_ready(run(x, y))
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(run(x, y))
                times.append(time.perf_counter() - t0)
            sec = float(np.median(times))
            print(
                f"{platform:5s} {name:16s}: {sec:8.3f} s for {args.prompts} prompts; paper's 16,384 prompts "
                f"≈ {sec * 16384 / args.prompts:8.1f} s",
                flush=True,
            )
            rows.append(
                {
                    "device": platform,
                    "method": name,
                    "prompts": args.prompts,
                    "M": args.M,
                    "d": args.d,
                    "seconds": sec,
                    "paper's 16,384 prompts (s)": sec * 16384 / args.prompts,
                }
            )
        a, b = out.values()
        diff = float(jnp.max(jnp.abs(a - b)))
        print(f"{platform:5s} max |svd − gram| over the predictions: {diff:.2e}")
        for row in rows[-2:]:
            row["max abs(svd − gram)"] = diff
        record("bench_ols", rows)


if __name__ == "__main__":
    main()
