"""Every Python code block of the README and of the documentation runs as written: each page's blocks, in order, in a
fresh interpreter of their own (a reader runs a page top to bottom), with nothing defined for them beforehand. The
pages whose results tests/test_readme.py checks run there (`CHECKED_PAGES`); every other page runs here. A block
that is a skeleton to fill in, not a program, is fenced as ``py`` rather than ``python`` and is not run. Every
concrete `jaxicl` command of the pages' shell blocks and of ``jaxicl --help`` passes the command's input checks."""

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


# A command line shown with placeholders (NAME, PAPER:STAGE, [...]) is a synopsis, not a command to run.
PLACEHOLDER = re.compile(r"\bNAME\b|PAPER|STAGE|CONFIG|SETTING|KEY=|\.\.\.|…|<|\||\[-")
ANY_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)  # every block, in order: (language, text)


def _commands(text: str) -> list[tuple[str, str]]:
    """The concrete shell blocks' `jaxicl` commands of ``text`` and its TOML files, in order: ("run", command line)
    and ("file", contents) for a TOML block whose first line is ``# NAME.toml`` (written before later commands)."""
    items = []
    for lang, block in ANY_FENCE.findall(text):
        if lang not in ("bash", "sh", "toml", ""):
            continue
        if lang == "toml":
            first = block.splitlines()[0]
            if re.fullmatch(r"# [\w.-]+\.toml", first):
                items.append(("file", block))
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("jaxicl ") and not PLACEHOLDER.search(line.split("#")[0]):
                items.append(("run", line.split("  #")[0].strip()))
    return items


def _help_examples() -> str:
    from jaxicl import cli

    lines = [
        line.strip()
        for epilog in (cli._EPILOG, cli._SWEEP_EPILOG)
        for line in epilog.split("examples:\n")[1].split("\n\n")[0].splitlines()
    ]
    return "```bash\n" + "\n".join(lines) + "\n```\n"


@pytest.mark.parametrize(
    "source",
    ["jaxicl --help", *(str(p.relative_to(ROOT)) for p in PAGES if _commands(p.read_text()))],
)
def test_the_commands_shown_pass_their_input_checks(source, tmp_path, monkeypatch, capsys):
    """Every concrete `jaxicl` command of ``jaxicl --help``'s examples and of the pages' shell blocks, run in order
    in an empty directory (a ``> FILE`` writes the output there; a TOML block headed ``# NAME.toml`` is written there
    first): each passes the command's checks of its input (names, flags, settings, grids, files), which run before
    any work. The work itself is stubbed out: a reproduction stops once its settings and --out are checked, a sweep
    when its stage is first called, after `sweep_stage` has checked the grid."""
    import shlex

    from jaxicl import cli
    from jaxicl.experiments import stage_sweep

    class Accepted(Exception):
        pass

    def stage_that_stops(name):
        paper, module, fn = real_stage(name)

        def stop(*args, **kwargs):
            raise Accepted

        stop.grid_axes = getattr(fn, "grid_axes", ())  # the same path through `sweep_stage` (vmapped or by point)
        return paper, module, stop

    real_stage = stage_sweep._stage
    monkeypatch.setattr(cli, "_reproduce_in", lambda *a: 0)
    monkeypatch.setattr(stage_sweep, "_stage", stage_that_stops)
    monkeypatch.chdir(tmp_path)
    items = _commands(_help_examples() if source == "jaxicl --help" else (ROOT / source).read_text())
    assert any(kind == "run" for kind, _ in items)
    for kind, text in items:
        if kind == "file":
            (tmp_path / text.splitlines()[0][2:]).write_text(text)
            continue
        command, _, into = text.partition(">")
        argv = shlex.split(command)[1:]
        capsys.readouterr()
        try:
            status = cli.main(argv + (["--no-cache"] if argv[0] in ("reproduce", "sweep") else []))
        except Accepted:
            status = 0
        out, err = capsys.readouterr()
        assert status == 0, f"{source}: `{text}` was refused: {err}"
        if into.strip():
            (tmp_path / into.strip()).write_text(out)
