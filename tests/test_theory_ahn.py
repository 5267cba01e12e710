"""Ahn et al.: Lemma 2, Thm 1 (optimum, exact loss vs Monte Carlo, gradient flow), Thm 3, the
Thm 4 family loss, and the baselines. All in float64."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_spd

import jaxicl as icl
from jaxicl.models import GramBatch, LinearTransformer
from jaxicl.tasks import LinearRegression
from jaxicl.theory import ahn

KEY = jax.random.PRNGKey(3)


@pytest.mark.parametrize("symmetric", [True, False])
def test_lemma2_layers_are_preconditioned_gd_steps(symmetric):
    d, n, L = 4, 11, 4
    task = LinearRegression(d, n, random_spd(KEY, d), noise_std=0.2)
    prompts = task.sample(jax.random.fold_in(KEY, 1), 32)
    A = 0.4 * jax.random.normal(jax.random.fold_in(KEY, 2), (L, d, d))
    model = LinearTransformer.preconditioner(A, symmetric=symmetric)
    Aeff = model.params.matrices()
    # eq. (11) with A_i; for a non-symmetric A_i the layer applies A_iᵀ
    pre = Aeff if symmetric else jnp.swapaxes(Aeff, 1, 2)
    layer = jax.vmap(lambda p: model.layer_predictions(p, attention="direct"))(prompts)
    gd = jax.vmap(lambda p: ahn.preconditioned_gd_iterates(p, pre) @ p.x_query)(prompts)
    assert float(jnp.max(jnp.abs(layer - gd))) <= 1e-10


def test_thm1_optimum_and_its_loss():
    d, n = 5, 12
    Sigma = random_spd(KEY, d)
    task = LinearRegression(d, n, Sigma)
    opt = ahn.thm1_model(Sigma, n)
    exact = icl.population_loss(opt, task)
    np.testing.assert_allclose(exact, ahn.thm1_min_loss(Sigma, n), rtol=1e-12)
    # isotropic special case stated after Thm 1: A = −[I; 0] / ((n−1)/n + (d+2)/n)
    b, A = ahn.thm1_optimum(jnp.eye(d), n)
    np.testing.assert_allclose(A[:d], -jnp.eye(d) / ((n - 1) / n + (d + 2) / n), rtol=1e-14)
    # the optimum is stationary, and the rescaling (γb, A/γ) keeps the loss
    g = eqx.filter_grad(lambda m: icl.population_loss(m, task))(opt)
    assert max(float(jnp.abs(x).max()) for x in jax.tree_util.tree_leaves(g)) < 1e-12
    resc = LinearTransformer.single_layer(2.5 * opt.params.b, opt.params.A / 2.5)
    np.testing.assert_allclose(icl.population_loss(resc, task), exact, rtol=1e-12)


@pytest.mark.parametrize("weights,noise", [("isotropic", 0.0), ("inverse_covariance", 0.5)])
def test_single_layer_exact_loss_matches_monte_carlo(weights, noise):
    d, n = 3, 6
    task = LinearRegression(d, n, random_spd(KEY, d), weights, noise_std=noise)
    k1, k2 = jax.random.split(jax.random.fold_in(KEY, 5))
    model = LinearTransformer.init(k1, d, 1, "single_layer", scale=0.4)
    exact = icl.population_loss(model, task)
    mc, se = icl.mc_loss(model, task, key=k2, batch=400_000, return_stderr=True)
    assert abs(float(mc - exact)) < 4 * float(se), (float(exact), float(mc), float(se))
    # a full (P, Q) one-layer model maps to the same closed form (only b and A matter)
    full = LinearTransformer.init(k1, d, 1, scale=0.4)
    mc, se = icl.mc_loss(full, task, key=k2, batch=400_000, return_stderr=True)
    assert abs(float(mc - icl.population_loss(full, task))) < 4 * float(se)


def test_deeper_models_have_no_closed_form_and_name_the_alternatives():
    task = LinearRegression(3, 5)
    with pytest.raises(icl.losses.NoClosedFormError, match="sample_loss"):
        icl.population_loss(LinearTransformer.init(KEY, 3, 2), task)


def test_thm1_gradient_flow_from_random_init_reaches_the_optimum():
    d, n = 3, 8
    Sigma = random_spd(KEY, d)
    task = LinearRegression(d, n, Sigma)
    model = LinearTransformer.init(jax.random.fold_in(KEY, 9), d, 1, "single_layer", scale=0.5)
    sol = icl.gradient_flow(
        lambda m: icl.population_loss(m, task),
        model,
        t1=1e5,
        solver="kvaerno5",
        rtol=1e-10,
        atol=1e-12,
        steady_state_tol=1e-11,
    )
    final = sol.final
    gap = float(icl.population_loss(final, task) - ahn.thm1_min_loss(Sigma, n))
    assert 0 <= gap < 1e-8 or abs(gap) < 1e-12, gap
    b, A = final.params.b, final.params.A
    gamma = b[d]
    # (b, A) = (γ e_{d+1}, −[Γ⁻¹; 0]/γ) up to the symmetry
    np.testing.assert_allclose(gamma * A[:d], -jnp.linalg.inv(ahn.gamma(Sigma, n)), atol=1e-4)
    assert float(jnp.abs(b[:d]).max()) < 1e-4 * abs(float(gamma))
    assert float(jnp.abs(A[d]).max()) < 1e-4 / abs(float(gamma))


def test_thm3_two_layer_isotropic_optimum_is_diagonal():
    """Sign-flip-symmetrised training set (the invariance behind Thm 3's proof): the trained
    A_0, A_1 of eq. (9) are diagonal up to the optimizer's tolerance."""
    d, n, base = 3, 6, 512
    task = LinearRegression(d, n)
    prompts = ahn.sign_symmetrized(task.sample(KEY, base))
    data = GramBatch.from_prompts(prompts)
    model = LinearTransformer.init(jax.random.fold_in(KEY, 4), d, 2, "preconditioner", scale=0.3)
    fit = icl.dynamics.levenberg_marquardt(
        lambda m: icl.losses.sample_residuals(m, data),
        model,
        60,
        jacobian_fn=lambda m: icl.losses.sample_residuals_and_jacobian(m, data),
    )
    A = fit.params.params.matrices()
    off = float(ahn.off_diagonal_mass(A).max())
    assert off < 1e-6, off
    assert float(fit.losses[-1]) < float(fit.losses[0])


def test_thm4_family_loss_matches_the_exact_single_layer_loss():
    d, n = 4, 10
    Sigma = random_spd(KEY, d)
    task = LinearRegression(d, n, Sigma, "inverse_covariance")
    ev = ahn.whitened_gram_eigenvalues(jax.random.fold_in(KEY, 1), d, n, 400_000)
    a = jnp.array([0.6])
    model = LinearTransformer.preconditioner(-a[0] * jnp.linalg.inv(Sigma)[None])
    est = ahn.thm4_family_loss(a, ev)
    per = 0.5 * jnp.sum((1 - a[0] * ev) ** 2, axis=-1)
    se = float(jnp.std(per) / jnp.sqrt(per.shape[0]))
    assert abs(float(est - icl.population_loss(model, task))) < 4 * se


def test_thm4_family_optimum_is_a_critical_point_of_the_sample_loss():
    """The optimum found through the power sums is a minimum of thm4_family_loss on the sample itself (float64):
    its loss there agrees to rounding, the sample loss's gradient vanishes and its Hessian is positive definite."""
    with jax.enable_x64(True):
        ev = ahn.whitened_gram_eigenvalues(jax.random.fold_in(KEY, 2), 5, 20, 50_000, dtype=jnp.float64)
        for L in (1, 3):
            a, loss = ahn.thm4_family_optimum(ev, L)
            direct = ahn.thm4_family_loss(a, ev)
            assert float(loss) == pytest.approx(float(direct), rel=1e-12)
            assert float(jnp.abs(jax.grad(ahn.thm4_family_loss)(a, ev)).max()) < 1e-9
            assert float(jnp.linalg.eigvalsh(jax.hessian(ahn.thm4_family_loss)(a, ev)).min()) > 0
        # L = 1: the optimum is a = E Σλ / E Σλ² in closed form
        a1, _ = ahn.thm4_family_optimum(ev, 1)
        assert float(a1[0]) == pytest.approx(float(jnp.mean(jnp.sum(ev, -1)) / jnp.mean(jnp.sum(ev**2, -1))), rel=1e-10)


def test_thm4_family_optimum_stays_at_the_optimum_given_more_iterations():
    """More iterations than convergence takes leave the optimum where it is: L-BFGS iterating on at the optimum (the
    curvature pairs s·y vanishing) sent the update to a loss of 1e43 at iteration 96 of 200 on an AMD EPYC under the
    tests' XLA flags, unless it stops once an iteration no longer lowers the loss."""
    with jax.enable_x64(True):
        ev = ahn.whitened_gram_eigenvalues(jax.random.fold_in(KEY, 2), 5, 20, 50_000, dtype=jnp.float64)
        for L in (2, 3, 4):
            a, loss = ahn.thm4_family_optimum(ev, L, n_steps=60)
            a_long, loss_long = ahn.thm4_family_optimum(ev, L, n_steps=2_000)
            np.testing.assert_allclose(np.sort(np.asarray(a_long)), np.sort(np.asarray(a)), rtol=1e-7)
            assert float(loss_long) == pytest.approx(float(loss), rel=1e-12)


def test_baselines():
    d, n = 4, 10
    task = LinearRegression(d, n, random_spd(KEY, d))
    prompts = task.sample(KEY, 512)
    assert float(ahn.ols_loss(prompts)) < 1e-20  # noise-free, n > d: OLS is exact
    step = ahn.best_gd_step(prompts, 3)
    grid = jnp.linspace(0.5 * step, 1.5 * step, 41)
    losses = jax.vmap(lambda s: ahn.gd_loss(prompts, s, 3))(grid)
    assert float(ahn.gd_loss(prompts, step, 3)) <= float(losses.min()) * (1 + 1e-6)
    # GD with one step and step size s is the transformer of eq. (9) with A = −s I
    model = LinearTransformer.preconditioner(-0.3 * jnp.eye(d)[None])
    np.testing.assert_allclose(icl.sample_loss(model, prompts), ahn.gd_loss(prompts, 0.3, 1), rtol=1e-12)


def test_dist_to_identity():
    assert float(ahn.dist_to_identity(3.0 * jnp.eye(4))) == 0.0
    M = jnp.diag(jnp.array([1.0, -1.0]))
    np.testing.assert_allclose(ahn.dist_to_identity(M), 1.0)
    np.testing.assert_allclose(ahn.dist_to_identity(jnp.stack([M, jnp.eye(2)])), [1.0, 0.0])
