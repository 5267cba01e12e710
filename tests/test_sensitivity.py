"""Derivatives through whole training runs (jaxicl.sensitivity), in float64: against central finite differences,
against the papers' closed forms, and the errors for paths that cannot be differentiated."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxicl as icl
from jaxicl.theory import zhang

D, N = 2, 6
KEY = jax.random.PRNGKey(3)
LAM = np.array([0.6, 1.7])  # numpy: float64 under the tests' x64 scope


def _lsa_task(lam, n=N):
    return icl.tasks.LinearRegression(D, n, icl.tasks.FixedCovariance(jnp.diag(lam)))


def _flow_loss(sigma, lam, t1=2.0, adjoint="recursive"):
    """Population loss of Zhang et al.'s LSA after gradient flow to t1 from Assumption 3.3 at scale σ."""
    task = _lsa_task(lam)
    m0 = icl.models.LinearSelfAttention.balanced_init(D, sigma, KEY)
    sol = icl.gradient_flow(
        lambda m: icl.population_loss(m, task), m0, t1, rtol=1e-12, atol=1e-14, n_save=2, adjoint=adjoint
    )
    return sol.losses[-1]


def _assert_close(ad: dict, fd: dict, rtol):
    for name in fd:
        np.testing.assert_allclose(np.asarray(ad[name]), fd[name], rtol=rtol, atol=1e-12, err_msg=name)


def test_flow_final_loss_in_sigma_and_spectrum_every_adjoint_matches_finite_differences():
    """d L(θ(t1)) / d(σ, λ) through the whole flow: reverse mode with recursive checkpointing and with the backsolve
    adjoint, and forward mode, agree with central differences (h = 1e-5) to 1e-6 relative."""
    at = {"sigma": 0.3, "lam": LAM}
    fd = icl.finite_difference(_flow_loss, at, eps=1e-5)
    _assert_close(icl.sensitivity(_flow_loss, at), fd, 1e-7)
    _assert_close(icl.sensitivity(lambda sigma, lam: _flow_loss(sigma, lam, adjoint="backsolve"), at), fd, 1e-6)
    _assert_close(
        icl.sensitivity(lambda sigma, lam: _flow_loss(sigma, lam, adjoint="forward"), at, mode="forward"), fd, 1e-7
    )


def test_time_to_a_loss_level_is_differentiable():
    """stop_at_loss: the time the flow needs to reach min L + 1e-3, located by a root finder; its derivative in σ
    matches central differences."""
    level = float(zhang.min_population_loss(jnp.diag(LAM), N)) + 1e-3

    def time_to_level(sigma):
        task = _lsa_task(LAM)
        m0 = icl.models.LinearSelfAttention.balanced_init(D, sigma, KEY)
        return icl.gradient_flow(
            lambda m: icl.population_loss(m, task), m0, 1e4, rtol=1e-12, atol=1e-14, n_save=2, stop_at_loss=level
        ).t_final

    t = float(time_to_level(0.3))
    assert 0 < t < 1e4
    _assert_close(
        icl.sensitivity(time_to_level, {"sigma": 0.3}),
        icl.finite_difference(time_to_level, {"sigma": 0.3}, eps=1e-5),
        1e-6,
    )


