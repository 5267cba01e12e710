"""Bad input gets an error that says what was wrong."""

import jax
import jax.numpy as jnp
import pytest

import jaxicl as icl
from jaxicl.experiments import reproduce


@pytest.mark.parametrize(
    "cov,match",
    [
        (jnp.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
        (jnp.array([[1.0, 2.0], [2.0, 1.0]]), "positive definite"),
        (jnp.ones((2, 3)), "square"),
        (jnp.ones(3), "square"),
    ],
)
def test_bad_covariance(cov, match):
    with pytest.raises(ValueError, match=match):
        icl.tasks.FixedCovariance(cov)


def test_bad_dimensions_and_lengths():
    with pytest.raises(ValueError, match="d must be >= 1, got 0"):
        icl.tasks.LinearRegression(0, 5)
    with pytest.raises(ValueError, match="n_context"):
        icl.tasks.LinearRegression(2, 0)
    with pytest.raises(ValueError, match="3-dimensional"):
        icl.tasks.LinearRegression(2, 5, jnp.eye(3))
    with pytest.raises(ValueError, match="weights"):
        icl.tasks.LinearRegression(2, 5, weights="gaussian")
    with pytest.raises(ValueError, match="noise_std"):
        icl.tasks.LinearRegression(2, 5, noise_std=-1.0)
    with pytest.raises(ValueError, match="d must be >= 1, got 0"):
        icl.models.LinearSelfAttention.balanced_init(0, 0.1, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="scale"):
        icl.tasks.RandomDiagonalCovariance(2, scale=0.0)


def test_prompt_of_wrong_width():
    model = icl.models.LinearSelfAttention.random_init(3, 0.1, jax.random.PRNGKey(0))
    prompt = icl.tasks.LinearRegression(2, 5).sample_one(jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match="d=3"):
        model.predict(prompt)
    with pytest.raises(ValueError, match="expects an embedding"):
        model(icl.tasks.embed(prompt))
    with pytest.raises(ValueError, match="d=3 but the task has d=2"):
        icl.population_loss(model, icl.tasks.LinearRegression(2, 5))


def test_unknown_reproduction_name():
    with pytest.raises(ValueError, match="available"):
        reproduce(["nope2099"], out="unused")


def test_sigma_violating_theorem_condition_warns_and_runs():
    task = icl.tasks.LinearRegression(2, 5, jnp.eye(2) * 4.0)
    with pytest.warns(UserWarning, match="σ²‖Γ‖_op√d < 2"):
        m0 = icl.models.LinearSelfAttention.balanced_init(2, 1.5, jax.random.PRNGKey(0), task=task)
    sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 10.0, n_save=4)
    assert jnp.all(jnp.isfinite(sol.losses))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"ts": [0.0, 2.0, 1.0]}, "increasing"),
        ({"ts": [0.0, 1.0, 20.0]}, r"inside \[0, t1 = 10.0\]"),
        ({"ts": [-1.0, 1.0]}, r"inside \[0, t1"),
        ({"dt0": -0.1}, "dt0 must be positive"),
    ],
)
def test_gradient_flow_save_times_and_first_step_are_checked_on_the_host(kwargs, match):
    """gradient_flow checks ts and dt0 on the host, before anything is traced, naming the argument (diffrax checks ts
    again inside the program)."""
    with pytest.raises(ValueError, match=match):
        icl.gradient_flow(lambda p: jnp.sum(p**2), jnp.ones(2), 10.0, **kwargs)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_get_the_umasks_permissions(tmp_path, umask):
    """Atomic writes go through a temporary file (created 0600); the result has a new file's mode under the
    process's umask, so that a colleague can read a shared report (0644 under umask 022)."""
    import os
    import stat

    from jaxicl._io import atomic_write_text

    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.md", "x")
        (tmp_path / "plain").write_text("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "report.md").stat().st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE((tmp_path / "plain").stat().st_mode)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: icl.tasks.LinearRegression(d=2.7, n_context=4), r"d must be an integer, got 2\.7"),
        (lambda: icl.tasks.LinearRegression(d=2, n_context=4.9), r"n_context \(N\) must be an integer, got 4\.9"),
        (lambda: icl.tasks.LinearRegression(d="2", n_context=4), r"d must be an integer, got '2'"),
        (lambda: icl.tasks.LinearRegression(d=2, n_context=4, noise_std=float("inf")), r"noise_std must be finite"),
        (lambda: icl.tasks.LinearRegression(d=2, n_context=4, noise_std=-0.1), r"noise_std must be >= 0"),
        (
            lambda: icl.models.LinearSelfAttention.balanced_init(2, float("nan"), jax.random.PRNGKey(0)),
            r"sigma must be finite",
        ),
        (lambda: icl.models.LinearSelfAttention.balanced_init(2, 0.0, jax.random.PRNGKey(0)), r"sigma must be > 0"),
        (
            lambda: icl.models.LinearSelfAttention.random_init(2.5, 0.1, jax.random.PRNGKey(0)),
            r"random_init: d must be an integer",
        ),
        (
            lambda: icl.models.LinearSelfAttention.balanced_init(2, [], jax.random.PRNGKey(0)),
            r"sigma must be a real number",
        ),
        (
            lambda: icl.models.LinearTransformer.init(jax.random.PRNGKey(0), 2, 2.5),
            r"init: n_layers must be an integer",
        ),
        (
            lambda: icl.models.LinearTransformer.init(jax.random.PRNGKey(0), 2, 1, scale=float("nan")),
            r"scale must be finite",
        ),
        (lambda: icl.models.MultiHeadSoftmaxICL.init(jax.random.PRNGKey(0), 2, 3.5, 4), r"init: d must be an integer"),
        (lambda: icl.models.MultiHeadSoftmaxICL.init(jax.random.PRNGKey(0), 2, 3, 4, beta=float("inf")), r"β.*finite"),
        (
            lambda: icl.models.StandardTransformer(jax.random.PRNGKey(0), 2, 1, n_layers=1.5),
            r"n_layers must be an integer",
        ),
        (lambda: icl.models.StandardTransformer(jax.random.PRNGKey(0), 2, 1, d_model=0), r"d_model must be >= 1"),
        (lambda: icl.tasks.RepresentationRegression(2, 5, noise_std=float("nan")), r"noise_std must be finite"),
        (lambda: icl.tasks.RepresentationRegression(2.5, 5), r"d must be an integer, got 2\.5"),
        (lambda: icl.tasks.CoTMLP(2, 3, 5, slope=float("inf")), r"slope must be finite"),
        (lambda: icl.tasks.UniformScale(1.0, float("inf")), r"UniformScale.high must be finite"),
        (lambda: icl.tasks.DiscreteScale([1.0, float("inf")]), r"DiscreteScale: values must be finite"),
        (
            lambda: icl.gradient_descent(lambda p: (p**2).sum(), jnp.ones(2), float("nan"), 3),
            r"gradient_descent: step must",
        ),
        (
            lambda: icl.gradient_descent(lambda p: (p**2).sum(), jnp.ones(2), 0.1, 2.5),
            r"gradient_descent: n_steps must be",
        ),
        (
            lambda: icl.train(lambda m, k, s: (m**2).sum(), jnp.ones(2), 2.5, jax.random.PRNGKey(0)),
            r"train: n_steps must be",
        ),
    ],
)
def test_constructors_refuse_bad_values_naming_the_argument(make, match):
    """Integers are never truncated, scales are finite: the error names the argument and the value."""
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def _lsa_flow_inputs():
    task = icl.tasks.LinearRegression(2, 5)
    return task, icl.models.LinearSelfAttention.balanced_init(2, 0.3, jax.random.PRNGKey(0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rtol=-1.0), r"gradient_flow: rtol must be > 0, got -1\.0"),
        (dict(atol=0.0), r"gradient_flow: atol must be > 0"),
        (dict(rtol=float("nan")), r"gradient_flow: rtol must be finite"),
        (dict(n_save=2.5), r"gradient_flow: n_save must be an integer"),
        (dict(max_steps=0), r"gradient_flow: max_steps must be >= 1"),
    ],
)
def test_gradient_flow_refuses_bad_tolerances_before_any_work(kwargs, match):
    """A negative tolerance made diffrax accept every step: the loss went up and no error was raised."""
    task, model = _lsa_flow_inputs()
    with pytest.raises((ValueError, TypeError), match=match):
        icl.gradient_flow(lambda m: icl.population_loss(m, task), model, 20.0, **kwargs)
    with pytest.raises(ValueError, match="t1"):
        icl.gradient_flow(lambda m: icl.population_loss(m, task), model, float("inf"))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch=2.5), r"mc_loss: batch must be an integer, got 2\.5"),
        (dict(batch=0), r"mc_loss: batch must be >= 1"),
        (dict(chunk_size=0), r"mc_loss: chunk_size must be >= 1"),
        (dict(chunk_size=-1), r"mc_loss: chunk_size must be >= 1"),
    ],
)
def test_mc_loss_refuses_a_fractional_or_empty_batch(kwargs, match):
    """``batch=2.5`` drew 3 prompts and divided by 2.5 (a 1.2x bias)."""
    task, model = _lsa_flow_inputs()
    with pytest.raises((ValueError, TypeError), match=match):
        icl.mc_loss(model, task, jax.random.PRNGKey(1), **kwargs)


