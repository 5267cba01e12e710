"""Gradient-flow benchmarks for Zhang et al.'s LSA (issue: core).

1. Time for gradient flow from Assumption 3.3 to reach ‖u₋₁U₁₁ − Γ⁻¹‖/‖Γ⁻¹‖ ≤ 1e-6, for
   d ∈ {5, 20, 50}: adaptive diffrax solver (Tsit5) vs fixed-step gradient descent with step
   1/λ_max(∇²L at W*) (the largest step of the classical 1/L rule). Wall time after compilation
   (median of repeats) and number of gradient evaluations.
2. Throughput of 1,000 vmapped gradient flows over random Λ (d = 5): trajectories per second.

Run: ``python benchmarks/bench_flow.py [--repeats 3]``. Float64 throughout (the 1e-6 target needs it). The results
are recorded as ``bench_flow`` (item 1) and ``bench_flow_vmapped`` (item 2) (``benchmarks/results.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.flatten_util
import jax.numpy as jnp
from results import record

import jaxicl as icl
from jaxicl.theory import zhang

TARGET = 1e-6


def setup(d, key):
    ev = jnp.geomspace(0.5, 2.0, d)  # κ = 4
    q, _ = jnp.linalg.qr(jax.random.normal(key, (d, d)))
    lam = (q * ev) @ q.T
    n = 2 * d
    task = icl.tasks.LinearRegression(d, n, lam)
    gi = jnp.linalg.inv(zhang.gamma(lam, n))
    # σ inside Thm 4.1's condition with margin: σ² ‖Γ‖ √d = 1
    sigma = float((1.0 / (jnp.linalg.norm(zhang.gamma(lam, n), 2) * jnp.sqrt(d))) ** 0.5)
    m0 = icl.models.LinearSelfAttention.balanced_init(d, sigma, jax.random.fold_in(key, 1))
    return task, gi, m0


def product_error(m, gi):
    K, _, _, b = m.blocks()
    return jnp.linalg.norm(b * K - gi) / jnp.linalg.norm(gi)


def timed(fn, repeats):
    out = jax.block_until_ready(fn())  # compile + warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_convergence(d, repeats):
    task, gi, m0 = setup(d, jax.random.PRNGKey(d))
    loss = lambda m: icl.population_loss(m, task)  # noqa: E731

    @jax.jit
    def flow(m0):
        sol = icl.gradient_flow(
            loss,
            m0,
            1e6,
            n_save=2,
            rtol=1e-9,
            atol=1e-12,
            max_steps=10**6,
            stop_when=lambda m: product_error(m, gi) <= TARGET,
        )
        return sol.t_final, sol.num_grad_evals, product_error(sol.final, gi)

    t_flow, (t_end, evals, err) = timed(lambda: flow(m0), repeats)

    # GD step: 1/λ_max of the Hessian at W* (over all parameters)
    wstar = zhang.w_star_model(task.covariance.matrix, task.n_context)
    flat, unravel = jax.flatten_util.ravel_pytree(wstar)
    lmax = jnp.linalg.eigvalsh(jax.hessian(lambda v: loss(unravel(v)))(flat))[-1]
    step = 1.0 / lmax
    grad = jax.grad(loss)

    @jax.jit
    def gd(m0):
        def cond(c):
            m, k = c
            return (product_error(m, gi) > TARGET) & (k < 10**7)

        def body(c):
            m, k = c
            return jax.tree_util.tree_map(lambda p, g: p - step * g, m, grad(m)), k + 1

        m, k = jax.lax.while_loop(cond, body, (m0, 0))
        return k, product_error(m, gi)

    t_gd, (gd_steps, gd_err) = timed(lambda: gd(m0), repeats)
    return {
        "d": d,
        "N": task.n_context,
        "flow_seconds": t_flow,
        "flow_grad_evals": int(evals),
        "flow_t": float(t_end),
        "flow_error": float(err),
        "gd_seconds": t_gd,
        "gd_grad_evals": int(gd_steps),
        "gd_step": float(step),
        "gd_error": float(gd_err),
        "speedup_gd_over_flow": t_gd / t_flow,
    }


def random_covariances(key, n_traj, d):
    """Λ = Q diag(λ) Qᵀ, Q uniform orthogonal, λ_i ~ Unif[0.5, 2] (condition number ≤ 4)."""

    def one(k):
        kq, kl = jax.random.split(k)
        q, r = jnp.linalg.qr(jax.random.normal(kq, (d, d)))
        q = q * jnp.sign(jnp.diag(r))
        return (q * jax.random.uniform(kl, (d,), minval=0.5, maxval=2.0)) @ q.T

    return jax.vmap(one)(jax.random.split(key, n_traj))


def bench_vmapped(n_traj, repeats, d=5, n_loop=20):
    n = 2 * d
    m0 = icl.models.LinearSelfAttention.balanced_init(d, 0.3, jax.random.PRNGKey(0))
    lams = random_covariances(jax.random.PRNGKey(1), n_traj, d)

    def one(lam):
        task = icl.tasks.LinearRegression(d, n, icl.tasks.FixedCovariance(lam))
        sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 100.0, n_save=2, rtol=1e-6, atol=1e-9)
        return sol.losses[-1]

    many = jax.jit(jax.vmap(one))
    single = jax.jit(one)
    t, losses = timed(lambda: many(lams), repeats)
    # the same flows one at a time through the jitted single-trajectory function (first n_loop)
    t_loop, _ = timed(lambda: [single(lam) for lam in lams[:n_loop]], repeats)
    per_loop = t_loop / n_loop
    return {
        "n_trajectories": n_traj,
        "d": d,
        "t1": 100.0,
        "seconds": t,
        "trajectories_per_second": n_traj / t,
        "python_loop_seconds_per_trajectory": per_loop,
        "vmap_speedup_over_loop": per_loop * n_traj / t,
        "all_finite": bool(jnp.all(jnp.isfinite(losses))),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dims", type=int, nargs="*", default=[5, 20, 50])
    parser.add_argument("--n-traj", type=int, default=1000)
    args = parser.parse_args()
    with jax.enable_x64(True):
        info = {
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "machine": platform.processor() or platform.machine(),
            "jax": jax.__version__,
            "date": time.strftime("%Y-%m-%d"),
        }
        print(json.dumps(info))
        vm = bench_vmapped(args.n_traj, args.repeats)
        print(
            f"{vm['n_trajectories']} vmapped flows (d={vm['d']}, t1={vm['t1']}): {vm['seconds']:.2f} s, "
            f"{vm['trajectories_per_second']:.1f} trajectories/s; Python loop over the jitted single flow "
            f"{vm['python_loop_seconds_per_trajectory'] * 1e3:.1f} ms/trajectory -> vmap {vm['vmap_speedup_over_loop']:.1f}x",
            flush=True,
        )
        record("bench_flow_vmapped", [vm])
        rows = []
        for d in args.dims:
            row = bench_convergence(d, args.repeats)
            rows.append(row)
            print(
                f"d={d:3d}  flow {row['flow_seconds']:.3f} s ({row['flow_grad_evals']} grad evals, t={row['flow_t']:.3g})"
                f"  GD {row['gd_seconds']:.3f} s ({row['gd_grad_evals']} steps, η={row['gd_step']:.3g})"
                f"  GD/flow time ratio {row['speedup_gd_over_flow']:.1f}",
                flush=True,
            )
            record("bench_flow", rows)  # after every d: a run stopped at a time limit keeps the dimensions it measured


if __name__ == "__main__":
    main()
