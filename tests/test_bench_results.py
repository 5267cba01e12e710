"""Benchmark results as data (benchmarks/results.py) and the README tables rendered from them (benchmarks/render.py)."""

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_are_recorded_with_where_and_when_and_rendered_latest_per_machine(tmp_path):
    results, render = _load("results"), _load("render")
    where = results.machine()
    assert (
        set(where) == {"machine", "backend", "jax", "jaxlib", "python", "commit", "date", "time"} and where["machine"]
    )
    cpu = dict(where, machine="2-core Test CPU", backend="cpu")
    gpu = dict(where, machine="H100 (16 CPU cores)", backend="gpu")
    results.record(
        "bench_x", [{"case": "a", "seconds": 2.0}], where=dict(cpu, date="2026-01-01", commit="old"), results=tmp_path
    )
    path = results.record(
        "bench_x", [{"case": "a", "seconds": 1.23456}], where=dict(cpu, date="2026-02-01"), results=tmp_path
    )
    results.record(
        "bench_x",
        [{"case": "a", "seconds": 0.1}, {"case": "b", "seconds": 0.2, "extra": "y"}],
        where=dict(gpu, date="2026-01-15"),
        results=tmp_path,
    )
    assert json.loads(path.read_text())["rows"] == [{"case": "a", "seconds": 1.23456}]
    assert [r["machine"] for r in render.latest("bench_x", tmp_path)] == ["2-core Test CPU", "H100 (16 CPU cores)"]
    table = render.table("bench_x", tmp_path)
    lines = table.splitlines()
    assert lines[0] == "| machine | backend | date | commit | case | seconds | extra |"
    assert len(lines) == 2 + 3 and "| 2-core Test CPU | cpu | 2026-02-01 |" in lines[2] and "| 1.23 |" in lines[2]
    assert "2026-01-01" not in table  # only the latest result of each machine
    readme = "# B\n\ntext\n<!-- results: bench_x -->\nstale\n<!-- /results -->\nafter\n"
    once = render.render(readme, tmp_path)
    assert "stale" not in once and table in once and once.endswith("<!-- /results -->\nafter\n")
    assert render.render(once, tmp_path) == once  # rendering again changes nothing
    assert "no result recorded yet: run `python benchmarks/bench_none.py`" in render.table("bench_none", tmp_path)
    assert "benchmarks/bench_ahn.py`" in render.table("bench_ahn_time_to_target", tmp_path)
    # two results of one machine on one day: the later measurement, whatever the file names' order
    results.record(
        "bench_day",
        [{"run": "late"}],
        where=dict(cpu, commit="aaa", time="2026-02-01T18:00:00+00:00"),
        results=tmp_path,
    )
    results.record(
        "bench_day",
        [{"run": "early"}],
        where=dict(cpu, commit="fff", time="2026-02-01T09:00:00+00:00"),
        results=tmp_path,
    )
    assert [r["rows"][0]["run"] for r in render.latest("bench_day", tmp_path)] == ["late"]
    # one benchmark measured by several commands (variants): the latest of each variant, each from its own file
    for variant, seconds in (("paper bf16", 1.0), ("quick float32", 2.0), ("paper bf16", 3.0)):
        results.record(
            "bench_var",
            [{"seconds": seconds}],
            variant=variant,
            where=dict(cpu, time=f"2026-02-01T1{int(seconds)}:00:00+00:00"),
            results=tmp_path,
        )
    assert len(list((tmp_path / "bench_var").glob("*.json"))) == 2  # the same variant, day and commit: one file
    assert [(r["variant"], r["rows"][0]["seconds"]) for r in render.latest("bench_var", tmp_path)] == [
        ("paper bf16", 3.0),
        ("quick float32", 2.0),
    ]
    assert (
        render.table("bench_var", tmp_path)
        .splitlines()[0]
        .startswith("| machine | backend | date | commit | variant |")
    )
    assert "variant" not in render.table("bench_x", tmp_path)
    results.record("bench_num", [{"a": 1107.46, "b": 0.05883, "c": 7.4e-08, "d": 12}], where=cpu, results=tmp_path)
    assert render.table("bench_num", tmp_path).splitlines()[2].endswith("| 1,107 | 0.0588 | 7.4e-08 | 12 |")
    results.record("bench_pipe", [{"a|b": "c|d"}], where=cpu, results=tmp_path)
    assert render.table("bench_pipe", tmp_path).splitlines()[2].endswith("| c\\|d |")


def test_the_readme_tables_are_the_rendering_of_the_recorded_results():
    """benchmarks/README.md is up to date with benchmarks/results/ (`python benchmarks/render.py` after a benchmark)."""
    render = _load("render")
    text = (BENCH / "README.md").read_text()
    assert render.MARK.search(text), "benchmarks/README.md has no rendered results table"
    assert render.render(text) == text, "benchmarks/README.md is stale: run `python benchmarks/render.py`"
