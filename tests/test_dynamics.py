"""Gradient flow (diffrax), gradient descent and optax training; Thm 4.1 and Lemma 5.4 checks."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import xarray as xr
from conftest import random_spd

import jaxicl as icl
from jaxicl.theory import zhang

D, N, SIGMA = 3, 10, 0.5
LAM = np.diag([1.0, 0.5, 2.0])  # float64 (a jnp array made at import would be float32: x64 is on per test)


@pytest.fixture(scope="module")
def balanced_flow():
    with jax.enable_x64(True):
        task = icl.tasks.LinearRegression(D, N, LAM)
        m0 = icl.models.LinearSelfAttention.balanced_init(D, SIGMA, jax.random.PRNGKey(0))
        sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, t1=2000.0, rtol=1e-10, atol=1e-12)
        return m0, sol


def test_flow_converges_to_w_star_4_1(balanced_flow):
    _, sol = balanced_flow
    gi = jnp.linalg.inv(zhang.gamma(LAM, N))
    K, _, _, b = sol.final.blocks()
    tol = 1e-9  # the flow's rtol is 1e-10; at t = 2000 it is at its limit (float32 Λ or Γ would miss by ~5e-8)
    assert jnp.linalg.norm(b * K - gi) / jnp.linalg.norm(gi) <= tol
    wk, wp = zhang.w_star(LAM, N)
    assert jnp.linalg.norm(sol.final.W_kq - wk) / jnp.linalg.norm(wk) <= tol
    assert jnp.linalg.norm(sol.final.W_pv - wp) / jnp.linalg.norm(wp) <= tol


def test_balancedness_is_conserved(balanced_flow):
    _, sol = balanced_flow
    bal = jax.vmap(lambda m: m.W_pv[D, D] ** 2 - jnp.sum(m.W_kq[:D, :D] ** 2))(sol.models)
    assert jnp.max(jnp.abs(bal - bal[0])) <= 1e-8


def test_pl_inequality_5_8_and_exponential_decay(balanced_flow):
    m0, sol = balanced_flow
    mu = zhang.pl_constant(SIGMA, m0.W_kq[:D, :D] / SIGMA, LAM, N)
    assert mu > 0
    gap = sol.losses - zhang.min_population_loss(LAM, N)
    # PL at every saved time (gaps at round-off level excluded: both sides are ~0 there)
    live = gap > 1e-13
    assert jnp.all(sol.grad_norms[live] ** 2 >= mu * gap[live] * (1 - 1e-9))
    assert jnp.all(gap[live] <= gap[0] * jnp.exp(-mu * sol.ts[live]) * (1 + 1e-6))


def test_flow_is_vmappable_over_covariances():
    lams = jnp.stack([jnp.diag(jnp.array([1.0, s])) for s in (0.5, 2.0)])
    m0 = icl.models.LinearSelfAttention.balanced_init(2, 0.3, jax.random.PRNGKey(1))

    def final_loss(lam):
        task = icl.tasks.LinearRegression(2, 5, icl.tasks.FixedCovariance(lam))
        return icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 50.0, n_save=5).losses[-1]

    batched = jax.vmap(final_loss)(lams)
    assert jnp.allclose(batched, jnp.stack([final_loss(l) for l in lams]), rtol=1e-8)


# slow: the default suite differentiates the same flow in σ against central differences, tighter (1e-7) and with
# every adjoint: test_sensitivity.py::test_flow_final_loss_in_sigma_and_spectrum_every_adjoint_matches_...
@pytest.mark.slow
def test_flow_is_differentiable_in_the_init_scale():
    task = icl.tasks.LinearRegression(2, 5, jnp.diag(jnp.array([1.0, 0.5])))
    key = jax.random.PRNGKey(2)

    def final_loss(sigma):
        m0 = icl.models.LinearSelfAttention.balanced_init(2, sigma, key)
        return icl.gradient_flow(
            lambda m: icl.population_loss(m, task), m0, 5.0, n_save=3, rtol=1e-10, atol=1e-12
        ).losses[-1]

    g = jax.grad(final_loss)(0.3)
    fd = (final_loss(0.3 + 1e-5) - final_loss(0.3 - 1e-5)) / 2e-5
    assert jnp.allclose(g, fd, rtol=1e-5)
    assert g < 0  # a larger init escapes the saddle at 0 faster


def test_implicit_solver_agrees_and_steady_state_event_stops_early():
    task = icl.tasks.LinearRegression(2, 5, random_spd(jax.random.PRNGKey(3), 2))
    m0 = icl.models.LinearSelfAttention.balanced_init(2, 0.5, jax.random.PRNGKey(4))
    loss = lambda m: icl.population_loss(m, task)  # noqa: E731
    a = icl.gradient_flow(loss, m0, 200.0, rtol=1e-10, atol=1e-12)
    b = icl.gradient_flow(loss, m0, 200.0, solver="kvaerno5", rtol=1e-10, atol=1e-12)
    assert jnp.allclose(a.losses, b.losses, rtol=1e-6, atol=1e-10)
    c = icl.gradient_flow(loss, m0, 1e4, steady_state_tol=1e-6)
    assert bool(c.stopped_by_event) and c.t_final < 1e4
    assert c.grad_norms[-1] < 1e-6  # saves after the stop repeat the final state
    assert not bool(a.stopped_by_event)
    d = icl.gradient_flow(loss, m0, 1e4, stop_when=lambda m: m.W_pv[2, 2] > 0.9 * c.final.W_pv[2, 2])
    assert bool(d.stopped_by_event) and d.t_final < c.t_final


def test_diverging_flow_raises_with_time_and_quantity():
    # L(θ) = −θ⁴: dθ/dt = 4θ³ blows up at t = 1/(8 θ0²) = 0.125
    with pytest.raises(FloatingPointError, match=r"diverged at t = 0\.12"):
        icl.gradient_flow(lambda p: -jnp.sum(p["a"] ** 4), {"a": jnp.array(1.0)}, t1=1.0, max_steps=4000)

    # check=False: a jitted (here vmapped) flow returns its flags; check_flow raises on the host, naming the batch's
    # latest stop (θ0 = 1 blows up at t = 1/8, θ0 = 0.5 at 1/2)
    def flow(a0, check):
        return icl.gradient_flow(lambda p: -jnp.sum(p["a"] ** 4), {"a": a0}, t1=1.0, max_steps=4000, check=check)

    a0 = jnp.array([1.0, 0.5])
    sols = jax.jit(jax.vmap(lambda a: flow(a, False)))(a0)
    assert sols.diverged.tolist() == [True, True] and not bool(sols.solver_failed.any())
    with pytest.raises(FloatingPointError, match=r"diverged at t = 0\.5"):
        icl.dynamics.check_flow(sols)
    ok = jax.jit(jax.vmap(lambda a: flow(a, False)))(jnp.array([0.1, 0.2]))  # blow-up at t = 12.5 and 3.1
    assert icl.dynamics.check_flow(ok) is ok


def test_a_flow_program_holds_no_host_callback_and_traced_save_times_are_checked_inside_it():
    """Every save time is the end of a solve (no diffrax ``SaveAt(ts=...)``, whose runtime checks of the times are
    host callbacks): with save times given as numbers, the flow's program holds no host callback, so JAX's persistent
    compilation cache can keep it (tests/test_profiling.py reads one back). Save times that are traced are checked
    inside the program: a decreasing ``ts`` fails there; and the state at a save time is differentiable in it."""
    loss = lambda p: jnp.sum((p - 1.0) ** 2)  # noqa: E731
    sol = icl.gradient_flow(loss, jnp.zeros(2), 1.0, n_save=5)
    np.testing.assert_allclose(sol.losses, 2 * np.exp(-4.0 * np.asarray(sol.ts)), rtol=1e-6)  # p(t) = 1 − e^{−2t}
    for kwargs in ({}, {"steady_state_tol": 1e-3}, {"stop_at_loss": 0.5}, {"adjoint": "backsolve"}):
        program = jax.jit(lambda p0: icl.gradient_flow(loss, p0, 1.0, n_save=5, check=False, **kwargs).losses)
        assert "callback" not in program.lower(jnp.zeros(2)).as_text(), kwargs
    flow = jax.jit(lambda ts: icl.gradient_flow(loss, jnp.zeros(2), 1.0, ts=ts).losses)
    assert "callback" in flow.lower(jnp.array([0.0, 0.2, 0.5])).as_text()
    np.testing.assert_allclose(
        flow(jnp.array([0.0, 0.2, 0.5])), 2 * np.exp(-4.0 * np.array([0.0, 0.2, 0.5])), rtol=1e-6
    )
    with pytest.raises(Exception, match="ts must be an increasing grid inside"):
        flow(jnp.array([0.0, 0.5, 0.2]))
    # the state at a save time is differentiable in that time: d L(p(τ))/dτ = −8 e^{−4τ}
    dloss = jax.grad(lambda tau: icl.gradient_flow(loss, jnp.zeros(2), 1.0, ts=jnp.stack([0.0, tau])).losses[-1])
    assert float(dloss(0.3)) == pytest.approx(-8 * np.exp(-1.2), rel=1e-6)


def test_gradient_descent_matches_closed_form_and_nan_names_the_step():
    loss = lambda p: 0.5 * 3.0 * p**2  # noqa: E731
    final, curve = icl.gradient_descent(loss, jnp.array(1.0), step=0.1, n_steps=20)
    assert jnp.allclose(final, 0.7**20, rtol=1e-12)  # θ_k = (1 − 0.1·3)^k
    assert jnp.allclose(curve, 1.5 * 0.7 ** (2 * jnp.arange(20)), rtol=1e-12)
    steps = {}
    for every in (1, 10):  # θ_k = (1 − 10·3)^k = (−29)^k
        with pytest.raises(FloatingPointError, match=r"at step (\d+)") as err:
            icl.gradient_descent(loss, jnp.array(1.0), step=10.0, n_steps=2000, record_every=every)
        steps[every] = int(re.search(r"at step (\d+)", str(err.value)).group(1))
    # a loss beyond float32's range has diverged, in float64 too (float64 alone carried this run on to 1e308):
    # 1.5·29^{2k} passes 3.4e38 at k = 14
    k = int(np.ceil(np.log10(np.finfo(np.float32).max / 1.5) / (2 * np.log10(29.0))))
    assert steps == {1: k, 10: 10 * int(np.ceil(k / 10))}  # every 10 steps: the first recorded step at or after it


def test_gradient_descent_records_aux_and_can_report_divergence_instead_of_raising():
    loss = lambda p: (0.5 * 3.0 * p**2, {"theta": p})  # noqa: E731
    _, (curve, aux) = icl.gradient_descent(loss, jnp.array(1.0), step=0.1, n_steps=20, record_every=5, has_aux=True)
    assert jnp.allclose(aux["theta"], 0.7 ** (5 * jnp.arange(4)), rtol=1e-12)  # θ at the recorded steps
    assert jnp.allclose(curve, 1.5 * aux["theta"] ** 2, rtol=1e-12)
    _, curve = icl.gradient_descent(
        lambda p: 0.5 * 3.0 * p**2, jnp.array(1.0), step=10.0, n_steps=2000, check_finite=False
    )
    bad = ~jnp.isfinite(curve)
    assert bool(bad[-1]) and not bool(bad[0])  # |1 − 30|^k overflows: the curve says where, nothing raised


def test_unchecked_training_is_cacheable_and_the_host_still_names_the_diverging_step():
    """check_finite=True under jit is an eqx.error_if, a host callback, which JAX never writes to the persistent
    compilation cache; check_finite=False keeps the program free of callbacks, and first_nonfinite_step +
    raise_if_diverged name the same step the eager check names."""
    loss = lambda p, k: 0.5 * 3.0 * jnp.sum(p**2) + 0.0 * jax.random.normal(k)  # noqa: E731  GD factor |1 − 3η|

    def run(eta, check):
        return icl.optax_train(loss, jnp.ones(2), optax.sgd(eta), 400, jax.random.PRNGKey(0), check_finite=check)[1]

    assert "callback" in jax.jit(lambda e: run(e, True)).lower(10.0).as_text()
    assert "callback" not in jax.jit(lambda e: run(e, False)).lower(10.0).as_text()
    with pytest.raises(FloatingPointError, match=r"at step (\d+)") as eager:
        icl.dynamics.check_finite_curve(run(10.0, False))
    expected = int(re.search(r"at step (\d+)", str(eager.value)).group(1))
    steps = jax.jit(jax.vmap(lambda e: icl.dynamics.first_nonfinite_step(run(e, False))))(jnp.array([0.1, 10.0, 0.5]))
    assert steps.tolist() == [-1, expected, -1] and 0 < expected < 400  # |1 − 30|^k overflows float32 mid-run
    icl.dynamics.raise_if_diverged(
        xr.DataArray(np.array([-1, -1]), coords={"eta": [0.1, 0.5]}, dims="eta")
    )  # none diverged
    with pytest.raises(FloatingPointError, match=rf"from step {expected} on at eta=10.0 \(1 of 3 grid points"):
        icl.dynamics.raise_if_diverged(xr.DataArray(np.asarray(steps), coords={"eta": [0.1, 10.0, 0.5]}, dims="eta"))


def test_optax_training_on_fresh_samples_approaches_the_exact_minimum():
    d, n = 2, 20
    task = icl.tasks.LinearRegression(d, n, jnp.eye(d))
    m0 = icl.models.LinearSelfAttention.balanced_init(d, 0.5, jax.random.PRNGKey(0))
    batch_loss = lambda m, k: icl.mc_loss(m, task, key=k, batch=512)  # noqa: E731
    model, curve = icl.optax_train(batch_loss, m0, optax.adam(2e-2), 600, jax.random.PRNGKey(1))
    gap0 = icl.population_loss(m0, task) - zhang.min_population_loss(jnp.eye(d), n)
    gap = icl.population_loss(model, task) - zhang.min_population_loss(jnp.eye(d), n)
    assert curve.shape == (600,)
    assert gap < 0.05 * gap0  # SGD noise floor at batch 512, lr 2e-2: well below 5% of the start


def test_optax_train_divergence_is_an_error_under_jit():
    """Inside jit/vmap the curve carries an eqx.error_if: a non-finite loss stops the run."""
    loss = lambda x, k: jnp.sum(x**4)  # noqa: E731  (diverges with a huge SGD step)
    run = jax.jit(jax.vmap(lambda x0: icl.dynamics.optax_train(loss, x0, optax.sgd(1e3), 50, jax.random.PRNGKey(0))[1]))
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(run(jnp.ones((2, 3))))


def test_lbfgs_with_ftol_stops_once_converged_and_holds_each_vmapped_member_where_it_stopped():
    """On a quadratic ½(x − b)ᵀA(x − b) L-BFGS reaches x = b in far fewer than 200 iterations: with ``ftol`` the
    loop stops there (the recorded iterates repeat the final one from then on) and agrees with the full 200
    iterations. Vmapped over a well and a badly conditioned A, each member stops where its own unbatched run stops
    and is held fixed there while the other goes on, with its unbatched run's numbers (up to the rounding in which a
    batched and an unbatched program differ: at XLA:CPU's LLVM level 1, the command's, they do in the last bits)."""
    with jax.enable_x64(True):
        d = 6
        b = jnp.linspace(-1.0, 2.0, d)
        well = random_spd(jax.random.PRNGKey(3), d, floor=1.0)
        bad = jnp.diag(jnp.logspace(0.0, 4.0, d))

        evaluations = [0]

        def fit(A, **kw):
            def loss(x):
                jax.debug.callback(lambda: evaluations.__setitem__(0, evaluations[0] + 1))  # counts evaluations run
                return 0.5 * (x - b) @ A @ (x - b)

            return jax.block_until_ready(icl.dynamics.lbfgs(loss, jnp.zeros(d), 200, record=lambda x: x, **kw))

        def held_from(records, params):
            """The iteration from which the records repeat the final parameters, bit for bit."""
            stop = np.flatnonzero(np.any(np.diff(np.asarray(records), axis=0) != 0, axis=1)).max() + 1
            np.testing.assert_array_equal(records[stop:], np.broadcast_to(params, (200 - stop, d)))
            return stop

        alone = []
        for A in (well, bad):
            full, n_full = fit(A), evaluations[0]
            early, n_early = fit(A, ftol=1e-14), evaluations[0] - n_full
            assert n_full > 200 and n_early < n_full / 3  # 201 → 14 and 212 → 55 loss evaluations
            # a loss decrease ≤ 1e-14 is a distance ~ √1e-14 = 1e-7 from the minimum (λ_min(A) ≥ 1)
            np.testing.assert_allclose(early.params, b, rtol=0, atol=1e-6)
            np.testing.assert_allclose(full.params, b, rtol=0, atol=1e-9)
            stop = held_from(early.records, early.params)
            np.testing.assert_array_equal(early.losses[stop:], early.losses[-1])
            assert np.all(np.diff(np.asarray(early.losses)) <= 0)
            alone.append((stop, early))

        batched = jax.vmap(lambda A: fit(A, ftol=1e-14))(jnp.stack([well, bad]))
        for i, (stop, early) in enumerate(alone):
            assert held_from(batched.records[i], batched.params[i]) == stop and stop < 100
            # rounding of 1e-16 grows with the condition number (1e4) along the iterates: 1e-12 seen, 1e-9 allowed
            np.testing.assert_allclose(batched.records[i], early.records, rtol=1e-9, atol=1e-12)
            # the loss ½ δᵀAδ (δ = x − b) turns an absolute difference ε in x into a relative one 2‖A‖·|δ|·ε / loss
            # ≤ 2√(2‖A‖ / loss)·ε: 1e-7 down to loss ~ 1e-6, and absolute ‖A‖·|δ|·ε ≤ 1e-17 near b
            np.testing.assert_allclose(batched.losses[i], early.losses, rtol=1e-7, atol=1e-17)


def test_gradient_flow_refuses_a_half_precision_model_with_the_way_out():
    """A float16 model reported "loss is nan at t = 0" where its loss was 1.235: half precision is refused, by name."""
    import jax.numpy as jnp

    task = icl.tasks.LinearRegression(2, 4)
    model = icl.dynamics.cast_floating(
        icl.models.LinearSelfAttention.random_init(2, 0.3, jax.random.PRNGKey(0)), jnp.float16
    )
    with pytest.raises(TypeError, match="float16 parameters; an adaptive ODE solve needs float32 or float64"):
        icl.gradient_flow(lambda m: icl.population_loss(m, task), model, t1=10.0)
