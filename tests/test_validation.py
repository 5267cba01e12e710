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
    with pytest.raises(ValueError, match="d >= 1"):
        icl.tasks.LinearRegression(0, 5)
    with pytest.raises(ValueError, match="n_context"):
        icl.tasks.LinearRegression(2, 0)
    with pytest.raises(ValueError, match="3-dimensional"):
        icl.tasks.LinearRegression(2, 5, jnp.eye(3))
    with pytest.raises(ValueError, match="weights"):
        icl.tasks.LinearRegression(2, 5, weights="gaussian")
    with pytest.raises(ValueError, match="noise_std"):
        icl.tasks.LinearRegression(2, 5, noise_std=-1.0)
    with pytest.raises(ValueError, match="d >= 1"):
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


@pytest.mark.parametrize("kwargs,match", [
    ({"ts": [0.0, 2.0, 1.0]}, "increasing"),
    ({"ts": [0.0, 1.0, 20.0]}, r"inside \[0, t1 = 10.0\]"),
    ({"ts": [-1.0, 1.0]}, r"inside \[0, t1"),
    ({"dt0": -0.1}, "dt0 must be positive"),
])
def test_gradient_flow_save_times_and_first_step_are_checked_on_the_host(kwargs, match):
    """gradient_flow checks ts and dt0 itself (diffrax's own checks are host callbacks in the compiled program, which
    would keep it out of the persistent compilation cache, so they are switched off while it traces)."""
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
