"""The multi-layer linear transformer (Ahn et al. eqs. 2–5): forward forms, parametrizations,
the hand-written Gram kernel, looping/depth, the Gatmiry sign mapping, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_spd

import jaxicl as icl
from jaxicl.models import (
    BlockWeights,
    FullWeights,
    GramBatch,
    LinearTransformer,
    PreconditionerWeights,
    RestrictedWeights,
    SingleLayerWeights,
)
from jaxicl.tasks import LinearRegression, Prompt, embed

KEY = jax.random.PRNGKey(7)


def _prompts(d=4, n=9, batch=16, key=KEY):
    task = LinearRegression(d, n, random_spd(jax.random.fold_in(key, 1), d), noise_std=0.3)
    return task.sample(key, batch)


def _literal_forward(P, Q, Z, activation):
    """Eq. (3)–(4) written out in NumPy, one head at a time (independent reference)."""
    P, Q, Z = (np.asarray(a, dtype=np.float64) for a in (P, Q, Z))
    n = Z.shape[1] - 1
    M = np.diag(np.r_[np.ones(n), 0.0])
    for layer in range(P.shape[0]):
        upd = 0
        for h in range(P.shape[1]):
            S = Z.T @ Q[layer, h] @ Z
            if activation == "relu":
                S = np.maximum(S, 0)
            elif activation == "softmax":
                S = np.exp(S - S.max(axis=0)) / np.exp(S - S.max(axis=0)).sum(axis=0)
            upd = upd + P[layer, h] @ Z @ M @ S
        Z = Z + upd / n
    return Z


@pytest.mark.parametrize("activation", ["identity", "relu", "softmax"])
def test_forward_matches_literal_equations(activation):
    prompts = _prompts()
    model = LinearTransformer.init(KEY, 4, 3, heads=2, scale=0.3, activation=activation)
    P, Q = model.layer_weights()
    for b in range(3):
        p = jax.tree_util.tree_map(lambda a: a[b], prompts)
        ref = _literal_forward(P, Q, embed(p), activation)
        np.testing.assert_allclose(model(embed(p)), ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model(embed(p), attention="direct"), ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.predict(p), -ref[-1, -1], rtol=1e-12, atol=1e-12)


def test_gram_kernel_values_and_gradients_match_autodiff_of_direct_form():
    prompts = _prompts(batch=64)
    gram = GramBatch.from_prompts(prompts)
    model = LinearTransformer.init(KEY, 4, 3, heads=2, scale=0.3)

    def loss_kernel(m):
        return icl.sample_loss(m, gram)

    def loss_direct(m):
        pred = jax.vmap(lambda p: m.predict(p, attention="direct"))(prompts)
        return 0.5 * jnp.mean((pred - prompts.y_query) ** 2)

    import equinox as eqx

    v1, g1 = eqx.filter_value_and_grad(loss_kernel)(model)
    v2, g2 = eqx.filter_value_and_grad(loss_direct)(model)
    np.testing.assert_allclose(v1, v2, rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    # gradients with respect to the data (through C_0, z_q) too
    dC1 = jax.grad(lambda c: jnp.sum(model.predict_gram(GramBatch(c, gram.z_query, gram.y_query, gram.n)) ** 2))(gram.C)
    dC2 = jax.grad(
        lambda c: jnp.sum(
            model.predict_gram(GramBatch(c, gram.z_query, gram.y_query, gram.n), reverse_kernel=False) ** 2
        )
    )(gram.C)
    sym = lambda a: 0.5 * (a + jnp.swapaxes(a, 0, 1))  # C is symmetric: compare symmetric parts
    np.testing.assert_allclose(sym(dC1), sym(dC2), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["full", "preconditioner", "block", "restricted"])
def test_prediction_jacobian_matches_forward_mode(kind):
    prompts = _prompts(batch=32)
    gram = GramBatch.from_prompts(prompts)
    model = LinearTransformer.init(KEY, 4, 2, kind, scale=0.3)
    import equinox as eqx
    from jax.flatten_util import ravel_pytree

    dyn, static = eqx.partition(model, eqx.is_inexact_array)
    theta, unravel = ravel_pytree(dyn)
    J_ref = jax.jacfwd(lambda t: eqx.combine(unravel(t), static).predict_gram(gram, reverse_kernel=False))(theta)
    pred, J = model.prediction_jacobian(gram)
    np.testing.assert_allclose(pred, model.predict_gram(gram), rtol=1e-12)
    np.testing.assert_allclose(J, J_ref, rtol=1e-9, atol=1e-12)


def test_looped_model_equals_unrolled_copies_and_depth_masks_layers():
    prompts = _prompts(batch=8)
    m1 = LinearTransformer.init(KEY, 4, 1, scale=0.3)
    P, Q = m1.params.weights()
    looped = LinearTransformer(m1.params, looped=True, depth=3, max_depth=5)
    unrolled = LinearTransformer.full(jnp.repeat(P, 3, 0), jnp.repeat(Q, 3, 0))
    np.testing.assert_allclose(jax.vmap(looped.predict)(prompts), jax.vmap(unrolled.predict)(prompts), rtol=1e-12)
    # the loop count is a runtime value: vmap over it, one compiled program
    counts = jnp.arange(6)
    preds = jax.vmap(
        lambda c: LinearTransformer(m1.params, looped=True, depth=c, max_depth=5).predict(
            jax.tree_util.tree_map(lambda a: a[0], prompts)
        )
    )(counts)
    p0 = jax.tree_util.tree_map(lambda a: a[0], prompts)
    np.testing.assert_allclose(
        preds,
        looped.layer_predictions(p0)[:1].tolist()
        + list(LinearTransformer(m1.params, looped=True, depth=5).layer_predictions(p0)[1:]),
        rtol=1e-12,
    )
    # depth < max_depth switches trailing layers off
    m3 = LinearTransformer.init(KEY, 4, 3, scale=0.3)
    P3, Q3 = m3.params.weights()
    short = LinearTransformer(m3.params, depth=2)
    two = LinearTransformer.full(P3[:2], Q3[:2])
    np.testing.assert_allclose(jax.vmap(short.predict)(prompts), jax.vmap(two.predict)(prompts), rtol=1e-12)
    np.testing.assert_allclose(
        short.predict_gram(GramBatch.from_prompts(prompts)), jax.vmap(two.predict)(prompts), rtol=1e-12
    )


def test_parametrizations_build_the_papers_block_structure_and_round_trip():
    d = 3
    A = jax.random.normal(KEY, (2, d, d))
    B = jax.random.normal(jax.random.fold_in(KEY, 1), (2, d, d))
    u = jax.random.normal(jax.random.fold_in(KEY, 2), (2, d))
    P, Q = PreconditionerWeights(A).weights()
    assert P.shape == (2, 1, d + 1, d + 1)
    np.testing.assert_array_equal(P[0, 0], np.diag([0, 0, 0, 1.0]))
    np.testing.assert_allclose(Q[1, 0, :d, :d], (A[1] + A[1].T) / 2)
    assert float(jnp.abs(Q[:, 0, d]).max()) == 0 and float(jnp.abs(Q[:, 0, :, d]).max()) == 0
    P, Q = BlockWeights(A, B).weights()
    np.testing.assert_allclose(P[:, 0, :d, :d], B)
    P, Q = RestrictedWeights(A, u).weights()
    np.testing.assert_allclose(P[:, 0, d, :d], -u)  # Gatmiry's P is −(this P)
    for cls, params in [
        (PreconditionerWeights, PreconditionerWeights(A)),
        (BlockWeights, BlockWeights(A, B)),
        (RestrictedWeights, RestrictedWeights(A, u)),
    ]:
        P, Q = params.weights()
        back = cls.from_weights(P, Q)
        for x, y in zip(back.weights(), (P, Q)):
            np.testing.assert_allclose(x, y)
    b, A1 = jnp.arange(d + 1.0), jnp.ones((d + 1, d))
    P, Q = SingleLayerWeights(b, A1).weights()
    back = SingleLayerWeights.from_weights(P, Q)
    np.testing.assert_allclose(back.b, b)
    np.testing.assert_allclose(back.A, A1)


def test_a_parametrization_that_cannot_express_the_weights_says_so():
    P, Q = FullWeights(*(jax.random.normal(k, (2, 1, 4, 4)) for k in jax.random.split(KEY))).weights()
    for cls in (PreconditionerWeights, BlockWeights, RestrictedWeights):
        with pytest.raises(ValueError, match="cannot be expressed"):
            cls.from_weights(P, Q)
    with pytest.raises(ValueError, match="one layer with one head"):
        SingleLayerWeights.from_weights(P, Q)
    with pytest.raises(ValueError, match="one head per layer"):
        LinearTransformer.init(KEY, 3, 2, "preconditioner", heads=2)
    with pytest.raises(ValueError, match="single layer"):
        LinearTransformer.init(KEY, 3, 2, "single_layer")
    with pytest.raises(ValueError, match="looped"):
        LinearTransformer(FullWeights(P, Q), looped=True, depth=3)


def test_bad_input_gets_clear_errors():
    model = LinearTransformer.init(KEY, 4, 2)
    with pytest.raises(ValueError, match="d=4"):
        model.predict(
            _prompts(d=3, batch=1).__class__(*(a[0] for a in jax.tree_util.tree_leaves(_prompts(d=3, batch=1))))
        )
    with pytest.raises(ValueError, match="n >= 1"):
        model(jnp.zeros((5, 1)))
    with pytest.raises(ValueError, match="n_context"):
        LinearRegression(4, 0)
    with pytest.raises(ValueError, match="activation"):
        LinearTransformer.init(KEY, 4, 2, activation="gelu")
    with pytest.raises(ValueError, match="depth"):
        LinearTransformer(model.params, depth=5)
    with pytest.raises(ValueError, match="σ = identity"):
        LinearTransformer.init(KEY, 4, 2, activation="relu").predict_gram(GramBatch.from_prompts(_prompts()))
    with pytest.raises(ValueError, match="orthogonal"):
        icl.tasks.rotated_covariance(jnp.ones((3, 3)), jnp.ones(3))
    with pytest.raises(ValueError, match="n_context"):
        GramBatch.from_prompts(_prompts(), n_context=20)


def test_gatmiry_sign_convention_restricted_form_and_recursion():
    """Gatmiry et al.: with u = 0, σ = identity, TF = w*ᵀ(I − Π_t(I − ΣA_t/n)) x_q, Σ = XXᵀ (their
    eqs. 3–6); with u ≠ 0 and ReLU the output follows their unrolled recursion for y^{(t)}, y_q^{(t)}."""
    d, n, L = 3, 7, 3
    k1, k2, k3, k4, k5 = jax.random.split(KEY, 5)
    X = jax.random.normal(k1, (d, n))
    w = jax.random.normal(k2, (d,))
    xq = jax.random.normal(k3, (d,))
    A = 0.5 * jax.random.normal(k4, (L, d, d))
    u = 0.3 * jax.random.normal(k5, (L, d))
    prompt = Prompt(X.T, X.T @ w, xq, xq @ w)
    Sig = X @ X.T
    M = jnp.eye(d)
    for t in range(L):
        M = M @ (jnp.eye(d) - Sig @ A[t] / n)
    tf = LinearTransformer.restricted(A).predict(prompt)
    np.testing.assert_allclose(tf, w @ (jnp.eye(d) - M) @ xq, rtol=1e-11)

    relu = jax.nn.relu
    y, yq = X.T @ w, 0.0
    for t in range(L):
        coef = y + X.T @ u[t]
        y, yq = y - coef @ relu(X.T @ A[t] @ X) / n, yq - coef @ relu(X.T @ A[t] @ xq) / n
    out = LinearTransformer.restricted(A, u, activation="relu").predict(prompt)
    np.testing.assert_allclose(out, -yq, rtol=1e-11)
