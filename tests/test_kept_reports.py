"""Reports kept in docs/reports/ say what the code showed when they ran: each is flagged here once its papers' code
(their own modules, and the library code they compute with) has changed since (run it again and keep the new one)."""

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted((ROOT / "docs" / "reports").glob("*/run.json"))


def _git(*args) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


# The library code that computes the papers' numbers and decides their verdicts: a change here changes what a kept
# report would say, as a change to the paper's own module does. Left out: where and when work runs (jaxicl/runtime,
# the command line, experiments/__init__'s processes), which decides no number of the report. Of jaxicl/theory (one
# module per paper) only its __init__ is here: a paper's code counts the theory modules that it or this code imports.
SHARED_CODE = (
    "jaxicl/dynamics",
    "jaxicl/losses",
    "jaxicl/models",
    "jaxicl/tasks",
    "jaxicl/theory/__init__.py",
    "jaxicl/baselines.py",
    "jaxicl/sweep.py",
    "jaxicl/experiments/report.py",
    "jaxicl/experiments/settings.py",
)


def _imported_modules(path: Path) -> set[str]:
    """The dotted names a Python file imports (anywhere in it, relative imports resolved), and ``package.name`` for
    every ``from package import name``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join(base + ((node.module,) if node.module else ()))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _theory_modules(paths: list[str]) -> list[str]:
    """The modules of jaxicl/theory that the code under ``paths`` imports, and those they import in turn."""
    todo = [f for p in paths for f in ([ROOT / p] if p.endswith(".py") else sorted((ROOT / p).rglob("*.py")))]
    found: set[str] = set()
    while todo:
        for name in _imported_modules(todo.pop()):
            if name.startswith("jaxicl.theory."):
                target = f"jaxicl/theory/{name.split('.')[2]}.py"
                if (ROOT / target).exists() and target not in found:
                    found.add(target)
                    todo.append(ROOT / target)
    return sorted(found)


def _paper_code(paper: str) -> list[str]:
    """A paper's code: its module or package under jaxicl/experiments, the library code it computes with
    (`SHARED_CODE`), and the theory modules either imports."""
    base = ROOT / "jaxicl" / "experiments"
    own = [str(p.relative_to(ROOT)) for p in (base / f"{paper}.py", base / paper) if p.exists()]
    shared = [p for p in SHARED_CODE if (ROOT / p).exists()]
    # theory/__init__ imports every paper's module, which only its own imports of them compute with
    return own and own + shared + _theory_modules(own + [p for p in shared if not p.startswith("jaxicl/theory")])


def _changed_since(commit: str, paths: list[str]) -> list[str]:
    """Those of ``paths`` that a commit of this history made after ``commit`` (not its ancestor) changed."""
    return [p for p in paths if _git("rev-list", "-1", f"{commit}..HEAD", "--", p)]


def _history() -> bool:
    if shutil.which("git") is None:
        return False
    try:
        return _git("rev-parse", "--is-shallow-repository") == "false"
    except subprocess.CalledProcessError:
        return False


@pytest.mark.skipif(not _history(), reason="needs the repository's full git history")
@pytest.mark.parametrize("run_file", REPORTS, ids=[p.parent.name for p in REPORTS])
def test_a_kept_report_ran_at_or_after_the_last_change_to_its_papers_code(run_file):
    run = json.loads(run_file.read_text())
    assert (run_file.parent / "report.md").is_file()
    commit = run["commit"]
    _git("cat-file", "-e", f"{commit}^{{commit}}")  # a commit of this history
    stale = []
    for paper in run["papers"]:
        paths = _paper_code(paper)
        assert paths, f"{paper}: no code under jaxicl/experiments"
        changed = _changed_since(commit, paths)
        if changed:
            stale.append(f"{paper} ({', '.join(changed)} changed after the report's {commit[:10]})")
    assert not stale, f"{run_file.parent.name} is older than its papers' code: {', '.join(stale)}; run it again"


def test_the_flag_fires_for_a_report_older_than_its_paper(tmp_path, monkeypatch):
    """The check above, against the first commit of the history: every paper's code changed after it."""
    if not _history():
        pytest.skip("needs the repository's full git history")
    first = _git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    run = tmp_path / "old" / "run.json"
    run.parent.mkdir()
    run.write_text(json.dumps({"commit": first, "papers": ["gatmiry2024"]}))
    (run.parent / "report.md").write_text("# old\n")
    with pytest.raises(AssertionError, match="older than its papers' code: gatmiry2024"):
        test_a_kept_report_ran_at_or_after_the_last_change_to_its_papers_code(run)


def test_the_flag_fires_for_a_change_to_the_library_a_paper_computes_with(tmp_path):
    """A report made just before the last change to the gradient flows and training (jaxicl/dynamics) is flagged
    for that change, whatever its paper's own module did."""
    if not _history():
        pytest.skip("needs the repository's full git history")
    last = _git("log", "-1", "--format=%H", "--", "jaxicl/dynamics")
    run = tmp_path / "old" / "run.json"
    run.parent.mkdir()
    run.write_text(json.dumps({"commit": _git("rev-parse", f"{last}^"), "papers": ["zhang2023"]}))
    (run.parent / "report.md").write_text("# old\n")
    with pytest.raises(AssertionError, match=r"zhang2023 \([^)]*jaxicl/dynamics[^)]*changed after"):
        test_a_kept_report_ran_at_or_after_the_last_change_to_its_papers_code(run)


def test_a_papers_code_counts_the_theory_modules_it_computes_with():
    """Of jaxicl/theory, a paper's code holds the modules it imports, and those these import (Ahn et al.'s Γ is Zhang
    et al.'s), not another paper's; a change to one flags the reports of the papers that import it."""
    ahn, zhang, gatmiry = (set(_paper_code(p)) for p in ("ahn2023", "zhang2023", "gatmiry2024"))
    assert {"jaxicl/theory/ahn.py", "jaxicl/theory/zhang.py"} <= ahn
    assert "jaxicl/theory/zhang.py" in zhang and "jaxicl/theory/ahn.py" not in zhang
    assert "jaxicl/theory/gatmiry.py" in gatmiry and not {"jaxicl/theory/ahn.py", "jaxicl/theory/zhang.py"} & gatmiry
    if not _history():
        pytest.skip("needs the repository's full git history")
    last = _git("log", "-1", "--format=%H", "--", "jaxicl/theory/ahn.py")
    assert "jaxicl/theory/ahn.py" in _changed_since(_git("rev-parse", f"{last}^"), sorted(ahn))


def test_every_paper_has_a_kept_report_at_the_trained_size_and_one_only():
    """Each paper's trained claims are kept (item 3 of the reports' issue): every paper is vouched for by one kept
    ``--trained`` report, whose ``run.json`` lists it; a paper run again apart is listed by its new report only."""
    from jaxicl.experiments import available

    runs = [json.loads(run_file.read_text()) for run_file in REPORTS]
    vouched = [paper for run in runs if run.get("size") == "trained" for paper in run["papers"]]
    assert sorted(vouched) == sorted(available())
