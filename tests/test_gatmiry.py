"""Gatmiry et al.: priors, the two loss conventions, constructions, optima and theorem helpers (float64)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxicl import losses, tasks
from jaxicl.experiments import gatmiry2024 as gat
from jaxicl.losses.restricted import GaussianXBatch, gaussian_x_errors, residual_matrix
from jaxicl.models import LinearTransformer
from jaxicl.theory import gatmiry as G

D, N = 4, 12


def _model(key, L=3, looped=False):
    A = 0.12 * jnp.eye(D) + 0.03 * jax.random.normal(key, (L, D, D))
    if looped:
        return LinearTransformer.restricted(A[:1], looped=True, depth=L, max_depth=L)
    return LinearTransformer.restricted(A)


# --- priors -------------------------------------------------------------------------------------------
def test_quadrature_is_exact_for_polynomials():
    u = tasks.UniformScale(1.0, 8.0)
    x, w = u.quadrature(6)  # exact up to degree 11
    for k in range(12):
        assert float(jnp.sum(w * x**k)) == pytest.approx((8.0 ** (k + 1) - 1) / (7 * (k + 1)), rel=1e-12)
    # overlapping windows: uniform on the union [0.5, 3.5] ∪ [4.5, 5.5]
    win = tasks.WindowedScale([1.0, 2.0, 3.0, 5.0], 0.5)
    x, w = win.quadrature(4)
    assert float(jnp.sum(w * x**3)) == pytest.approx(((3.5**4 - 0.5**4) + (5.5**4 - 4.5**4)) / 4 / 4.0, rel=1e-12)


@pytest.mark.parametrize(
    "prior",
    [
        tasks.UniformScale.kappa(8.0),
        tasks.WindowedScale(np.linspace(1, 8, 5), 0.6),
        tasks.WindowedScale(np.linspace(1, 8, 9), 0.5),
        tasks.DiscreteScale([1.0, 3.0, 8.0], [0.2, 0.3, 0.5]),
    ],
)
def test_sampling_matches_quadrature(prior):
    """E[s] and E[s²] from 200k samples agree with the quadrature within 4 standard errors."""
    s = np.asarray(jax.vmap(prior.sample)(jax.random.split(jax.random.PRNGKey(0), 200_000)))
    x, w = prior.quadrature(16)
    for k in (1, 2):
        exact = float(jnp.sum(w * x**k))
        assert abs(np.mean(s**k) - exact) <= 4 * np.std(s**k) / np.sqrt(s.size)
    lo, hi = prior.support()
    assert s.min() >= float(lo) - 1e-12 and s.max() <= float(hi) + 1e-12


def test_padding_by_repeating_a_centre_changes_nothing():
    a = tasks.WindowedScale([1.0, 4.5, 8.0], 0.3)
    b = tasks.WindowedScale([1.0, 4.5, 8.0, 8.0, 8.0], 0.3)
    f = lambda p: float(jnp.sum(p.quadrature(8)[1] * p.quadrature(8)[0] ** 3))  # noqa: E731
    assert f(a) == pytest.approx(f(b), rel=1e-13)
    c = tasks.DiscreteScale([1.0, 8.0, 8.0], [0.5, 0.5, 0.0])
    assert float(jnp.sum(c.quadrature()[1] * c.quadrature()[0] ** 2)) == pytest.approx(32.5)


@pytest.mark.parametrize("k", [2, 5, 9])
def test_the_fig2_test_distribution_at_w_0_is_the_training_distribution(k):
    """Fig. 2 pads the k training scales to 9 by repeating the last (one program for every k). At w = 0 the test
    prior must then be D_train = Unif{s_1 … s_k}, in its quadrature, its sampling and its probabilities: the mass at
    s = 8 is 1/k (a weight per padded centre gave 8/9 for k = 2), and every moment equals D_train's."""
    centers, probs = gat._padded_centers(jnp.asarray(k), 9)
    test, train = tasks.WindowedScale(centers, 0.0), tasks.DiscreteScale(centers, probs)
    distinct = np.linspace(1.0, 8.0, k)
    masses = np.asarray(test.masses())
    np.testing.assert_allclose(np.sort(masses[masses > 0]), np.full(k, 1 / k), rtol=1e-14)
    for prior in (test, train):
        x, w = (np.asarray(a) for a in prior.quadrature(4))
        for p in (1, 2, 3):
            assert float(np.sum(w * x**p)) == pytest.approx(np.mean(distinct**p), rel=1e-13)
    s = np.asarray(jax.vmap(test.sample)(jax.random.split(jax.random.PRNGKey(1), 40_000)))
    at_8 = np.mean(s == 8.0)  # a binomial proportion: within 4 standard errors of 1/k
    assert abs(at_8 - 1 / k) <= 4 * np.sqrt((1 / k) * (1 - 1 / k) / s.size), (k, at_8)
    assert set(np.unique(s)) <= set(distinct.astype(np.float32).astype(float)) | set(distinct)
    # and the windows around the same centres, padded or not, are one distribution (w > 0 and w = 0)
    for w in (0.0, 0.2):
        a, b = tasks.WindowedScale(distinct, w), tasks.WindowedScale(centers, w)
        f = lambda p: float(jnp.sum(p.quadrature(8)[1] * p.quadrature(8)[0] ** 3))  # noqa: E731
        assert f(a) == pytest.approx(f(b), rel=1e-13)


