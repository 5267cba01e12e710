"""Compile-time accounting (jaxicl.runtime.profiling) and the persistent compilation cache (jaxicl.runtime.compilation_cache)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxicl import cli
from jaxicl.experiments.report import PaperResult, render_markdown
from jaxicl.runtime.profiling import StageTimer


def test_a_stage_counts_its_compilations_and_splits_compile_from_run():
    timer = StageTimer()
    f = jax.jit(lambda x: jnp.sin(x) @ x.T + 1.2345)
    x = jnp.ones((64, 64))
    f(x).block_until_ready()
    first = timer.lap("compile and run")
    for _ in range(3):
        f(x).block_until_ready()
    second = timer.lap("run only")
    assert first.programs >= 1 and 0 < first.compile <= first.wall
    assert second.programs == 0 and second.compile == 0.0 and second.run == second.wall
    report = render_markdown([PaperResult("p", "t", "quick", [], [], [], stages=timer.stages)])
    assert "| compile and run |" in report and "| total |" in report


def test_closed_forms_called_eagerly_compile_one_program_per_new_shape():
    """The checks evaluate closed forms eagerly, in Python loops over depth; each jnp operation of an unjitted
    function would be an XLA program of its own (a model at a new depth: 10 programs), so they are jitted."""
    import numpy as np

    from jaxicl import losses, tasks
    from jaxicl.models import LinearTransformer
    from jaxicl.theory import ahn, yang

    def fixed_gram(L):  # Gatmiry et al. eq. (9) for a restricted model of depth L, built from host data
        return float(losses.fixed_gram_loss(LinearTransformer.restricted(np.full((L, 3, 3), 0.1)), 2 * np.eye(3)))

    timer = StageTimer()
    fixed_gram(2)
    timer.lap("warm-up")
    value = fixed_gram(5)
    assert timer.lap("new depth").programs <= 1
    # A_t = 0.1·11ᵀ, Σ = 2I: M = (I − 0.2·11ᵀ)^5 has eigenvalues (1 − 0.6)^5, 1, 1 and tr(MΣMᵀΣ⁻¹) = tr(MMᵀ)
    assert value == pytest.approx(2 + 0.4**10, rel=1e-6)
    fixed_gram(5)
    assert timer.lap("same depth").programs == 0
    task = tasks.TemplateRegression.random(jax.random.PRNGKey(0), d=4, K=8, n_context=5, m=3, tau=0.1)
    timer.lap("task")
    yang.loss_infimum(task).block_until_ready()
    assert timer.lap("Yang et al. L*").programs <= 1
    ahn.thm1_min_loss(np.eye(3), 10).block_until_ready()
    assert timer.lap("Ahn et al. Thm 1").programs <= 1


# A fresh process per step, so that JAX's in-memory caches do not hide the persistent one.
_PROGRAM = """
import json, sys, jax, jax.numpy as jnp
from jaxicl.runtime import compilation_cache
from jaxicl.runtime.profiling import StageTimer
compilation_cache.enable(sys.argv[1], min_compile_seconds=0.0)
timer = StageTimer()
scale = float(sys.argv[2])
# a "model" whose constant and shape come from the command line: a changed model is a different program
out = jax.jit(lambda x: jnp.tanh(scale * x) @ x.T)(jnp.arange(int(sys.argv[3]) ** 2,
dtype=jnp.float32).reshape(int(sys.argv[3]), -1) / 100)
stage = timer.lap("x")
print(json.dumps({"programs": stage.programs, "hits": stage.cache_hits, "sum": float(out.sum())}))
"""


def _run(program, *args):
    """The JSON that ``program`` prints last, run in a fresh process with ``args``."""
    res = subprocess.run(
        [sys.executable, "-c", program, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_persistent_cache_is_reused_and_a_changed_model_recompiles(tmp_path):
    cache = tmp_path / "xla"
    cold = _run(_PROGRAM, cache, 0.5, 8)
    assert cold["programs"] >= 1 and cold["hits"] == 0 and any(cache.iterdir())
    warm = _run(_PROGRAM, cache, 0.5, 8)
    assert warm["hits"] >= 1 and warm["sum"] == cold["sum"]  # read back, same numbers
    changed = _run(_PROGRAM, cache, 0.7, 8)  # another constant: another program, compiled afresh
    reference = float(
        (jnp.tanh(0.7 * (jnp.arange(64.0) / 100).reshape(8, 8)) @ (jnp.arange(64.0) / 100).reshape(8, 8).T).sum()
    )
    assert changed["sum"] == pytest.approx(reference, rel=1e-5)
    reshaped = _run(_PROGRAM, cache, 0.5, 9)  # another shape
    assert reshaped["sum"] != cold["sum"]
    # the main program (the matrix product) missed the cache in both: at most the shared one-op programs hit
    assert changed["hits"] < warm["hits"] and reshaped["hits"] < warm["hits"]


_FLOW = """
import json, sys, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import jaxicl as icl
from jaxicl.runtime import compilation_cache
from jaxicl.runtime.profiling import StageTimer
compilation_cache.enable(sys.argv[1], min_compile_seconds=0.0)
task = icl.tasks.LinearRegression(2, 6, icl.tasks.FixedCovariance(jnp.diag(jnp.array([0.6, 1.7]))))
m0 = icl.models.LinearSelfAttention.balanced_init(2, 0.3, jax.random.PRNGKey(3))
timer = StageTimer()
sol = icl.gradient_flow(lambda m: icl.population_loss(m, task), m0, 50.0, n_save=10, steady_state_tol=1e-9)
stage = timer.lap("flow")
print(json.dumps({"programs": stage.programs, "hits": stage.cache_hits, "loss": float(sol.losses[-1])}))
"""


def test_a_gradient_flow_is_read_back_from_the_persistent_cache(tmp_path):
    """A flow's program holds no host callback (tests/test_dynamics.py), so a second process reads every program of
    the same flow from the persistent cache, the solve's included, and gets the same numbers."""
    cold, warm = _run(_FLOW, tmp_path / "xla"), _run(_FLOW, tmp_path / "xla")
    assert cold["programs"] >= 1 and cold["hits"] == 0
    assert warm["hits"] == warm["programs"] == cold["programs"] and warm["loss"] == cold["loss"]


