"""Exact population losses against Monte Carlo, the invariant-manifold formula, and the registry."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from conftest import random_spd

import jaxicl as icl
from jaxicl.losses import NoClosedFormError
from jaxicl.theory import zhang

N_SE = 3.0  # Monte-Carlo tolerance in standard errors


@pytest.mark.parametrize("d", [1, 3, 5])
@pytest.mark.parametrize("N", [2, 9])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_exact_loss_matches_monte_carlo_at_random_parameters(d, N, noise):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(100 * d + 10 * N + int(10 * noise)), 3)
    lam = random_spd(k1, d)
    task = icl.tasks.LinearRegression(d, N, lam, noise_std=noise)
    model = icl.models.LinearSelfAttention.random_init(d, 0.3, k2)  # all entries, not balanced
    exact = icl.population_loss(model, task)
    mc, se = icl.mc_loss(model, task, key=k3, batch=200_000, return_stderr=True)
    assert abs(mc - exact) <= N_SE * se, (float(exact), float(mc), float(se))


@pytest.mark.parametrize("d,N,noise", [(2, 4, 0.0), (4, 6, 0.7)])
def test_exact_loss_inverse_covariance_weights_matches_monte_carlo(d, N, noise):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(7 + d), 3)
    task = icl.tasks.LinearRegression(d, N, random_spd(k1, d), weights="inverse_covariance", noise_std=noise)
    model = icl.models.LinearSelfAttention.random_init(d, 0.3, k2)
    exact = icl.population_loss(model, task)
    mc, se = icl.mc_loss(model, task, key=k3, batch=200_000, return_stderr=True)
    assert abs(mc - exact) <= N_SE * se


@pytest.mark.parametrize("d,N,shape,scale", [(2, 3, 1.0, 1.0), (4, 10, 2.0, 0.5)])
def test_exact_random_diagonal_loss_matches_monte_carlo(d, N, shape, scale):
    prior = icl.tasks.RandomDiagonalCovariance(d, scale=scale, shape=shape)
    task = icl.tasks.LinearRegression(d, N, prior, noise_std=0.3)
    model = icl.models.LinearSelfAttention.random_init(d, 0.3, jax.random.PRNGKey(d))
    exact = icl.population_loss(model, task)
    mc, se = icl.mc_loss(model, task, key=jax.random.PRNGKey(11), batch=400_000, return_stderr=True)
    assert abs(mc - exact) <= N_SE * se


def test_two_node_gauss_rule_matches_first_three_moments():
    prior = icl.tasks.RandomDiagonalCovariance(3, scale=2.0, shape=1.5)
    nodes, weights = prior.gauss_rule()
    for j, m in enumerate((1.0, *prior.raw_moments())):
        assert jnp.allclose(jnp.sum(weights * nodes**j), m, rtol=1e-12)
    nodes, _ = icl.tasks.RandomDiagonalCovariance(1).gauss_rule()  # Gauss–Laguerre
    assert jnp.allclose(nodes, jnp.array([2 - 2**0.5, 2 + 2**0.5]), rtol=1e-12)


def test_manifold_loss_is_reduced_loss_plus_half_trace_and_gradient_is_ode_5_4():
    d, N = 4, 7
    lam = random_spd(jax.random.PRNGKey(0), d)
    task = icl.tasks.LinearRegression(d, N, lam)
    K = jax.random.normal(jax.random.PRNGKey(1), (d, d))
    b = 0.8
    model = icl.models.LinearSelfAttention.from_blocks(K, jnp.zeros(d), jnp.zeros(d), b)
    expected = zhang.reduced_loss(K, b, lam, N) + 0.5 * jnp.trace(lam)
    assert jnp.allclose(icl.population_loss(model, task), expected, rtol=1e-12)
    g = jax.grad(icl.population_loss)(model, task)
    dU, du = zhang.reduced_vector_field(K, b, lam, N)
    assert jnp.allclose(-g.W_kq[:d, :d], dU, rtol=1e-10, atol=1e-12)
    assert jnp.allclose(-g.W_pv[d, d], du, rtol=1e-10)
    # u12 = w21^PV, u21 = w21^KQ stay zero (Lemma 5.2): their gradient vanishes on the manifold
    assert jnp.allclose(g.W_pv[d, :d], 0, atol=1e-12) and jnp.allclose(g.W_kq[d, :d], 0, atol=1e-12)


def test_global_minimum_value_is_lemma_5_3():
    d, N = 3, 5
    lam = random_spd(jax.random.PRNGKey(3), d)
    task = icl.tasks.LinearRegression(d, N, lam)
    loss_star = icl.population_loss(zhang.w_star_model(lam, N), task)
    assert jnp.allclose(loss_star, zhang.min_population_loss(lam, N), rtol=1e-12)
    # and W* is a critical point of the full loss
    g = jax.grad(icl.population_loss)(zhang.w_star_model(lam, N), task)
    assert max(jnp.abs(leaf).max() for leaf in jax.tree_util.tree_leaves(g)) < 1e-12


class _OtherTask(eqx.Module):
    d: int = 2

    def sample(self, key, batch):
        return icl.tasks.LinearRegression(2, 3).sample(key, batch)


def test_missing_closed_form_names_mc_loss_and_registration_needs_no_edit():
    model = icl.models.LinearSelfAttention.random_init(2, 0.1, jax.random.PRNGKey(0))
    with pytest.raises(NoClosedFormError, match="mc_loss"):
        icl.population_loss(model, _OtherTask())
    # mc_loss works for any task with `sample`
    assert jnp.isfinite(icl.mc_loss(model, _OtherTask(), key=jax.random.PRNGKey(1), batch=100))

    class Sub(_OtherTask):
        pass

    icl.register_population_loss(icl.models.LinearSelfAttention, Sub)(lambda m, t: jnp.array(42.0))
    assert icl.population_loss(model, Sub()) == 42.0


def test_random_prior_with_inverse_covariance_weights_has_no_closed_form():
    task = icl.tasks.LinearRegression(2, 3, icl.tasks.RandomDiagonalCovariance(2), weights="inverse_covariance")
    model = icl.models.LinearSelfAttention.random_init(2, 0.1, jax.random.PRNGKey(0))
    with pytest.raises(NoClosedFormError, match="mc_loss"):
        icl.population_loss(model, task)


def test_mc_loss_chunks_mask_the_remainder_exactly():
    task = icl.tasks.LinearRegression(3, 5, noise_std=0.2)
    model = icl.models.LinearSelfAttention.random_init(3, 0.3, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(5)
    got = icl.mc_loss(model, task, key=key, batch=1000, chunk_size=300)  # 4 chunks, 200 masked
    prompts = jax.vmap(lambda k: task.sample(k, 300))(jax.random.split(key, 4))
    prompts = jax.tree_util.tree_map(lambda x: x.reshape((1200,) + x.shape[2:])[:1000], prompts)
    manual = jnp.mean(0.5 * (jax.vmap(model.predict)(prompts) - prompts.y_query) ** 2)
    assert jnp.allclose(got, manual, rtol=1e-12)


def test_population_loss_is_vmappable_over_covariance_and_differentiable_in_it():
    lams = jnp.stack([jnp.diag(jnp.array([1.0, s])) for s in (0.5, 1.0, 2.0)])
    model = zhang.w_star_model(jnp.eye(2), 4)
    f = lambda lam: icl.population_loss(model, icl.tasks.LinearRegression(2, 4, icl.tasks.FixedCovariance(lam)))  # noqa: E731
    vals = jax.vmap(f)(lams)
    assert jnp.allclose(vals, jnp.stack([f(l) for l in lams]), rtol=1e-12)
    g = jax.grad(f)(lams[0])
    eps = 1e-6
    e = jnp.zeros((2, 2)).at[1, 1].set(eps)
    assert jnp.allclose(g[1, 1], (f(lams[0] + e) - f(lams[0] - e)) / (2 * eps), rtol=1e-6)


def test_mc_loss_memory_does_not_grow_with_the_batch():
    """Chunk i's prompts come from fold_in(key, i) inside the scan: the traced program for 10^12 prompts (1.2e8
    chunks) holds no array larger than a chunk (the keys of every chunk, split up front, took 10^15 prompts to
    RESOURCE_EXHAUSTED); a batch past 2^31 − 1 chunks is refused with the way out; a partial last chunk counts only its
    own prompts."""
    task = icl.tasks.LinearRegression(2, 4)
    model = icl.models.LinearSelfAttention.random_init(2, 0.3, jax.random.PRNGKey(0))
    jaxpr = jax.make_jaxpr(lambda k: icl.mc_loss(model, task, key=k, batch=10**12))(jax.random.PRNGKey(1))

    def sizes(jp):
        for eqn in jp.eqns:
            for v in eqn.outvars:
                yield int(getattr(v.aval, "size", 1))
            for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else ():
                yield from sizes(sub)

    assert max(sizes(jaxpr.jaxpr)) <= 8192 * 4 * 3  # one chunk of prompts (4 examples of 2 + 1 dims)
    with pytest.raises(ValueError, match="raise chunk_size, or average several estimates"):
        icl.mc_loss(model, task, key=jax.random.PRNGKey(1), batch=10**15)
    key = jax.random.PRNGKey(2)

    def errors(i):  # chunk i's half squared errors, drawn as mc_loss draws them
        p = task.sample(jax.random.fold_in(key, i), 4)
        return 0.5 * (jax.vmap(model.predict)(p) - p.y_query) ** 2

    expected = (errors(0).sum() + errors(1).sum() + errors(2)[:2].sum()) / 10  # 4 + 4 + 2 prompts
    assert float(icl.mc_loss(model, task, key=key, batch=10, chunk_size=4)) == pytest.approx(float(expected), rel=1e-12)
