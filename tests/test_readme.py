"""The README's ten-line example runs as written."""

import re
from pathlib import Path

import pytest


def test_readme_example_runs():
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"## The library in ten lines\n\n```python\n(.*?)```", text, re.S).group(1)
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert ns["sol"].losses.shape == ns["sol"].ts.shape
    assert ns["sol"].losses[-1] < ns["sol"].losses[0]


@pytest.mark.slow
def test_reproduce_zhang2023_full_passes_every_check(tmp_path):
    from jaxicl.experiments import reproduce

    (res,) = reproduce(["zhang2023"], size="full", out=tmp_path)
    assert all(c.passed is not False for c in res.checks)