def test_priors_are_sweepable_leaves():
    """κ and w are array leaves: vmap over them gives the same exact losses as one call each."""
    model = _model(jax.random.PRNGKey(0))
    kappas = jnp.array([2.0, 4.0, 8.0])
    f = lambda k: losses.fixed_gram_population_loss(
        model, tasks.ScaledIdentityCovariance(D, tasks.UniformScale(1.0, k))
    )  # noqa: E731
    np.testing.assert_allclose(jax.vmap(f)(kappas), [f(k) for k in kappas], rtol=1e-12)
    ws = jnp.array([0.0, 0.2, 0.5])
    h = lambda w: losses.fixed_gram_population_loss(
        model, tasks.ScaledIdentityCovariance(D, tasks.WindowedScale(jnp.array([1.0, 4.5, 8.0]), w))
    )  # noqa: E731
    np.testing.assert_allclose(jax.vmap(h)(ws), [h(w) for w in ws], rtol=1e-12)


def test_bad_input_is_an_error():
    with pytest.raises(ValueError, match="κ must be >= 1"):
        tasks.UniformScale.kappa(0.5)
    with pytest.raises(ValueError, match="w must be >= 0"):
        tasks.WindowedScale([1.0, 2.0], -0.1)
    with pytest.raises(ValueError, match="leaves"):
        tasks.WindowedScale([1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="alpha < beta"):
        tasks.RandomSpectrumCovariance(3, 2.0, 2.0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        tasks.RandomSpectrumCovariance(3, 0.0, 2.0)
    with pytest.raises(ValueError, match="loop count"):
        LinearTransformer.restricted(jnp.eye(3)[None], looped=True, depth=0, max_depth=4)
    with pytest.raises(ValueError, match=">= 1"):
        G.chebyshev_steps(1.0, 10.0, 0)
    with pytest.raises(ValueError, match="0 < alpha < beta"):
        G.gd_step(3.0, 2.0)
    with pytest.raises(ValueError, match="u = 0"):
        losses.fixed_gram_loss(LinearTransformer.restricted(jnp.eye(3)[None], jnp.ones((1, 3))), jnp.eye(3))


# --- the two loss conventions ---------------------------------------------------------------------------
def test_residual_matrix_is_the_models_error():
    """Lemma 4: TF − y_q = −w*ᵀ M x_q, M = Π(I − Σ̂A_t), on prompts with XXᵀ/n = Σ exactly."""
    model = _model(jax.random.PRNGKey(1))
    Sigma = jnp.diag(jnp.array([1.0, 2.0, 3.0, 5.0]))
    task = tasks.FixedGramRegression(D, N, Sigma)
    for k in jax.random.split(jax.random.PRNGKey(2), 3):
        p, w = task.sample_with_weights(k)
        np.testing.assert_allclose(p.x.T @ p.x / N, Sigma, atol=1e-12)
        M = residual_matrix(model, Sigma)
        assert float(model.predict(p) - p.y_query) == pytest.approx(float(-w @ M @ p.x_query), abs=1e-10)
        assert float(model.predict(p, attention="direct")) == pytest.approx(float(model.predict(p)), abs=1e-10)


@pytest.mark.parametrize("looped", [False, True])
def test_fixed_gram_exact_matches_monte_carlo(looped):
    model = _model(jax.random.PRNGKey(3), looped=looped)
    task = tasks.FixedGramRegression(D, N, tasks.ScaledIdentityCovariance(D, tasks.UniformScale.kappa(4.0)))
    exact = losses.population_loss(model, task)  # ½ convention
    mc, se = losses.mc_loss(model, task, jax.random.PRNGKey(4), 200_000, return_stderr=True)
    assert abs(float(mc - exact)) <= 4 * float(se)
    assert float(exact) == pytest.approx(0.5 * float(losses.fixed_gram_population_loss(model, task.covariance)))


def test_fixed_gram_random_spectrum_has_no_closed_form():
    task = tasks.FixedGramRegression(D, N, tasks.RandomSpectrumCovariance(D, 1.0, 4.0))
    with pytest.raises(losses.NoClosedFormError):
        losses.population_loss(_model(jax.random.PRNGKey(0)), task)


def test_gaussian_x_estimator_matches_plain_monte_carlo():
    """The statistics estimator (exact in x_q) and plain prompts through model.predict agree."""
    model = _model(jax.random.PRNGKey(5))
    task = tasks.LinearRegression(
        D, N, tasks.ScaledIdentityCovariance(D, tasks.UniformScale.kappa(4.0)), "inverse_covariance"
    )
    e = gaussian_x_errors(model, GaussianXBatch.sample(task, jax.random.PRNGKey(6), 100_000))
    mc, se = losses.mc_loss(model, task, jax.random.PRNGKey(7), 200_000, return_stderr=True)
    diff = float(0.5 * jnp.mean(e) - mc)
    assert abs(diff) <= 4 * float(jnp.sqrt(se**2 + (0.5 * jnp.std(e)) ** 2 / e.size))
    # a general prior goes through the Cholesky path
    task2 = tasks.LinearRegression(D, N, tasks.RandomSpectrumCovariance(D, 1.0, 3.0), "inverse_covariance")
    e2 = gaussian_x_errors(model, GaussianXBatch.sample(task2, jax.random.PRNGKey(8), 50_000))
    mc2, se2 = losses.mc_loss(model, task2, jax.random.PRNGKey(9), 100_000, return_stderr=True)
    assert abs(float(0.5 * jnp.mean(e2) - mc2)) <= 4 * float(jnp.sqrt(se2**2 + (0.5 * jnp.std(e2)) ** 2 / e2.size))


# --- constructions and optima ---------------------------------------------------------------------------
def test_worst_case_error_finds_peaks_between_grid_points():
    """The golden-section refinement (all brackets at once) finds maxima the grid misses: two Lorentzian peaks
    of heights 1 and 2 at 1.537 and 1.2213, width 0.001, on [1, 2] with a grid of spacing 0.1 (grid values below 0.005)."""
    peak = lambda s, c, w: 1 / (1 + ((s - c) / w) ** 2)  # noqa: E731
    fn = lambda s: peak(s, 1.537, 1e-3) + 2 * peak(s, 1.2213, 1e-3)  # noqa: E731
    assert np.max(fn(np.linspace(1, 2, 11))) < 5e-3
    assert G.worst_case_error(fn, 1.0, 2.0, grid=11) == pytest.approx(fn(np.array([1.2213]))[0], rel=1e-12)
    assert G.worst_case_error(lambda s: -fn(s), 1.3, 2.0, grid=8) == pytest.approx(fn(np.array([1.537]))[0], rel=1e-12)


@pytest.mark.parametrize("kappa", [10.0, 100.0, 1000.0])
def test_worst_case_error_of_constructions(kappa):
    """Through the model: max over s ∈ [1, κ] of the error equals the formula (Thms 2, 5); Newton (Thm 4)."""
    for L in (1, 3, 6):
        cheb = G.chebyshev_model(1.0, kappa, 3, L)
        gd = G.gd_model(1.0, kappa, 3, L)
        assert G.worst_case_error(G.model_scalar_error(cheb), 1.0, kappa) == pytest.approx(
            G.chebyshev_worst_error(kappa, L), rel=1e-9
        )
        assert G.worst_case_error(G.model_scalar_error(gd), 1.0, kappa) == pytest.approx(
            G.gd_worst_error(kappa, L), rel=1e-9
        )
        Sigma = np.diag([1.0, kappa, np.sqrt(kappa)])
        assert G.newton_iteration_error(1.0, kappa, L, Sigma) == pytest.approx(G.newton_worst_error(kappa, L), rel=1e-9)
        # random members of {I ≼ Σ ≼ κI} never do worse than the worst case
        Sig = tasks.RandomSpectrumCovariance(3, 1.0, kappa).sample(jax.random.PRNGKey(L))
        u = jax.random.normal(jax.random.PRNGKey(10 + L), (2, 3))
        assert float(G.model_relative_error(cheb, Sig, u[0], u[1], 5)) <= G.chebyshev_worst_error(kappa, L) * (1 + 1e-9)


def test_depth_needed_scaling():
    eps = 1e-4
    kappas = np.array([10.0, 100.0, 1000.0])
    cheb = [G.depth_needed(lambda L, k=k: G.chebyshev_worst_error(k, L), eps, 4096) for k in kappas]
    gd = [G.depth_needed(lambda L, k=k: G.gd_worst_error(k, L), eps, 1 << 16) for k in kappas]
    assert np.polyfit(np.log(kappas), np.log(cheb), 1)[0] == pytest.approx(0.5, abs=0.05)
    assert np.polyfit(np.log(kappas), np.log(gd), 1)[0] == pytest.approx(1.0, abs=0.05)
    newton = [G.depth_needed(lambda L, k=k: G.newton_worst_error(k, L), eps, 64) for k in kappas]
    # Newton: 2^L ≈ (κ²/2)·ln(1/ε), so L grows by log2(100) ≈ 6.6 per decade of κ (the log κ of Remark 3.1)
    assert np.all(np.abs(np.diff(newton) - 2 * np.log2(10)) <= 1)


@pytest.mark.parametrize("L", [1, 2, 5, 9])
def test_optimal_polynomial_against_least_squares(L):
    """min E p(s)² over p(0) = 1 (Stieltjes/Radau) equals a direct least-squares solve in a Legendre basis."""
    x, w = (np.asarray(a) for a in tasks.UniformScale.kappa(8.0).quadrature(40))
    steps, val = G.optimal_polynomial(x, w, L)
    assert np.sum(w * G.residual_polynomial(steps, x) ** 2) == pytest.approx(val, rel=1e-9)
    # p(s) = 1 + Σ_k c_k (P_k(t) − P_k(t0)), t = (2s − 9)/7: unconstrained least squares in c
    t, t0 = (2 * x - 9) / 7, -9 / 7
    V = np.stack(
        [
            np.polynomial.legendre.legval(t, np.eye(L + 1)[k]) - np.polynomial.legendre.legval(t0, np.eye(L + 1)[k])
            for k in range(1, L + 1)
        ],
        axis=1,
    )
    c = np.linalg.lstsq(np.sqrt(w)[:, None] * V, -np.sqrt(w), rcond=None)[0]
    assert np.sum(w * (1 + V @ c) ** 2) == pytest.approx(val, rel=1e-8)
    # looped: bisection against a dense grid
    a, lv = G.looped_optimum(x, w, L)
    grid = np.linspace(0.01, 1.0, 20001)
    vals = np.sum(w[None] * (1 - grid[:, None] * x[None]) ** (2 * L), axis=1)
    assert lv <= vals.min() * (1 + 1e-9) and lv >= vals.min() * (1 - 1e-3)


def test_trained_looped_fixed_gram_reaches_optimum():
    from jaxicl import dynamics

    cov = tasks.ScaledIdentityCovariance(D, tasks.UniformScale.kappa(4.0))
    A0 = 1e-2 * jax.random.normal(jax.random.PRNGKey(0), (1, D, D))
    L = 3
    res = dynamics.lbfgs(
        lambda A: losses.fixed_gram_population_loss(
            LinearTransformer.restricted(A, looped=True, depth=L, max_depth=L), cov
        ),
        A0,
        60,
    )
    x, w = (np.asarray(v) for v in cov.scale.quadrature(32))
    assert float(res.losses[-1]) == pytest.approx(D * G.looped_optimum(x, w, L)[1], rel=1e-6)


# --- Lemma 1, Thms 3, 6, 7, 8 ---------------------------------------------------------------------------
def test_lemma1_and_thm3():
    task = tasks.FixedGramRegression(D, N, tasks.RandomSpectrumCovariance(D, 1.0, 8.0))
    prompts = task.sample(jax.random.PRNGKey(0), 16)
    model = G.chebyshev_model(1.0, 8.0, D, 3)
    p0 = jax.tree_util.tree_map(lambda a: a[0], prompts)
    err = G.scaling_errors(model, p0, jnp.geomspace(1.0, 36.0 * 9, 2000))
    assert float(err.max()) >= 0.25
    loop = G.restricted_model([1 / 8.0], D, looped=True, depth=300, max_depth=300)
    ell, e, _ = jax.vmap(lambda p: G.adaptive_depth(loop, p, 1e-4))(prompts)
    assert np.all(np.asarray(ell) >= 0) and float(e.max()) <= 1e-4


def test_thm6_and_thm7():
    for L in (2, 4):
        B = G.thm6_training_covariances(1.0, 100.0, D, L)
        assert len(np.unique(np.diagonal(B[:-1], axis1=1, axis2=2))) == (L - 1) * D  # Ld − d distinct below β
        model = G.thm6_minimizer(1.0, 100.0, D, L)
        assert max(float(losses.fixed_gram_loss(model, jnp.asarray(b))) for b in B) <= 1e-10
        ood = float(losses.fixed_gram_loss(model, 8.0 * jnp.eye(D)))
        assert ood >= G.thm6_bound(1.0, 0.5, D, L)
    A = G.looped_minimizer_diagonal(
        np.stack([np.diag(b) for b in G.thm6_training_covariances(1.0, 100.0, D, 10)]), np.full(10, 0.1), 10
    )
    assert 1 / np.max(np.diag(A)) >= 50 * (1 - np.log(D * 10) / 10)


def test_thm8_monotone_tail():
    """Looped: the loss is monotone from ⌈L_0⌉ on; with |1 − sa| > 1 it first falls then rises."""
    A = np.diag([0.02, 0.05, 0.2, 0.3])
    s = 8.0
    L0 = G.looped_monotone_from(A, s * np.eye(D))
    assert L0 > 1
    model = LinearTransformer.restricted(jnp.asarray(A)[None], looped=True, depth=40, max_depth=40)
    vals = np.array(
        [
            float(
                losses.fixed_gram_loss(
                    LinearTransformer(model.params, looped=True, depth=L, max_depth=40), s * jnp.eye(D)
                )
            )
            for L in range(1, 41)
        ]
    )
    tail = vals[int(np.ceil(L0)) - 1 :]
    assert np.all(np.diff(tail) > 0)
    steps = G.nonmonotone_steps(4.0, 6)
    multi = G.restricted_model(steps, D)
    curve = [
        float(losses.fixed_gram_loss(LinearTransformer(multi.params, depth=L), 4.0 * jnp.eye(D))) for L in range(1, 7)
    ]
    assert np.any(np.diff(curve) > 0) and np.any(np.diff(curve) < 0)


def test_depth_curves_in_one_program_equal_each_models_fixed_gram_loss():
    """fixed_gram_depth_curves (the batched form the Thm 6-8 checks use): entry ℓ of each curve is fixed_gram_loss of
    the model cut to its first ℓ layers; zero padding keeps a shallower model's loss; a looped A is A repeated; a
    random non-symmetric A and a full SPD Σ, so no structure hides an error."""
    rng = np.random.default_rng(0)
    T = 5
    A_loop = 0.1 * rng.normal(size=(D, D)) + 0.2 * np.eye(D)
    multi = 0.1 * rng.normal(size=(3, D, D))
    a = rng.normal(size=(D, D))
    Sigma = a @ a.T / D + 0.5 * np.eye(D)
    layers = np.stack([np.repeat(A_loop[None], T, 0), np.concatenate([multi, np.zeros((T - 3, D, D))])])
    curves = np.asarray(losses.fixed_gram_depth_curves(layers, np.stack([Sigma, 2.0 * Sigma])))
    assert curves.shape == (2, T)
    looped = LinearTransformer.restricted(jnp.asarray(A_loop)[None], looped=True, depth=T, max_depth=T)
    want_loop = [
        float(
            losses.fixed_gram_loss(
                LinearTransformer(looped.params, looped=True, depth=L, max_depth=T), jnp.asarray(Sigma)
            )
        )
        for L in range(1, T + 1)
    ]
    want_multi = [
        float(losses.fixed_gram_loss(LinearTransformer.restricted(jnp.asarray(multi[:L])), 2.0 * jnp.asarray(Sigma)))
        for L in range(1, 4)
    ]
    np.testing.assert_allclose(curves[0], want_loop, rtol=1e-12)
    np.testing.assert_allclose(curves[1], want_multi + [want_multi[-1]] * (T - 3), rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        losses.fixed_gram_depth_curves(layers[0], Sigma)


def test_the_gradient_clip_reaches_adam():
    """``clip`` bounds the gradient's global norm before Adam: at 1e-14, far below Adam's ε (1e-8), every update is at
    most lr·1e-6 (lr·|g|/ε), so A stays at its initial value, where the unclipped training moves it by more than lr."""
    cfg = dataclasses.replace(gat.Config(), d=2, n=4, batch=8, steps=6, lr=1e-2, curve_windows=2)
    prior, key = tasks.UniformScale(1.0, 2.0), jax.random.PRNGKey(0)
    A0 = cfg.init_scale * jax.random.normal(jax.random.split(key)[0], (2, cfg.d, cfg.d))

    def moved(clip):
        A, _ = gat.train_gaussian_x(key, dataclasses.replace(cfg, clip=clip), prior, False, 2, 2)
        return float(jnp.max(jnp.abs(A - A0)))

    assert moved(0.0) > cfg.lr  # six Adam steps of at most lr each per entry (cosine-decayed)
    assert moved(1e-14) < 1e-5 * cfg.lr  # six such updates at most


def test_a_diverging_fig1_run_raises_naming_the_grid_point_and_step():
    """The Fig. 1 sweep program carries no host callback (so the persistent cache can hold it); divergence is
    checked on the host from the returned first non-finite step. In float32, a 1e6 initial scale overflows the
    depth-4 prediction (∝ ‖A‖⁴, squared in the loss) at step 0 and leaves depth 1 finite."""
    cfg = dataclasses.replace(
        gat.Config(),
        d=2,
        n=4,
        kappas=(2.0,),
        depths=(1, 4),
        seeds=1,
        batch=8,
        steps=6,
        init_scale=1e6,
        test_batch=64,
        curve_windows=2,
    )
    with (
        pytest.raises(
            FloatingPointError,
            match=r"not finite from step 0 on at kappa=2.0, depth=4, looped=0, seed=0 "
            r"\(2 of 4 grid points diverged\)",
        ),
        jax.enable_x64(False),
    ):
        gat.fig1_sweep(cfg, jax.random.PRNGKey(0))  # float32, as the reproduction runs it


def test_step_sizes_learned_through_gradient_descent_are_chebyshevs():
    """Thm 2's optimal k-step schedule, found by differentiating the error after k GD steps through the runs
    (`learned_steps_sweep`, L-BFGS with its early stop, the powers scanned): the learned steps are the reciprocal
    Chebyshev nodes on [1, κ] and their worst-case error is 1/T_k((κ+1)/(κ−1)), within 1 % (the smooth maximum at
    p = 2048 on a grid of 1001 points stops short of the true maximum)."""
    cfg = dataclasses.replace(gat.SIZES["quick"], learned_kappas=(4.0, 64.0), learned_steps=3, learned_grid=1001)
    ds = gat.learned_steps_sweep(cfg)
    assert ds.learned.shape == (2, 3)
    np.testing.assert_allclose(ds.learned.values, ds.chebyshev.values, rtol=1e-2)
    np.testing.assert_allclose(
        ds.learned_worst_error.values, G.chebyshev_worst_error(np.array([4.0, 64.0]), 3), rtol=1e-2
    )
    assert np.all(ds.learned_worst_error.values >= ds.chebyshev_worst_error.values * (1 - 1e-9))  # Chebyshev is optimal
    assert np.all(ds.gd_worst_error.values > ds.learned_worst_error.values)  # beats the best constant step
