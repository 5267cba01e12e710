"""Every Python code block of the README and of the documentation runs as written: each page's blocks, in order, in a
fresh interpreter of their own (a reader runs a page top to bottom), with nothing defined for them beforehand. The
pages whose results tests/test_readme.py checks run there (`CHECKED_PAGES`); every other page runs here. A block
that is a skeleton to fill in, not a program, is fenced as ``py`` rather than ``python`` and is not run. Every
concrete `jaxicl` command of the pages' shell blocks and of ``jaxicl --help`` passes the command's input checks, and
every `jaxicl …` written inline (pages and the library's messages) names options, papers and stages that exist."""

import argparse
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


# Every `jaxicl …` written inline, in prose or in the library's messages (a name, a synopsis or a command): the pages
# (not the kept reports, which quote the commands as they ran) and jaxicl/'s sources.
INLINE = re.compile(r"`(jaxicl(?: [^`\n]*)?)`")
INLINE_SOURCES = [
    *(p for p in PAGES if "reports" not in p.relative_to(ROOT).parts),
    *sorted((ROOT / "jaxicl").rglob("*.py")),
]


def _inline_commands() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), command)
        for path in INLINE_SOURCES
        for command in dict.fromkeys(INLINE.findall(path.read_text()))
    ]


def _unknown_names(command: str, parser, papers: list[str], stages: list[str]) -> list[str]:
    """The names of ``command`` (a command line, or a synopsis with placeholders in capitals, braces or angle
    brackets) that the command line does not have: its subcommand, its options, a paper it names, a stage."""
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    tokens = command.split()[1:]
    if not tokens or tokens[0] in ("--help", "-h", "COMMAND"):
        return []
    if tokens[0] not in subcommands:
        return [tokens[0]]
    options = subcommands[tokens[0]]._option_string_actions
    unknown = []
    for i, token in enumerate(tokens[1:], 1):
        for word in token.strip("[]").split("|"):
            if word.startswith("-"):
                unknown += [word] if word.split("=")[0] not in options else []
            elif tokens[i - 1] == "--stage" and re.fullmatch(r"[a-z0-9_]+:\w+", word):  # a stage, or PAPER:NAME
                paper, _, name = word.partition(":")
                unknown += (
                    []
                    if word in stages or name.isupper() and any(s.startswith(paper + ":") for s in stages)
                    else [word]
                )
            elif i == 1 and tokens[0] in ("reproduce", "config") and re.fullmatch(r"[a-z0-9_]+", word):
                unknown += [word] if word not in papers else []
    return unknown


def _what_the_command_line_has() -> tuple:
    """(the parser, the papers, the stages) that `_unknown_names` checks against."""
    from jaxicl import cli
    from jaxicl.experiments import available
    from jaxicl.experiments.stage_sweep import stages

    return cli.build_parser(), available(), list(stages())


def test_the_commands_written_inline_name_what_the_command_line_has():
    """Every `jaxicl …` written inline in the pages and in the library's messages names a subcommand, options, papers
    and stages that the command line has: a renamed option or stage leaves no page or message pointing at the old
    name. (The concrete commands of the shell blocks and of the help run, above.)"""
    parser, papers, known_stages = _what_the_command_line_has()
    found = _inline_commands()
    assert len(found) > 30 and any(path.startswith("jaxicl/") for path, _ in found)
    wrong = [
        f"{path}: `{command}` ({', '.join(names)})"
        for path, command in found
        if (names := _unknown_names(command, parser, papers, known_stages))
    ]
    assert not wrong, "\n".join(wrong)


def test_a_renamed_name_in_an_inline_command_is_found():
    parser, papers, known = _what_the_command_line_has()
    for command, names in [
        ("jaxicl reproduce --jobs 3", []),
        ("jaxicl reproduce [NAME ...] [--quick|--trained|--full] [--out DIR]", []),
        ("jaxicl sweep --stage gatmiry2024:NAME", []),
        ("jaxicl reproduce --job 3", ["--job"]),
        ("jaxicl reproduce [--quick|--train]", ["--train"]),
        ("jaxicl sweep --list-stage", ["--list-stage"]),
        ("jaxicl config zhang2024", ["zhang2024"]),
        ("jaxicl sweep --stage gatmiry2024:fig9", ["gatmiry2024:fig9"]),
        ("jaxicl sweep --stage nopaper:NAME", ["nopaper:NAME"]),
        ("jaxicl reproduces", ["reproduces"]),
    ]:
        assert _unknown_names(command, parser, papers, known) == names, command
