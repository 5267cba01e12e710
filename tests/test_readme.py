"""The README's ten-line example and the guides' examples (docs/) run as written, and compute what they say."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TEN_LINES = r"## The library in ten lines\n\n```python\n(.*?)```"


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    code = re.search(TEN_LINES, text, re.S).group(1)
    # the getting-started page shows the same example
    assert re.search(TEN_LINES, (ROOT / "docs" / "getting-started.md").read_text(), re.S).group(1) == code
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert ns["sol"].losses.shape == ns["sol"].ts.shape
    assert ns["sol"].losses[-1] < ns["sol"].losses[0]


FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
# the guide pages whose examples these tests run and check; tests/test_doc_examples.py runs every other page's
CHECKED_PAGES = (
    "README.md",
    "docs/getting-started.md",
    "docs/guides/linear-transformers.md",
    "docs/guides/gatmiry.md",
    "docs/guides/yang.md",
    "docs/guides/softmax-transformers.md",
    "docs/guides/differentiating.md",
    "docs/guides/extending.md",
)


def _run_page(page: str) -> dict:
    """Every python block of ``page`` (a path under the repository), in order, in a fresh namespace (the pages are
    self-contained: nothing is defined for them); the namespace."""
    ns: dict = {}
    for block in FENCE.findall((ROOT / page).read_text()):
        exec(compile(block, page, "exec"), ns)
    return ns


def test_readme_linear_transformer_example_runs():
    ns = _run_page("docs/guides/linear-transformers.md")
    assert ns["fit"].losses[-1] < 0.2 * ns["fit"].losses[0]


def test_readme_gatmiry_example_runs():
    import numpy as np

    from jaxicl.theory import gatmiry as G

    ns = _run_page("docs/guides/gatmiry.md")
    worst = G.worst_case_error(G.model_scalar_error(ns["cheb"]), 1.0, 100.0)  # the Chebyshev model, through it
    assert worst == pytest.approx(G.chebyshev_worst_error(100.0, 8), rel=1e-9)
    mean, se = ns["icl"].losses.gaussian_x_mc(ns["model"], ns["gx"], ns["key"], 20_000)
    assert np.isfinite(float(mean)) and float(se) > 0


def test_readme_yang_example_runs():
    ns = _run_page("docs/guides/yang.md")
    assert float(ns["curve"][-1]) < 1e-4 * float(ns["curve"][0])  # four decades towards the ridge-regression limit


def test_readme_algoformer_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes algo.ckpt
    ns = _run_page("docs/guides/softmax-transformers.md")
    import numpy as np

    assert ns["run"].losses.shape == (200,) and (tmp_path / "algo.ckpt").exists()
    assert np.mean(ns["run"].losses[-20:]) < np.mean(ns["run"].losses[:20])
    assert ns["curve"].shape == (8,) and np.all(np.isfinite(ns["curve"]))


def test_readme_sensitivity_example_runs():
    import numpy as np

    ns = _run_page("docs/guides/differentiating.md")
    for name in ("sigma", "lam"):
        np.testing.assert_allclose(np.asarray(ns["grads"][name]), ns["check"][name], rtol=1e-6)


def test_guide_adding_a_model_and_a_task_runs():
    """The worked example: the registered closed form is what population_loss returns, it agrees with Monte Carlo
    within 4 standard errors where the Gaussian moment in its place is rejected, and the flow ends at η⋆."""
    ns = _run_page("docs/guides/extending.md")
    exact, mc, se = float(ns["exact"]), float(ns["mc"]), float(ns["se"])
    assert abs(exact - mc) <= 4 * se
    model, task = ns["model"], ns["task"]
    d, N, s2, eta = task.d, task.n_context, task.noise_std**2, float(model.eta)
    gaussian = 0.5 * (eta**2 * d * (N + d + 1 + s2) / N - 2 * eta * d + d + s2)  # the wrong moment
    assert abs(gaussian - mc) > 4 * se
    assert float(ns["sol"].final.eta) == pytest.approx(ns["eta_star"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("paper", ["zhang2023", "ahn2023", "gatmiry2024", "yang2024"])
def test_reproduce_full_passes_every_check(paper, tmp_path, monkeypatch):
    """The paper-size reproductions, except the transformer figures (Zhang Fig. 1, Yang Figs. 2(b)/5: 500k and 20k
    steps at the papers' sizes, weeks on a CPU; run them with `jaxicl reproduce <paper> --full` on a GPU)."""
    import dataclasses

    from jaxicl.experiments import REPRODUCTIONS, reproduce

    part = {"zhang2023": "gpt2", "yang2024": "transformer"}.get(paper)
    if part is not None:
        module = importlib.import_module(REPRODUCTIONS[paper][0])
        monkeypatch.setitem(module.SIZES, "full", dataclasses.replace(module.SIZES["full"], **{part: None}))
    (res,) = reproduce([paper], size="full", out=tmp_path)
    assert all(c.verdict != "FAIL" for c in res.checks)