def test_derivative_of_the_converged_loss_in_the_covariance_is_lemma_5_3s():
    """After a long flow the loss is min L(Λ) = ½trΛ − ½tr(Λ²Γ⁻¹) (Lemma 5.3 + ½trΛ); by the envelope theorem its
    derivative in Λ through the whole flow (every trajectory point moves with Λ) equals that of the closed form,
    for the full matrix Λ (symmetrised) and for the context length N treated as continuous (reduced flow, eq. 5.4)."""
    Lam = jnp.array([[0.9, 0.2], [0.2, 1.4]])

    def converged(Lam):
        task = icl.tasks.LinearRegression(D, N, icl.tasks.FixedCovariance((Lam + Lam.T) / 2))
        m0 = icl.models.LinearSelfAttention.balanced_init(D, 0.3, KEY)
        return icl.gradient_flow(
            lambda m: icl.population_loss(m, task), m0, 400.0, rtol=1e-12, atol=1e-14, n_save=2
        ).losses[-1]

    through_flow = icl.sensitivity(converged, {"Lam": Lam})["Lam"]
    closed_form = jax.grad(lambda L: zhang.min_population_loss((L + L.T) / 2, N))(Lam)
    np.testing.assert_allclose(through_flow, closed_form, rtol=1e-7)

    # N continuous: gradient flow on the reduced loss (5.5) in (U11, u), N a real number
    U0 = 0.3 * jnp.eye(D) / jnp.sqrt(D)

    def reduced_final(n, t1):
        sol = icl.gradient_flow(
            lambda th: zhang.reduced_loss(th[0], th[1], Lam, n),
            (U0, jnp.asarray(0.3)),
            t1,
            rtol=1e-12,
            atol=1e-14,
            n_save=2,
        )
        return sol.losses[-1]

    at = {"n": float(N)}
    _assert_close(
        icl.sensitivity(lambda n: reduced_final(n, 3.0), at),
        icl.finite_difference(lambda n: reduced_final(n, 3.0), at, eps=1e-5),
        1e-6,
    )
    d_min = jax.grad(lambda n: zhang.min_reduced_loss(Lam, n))(float(N))
    np.testing.assert_allclose(icl.sensitivity(lambda n: reduced_final(n, 400.0), at)["n"], d_min, rtol=1e-7)


def test_decay_rate_by_differentiating_the_time_scale_obeys_the_pl_bound():
    """Running the flow with rate r to time T reaches θ(rT): d/dr at r = 1 is T·dL/dt, so differentiating through
    the flow in its rate measures d log(L − min L)/dt. It equals −‖∇L‖²/(L − min L) (chain rule) and is ≤ −μ of
    eq. (5.7), the PL constant of Zhang et al. (5.8), on the balanced flow."""
    Lam = jnp.diag(LAM)
    task = _lsa_task(LAM)
    m0 = icl.models.LinearSelfAttention.balanced_init(D, 0.3, KEY)
    lmin = zhang.min_population_loss(Lam, N)
    loss = lambda m: icl.population_loss(m, task)  # noqa: E731
    mu = float(zhang.pl_constant(0.3, m0.W_kq[:D, :D] / 0.3, Lam, N))
    for T in (0.5, 5.0):

        def log_gap(r, T=T):
            sol = icl.gradient_flow(
                loss, m0, T, rtol=1e-12, atol=1e-14, n_save=2, rates=jax.tree_util.tree_map(lambda _: r, m0)
            )
            return jnp.log(sol.losses[-1] - lmin)

        rate = float(icl.sensitivity(log_gap, {"r": 1.0})["r"]) / T
        sol = icl.gradient_flow(loss, m0, T, rtol=1e-12, atol=1e-14, n_save=2)
        g = jax.grad(loss)(sol.final)
        chain = -float(sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(g))) / float(sol.losses[-1] - lmin)
        np.testing.assert_allclose(rate, chain, rtol=1e-6)
        assert rate <= -mu * (1 - 1e-9), (rate, mu)


def test_gradient_descent_step_sizes_schedules_and_checkpointing():
    """d L(θ_K)/d(step sizes) for per-leaf steps and for a per-step schedule: the online-checkpointed scan gives the
    lax.scan's numbers, and both match central differences."""
    task = _lsa_task(LAM)
    m0 = icl.models.LinearSelfAttention.balanced_init(D, 0.3, KEY)
    loss = lambda m: icl.population_loss(m, task)  # noqa: E731

    def per_leaf(eta_kq, eta_pv, checkpoints=None):
        steps = icl.models.LinearSelfAttention(jnp.full_like(m0.W_kq, eta_kq), jnp.full_like(m0.W_pv, eta_pv))
        final, _ = icl.gradient_descent(loss, m0, steps, 40, checkpoints=checkpoints)
        return loss(final)

    at = {"eta_kq": 0.2, "eta_pv": 0.05}
    scan = icl.sensitivity(per_leaf, at)
    _assert_close(icl.sensitivity(lambda eta_kq, eta_pv: per_leaf(eta_kq, eta_pv, checkpoints=3), at), scan, 1e-12)
    _assert_close(scan, icl.finite_difference(per_leaf, at, eps=1e-6), 1e-6)

    def scheduled(etas):
        final, _ = icl.gradient_descent(loss, m0, lambda k: etas[k], etas.shape[0], checkpoints=2)
        return loss(final)

    at = {"etas": jnp.linspace(0.3, 0.1, 8)}
    _assert_close(icl.sensitivity(scheduled, at), icl.finite_difference(scheduled, at, eps=1e-6), 1e-6)


