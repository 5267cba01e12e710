"""Theorems 4.2 and 4.5 and the §4.2 shifts of Zhang et al., checked against simulation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxicl as icl
from jaxicl.experiments.report import mean_and_se as mc
from jaxicl.experiments.zhang2023 import example_covariance, predictions, squared_errors
from jaxicl.theory import zhang

N_SE = 3.0
with jax.enable_x64(True):  # float64, as every check here (x64 is on per test, not at import)
    LAM = example_covariance(3)


@pytest.mark.parametrize("N,M", [(5, 10), (40, 100)])
def test_thm_4_2_noisy_linear_and_quadratic_task(N, M):
    with jax.enable_x64(True):
        lam = example_covariance(3)
        w = jnp.array([1.0, -2.0, 0.5])
        v = jnp.array([0.3, 0.2, -0.6])
        model = zhang.w_star_model(lam, N)
        # noisy linear D (task shift)
        pred = zhang.prediction_error(*zhang.linear_task_moments(w, lam, 0.7), lam, N, M)
        m, se = mc(
            squared_errors(jax.random.PRNGKey(N), model, lam, lam, w, v, 0.0, 0.7, M=M, batch=40_000, fixed_w=True)
        )
        assert abs(m - pred) <= N_SE * se
        # nonlinear D: y = ⟨w, x⟩ + q⟨v, x⟩²: a = w, best linear error 3q²(vᵀΛv)²
        q = 0.4
        Lw, Lv, vLv = lam @ w, lam @ v, v @ lam @ v
        sigma = (w @ Lw) * lam + jnp.outer(Lw, Lw) + q**2 * (3 * vLv**2 * lam + 12 * vLv * jnp.outer(Lv, Lv))
        pred = zhang.prediction_error(w, sigma, 3 * q**2 * vLv**2, lam, N, M)
        m, se = mc(
            squared_errors(jax.random.PRNGKey(M), model, lam, lam, w, v, q, 0.0, M=M, batch=40_000, fixed_w=True)
        )
        assert abs(m - pred) <= N_SE * se


def test_isotropic_error_is_below_corollary_4_3_bound_and_lengths_suffice():
    lam = example_covariance(3)
    for eps in (0.5, 0.1):
        M, N = (int(np.ceil(float(x))) for x in zhang.corollary_4_3_lengths(lam, eps))
        assert zhang.prediction_error_isotropic(lam, N, M) <= eps
        assert zhang.prediction_error_isotropic(lam, N, M) <= zhang.corollary_4_3_bound(lam, N, M)


def test_covariate_scaling_multiplies_predictions_by_c_squared():
    N = M = 400
    model = zhang.w_star_model(LAM, N)
    for c in (0.5, 2.0):
        yh, y = (
            np.asarray(a)
            for a in predictions(
                jax.random.PRNGKey(int(10 * c)),
                model,
                c**2 * LAM,
                c**2 * LAM,
                jnp.zeros(3),
                jnp.zeros(3),
                0.0,
                0.0,
                M=M,
                batch=20_000,
                fixed_w=False,
            )
        )
        slope = (yh * y).mean() / (y * y).mean()
        se = ((yh * y) - slope * y * y).std(ddof=1) / np.sqrt(y.size) / (y * y).mean()
        pred = float(zhang.covariate_scaling_slope(LAM, N, c))
        assert abs(slope - pred) <= N_SE * se
        assert abs(pred - c**2) <= 0.02 * c**2  # the N → ∞ statement of §4.2


def test_query_shift_is_tolerated():
    N = M = 400
    lq = 4.0 * jnp.eye(3)
    model = zhang.w_star_model(LAM, N)
    m, se = mc(
        squared_errors(
            jax.random.PRNGKey(9),
            model,
            LAM,
            lq,
            jnp.zeros(3),
            jnp.zeros(3),
            0.0,
            0.0,
            M=M,
            batch=20_000,
            fixed_w=False,
        )
    )
    pred = zhang.query_shift_error(LAM, lq, N, M)
    assert abs(m - pred) <= N_SE * se
    assert pred < 0.02 * jnp.trace(lq)  # far below the zero predictor's error tr(Λ_q) …
    # … and vanishing like 1/M (+ 1/N²): ten times longer prompts cut it at least ~tenfold
    assert zhang.query_shift_error(LAM, lq, 10 * N, 10 * M) <= 0.11 * pred


def test_thm_4_5_random_covariance_limit_and_error_on_new_covariance():
    d, N = 3, 10
    prior = icl.tasks.RandomDiagonalCovariance(d)
    task = icl.tasks.LinearRegression(d, N, prior)
    m0 = icl.models.LinearSelfAttention.balanced_init(d, 0.3, jax.random.PRNGKey(0))
    sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 3000.0, rtol=1e-10, atol=1e-12)
    wk, wp, b = zhang.random_covariance_limit(*prior.raw_moments(), d, N)
    assert jnp.linalg.norm(sol.final.W_kq - wk) / jnp.linalg.norm(wk) <= 1e-6
    assert jnp.linalg.norm(sol.final.W_pv - wp) / jnp.linalg.norm(wp) <= 1e-6
    lam_new = prior.sample_eigenvalues(jax.random.PRNGKey(5))
    err = 2 * icl.population_loss(sol.final, icl.tasks.LinearRegression(d, 10**6, jnp.diag(lam_new)))
    assert jnp.allclose(err, zhang.random_covariance_limit_error(b, lam_new), rtol=1e-4)
    # N, M → ∞ with Exp(1) entries: b → E[λ²]/E[λ³] = 1/3, the paper's E ŷ → ⟨w, x_q⟩/3
    assert jnp.allclose(zhang.random_covariance_limit(*prior.raw_moments(), d, 10**9)[2], 1 / 3, rtol=1e-6)


def test_an_integer_array_prompt_length_keeps_double_precision():
    """A sweep hands N over as an integer array: Γ and the limits built on it stay float64, equal to a Python int's."""
    N = 20
    for n in (jnp.int32(N), jnp.int64(N)):
        assert zhang.gamma(LAM, n).dtype == jnp.float64
        assert jnp.allclose(zhang.gamma(LAM, n), zhang.gamma(LAM, N), rtol=1e-15, atol=0)
        assert jnp.allclose(zhang.min_population_loss(LAM, n), zhang.min_population_loss(LAM, N), rtol=1e-15, atol=0)
        b_int, b_array = (zhang.random_covariance_limit(1.0, 2.0, 6.0, 3, m)[2] for m in (N, n))
        assert jnp.allclose(b_array, b_int, rtol=1e-15, atol=0)