def test_cli_cache_options(tmp_path, capsys, monkeypatch):
    args = cli.build_parser().parse_args(["reproduce", "zhang2023", "--no-cache"])
    assert args.no_cache and args.cache_dir is None
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(
        SystemExit, match=r"cannot write to the compilation cache .*xla \(Not a directory\)\. Pass --cache-dir"
    ):
        cli.main(["reproduce", "zhang2023", "--cache-dir", str(blocked / "xla"), "--out", str(tmp_path / "o")])
    from jaxicl.runtime import compilation_cache

    monkeypatch.setenv("JAXICL_CACHE_DIR", str(tmp_path / "env-cache"))
    assert compilation_cache.default_dir() == Path(tmp_path / "env-cache")
    monkeypatch.delenv("JAXICL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.default_dir() == tmp_path / "xdg" / "jaxicl" / "xla"


def test_the_tests_keep_the_default_compilation_cache_out_of_the_users_home():
    """A run a test starts without --cache-dir writes its compilation cache into the session's directory
    (tests/conftest.py), which exists, is no cache directory of the user's, and is inherited by the processes the
    tests start."""
    import tempfile

    from jaxicl.runtime import compilation_cache

    here = compilation_cache.default_dir()
    assert here.is_dir() and here.name.startswith("jaxicl-tests-xla-")
    assert here.parent == Path(tempfile.gettempdir())
    assert not here.is_relative_to(Path.home() / ".cache")
    child = subprocess.run(
        [sys.executable, "-c", "from jaxicl.runtime import compilation_cache as c; print(c.default_dir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()) == here
