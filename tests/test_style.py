"""The tree is formatted and linted as pyproject.toml's [tool.ruff] says (``ruff format``, ``ruff check``), the notebooks
within 79 columns, the documentation site's text column (notebooks/ruff.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is not installed: it is in the test extras (pip install -e '.[test]')")
    return [exe]


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_the_tree_is_clean_under_ruff(command):
    run = subprocess.run(_ruff() + command + ["."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