def test_optax_train_learning_rate_derivative_with_checkpointing():
    """Through 30 Adam steps of a small softmax transformer on fresh batches (float64): d(final loss)/d(learning
    rate), the optimizer built inside the differentiated function (with eps_root > 0: √v has an infinite derivative
    where a gradient is exactly zero); checkpointed (activations recomputed) equals the plain scan, and both match
    central differences."""
    task = icl.tasks.RepresentationRegression(2, 4)
    model = icl.models.StandardTransformer(KEY, 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=8, dtype=jnp.float64)
    batch_loss = lambda m, k: icl.losses.sequence_loss(m, task.prompts(k, 8))  # noqa: E731
    test = task.prompts(jax.random.PRNGKey(7), 64)

    def final_loss(lr, checkpoints=None):
        trained, _ = icl.optax_train(
            batch_loss, model, optax.adam(lr, eps_root=1e-16), 30, KEY, checkpoints=checkpoints
        )
        return icl.losses.sequence_loss(trained, test)

    at = {"lr": 3e-3}
    plain = icl.sensitivity(final_loss, at)
    # the checkpointed run recomputes the same forward steps, compiled in other fusions: float64 rounding (1e-16)
    # grown through 30 Adam steps differs by 3e-10 on one 2-core CPU, hence 1e-8, still 10³ below the FD check
    _assert_close(icl.sensitivity(lambda lr: final_loss(lr, checkpoints=4), at), plain, 1e-8)
    # h = 1e-3·lr: Adam divides by √v, and where v is tiny the loss is rough on scales below that (smaller h
    # differences that roughness, not the slope)
    _assert_close(plain, icl.finite_difference(final_loss, at, eps=1e-3), 1e-5)


def test_paths_without_a_derivative_are_errors_that_name_the_argument():
    task = _lsa_task(LAM)
    loss = lambda m: icl.population_loss(m, task)  # noqa: E731

    def stopped(sigma, **kw):
        m0 = icl.models.LinearSelfAttention.balanced_init(D, sigma, KEY)
        return icl.gradient_flow(loss, m0, 50.0, n_save=2, **kw).losses[-1]

    for kw, name in (  # without a derivative both run: test_dynamics.py's event test
        ({"stop_when": lambda m: loss(m) < 0.7}, "stop_when"),
        ({"steady_state_tol": 1e-3}, "steady_state_tol"),
    ):
        with pytest.raises(ValueError, match=f"{name}.*not differentiable.*stop_at_loss"):
            jax.grad(lambda s, kw=kw: stopped(s, **kw))(0.3)
    with pytest.raises(ValueError, match="backsolve.*takes no events"):
        stopped(0.3, adjoint="backsolve", stop_at_loss=0.7)
    with pytest.raises(TypeError, match="'N' = 6.*integer.*N=6.0"):
        icl.sensitivity(lambda N: zhang.min_population_loss(jnp.diag(LAM), N), {"N": 6})
    with pytest.raises(TypeError, match="n_steps is a traced value"):
        jax.grad(
            lambda n: icl.gradient_descent(loss, icl.models.LinearSelfAttention.balanced_init(D, 0.3, KEY), 0.1, n)[1][
                -1
            ]
        )(3.0)
    with pytest.raises(ValueError, match="Python float t1"):
        jax.grad(
            lambda t1: (
                stopped(0.3) * 0
                + icl.gradient_flow(loss, icl.models.LinearSelfAttention.balanced_init(D, 0.3, KEY), t1).losses[-1]
            )
        )(5.0)