def test_finite_difference_needs_a_positive_step():
    with pytest.raises(ValueError, match=r"finite_difference: eps must be > 0, got 0"):
        icl.finite_difference(lambda x: x**2, {"x": jnp.asarray(1.0)}, eps=0)


def test_a_nan_in_a_flow_names_the_first_saved_time_and_a_nan_gradient_is_not_called_stiffness():
    import numpy as np

    def nan_loss(th):  # θ(t) = e^{−t}: NaN from t = 0.45 on, between two saved times (not at one, where the solver's
        return jnp.where(th[0] < np.exp(-0.45), jnp.nan, 0.5 * jnp.sum(th**2))  # error would decide the side)

    with pytest.raises(FloatingPointError, match=r"the loss is nan at the saved time t = 0\.5, the first saved time"):
        icl.gradient_flow(nan_loss, jnp.ones(2), 2.0, ts=np.linspace(0, 2, 21))

    def nan_gradient(th):  # the derivative of the untaken branch is NaN everywhere
        return 0.5 * jnp.sum(th**2) + jnp.where(th[0] > 5.0, jnp.sqrt(-1.0 + 0 * th[0]), 0.0)

    with pytest.raises(FloatingPointError, match=r"the gradient there is not finite .* \(not stiffness\)"):
        icl.gradient_flow(nan_gradient, jnp.ones(2), 2.0, ts=np.linspace(0, 2, 21))


def test_a_half_precision_covariance_is_refused_naming_it():
    """A float16 Λ failed deep in a linear-algebra call ("array type float16 is unsupported in linalg"), naming no
    argument; now the constructor names it and says what to pass."""
    with pytest.raises(TypeError, match=r"FixedCovariance matrix is float16: .* float32 or float64"):
        icl.tasks.FixedCovariance(jnp.eye(3, dtype=jnp.float16))
    with pytest.raises(TypeError, match="bfloat16"):
        icl.tasks.FixedCovariance(jnp.eye(3, dtype=jnp.bfloat16))
    icl.tasks.FixedCovariance(jnp.eye(3, dtype=jnp.float32))  # single precision is fine
