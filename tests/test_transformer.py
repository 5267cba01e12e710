"""Softmax transformers (standard, looped, AlgoFormer), sequence tasks, baselines and the training loop."""

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import xarray as xr
from conftest import tiny_algoformer

from jaxicl import baselines, losses, models, tasks
from jaxicl.dynamics import Curriculum, train

KEY = jax.random.PRNGKey(0)
SMALL = dict(d_model=16, max_len=24)


def _models(d_in=3, d_out=1):
    return {
        "standard": (models.StandardTransformer(KEY, d_in, d_out, n_layers=2, n_heads=2, **SMALL), None),
        "looped": (models.LoopedTransformer(KEY, d_in, d_out, n_layers=1, n_heads=2, **SMALL), 3),
        "algoformer": (models.AlgoFormer(KEY, d_in, d_out, layers=(1, 2, 1), heads=(2, 4, 1), **SMALL), 3),
    }


def _apply(model, loops, tokens):
    return model(tokens) if loops is None else model(tokens, loops)


@pytest.mark.parametrize("name", ["standard", "looped", "algoformer"])
def test_causal_prediction_depends_only_on_the_prefix(name):
    model, loops = _models()[name]
    tokens = jax.random.normal(KEY, (10, 3))
    changed = tokens.at[6:].set(jax.random.normal(jax.random.PRNGKey(1), (4, 3)))
    a, b = _apply(model, loops, tokens), _apply(model, loops, changed)
    np.testing.assert_allclose(a[:6], b[:6], rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(a[6:] - b[6:])) > 1e-6


def test_looped_models_at_any_loop_count():
    for name in ("looped", "algoformer"):
        model, _ = _models()[name]
        tokens = jax.random.normal(KEY, (8, 3))
        per_loop = model.outputs_per_loop(tokens, 6)
        for t in (1, 4, 6):
            np.testing.assert_allclose(model(tokens, t), per_loop[t - 1], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(
            model.outputs_per_loop(tokens, 6, first_loop=4), per_loop[3:], rtol=1e-12, atol=1e-14
        )  # loops 4…6 only (eq. 6 weighs 0 before T − ΔT)
        traced = jax.jit(lambda n: model(tokens, n))  # one program for every loop count
        np.testing.assert_allclose(traced(jnp.asarray(4)), per_loop[3], rtol=1e-10, atol=1e-12)
        assert np.all(np.isfinite(traced(jnp.asarray(200))))  # far more loops than trained


def test_algoformer_is_post_of_loop_T_of_pre():
    """Eq. (2): TF_post(TF_loop(⋯TF_loop(TF_pre(X))⋯)); the looped model injects the input every loop."""
    algo, _ = _models()["algoformer"]
    tokens = jax.random.normal(KEY, (8, 3))
    h = algo.pre(algo.io.read_in(tokens))
    for _ in range(3):
        h = algo.loop(h)
    np.testing.assert_allclose(algo(tokens, 3), algo.io.read_out(algo.post(h)), rtol=1e-12)
    assert (algo.pre.n_layers, algo.loop.n_layers, algo.post.n_layers) == (1, 2, 1)
    assert (algo.pre.n_heads, algo.loop.n_heads, algo.post.n_heads) == (2, 4, 1)
    looped, _ = _models()["looped"]
    e = looped.io.read_in(tokens)
    h = jnp.zeros_like(e)
    for _ in range(3):
        h = looped.loop(h + e)
    np.testing.assert_allclose(looped(tokens, 3), looped.io.read_out(h), rtol=1e-12)


def test_bad_input_errors():
    model, _ = _models()["standard"]
    with pytest.raises(ValueError, match="longer than the positional table"):
        model(jnp.zeros((25, 3)))
    with pytest.raises(ValueError, match="width 3"):
        model(jnp.zeros((5, 4)))
    looped, _ = _models()["looped"]
    with pytest.raises(ValueError, match="loop count must be >= 1"):
        looped(jnp.zeros((5, 3)), 0)
    with pytest.raises(ValueError, match="loop count must be >= 1"):
        looped.outputs_per_loop(jnp.zeros((5, 3)), 0)
    with pytest.raises(ValueError, match="first_loop must be in"):
        looped.outputs_per_loop(jnp.zeros((5, 3)), 3, first_loop=4)
    with pytest.raises(Exception, match="loop count must be >= 1"):
        jax.jit(lambda n: looped(jnp.zeros((5, 3)), n))(jnp.asarray(0))
    with pytest.raises(ValueError, match="divisible"):
        models.StandardTransformer(KEY, 3, 1, n_layers=1, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="loops="):
        losses.sequence_loss(looped, tasks.RepresentationRegression(3, 5).prompts(KEY, 2))
    with pytest.raises(ValueError, match="T >= 1"):
        losses.loop_weights(0, 1)


def test_loop_weights_eq6():
    w = np.asarray(losses.loop_weights(20, 15))  # t = 5 … 20
    assert np.all(w[:4] == 0) and np.allclose(w[4:], 1 / 16)
    w = np.asarray(losses.loop_weights(10, 10))  # T_0 = 0: t = 1 … 10 (t = 0 is no loop)
    assert np.allclose(w, 0.1)


def test_sequence_loss_is_the_masked_loop_averaged_squared_error():
    model, _ = _models()["algoformer"]
    task = tasks.RepresentationRegression(3, 5, noise_std=0.1)
    p = task.prompts(KEY, 4)
    outs = jax.vmap(lambda t: model.outputs_per_loop(t, 4))(p.tokens)  # (batch, loops, T, 1)
    err = np.sum((np.asarray(outs) - np.asarray(p.targets)[:, None]) ** 2, -1)
    per = (err * np.asarray(p.mask)[:, None]).sum(-1) / np.asarray(p.mask).sum(-1)[:, None]
    want = per[:, 2:].mean()  # (T, ΔT) = (4, 1): t = 3, 4
    np.testing.assert_allclose(losses.sequence_loss(model, p, (4, 1)), want, rtol=1e-12)


def test_causal_attention_is_softmax_of_masked_scaled_logits_times_v():
    """Attention normalises after the product with v (faster on XLA:CPU): in float64 its values and gradient equal
    the textbook softmax(q kᵀ/√c + causal mask) v of each head, written out with numpy (values) and jax.nn.softmax
    (gradient), including logits large enough to overflow an unshifted exp."""
    T, H, c = 7, 3, 4
    q, k, v, w = (jax.random.normal(jax.random.fold_in(KEY, i), (T, H, c)) for i in range(4))
    q = q.at[2].multiply(300.0)  # exp(q·k/√c) overflows without the max shift

    def textbook(q, k, v):
        logits = jnp.einsum("thc,shc->hts", q, k) / np.sqrt(c)
        logits = jnp.where(np.tril(np.ones((T, T), bool)), logits, -jnp.inf)
        return jnp.einsum("hts,shc->thc", jax.nn.softmax(logits, axis=-1), v)

    qn, kn, vn = (np.asarray(a) for a in (q, k, v))
    expected = np.zeros((T, H, c))
    for h in range(H):
        for t in range(T):
            z = qn[t, h] @ kn[: t + 1, h].T / np.sqrt(c)
            p = np.exp(z - z.max())
            expected[t, h] = p @ vn[: t + 1, h] / p.sum()
    got = models.transformer.causal_attention(q, k, v)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    grad = lambda f: jax.grad(lambda *a: jnp.sum(f(*a) * w), argnums=(0, 1, 2))(q, k, v)  # noqa: E731
    for a, b in zip(grad(models.transformer.causal_attention), grad(textbook)):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["standard", "algoformer"])  # the looped model's blocks are the same BlockStack
def test_rematerialised_blocks_give_the_same_loss_and_gradient(name, monkeypatch):
    """REMAT (on by default on the CPU) recomputes LayerNorms, softmax and GELU in the backward pass from the four
    saved activations: the same loss and gradient as keeping every intermediate (float64: to rounding)."""
    model, loops = _models()[name]
    p = tasks.RepresentationRegression(3, 5, noise_std=0.1).prompts(KEY, 4)
    loss = lambda m: losses.sequence_loss(m, p, None if loops is None else (loops, 2))  # noqa: E731
    results, programs = {}, {}
    for remat in (False, True):
        monkeypatch.setattr(models.transformer, "REMAT", remat)
        jax.clear_caches()  # REMAT is read when a model is traced
        grad = eqx.filter_jit(eqx.filter_value_and_grad(loss))
        results[remat] = grad(model)
        programs[remat] = str(eqx.filter_make_jaxpr(grad)(model)[0])
    assert "remat" in programs[True] and "remat" not in programs[False]  # jax.checkpoint's primitive
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-13)
    for a, b in zip(jax.tree_util.tree_leaves(results[True][1]), jax.tree_util.tree_leaves(results[False][1])):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    monkeypatch.setattr(models.transformer, "REMAT", None)  # the default: on for the CPU only
    assert models.transformer._remat() is (jax.default_backend() == "cpu")


