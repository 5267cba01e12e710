"""Every Python code block of the README and of the documentation runs as written: each page's blocks, in order, in a
fresh interpreter of their own (a reader runs a page top to bottom), with nothing defined for them beforehand. The
pages whose results tests/test_readme.py checks run there (`CHECKED_PAGES`); every other page runs here. A block
that is a skeleton to fill in, not a program, is fenced as ``py`` rather than ``python`` and is not run."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
sys.path.insert(0, str(Path(__file__).parent))
from test_readme import CHECKED_PAGES  # noqa: E402

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text())


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if _blocks(p) and str(p.relative_to(ROOT)) not in CHECKED_PAGES],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_pages_code_runs_as_written(page, tmp_path):
    code = "\n\n".join(_blocks(page))
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert run.returncode == 0, f"{page.name}:\n{run.stderr[-3000:]}"
