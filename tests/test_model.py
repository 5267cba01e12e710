"""LSA forward pass (eq. 3.3), its prediction shortcut (3.6), and the initializations."""

import jax
import jax.numpy as jnp
import pytest

import jaxicl as icl


@pytest.mark.parametrize("M", [1, 4, 25])
def test_predict_is_bottom_right_entry_of_f_lsa_for_any_prompt_length(M):
    d = 3
    model = icl.models.LinearSelfAttention.random_init(d, 0.5, jax.random.PRNGKey(0))
    prompt = icl.tasks.LinearRegression(d, M, noise_std=0.1).sample_one(jax.random.PRNGKey(M))
    E = icl.tasks.embed(prompt)
    assert E.shape == (d + 1, M + 1) and E[d, M] == 0
    full = E + model.W_pv @ E @ (E.T @ model.W_kq @ E) / M  # eq. (3.3) with ρ = M
    assert jnp.allclose(model(E), full, rtol=1e-12)
    assert jnp.allclose(model.predict(prompt), full[d, M], rtol=1e-12)


def test_balanced_init_satisfies_assumption_3_3():
    d, sigma = 4, 0.3
    m = icl.models.LinearSelfAttention.balanced_init(d, sigma, jax.random.PRNGKey(1))
    tt = m.W_kq[:d, :d] / sigma
    assert jnp.allclose(jnp.linalg.norm(tt), 1.0, rtol=1e-12)
    assert jnp.allclose(tt, tt.T) and jnp.linalg.eigvalsh(tt).min() >= 0
    assert jnp.allclose(m.W_pv, jnp.zeros((d + 1, d + 1)).at[d, d].set(sigma))
    assert jnp.all(m.W_kq[d, :] == 0) and jnp.all(m.W_kq[:, d] == 0)


def test_blocks_round_trip():
    K = jnp.arange(9.0).reshape(3, 3)
    m = icl.models.LinearSelfAttention.from_blocks(K, jnp.ones(3), 2 * jnp.ones(3), 5.0)
    K2, k, bx, by = m.blocks()
    assert jnp.all(K2 == K) and jnp.all(k == 1) and jnp.all(bx == 2) and by == 5.0


def test_sampling_is_deterministic_given_the_key_and_has_the_right_moments():
    lam = jnp.diag(jnp.array([0.5, 2.0]))
    task = icl.tasks.LinearRegression(2, 50, lam)
    a = task.sample(jax.random.PRNGKey(0), 4000)
    b = task.sample(jax.random.PRNGKey(0), 4000)
    assert jnp.all(a.x == b.x)
    cov = jnp.einsum("bni,bnj->ij", a.x, a.x) / (4000 * 50)
    assert jnp.allclose(cov, lam, atol=0.03)  # 200k samples: s.e. of each entry ≤ 0.007