def test_the_transformers_compile_for_the_platform_they_are_placed_on(monkeypatch):
    """Unrolled scans, rematerialised blocks and fused attention are decided by where the model is traced to run
    (`placement.current_platform`: the innermost `on` block's platform), not by JAX's default backend, so that
    `--device cpu` on a GPU machine compiles as a CPU-only machine does. A GPU block is simulated: only traced."""
    placement = importlib.import_module("jaxicl.runtime.placement")
    t = models.transformer
    monkeypatch.setattr(t, "UNROLL", None)
    monkeypatch.setattr(t, "REMAT", None)
    model, loops = _models()["algoformer"]
    p = tasks.RepresentationRegression(3, 5, noise_std=0.1).prompts(KEY, 4)
    grad = eqx.filter_value_and_grad(lambda m: losses.sequence_loss(m, p, (loops, 2)))
    q = jnp.zeros((5, 2, 16), jnp.bfloat16)
    seen = {}
    for platform in ("cpu", "gpu"):
        monkeypatch.setattr(placement, "_active", [platform])
        program = str(eqx.filter_make_jaxpr(grad)(model)[0])
        seen[platform] = (t._unroll(), t._remat(), t._fused_attention_ok(q), "remat" in program)
    assert seen == {"cpu": (False, True, False, True), "gpu": (True, False, True, False)}
    monkeypatch.setattr(placement, "_active", [])
    assert placement.current_platform() == jax.default_backend()
    with placement.use("cpu"), placement.on("throughput"):
        assert placement.current_platform() == "cpu" and t._remat() and not t._unroll()


def test_compilation_switches_from_the_environment(monkeypatch):
    """$JAXICL_UNROLL / $JAXICL_REMAT (auto, on, off) and $JAXICL_TRAINING_AUTOTUNE_LEVEL (0…4) set the scans, the
    rematerialisation and the training programs' GEMM autotuning for a whole run: read at import, so that the
    `--jobs` processes get them too; anything else is refused, naming the variable."""
    switch = importlib.import_module("jaxicl.runtime.xla_options").switch_from_env
    for value, expected in (
        ("", None),
        ("auto", None),
        ("1", True),
        ("On", True),
        ("true", True),
        ("0", False),
        ("off", False),
        ("FALSE", False),
    ):
        monkeypatch.setenv("JAXICL_UNROLL", value)
        assert switch("JAXICL_UNROLL") is expected
    monkeypatch.delenv("JAXICL_UNROLL")
    assert switch("JAXICL_UNROLL") is None
    monkeypatch.setenv("JAXICL_UNROLL", "yes")
    with pytest.raises(ValueError, match=r"\$JAXICL_UNROLL = 'yes'"):
        switch("JAXICL_UNROLL")
    level = importlib.import_module("jaxicl.runtime.xla_options")._autotune_level_from_env
    monkeypatch.delenv("JAXICL_TRAINING_AUTOTUNE_LEVEL", raising=False)
    assert level() == 4
    for value in ("0", "4"):
        monkeypatch.setenv("JAXICL_TRAINING_AUTOTUNE_LEVEL", value)
        assert level() == int(value)
    for value in ("5", "-1", "high"):
        monkeypatch.setenv("JAXICL_TRAINING_AUTOTUNE_LEVEL", value)
        with pytest.raises(ValueError, match="JAXICL_TRAINING_AUTOTUNE_LEVEL"):
            level()
    # a fresh process (as `jaxicl reproduce --jobs` starts) reads them at import
    env = {**os.environ, "JAXICL_UNROLL": "off", "JAXICL_REMAT": "on", "JAXICL_TRAINING_AUTOTUNE_LEVEL": "0"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib, jaxicl.models.transformer as t; "
            "tr = importlib.import_module('jaxicl.runtime.xla_options'); "
            "print(t.UNROLL, t.REMAT, tr.TRAINING_COMPILER_OPTIONS)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split(maxsplit=2)
    assert out == ["False", "True", "{'xla_gpu_autotune_level': 0}\n"]


@pytest.mark.parametrize("name", ["looped", "algoformer"])
def test_position_errors_per_loop_equals_one_call_per_loop_count(name):
    """The one-pass error-vs-loops curve (Figs. 3, 5) is position_errors at each loop count, row t − 1."""
    model, _ = _models()[name]
    p = tasks.RepresentationRegression(3, 5, noise_std=0.1).prompts(KEY, 4)
    per = np.asarray(losses.position_errors_per_loop(model, p, 5))
    assert per.shape == (4, 5, p.tokens.shape[1])
    for t in (1, 3, 5):
        np.testing.assert_allclose(per[:, t - 1], losses.position_errors(model, p, t), rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="needs a looped model"):
        losses.position_errors_per_loop(_models()["standard"][0], p, 5)


def test_garg_encoding_layout_and_curriculum_mask():
    task = tasks.RepresentationRegression(3, 4, d_out=2)
    xs, ys, clean, A = task.sample_xy(KEY)
    p = task.prompt(KEY)
    assert p.tokens.shape == (8, 3) and p.targets.shape == (8, 2)
    np.testing.assert_array_equal(p.tokens[0::2], xs)
    np.testing.assert_array_equal(p.tokens[1::2], np.pad(ys, ((0, 0), (0, 1))))
    np.testing.assert_array_equal(p.targets[0::2], ys)
    np.testing.assert_array_equal(p.mask, np.tile([1.0, 0.0], 4))
    np.testing.assert_allclose(clean, xs @ A.T, rtol=1e-12)  # linear regression: y = A x
    q = task.prompt(KEY, d_active=2, n_active=3)
    assert np.all(q.tokens[0::2, 2] == 0) and np.any(q.tokens[0::2, 1] != 0)
    np.testing.assert_array_equal(q.mask, [1, 0, 1, 0, 1, 0, 0, 0])
    s = tasks.RepresentationRegression(3, 4, encoding="stacked").prompt(KEY)
    assert s.tokens.shape == (4, 4) and s.tokens[3, 3] == 0 and s.tokens[0, 3] != 0
    np.testing.assert_array_equal(s.mask, [0, 0, 0, 1])


def test_representation_and_ar_tasks_follow_their_equations():
    phi = tasks.LeakyReluMLP(KEY, [4, 8, 8, 5])
    task = tasks.RepresentationRegression(4, 6, phi=phi, noise_std=0.5)
    xs, ys, clean, A = task.sample_xy(KEY)
    np.testing.assert_allclose(clean, phi(xs) @ A.T, rtol=1e-12)
    # the noise is N(0, σ²): check its variance over many prompts (tolerance 5 s.e.)
    noise = jax.vmap(lambda k: (lambda r: r[1] - r[2])(task.sample_xy(k)))(jax.random.split(KEY, 4000)).ravel()
    assert abs(np.var(noise) / 0.25 - 1) < 5 * np.sqrt(2 / noise.size)
    ar = tasks.ARRepresentation(2, 3, 30, tasks.LeakyReluMLP(KEY, [6, 8, 4]), noise_std=0.0)
    series, means = ar.sample_series(KEY)
    np.testing.assert_allclose(series[3:], means[3:], rtol=1e-12)  # noiseless: x_{t+1} = AΦ(window)
    p = ar.prompt(KEY)
    np.testing.assert_array_equal(p.targets, series[1:])
    assert p.mask[:2].sum() == 0 and p.mask[2:].min() == 1
    big = tasks.ARRepresentation(20, 3, 200, tasks.LeakyReluMLP(KEY, [60, 64, 64, 20]))
    series = jax.vmap(lambda k: big.sample_series(k)[0])(jax.random.split(KEY, 50))
    rms = np.sqrt(np.mean(np.asarray(series) ** 2, axis=(0, 2)))
    assert rms[-50:].mean() < 3 * rms[:50].mean()  # stationary in scale over 200 steps, not exploding


def test_a_normalized_representation_has_the_output_scale_of_its_width_whatever_its_draw():
    """`LeakyReluMLP(normalize=True)` is the same draw with its last layer times one positive scalar, and
    E‖Φ*(z)‖² = d_out (z ~ N(0, I)) on a fresh sample, within 5 standard errors of the two Monte-Carlo means (the
    normalization's 4,096 draws and the check's), for 8 draws whose raw scales differ by more than a factor 1.5."""
    sizes, n = [9, 16, 16, 3], 100_000
    z = jax.random.normal(jax.random.PRNGKey(11), (n, sizes[0]))
    raw_scales = []
    for s in range(8):
        key = jax.random.PRNGKey(100 + s)
        raw, phi = tasks.LeakyReluMLP(key, sizes), tasks.LeakyReluMLP(key, sizes, normalize=True)
        for w_raw, w in zip(raw.weights[:-1], phi.weights[:-1]):
            np.testing.assert_array_equal(w, w_raw)
        ratio = np.asarray(phi.weights[-1] / raw.weights[-1])
        assert ratio.min() > 0 and np.ptp(ratio) < 1e-12 * ratio.max()
        sq_raw = np.sum(np.asarray(raw(z)) ** 2, -1)
        raw_scales.append(sq_raw.mean())
        sq = np.sum(np.asarray(phi(z)) ** 2, -1)
        rel_se = np.std(sq) / np.mean(sq) * np.sqrt(1 / n + 1 / tasks.LeakyReluMLP.NORMALIZE_SAMPLES)
        assert abs(sq.mean() / sizes[-1] - 1) < 5 * rel_se, (s, sq.mean(), rel_se)
    assert max(raw_scales) > 1.5 * min(raw_scales)  # the draws differ: the check is not trivially met


def test_the_ar_bayes_oracle_is_the_posterior_mean_of_A():
    """`ARRepresentation.bayes_predictions` against Bayes' rule written out in numpy: with A's entries
    N(0, ρ²/(kq)) and x_{t+1} = A f_t + σε_t (f_t = Φ*(window)), E[Aᵀ | the earlier steps] =
    (FᵀF/σ² + (kq/ρ²) I)⁻¹ FᵀY/σ², and the prediction of step t is f_tᵀ E[Aᵀ | steps before t]."""
    q, k, sigma, rho = 3, 4, 0.7, 0.5
    ar = tasks.ARRepresentation(2, q, 12, tasks.LeakyReluMLP(KEY, [2 * q, 8, k]), noise_std=sigma, gain=rho)
    p = ar.prompt(jax.random.PRNGKey(3))
    pred = np.asarray(ar.bayes_predictions(p))
    series = np.concatenate([np.asarray(p.tokens), np.asarray(p.targets[-1:])])
    feats = np.array([np.asarray(ar.phi(jnp.asarray(series[t - q : t].reshape(-1)))) for t in range(q, 12)])
    for i, t in enumerate(range(q, 12)):  # position t − 1 predicts step t from steps q … t − 1
        F, Y = feats[:i], series[q:t]
        mean_At = np.linalg.solve(F.T @ F / sigma**2 + k * q / rho**2 * np.eye(k), F.T @ Y / sigma**2)
        np.testing.assert_allclose(pred[t - 1], feats[i] @ mean_At, rtol=1e-9, atol=1e-12)
    assert not pred[: q - 1].any()  # unscored positions
    assert not pred[q - 1].any()  # no step before the first scored one: the prior mean, 0


def test_cot_chains_are_in_context_linear_after_the_leaky_inverse():
    """Each CoT step is s^ℓ = σ(W^ℓ s^{ℓ−1}) with W^ℓ shared by the prompt's chains: undoing the leaky ReLU,
    least squares over the N chains recovers W^ℓ with zero residual."""
    d, L, N, slope = 3, 4, 8, 0.1
    p = tasks.CoTMLP(d, L, N, slope).prompt(KEY)
    seq = np.concatenate([np.asarray(p.tokens), np.asarray(p.targets[-1:])]).reshape(N, L + 1, d)
    for ell in range(1, L + 1):
        prev, nxt = seq[:, ell - 1], seq[:, ell]
        pre = np.where(nxt >= 0, nxt, nxt / slope)
        W, res, *_ = np.linalg.lstsq(prev, pre, rcond=None)
        assert np.max(np.abs(prev @ W - pre)) < 1e-9
    assert np.array_equal(np.asarray(p.mask), np.array([(j + 1) % (L + 1) != 0 for j in range(N * (L + 1) - 1)]))


# ----- baselines -----------------------------------------------------------------------------------------


def _xy(N=12, d=4, m=2, key=KEY):
    k1, k2 = jax.random.split(key)
    xs = jax.random.normal(k1, (N, d))
    return xs, xs @ jax.random.normal(k2, (d, m)) + 0.1 * jax.random.normal(key, (N, m))


def test_ols_ridge_averaging_knn_match_direct_formulas_at_every_prefix():
    xs, ys = _xy()
    X, Y = np.asarray(xs), np.asarray(ys)
    o, g, r, a, k = (
        np.asarray(f(xs, ys))
        for f in (
            baselines.ols,
            baselines.ols_gram,
            lambda x, y: baselines.ridge(x, y, 0.3),
            baselines.averaging,
            lambda x, y: baselines.nearest_neighbours(x, y, 2),
        )
    )
    assert np.all(o[0] == 0) and np.all(g[0] == 0) and np.all(a[0] == 0)
    for i in range(1, 12):
        Xi, Yi = X[:i], Y[:i]
        np.testing.assert_allclose(o[i], X[i] @ np.linalg.pinv(Xi) @ Yi, rtol=1e-9, atol=1e-10)
        # from the Gram matrices, below d = 4 examples too (minimum norm): squared condition, float64 still 1e-9
        np.testing.assert_allclose(g[i], X[i] @ np.linalg.pinv(Xi) @ Yi, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(r[i], X[i] @ np.linalg.solve(Xi.T @ Xi + 0.3 * np.eye(4), Xi.T @ Yi), rtol=1e-9)
        np.testing.assert_allclose(a[i], X[i] @ (Xi.T @ Yi) / i, rtol=1e-9)
        near = np.argsort(((Xi - X[i]) ** 2).sum(1))[:2]
        np.testing.assert_allclose(k[i], Yi[near].mean(0), rtol=1e-9)


def test_newton_and_gd_converge_to_ols():
    """Eq. (4) converges superlinearly to S⁺ (so to OLS); GD converges linearly; both from w = 0."""
    xs, ys = _xy(N=16, d=4)
    o = np.asarray(baselines.ols(xs, ys))[8:]  # full-rank prefixes (n_i >= 8 > d)
    newton = np.asarray(baselines.newton_steps(xs, ys, 60))[:, 8:]
    gd = np.asarray(baselines.gradient_descent_steps(xs, ys, 3000))[:, 8:]
    err = lambda w: np.max(np.abs(w - o), axis=(1, 2))  # noqa: E731
    assert err(newton)[-1] < 1e-9 and err(gd)[-1] < 1e-6
    e = err(newton)
    first = np.argmax(e < 1e-2)  # superlinear: once close, it squares the error
    assert e[first + 2] < 1e-5
    assert err(gd)[5] > 1e-3  # linear convergence is slower


@pytest.mark.parametrize("method", [baselines.newton_steps, baselines.gradient_descent_steps])
def test_fig5_baselines_batched_over_prompts_are_each_prompts_last_position(method):
    """AlgoFormer Fig. 5 evaluates GD and Newton `A.EVAL_BATCH` prompts at a time (`_last_position_iterates`): on a
    batch and a remainder, every prompt's iterates at its last position, in the prompts' order."""
    from jaxicl.experiments import algoformer as A

    n = A.EVAL_BATCH + 76
    xs = jax.random.normal(KEY, (n, 6, 2))
    ys = xs @ jax.random.normal(jax.random.fold_in(KEY, 1), (n, 2, 1)) / np.sqrt(2)
    got = np.asarray(A._last_position_iterates(method, xs, ys, 3))
    assert got.shape == (n, 3, 1)
    for i in (0, A.EVAL_BATCH - 1, A.EVAL_BATCH, n - 1):
        np.testing.assert_allclose(got[i], np.asarray(method(xs[i], ys[i], 3))[:, -1], rtol=1e-12, atol=1e-14)


def test_algoformer_evaluations_batched_over_prompts_are_the_unbatched_ones():
    """Figs. 2, 3 and 5 evaluate a model on a batch of test prompts and a remainder at a time (`A.EVAL_BATCH`,
    `A.LOOP_EVAL_BATCH` prompts): every prompt's error at every position (Fig. 2), in the prompts' order, and the mean
    error at the last query after each loop (Figs. 3 and 5) are those of the whole test set at once."""
    from jaxicl.experiments import algoformer as A

    cfg = tiny_algoformer()
    task = A.fig2_tasks(cfg, KEY)["regression"]
    model = A.build_model("algoformer", cfg, task, jax.random.fold_in(KEY, 1))
    test = task.prompts(jax.random.fold_in(KEY, 2), A.EVAL_BATCH + 40)
    got = np.asarray(A._position_errors_batched(model, test, 3))
    np.testing.assert_allclose(got, np.asarray(losses.position_errors(model, test, 3)), rtol=1e-12, atol=1e-14)
    test = jax.tree_util.tree_map(lambda a: a[: A.LOOP_EVAL_BATCH + 24], test)
    per_loop = losses.position_errors_per_loop(model, test, cfg.eval_loops)[:, :, -2]
    np.testing.assert_allclose(
        np.asarray(A._last_query_error_per_loop(model, test, cfg.eval_loops)),
        np.asarray(jnp.mean(per_loop, 0)),
        rtol=1e-12,
    )


# ----- training loop ---------------------------------------------------------------------------------------

TASK = tasks.RepresentationRegression(2, 5, noise_std=0.1)


def _loss(m, k, s):
    return losses.sequence_loss(m, TASK.prompts(k, 8))


def _tiny():
    return models.StandardTransformer(KEY, 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=10)


def test_resumed_run_follows_the_uninterrupted_trajectory(tmp_path):
    opt = optax.adamw(3e-3)
    full = train(_loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, progress=False)
    ck = tmp_path / "run.ckpt"
    part = train(_loss, _tiny(), 40, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, progress=False)
    assert part.losses.shape == (40,)
    resumed = train(_loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, progress=False)
    assert resumed.resumed_from == 40
    np.testing.assert_array_equal(resumed.losses, full.losses)
    for a, b in zip(jax.tree_util.tree_leaves(resumed.model), jax.tree_util.tree_leaves(full.model)):
        np.testing.assert_array_equal(a, b)
    # a crash mid-run (here: in the evaluation at step 40) loses nothing before the last checkpoint
    ck2 = tmp_path / "crash.ckpt"

    def crash(m, calls=[0]):  # noqa: B006
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return {"loss": losses.sequence_loss(m, TASK.prompts(jax.random.PRNGKey(9), 16))}

    with pytest.raises(KeyboardInterrupt):
        train(
            _loss,
            _tiny(),
            60,
            KEY,
            optimizer=opt,
            chunk_size=20,
            checkpoint=ck2,
            eval_fn=crash,
            eval_every=20,
            progress=False,
        )
    again = train(
        _loss,
        _tiny(),
        60,
        KEY,
        optimizer=opt,
        chunk_size=20,
        checkpoint=ck2,
        eval_fn=crash,
        eval_every=20,
        progress=False,
    )
    assert again.resumed_from == 20
    np.testing.assert_array_equal(again.losses, full.losses)
    assert list(again.eval_steps) == [0, 20, 40, 60]


def test_checkpoint_of_another_config_is_refused(tmp_path):
    """Every setting the run names must match the checkpoint's (a setting the checkpoint holds and the run does not
    name is one the run does not read: resumed); so must the parameters' structure."""
    ck = tmp_path / "run.ckpt"
    train(_loss, _tiny(), 10, KEY, chunk_size=10, checkpoint=ck, config={"lr": 1e-4, "other": 1}, progress=False)
    with pytest.raises(ValueError, match="another configuration.*lr"):
        train(_loss, _tiny(), 20, KEY, chunk_size=10, checkpoint=ck, config={"lr": 1e-3}, progress=False)
    with pytest.raises(ValueError, match=r"config differ: new: checkpoint None vs run 2"):
        train(_loss, _tiny(), 20, KEY, chunk_size=10, checkpoint=ck, config={"lr": 1e-4, "new": 2}, progress=False)
    kept = train(_loss, _tiny(), 20, KEY, chunk_size=10, checkpoint=ck, config={"lr": 1e-4}, progress=False)
    assert kept.resumed_from == 10
    other = models.StandardTransformer(KEY, 2, 1, n_layers=2, n_heads=2, d_model=8, max_len=10)
    with pytest.raises(ValueError, match="another configuration"):
        train(_loss, other, 20, KEY, chunk_size=10, checkpoint=ck, config={"lr": 1e-4}, progress=False)
    (tmp_path / "junk").write_text("hello\n")
    with pytest.raises(ValueError, match="not a jaxicl training checkpoint"):
        train(_loss, _tiny(), 20, KEY, chunk_size=10, checkpoint=tmp_path / "junk", progress=False)


def test_a_damaged_or_foreign_checkpoint_is_an_error_naming_it(tmp_path):
    """Resume is verified (issue 39): a checkpoint of another seed (PRNG key), a truncated one, one with trailing
    data, one whose step disagrees with its loss history, or one of a longer run is a CheckpointError that names the
    file and says to delete it; it is never used."""
    import json

    from jaxicl.dynamics.train import CheckpointError

    ck = tmp_path / "run.ckpt"
    train(_loss, _tiny(), 20, KEY, chunk_size=10, checkpoint=ck, progress=False)
    good = ck.read_bytes()
    again = lambda key=KEY, n=30: train(_loss, _tiny(), n, key, chunk_size=10, checkpoint=ck, progress=False)  # noqa
    with pytest.raises(CheckpointError, match=f"checkpoint {ck} was written by a run with another PRNG key.*Delete it"):
        again(jax.random.PRNGKey(1))
    header, rest = good.split(b"\n", 1)
    for damage, match in [
        (good[: len(good) // 2], "is unreadable or truncated"),
        (good[: len(header) + 40], "is unreadable or truncated"),
        (good + b"x", "has data after its parameters"),
        (header[:-1] + b"\n" + rest, "is not a jaxicl training checkpoint"),
        (
            json.dumps({**json.loads(header), "step": 10}).encode() + b"\n" + rest,
            "is inconsistent: step 10 with a loss history of 20 steps",
        ),
    ]:
        ck.write_bytes(damage)
        with pytest.raises(
            CheckpointError, match=f"checkpoint {ck} {match}.*Delete it to train this run from the start"
        ):
            again()
    ck.write_bytes(good)
    with pytest.raises(CheckpointError, match="at step 20, beyond n_steps = 10: it belongs to a longer run"):
        again(n=10)
    assert again().resumed_from == 20  # the intact file still resumes


def test_a_longer_run_continues_a_shorter_runs_checkpoint_bit_for_bit(tmp_path):
    """`continue_checkpoint`: a run of 30 steps started from the 20-step checkpoint of the same trajectory (settings
    that differ only in the step count and the name) resumes at step 20 and ends with the parameters and losses of
    the run trained 30 steps from the start; a checkpoint of another setting is refused, and so is an existing one."""
    from jaxicl.dynamics.checkpoint import continue_checkpoint
    from jaxicl.dynamics.train import CheckpointError

    run = lambda n, ck, **cfg: train(  # noqa: E731
        _loss, _tiny(), n, KEY, chunk_size=10, checkpoint=ck, progress=False, config={"steps": n, **cfg}
    )
    straight = run(30, tmp_path / "straight.ckpt", name="long", lr=1)
    run(20, tmp_path / "short.ckpt", name="short", lr=1)
    continue_checkpoint(
        tmp_path / "short.ckpt",
        tmp_path / "long.ckpt",
        {"steps": 30, "name": "long", "lr": 1},
        may_differ=("steps", "name"),
    )
    res = run(30, tmp_path / "long.ckpt", name="long", lr=1)
    assert res.resumed_from == 20 and res.step == 30
    np.testing.assert_array_equal(res.losses, straight.losses)
    for a, b in zip(jax.tree_util.tree_leaves(res.model), jax.tree_util.tree_leaves(straight.model)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(CheckpointError, match="cannot start the run of .*another trajectory \\(lr differ\\)"):
        continue_checkpoint(
            tmp_path / "short.ckpt", tmp_path / "other.ckpt", {"steps": 30, "lr": 2}, may_differ=("steps", "name")
        )
    with pytest.raises(CheckpointError, match="long.ckpt exists"):
        continue_checkpoint(
            tmp_path / "short.ckpt",
            tmp_path / "long.ckpt",
            {"steps": 30, "name": "long", "lr": 1},
            may_differ=("steps", "name"),
        )


def test_nan_loss_names_the_step(tmp_path):
    def loss(m, k, s):
        return _loss(m, k, s) * jnp.where(s == 13, jnp.nan, 1.0)

    ck = tmp_path / "nan.ckpt"
    with pytest.raises(FloatingPointError, match="at step 13"):
        train(loss, _tiny(), 30, KEY, chunk_size=10, checkpoint=ck, progress=False)
    res = train(_loss, _tiny(), 10, KEY, chunk_size=10, checkpoint=ck, progress=False)  # the step-10 checkpoint
    assert res.resumed_from == 10


def test_training_learns_and_mixed_precision_keeps_float32_masters():
    model = _tiny()
    evalp = TASK.prompts(jax.random.PRNGKey(5), 256)
    ev = lambda m: {"err": losses.sequence_loss(m, evalp)}  # noqa: E731
    res = train(
        _loss, model, 300, KEY, optimizer=optax.adamw(1e-2), chunk_size=100, eval_fn=ev, eval_every=100, progress=False
    )
    assert res.evals["err"][-1] < 0.8 * res.evals["err"][0]
    with jax.enable_x64(False):
        m32 = _tiny()
        r = train(_loss, m32, 20, KEY, chunk_size=10, compute_dtype=jnp.bfloat16, progress=False)
    assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(eqx.filter(r.model, eqx.is_inexact_array)))
    assert np.all(np.isfinite(r.losses))


def test_ensemble_members_train_independently():
    """A vector loss (one per vmapped member) under Adam equals training each member alone."""
    keys = jax.random.split(KEY, 2)
    ens = eqx.filter_vmap(lambda k: models.StandardTransformer(k, 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=10))(
        keys
    )
    loss = lambda m, k, s: eqx.filter_vmap(lambda mm: _loss(mm, k, s))(m)  # noqa: E731
    res = train(loss, ens, 20, KEY, optimizer=optax.adam(1e-2), chunk_size=10, progress=False)
    assert res.losses.shape == (20, 2)
    one = train(
        _loss,
        models.StandardTransformer(keys[1], 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=10),
        20,
        KEY,
        optimizer=optax.adam(1e-2),
        chunk_size=10,
        progress=False,
    )
    np.testing.assert_allclose(res.losses[:, 1], one.losses, rtol=1e-9)


def test_an_ensemble_trains_each_member_as_its_own_run_in_float32(tmp_path):
    """train(ensemble=True): three models of one shape, each with its own key (data stream) and its own optimizer
    state, under an optimizer that couples parameters (a global-norm clip, which a summed vector loss would share
    between members): every member's losses and weights equal its one-model run to float32 rounding. A checkpointed
    ensemble resumes; bad stacks and keys are refused."""
    from jaxicl.dynamics import member, stack_members

    opt = optax.chain(optax.clip_by_global_norm(0.05), optax.adam(1e-2))
    with jax.enable_x64(False):
        keys = jax.random.split(jax.random.PRNGKey(3), 3)
        singles = [models.StandardTransformer(k, 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=10) for k in keys]
        data_keys = jax.random.split(jax.random.PRNGKey(4), 3)
        ens = train(
            _loss, stack_members(singles), 20, data_keys, optimizer=opt, chunk_size=10, progress=False, ensemble=True
        )
        assert ens.losses.shape == (20, 3)
        for i, (m, k) in enumerate(zip(singles, data_keys)):
            one = train(_loss, m, 20, k, optimizer=opt, chunk_size=10, progress=False)
            np.testing.assert_allclose(ens.losses[:, i], one.losses, rtol=2e-5, atol=1e-6)
            for a, b in zip(
                jax.tree_util.tree_leaves(eqx.filter(member(ens.model, i), eqx.is_array)),
                jax.tree_util.tree_leaves(eqx.filter(one.model, eqx.is_array)),
            ):
                # Adam divides by √v: entries whose gradient is round-off move by round-off-sized steps of either
                # sign, so compare each weight matrix as a whole (a wrong key or a shared state is off by O(1))
                assert a.dtype == jnp.float32
                assert np.linalg.norm(a - b) <= 1e-3 * np.linalg.norm(b) + 1e-6, (
                    i,
                    np.linalg.norm(a - b) / np.linalg.norm(b),
                )
        # the members differ (own data, own init): an ensemble that shared one stream would not pass the loop above
        assert not np.allclose(ens.losses[:, 0], ens.losses[:, 1])
        ck = tmp_path / "ens.ckpt"
        first = train(
            _loss,
            stack_members(singles),
            20,
            data_keys,
            optimizer=opt,
            chunk_size=10,
            checkpoint=ck,
            deadline=0.0,
            progress=False,
            ensemble=True,
        )
        assert first.step == 10
        rest = train(
            _loss,
            stack_members(singles),
            20,
            data_keys,
            optimizer=opt,
            chunk_size=10,
            checkpoint=ck,
            progress=False,
            ensemble=True,
        )
        assert rest.resumed_from == 10
        np.testing.assert_array_equal(rest.losses, ens.losses)
        with pytest.raises(ValueError, match="one PRNG key per member"):
            train(_loss, stack_members(singles), 10, KEY, chunk_size=10, progress=False, ensemble=True)
        with pytest.raises(ValueError, match="leading member axis"):
            train(_loss, singles[0], 10, data_keys, chunk_size=10, progress=False, ensemble=True)
        other = models.StandardTransformer(keys[0], 2, 1, n_layers=1, n_heads=2, d_model=16, max_len=10)
        with pytest.raises(ValueError, match="model 1 differs"):
            stack_members([singles[0], other])
        with pytest.raises(ValueError, match="if it is a stack of models .stack_members., pass ensemble=True"):
            train(_loss, stack_members(singles), 10, KEY, chunk_size=10, progress=False)  # ensemble=True forgotten


def test_an_ensemble_batched_into_one_step_trains_as_one_run_in_turn(monkeypatch):
    """The two ways `train(ensemble=True)` runs its members give the same runs to float32 rounding: batched into one
    step (vmap, the accelerators' default) and one after another in the chunk (lax.map, the CPU's default, which the
    test above checks member by member against one-model runs). Member data (each member's own task) included; the
    CPU's default is in turn."""
    from jaxicl.dynamics import stack_members
    from jaxicl.runtime import placement

    train_module = importlib.import_module("jaxicl.dynamics.train")
    monkeypatch.setattr(train_module, "BATCH_MEMBERS", None)  # auto ($JAXICL_BATCH_MEMBERS unset)
    with placement.on("throughput"):  # where `train` asks it (train is placed on the throughput device)
        assert train_module._batch_members() == (placement.platform_for("throughput") != "cpu")
    with placement.use("cpu"), placement.on("throughput"):
        assert not train_module._batch_members()

    def loss(m, k, s, which):
        return losses.sequence_loss(m, jax.lax.switch(which, [lambda k, t=t: t.prompts(k, 8) for t in tasks_], k))

    runs = {}
    with jax.enable_x64(False):
        tasks_ = [tasks.RepresentationRegression(2, 4), tasks.RepresentationRegression(2, 4, noise_std=1.0)]
        keys = jax.random.split(jax.random.PRNGKey(5), 2)
        singles = [models.StandardTransformer(k, 2, 1, n_layers=1, n_heads=2, d_model=8, max_len=10) for k in keys]
        for batched in (True, False):
            monkeypatch.setattr(train_module, "BATCH_MEMBERS", batched)
            runs[batched] = train(
                loss,
                stack_members(singles),
                12,
                jax.random.split(jax.random.PRNGKey(6), 2),
                optimizer=optax.sgd(0.05),  # not Adam, whose √v step moves round-off gradients by a full step
                chunk_size=6,
                progress=False,
                ensemble=True,
                member_data=jnp.asarray([0, 1]),
            )
    assert runs[True].losses.shape == runs[False].losses.shape == (12, 2)
    np.testing.assert_allclose(runs[True].losses, runs[False].losses, rtol=2e-5, atol=1e-6)
    for a, b in zip(
        jax.tree_util.tree_leaves(eqx.filter(runs[True].model, eqx.is_array)),
        jax.tree_util.tree_leaves(eqx.filter(runs[False].model, eqx.is_array)),
    ):
        assert np.linalg.norm(a - b) <= 1e-3 * np.linalg.norm(b) + 1e-6
    assert not np.allclose(runs[False].losses[:, 0], runs[False].losses[:, 1])  # the members' tasks differ


def test_curriculum_schedule():
    c = Curriculum(d=(5, 20, 1), n=(11, 41, 2), every=2000)
    assert [tuple(map(int, c.at(s))) for s in (0, 1999, 2000, 30_000, 500_000)] == [
        (5, 11),
        (5, 11),
        (6, 13),
        (20, 41),
        (20, 41),
    ]
    with pytest.raises(ValueError, match="curriculum"):
        Curriculum(d=(5, 2, 1))


def test_template_encoding_layout():
    task = tasks.TemplateRegression.random(KEY, d=4, K=7, n_context=3, m=2)
    p = task.sample(jax.random.PRNGKey(1), 5)
    s = tasks.template_encoding(p, clean=2 * p.y_query)
    assert s.tokens.shape == (5, 7, 5) and s.targets.shape == (5, 7, 1) and s.mask.shape == (5, 7)
    np.testing.assert_array_equal(s.tokens[:, :, :4], np.broadcast_to(task.tokens, (5, 7, 4)))
    np.testing.assert_array_equal(s.tokens[:, :3, 4], p.y)  # labels shown for k <= N ...
    np.testing.assert_array_equal(s.tokens[:, 3:, 4], 0)  # ... and hidden after
    np.testing.assert_array_equal(s.targets[..., 0], p.y_query)  # every label scored (loss (9))
    np.testing.assert_array_equal(s.clean[..., 0], 2 * p.y_query)
    np.testing.assert_array_equal(s.mask, 1)
    one = tasks.template_encoding(tasks.TemplatePrompt(p.tokens, p.y[0], p.y_query[0]))
    np.testing.assert_array_equal(one.tokens, s.tokens[0])


def test_step_seconds_times_a_compiled_step_and_rejects_bad_input():
    from jaxicl.dynamics import step_seconds

    model, _ = _models()["standard"]
    task = tasks.RepresentationRegression(3, 4)
    loss = lambda m, k, s: losses.sequence_loss(m, task.prompts(k, 4))  # noqa: E731
    sec = step_seconds(loss, model, chunk=2, repeats=2)
    assert np.isfinite(sec) and sec > 0
    with pytest.raises(ValueError, match="chunk >= 1"):
        step_seconds(loss, model, chunk=0)


def test_zhang_fig1_lsa_line_is_the_papers_closed_form():
    """§4.3: the LSA trained on Exp(1) covariance predicts b x_qᵀΛ_new w with b = E[λ²]/E[λ³] = 1/3, so on a
    new Λ = c·diag(Exp(1)) its error per coordinate is E[cλ(cλ/3 − 1)²] = 2c³/3 − 4c²/3 + c (1/3 at c = 1,
    the paper's value), and (1/3 − 1)² = 4/9 on the identity."""
    from jaxicl.experiments import zhang2023 as Z

    g = Z.GPT2Config(d=4, cs=(1.0, 4.0, 9.0))
    lines = Z.fig1_lsa_limits(g)
    expected = {"identity": 4 / 9} | {f"c={c:g}": 2 * c**3 / 3 - 4 * c**2 / 3 + c for c in g.cs}
    assert lines.keys() == expected.keys()
    for k, v in expected.items():
        np.testing.assert_allclose(lines[k][0], v, rtol=1e-12)
        np.testing.assert_allclose(lines[k][1], v, rtol=1e-4)  # the exact loss at M = 10⁶


def test_zhang_fig1_pipeline_reference_curves(tmp_path):
    """Fig. 1 end to end at a toy size (a few steps: the GPT-2 curves mean nothing here). On the same test
    prompts, least squares is exact once M >= d (noiseless labels) and the zero estimator's error y²/d has mean c
    (1 on the identity): y = wᵀΛ^{1/2}z gives E y⁴ = 3(d² + 2d) on the identity and 3c²(d² + 5d) for
    Λ = c·diag(Exp(1)), hence the standard errors, at every M within 4 s.e."""
    import dataclasses

    from jaxicl.experiments import zhang2023 as Z

    g = dataclasses.replace(
        Z.GPT2Config(), d=3, Ns=(3, 4), d_model=8, n_layers=1, n_heads=2, steps=4, chunk=2, batch=4, test_prompts=4000
    )
    with jax.enable_x64(False):
        ds = Z.fig1(g, KEY, tmp_path)
    assert ds.error.shape == (1, 2, 2, 4, 9) and np.all(np.isfinite(ds.error))
    assert float(np.abs(ds.ols.sel(M=slice(g.d, None))).max()) < 1e-6
    d, P = g.d, g.test_prompts
    c = np.array([1.0, *g.cs])[:, None]
    sd = np.array(
        [[np.sqrt(3 * (d**2 + 2 * d) / d**2 - 1)]] + [[cc * np.sqrt(3 * (d**2 + 5 * d) / d**2 - 1)] for cc in g.cs]
    )
    z = (ds.zero.values - c) / (sd / np.sqrt(P))
    assert np.all(np.abs(z) <= 4), z
    assert len(list(tmp_path.glob("*.ckpt"))) == len(g.Ns)  # one ensemble (both covariances) per N
    # each N trained apart (the parts of a --jobs run: Zhang's parts_of) and joined: the whole run's dataset
    with jax.enable_x64(False):
        apart = [Z.fig1(g, KEY, tmp_path / "apart", Ns=(N,)) for N in reversed(g.Ns)]
    theory = ("flows", "prediction")
    assert Z.parts_of(Z.Config(gpt2=g)) == (*theory, "fig1_N3", "fig1_N4") and Z.parts_of(Z.Config(gpt2=None)) == theory
    assert Z.parts_of(Z.Config(gpt2=g, fig1=False)) == theory  # the quick size's: Fig. 1 left to --trained
    assert Z.parts_of(Z.SIZES["quick"]) == theory
    assert Z.parts_of(Z.SIZES["trained"]) == (*theory, "fig1_N10", "fig1_N20")
    joined = Z.join_fig1(apart)
    xr.testing.assert_equal(joined.sel(N=list(g.Ns)), ds)  # the values; the attributes hold measured speeds
    assert joined.attrs.keys() == ds.attrs.keys() and joined.attrs["steps_trained"] == [4, 4]
    assert joined.attrs["status"] == "complete"
    with pytest.raises(ValueError, match=r"training lengths of gpt2.Ns = \[3, 4\], got \[5\]"):
        Z.fig1(g, KEY, tmp_path, Ns=(5,))


def test_template_sequence_loss_estimates_eq9_so_l_star_is_its_floor():
    """The transformers of Yang et al. Figs. 2(b)/5 train on ½·mean_k (ŷ_k − y_k)² over template_encoding
    prompts: for the optimal linear predictor ŷ = Aᵀy its Monte-Carlo mean equals L⋆ of eq. (9), within 4 s.e."""
    from jaxicl.theory import yang as Y

    task = tasks.TemplateRegression.random(KEY, d=5, K=12, n_context=4, m=3, tau=0.1)
    p = task.sample(jax.random.PRNGKey(3), 40_000)
    s = tasks.template_encoding(p)
    per_prompt = 0.5 * np.mean(
        (np.asarray(p.y @ Y.optimal_prediction_matrix(task)) - np.asarray(s.targets[..., 0])) ** 2, 1
    )
    se = per_prompt.std(ddof=1) / np.sqrt(per_prompt.size)
    assert abs(per_prompt.mean() - float(Y.loss_infimum(task))) <= 4 * se


def test_yang_transformer_pipeline_and_compute_budget(tmp_path):
    """Figs. 2(b)/5 end to end at a toy size; Fig. 5's fixed budget is ``tc.steps`` steps of the cheapest H, in
    floating-point operations counted from each model's shape, and each H trains and is read at the steps it
    completes in it (Fig. 2(b)'s H trains every step)."""
    import dataclasses

    from jaxicl.experiments import yang2024 as Yx

    tc = dataclasses.replace(
        Yx.TransformerConfig(),
        d=6,
        K=12,
        N=4,
        m=2,
        d_model=8,
        d_ff=16,
        n_layers=1,
        heads=2,
        fig5_heads=(1, 2, 8),
        steps=60,
        chunk=30,
        batch=4,
        smooth=2,
        test_prompts=20,
    )
    flops = {h: Yx.step_flops(tc, h) for h in (1, 2, 8)}
    assert flops[1] < flops[2] < flops[8] and flops[2] - flops[1] == 3 * tc.batch * tc.K * 5 * tc.K
    steps = Yx.budget_steps(tc, (1, 2, 8))
    assert steps == {h: int(60 * flops[1] // flops[h]) for h in (1, 2, 8)} and steps[1] == 60 > steps[8]
    with jax.enable_x64(False):
        seeded = Yx.train_transformers(tc, KEY, tmp_path)
    assert seeded.seed.values.tolist() == [0]  # one seed (tc.seeds): a seed dimension of one
    ds = seeded.sel(seed=0)
    assert ds.loss.shape == (3, 60) and ds.inference.shape == (3, 3, 2) and ds.eval_step.values.tolist() == [0, 30, 60]
    assert ds.steps_trained.values.tolist() == [60, 60, steps[8]]  # H = 2 is Fig. 2(b)'s: every step
    assert np.all(np.isfinite(ds.loss.values[2, : steps[8]])) and np.all(np.isnan(ds.loss.values[2, steps[8] :]))
    budget, n, loss, inf = Yx.at_budget(ds, tc)
    assert budget == 60 * flops[1] and n.tolist() == [60, steps[2], steps[8]]
    np.testing.assert_allclose(loss, [ds.loss.values[i, k - 2 : k].mean() for i, k in enumerate(n)])
    np.testing.assert_array_equal(inf[0], ds.inference.values[0, 2])
    checks = Yx._transformer_checks(ds, tc)
    assert [c.simulated for c in Yx._transformer_checks(seeded, tc)] == [c.simulated for c in checks]
    assert len(checks) == 7 and checks[-1].verdict == "reported" and "ms/step" in checks[-1].simulated
    # the budget, and so every verdict, does not depend on the measured step times
    slow = ds.assign(step_seconds=("heads", [1.0, 50.0, 900.0]))
    assert [c.passed for c in Yx._transformer_checks(slow, tc)] == [c.passed for c in checks]
    # a figure drawn from runs shorter than the moving average's window (a --plan, an early --budget slice): every H
    # with the steps it has, none with a window longer than its curve
    short = ds.assign(loss=ds.loss.where(ds.step <= 3), steps_trained=("heads", [3, 3, 3])).assign_attrs(
        status="partial, step 3 of 60"
    )
    wide = dataclasses.replace(tc, smooth=40)
    assert Path(Yx._transformer_figure(tmp_path, short, wide)).name == "fig2b_fig5_transformer.png"


class _ChunkTimer:
    """Stands in for ``StageTimer`` inside ``train``: every chunk of ``steps`` steps took ``steps × seconds`` (run),
    with no compilation, so that time limits are certain."""

    steps, seconds = 1, 1.0

    def lap(self, label):
        from jaxicl.runtime.profiling import Stage

        return Stage(label, _ChunkTimer.steps * _ChunkTimer.seconds, 0.0, 0, 0)


def test_a_time_limit_stops_after_the_chunk_that_reaches_it_and_the_run_is_complete(tmp_path, monkeypatch):
    train_module = importlib.import_module("jaxicl.dynamics.train")  # the module (its name is also the function)

    monkeypatch.setattr(train_module, "StageTimer", _ChunkTimer)
    monkeypatch.setattr(_ChunkTimer, "steps", 20)  # 1 s per step
    opt, ck = optax.adamw(3e-3), tmp_path / "limited.ckpt"
    full = train(_loss, _tiny(), 100, KEY, optimizer=opt, chunk_size=20, progress=False)
    run = train(_loss, _tiny(), 100, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, time_limit=50.0, progress=False)
    assert (run.step, run.time_limited, run.complete, run.status()) == (60, True, True, "complete")  # 40 s < 50 ≤ 60 s
    np.testing.assert_array_equal(run.losses, full.losses[:60])
    again = train(
        _loss, _tiny(), 100, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, time_limit=50.0, progress=False
    )
    assert (again.resumed_from, again.step, again.complete) == (60, 60, True)  # the checkpoint's step time: no chunk
    longer = train(
        _loss, _tiny(), 100, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, time_limit=70.0, progress=False
    )
    assert (longer.step, longer.time_limited) == (80, True)
    np.testing.assert_array_equal(longer.losses, full.losses[:80])
    done = train(_loss, _tiny(), 100, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, time_limit=1e9, progress=False)
    assert (done.step, done.time_limited, done.complete) == (100, False, True)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=r"train: time_limit \(seconds\) must be (> 0|finite)"):
            train(_loss, _tiny(), 100, KEY, chunk_size=20, time_limit=bad, progress=False)


def test_bf16_loss_curve_agrees_with_float32_over_the_first_steps():
    """Mixed precision (bf16 compute, float32 master weights and loss) on the same batches: the first 100 losses
    agree step by step within 2 %, and the 50-step means of the first 300 steps within 5 % (later, the two
    trajectories may leave their plateau at different steps). The loss falls by a third over those steps."""
    with jax.enable_x64(False):
        task = tasks.RepresentationRegression(1, 8)
        loss = lambda m, k, s: losses.sequence_loss(m, task.prompts(k, 64))  # noqa: E731
        model = models.StandardTransformer(jax.random.PRNGKey(1), 1, 1, n_layers=2, n_heads=2, d_model=16, max_len=18)
        runs = [
            train(
                loss,
                model,
                300,
                jax.random.PRNGKey(1),
                optimizer=optax.adamw(3e-3),
                chunk_size=100,
                progress=False,
                compute_dtype=dtype,
            )
            for dtype in (None, jnp.bfloat16)
        ]
    f32, b16 = (r.losses for r in runs)
    assert np.max(np.abs(b16[:100] / f32[:100] - 1)) < 0.02
    windows = [x.reshape(6, 50).mean(1) for x in (f32, b16)]
    assert np.max(np.abs(windows[1] / windows[0] - 1)) < 0.05
    assert windows[0][-1] < 0.67 * windows[0][0]


def test_a_deadline_trains_in_slices_that_follow_the_uninterrupted_run(tmp_path):
    import time

    opt = optax.adamw(3e-3)
    full = train(_loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, progress=False)
    ck = tmp_path / "slices.ckpt"
    first = train(
        _loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, deadline=time.time(), progress=False
    )  # a deadline already past: one chunk (every call progresses), then stop
    assert (first.step, first.complete, first.status()) == (20, False, "partial, step 20 of 60")
    assert np.isfinite(first.steps_per_second)
    second = train(
        _loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, deadline=time.time(), progress=False
    )
    assert second.resumed_from == 20 and second.step == 40
    last = train(_loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, progress=False)
    assert last.complete and last.status() == "complete"
    np.testing.assert_array_equal(last.losses, full.losses)
    for a, b in zip(jax.tree_util.tree_leaves(last.model), jax.tree_util.tree_leaves(full.model)):
        np.testing.assert_array_equal(a, b)
    again = train(_loss, _tiny(), 60, KEY, optimizer=opt, chunk_size=20, checkpoint=ck, progress=False)
    assert again.resumed_from == 60 and again.steps_per_second == last.steps_per_second  # stored in the checkpoint


def test_train_refuses_to_be_traced():
    with pytest.raises(TypeError, match="cannot be traced.*optax_train"):
        eqx.filter_jit(lambda m: train(_loss, m, 2, KEY, chunk_size=1, progress=False).losses)(_tiny())


def test_zhang_fig1_trains_the_covariances_of_one_n_as_an_ensemble_equal_to_training_each_alone(tmp_path):
    """Fig. 1's ensemble (fixed and random training covariance, one program): the random-covariance member's test
    errors equal those of the same model trained alone, with its own key, on its own task."""
    from jaxicl.experiments import zhang2023 as Z

    g = Z.GPT2Config(
        d=2, Ns=(3,), d_model=8, n_layers=1, n_heads=2, steps=6, batch=8, cs=(1.0,), test_prompts=16, chunk=3
    )
    key = jax.random.PRNGKey(0)
    ds = Z.fig1(g, key, tmp_path)
    assert ds.error.shape == (1, 2, 1, 2, 7) and np.all(np.isfinite(ds.error.values))
    ci, N, M_max = 1, 3, 6
    task = tasks.RepresentationRegression(g.d, N, covariance=tasks.RandomDiagonalCovariance(g.d))
    alone = train(
        lambda m, k, s: losses.sequence_loss(m, task.prompts(k, g.batch)),
        Z._fig1_model(g, jax.random.fold_in(key, 10 * ci), M_max),
        g.steps,
        jax.random.fold_in(key, 1000 + 10 * ci),
        optimizer=optax.adamw(g.lr),
        chunk_size=g.chunk,
        progress=False,
    )
    base = tasks.RepresentationRegression(g.d, M_max + 1)
    prior = Z.fig1_test_priors(g)["identity"]
    xs, ys, clean, _ = jax.vmap(base.with_covariance(prior).sample_xy)(
        jax.random.split(jax.random.fold_in(key, 100), 16)
    )
    prompts = jax.vmap(tasks.garg_encoding)(xs, ys, clean)
    e = (
        np.mean(
            [
                np.asarray(
                    losses.position_errors(alone.model, jax.tree_util.tree_map(lambda a: a[i : i + 1], prompts))[0, ::2]
                )
                for i in range(16)
            ],
            0,
        )
        / g.d
    )
    np.testing.assert_allclose(ds.error.sel(seed=0, train_covariance="random", test="identity").values[0], e, rtol=1e-6)
    # more seeds: more members of the same ensemble; seed 0's are the one-seed run's, the others train apart
    three = Z.fig1(dataclasses.replace(g, seeds=3), key, tmp_path / "three")
    assert three.error.shape == (3, 2, 1, 2, 7)
    np.testing.assert_allclose(three.error.sel(seed=0).values, ds.error.sel(seed=0).values, rtol=1e-5)
    assert not np.allclose(three.error.sel(seed=1).values, three.error.sel(seed=0).values, rtol=1e-3)


def test_zhang_fig1_least_squares_references_in_float64_come_from_the_gram_form():
    """In float64 (as the reproduction runs) Fig. 1's least-squares curve is computed by ols_gram: equal to the SVD's
    at every M, the interpolation threshold M = d included, with label noise so that M > d is not trivially 0."""
    xs = jax.random.normal(KEY, (64, 25, 6))
    ys = xs @ jax.random.normal(jax.random.PRNGKey(1), (64, 6, 1)) + 0.3 * jax.random.normal(
        jax.random.PRNGKey(2), (64, 25, 1)
    )
    svd = np.mean(np.sum((np.asarray(jax.vmap(baselines.ols)(xs, ys)) - np.asarray(ys)) ** 2, -1), 0)
    gram = np.mean(np.sum((np.asarray(jax.vmap(baselines.ols_gram)(xs, ys)) - np.asarray(ys)) ** 2, -1), 0)
    np.testing.assert_allclose(gram, svd, rtol=1e-8)
    assert svd[6] > 10 * svd[-1]  # the spike at M = d is in the range compared


def test_ensemble_size_that_fits_is_read_from_one_compilation_and_the_ensemble_it_names_fits():
    """The size comes from the memory of one compiled member (every buffer of `train`'s chunk program is per member),
    so K members fit in the budget: compiling the K-member program confirms it; a budget below one member is a
    MemoryError that says so."""
    from jaxicl.dynamics import ensemble_size_that_fits, stack_members
    from jaxicl.dynamics.train import chunk_runner
    from jaxicl.sweep import program_bytes

    with jax.enable_x64(False):
        model = _tiny()
        k, one = ensemble_size_that_fits(_loss, model, chunk=4, memory_budget=10**9, max_members=3)
        assert (k, one > 0) == (3, True)  # the cap
        budget = int(5.5 * one)
        k, again = ensemble_size_that_fits(_loss, model, chunk=4, memory_budget=budget)
        assert (k, again) == (5, one)
        opt = optax.adamw(1e-4)
        params, static = eqx.partition(stack_members([model] * k), eqx.is_inexact_array)
        run = chunk_runner(_loss, static, opt, None, ensemble=True)
        state = jax.eval_shape(jax.vmap(opt.init), params)
        keys = jax.ShapeDtypeStruct((k, 2), jnp.uint32)
        need = program_bytes(run.lower(params, state, keys, jax.ShapeDtypeStruct((4,), jnp.int32)).compile())
        assert 0 < need <= budget, (need, budget)
        with pytest.raises(MemoryError, match="more than the budget"):
            ensemble_size_that_fits(_loss, model, chunk=4, memory_budget=one - 1)


def test_algoformer_fig3_trains_fig2s_model_for_its_own_steps(tmp_path, monkeypatch):
    """With Fig. 3's own steps (`Config.fig3_steps`) its (T, ΔT) = ``loops`` model is Fig. 2's AlgoFormer (its
    initialisation and prompts) trained that long under a checkpoint of its own: the same errors at every loop as
    the model Fig. 2 trains when its own steps are that many (where Fig. 3 reuses Fig. 2's model); where Fig. 2's
    checkpoint is there, from it."""
    from jaxicl.experiments import algoformer as A

    tiny = tiny_algoformer()
    own = dataclasses.replace(tiny, steps=2, fig3_steps=4)
    assert A._fig3_to_train(tiny) == [] and A._fig3_to_train(own) == [(2, 1)]
    key2, key3 = jax.random.PRNGKey(2), jax.random.PRNGKey(3)
    with jax.enable_x64(False):  # as the reproduction trains them
        task = A.fig2_tasks(tiny, key2)["regression"]
        ds3 = A.fig3(own, key3, tmp_path, task, {}, fig2_key=key2)
        fig2s, _ = A.fig2_model(tiny, key2, "regression", task, "algoformer", tmp_path / "f2.ckpt", False, None, [])
        test = task.prompts(jax.random.fold_in(key3, 100), tiny.test_prompts)
        expected = A._last_query_error_per_loop(fig2s, test, tiny.eval_loops)
    np.testing.assert_array_equal(ds3.error.values, np.asarray(expected)[None])
    assert (tmp_path / "fig3_T2_dT1.ckpt").exists() and ds3.attrs["status"] == "complete"
    # where Fig. 2 trained first (its 2 steps), Fig. 3's model starts from Fig. 2's checkpoint: the same model
    after, started = tmp_path / "after_fig2", []
    with jax.enable_x64(False):
        A.fig2_model(
            own, key2, "regression", task, "algoformer", after / "fig2_regression_algoformer.ckpt", False, None, []
        )
        keep = A.continue_checkpoint
        spy = lambda src, dst, *a, **k: (started.append((src.name, dst.name)), keep(src, dst, *a, **k))  # noqa: E731
        monkeypatch.setattr(A, "continue_checkpoint", spy)
        ds3b = A.fig3(own, key3, after, task, {}, fig2_key=key2)
    assert started == [("fig2_regression_algoformer.ckpt", "fig3_T2_dT1.ckpt")]
    np.testing.assert_array_equal(ds3b.error.values, ds3.error.values)
    with pytest.raises(ValueError, match="give fig2_key"), jax.enable_x64(False):
        A.fig3(own, key3, tmp_path / "none", task, {})


def test_algoformer_ar_steps_train_the_ar_tasks_models_alone(tmp_path, monkeypatch):
    """`Config.ar_steps` is the AR task's models' steps and no other model's: they train that long, the regression and
    CoT models ``steps``; no checkpoint fingerprint names it, and a change to it leaves every fingerprint but the AR
    models' (whose ``steps`` it is) as it was, so their checkpoints stay resumable."""
    from jaxicl.experiments import algoformer as A

    seen = {}
    keep = A.train

    def spy(loss, model, steps, key, **kw):
        seen[kw["label"]] = (steps, kw["config"])
        return keep(loss, model, steps, key, **kw)

    monkeypatch.setattr(A, "train", spy)
    key = jax.random.PRNGKey(0)

    def trained(cfg, where):
        seen.clear()
        with jax.enable_x64(False):  # as the reproduction trains them
            ts = A.fig2_tasks(cfg, key)
            for tname, task in ts.items():
                for kind in A.MODELS:
                    A.fig2_model(
                        cfg, key, tname, task, kind, tmp_path / where / f"{tname}_{kind}.ckpt", False, None, []
                    )
        return dict(seen)

    first = trained(tiny_algoformer(steps=2, ar_steps=3), "a")
    assert sorted(first) == sorted(f"fig2 {t} {k}" for t in A.FIG2_TASKS for k in A.MODELS)
    for label, (steps, config) in first.items():
        assert steps == (3 if label.startswith("fig2 ar ") else 2), label
        assert config["steps"] == str(steps) and "ar_steps" not in config, label
    again = trained(tiny_algoformer(steps=2, ar_steps=4), "b")
    for label, (steps, config) in again.items():
        if label.startswith("fig2 ar "):
            assert steps == 4 and config == first[label][1] | {"steps": "4"}, label
        else:
            assert (steps, config) == first[label], label
