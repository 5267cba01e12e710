"""`jaxicl list` and `jaxicl reproduce <paper> --quick`: every check passes and the report is written."""

import os
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_algoformer

from jaxicl import cli
from jaxicl.runtime import jobs as jobs_module
from jaxicl.runtime import xla_options


def test_list(capsys):
    assert cli.main(["list"]) == 0
    assert "zhang2023" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["list"], ["sweep", "--list-stages"], ["config", "gatmiry2024"]])
def test_a_reader_that_closed_the_output_ends_the_command_quietly(argv):
    """`jaxicl list | head -1`: a reader gone before the command writes ends it with 141 (as a shell reports a
    command that SIGPIPE ended), with nothing on stderr; it was a BrokenPipeError traceback."""
    import subprocess

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails, deterministically
    try:
        p = subprocess.run(
            [sys.executable, "-P", "-m", "jaxicl.cli", *argv], stdout=write_end, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr.decode()) == (141, "")


def test_the_stage_list_puts_each_name_on_its_line_and_wraps_what_it_computes(capsys, monkeypatch):
    from jaxicl.experiments.stage_sweep import stages

    monkeypatch.setenv("COLUMNS", "72")
    assert cli.main(["sweep", "--list-stages"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln for ln in lines if not ln.startswith("    ")] == list(stages())
    assert max(map(len, lines)) <= 72 and not any("``" in ln for ln in lines)


def test_unknown_name_is_an_error(capsys):
    assert cli.main(["reproduce", "nope2099", "--out", "unused"]) == 2
    assert "unknown reproduction" in capsys.readouterr().err


# paper -> (the number of asserted checks at quick size, a data file, variables or dimensions it must hold)
PAPERS = {
    "zhang2023": (19, "thm42.nc", lambda ds: set(ds.dims) == {"case", "N", "M"}),
    "ahn2023": (22, "depth.nc", lambda ds: set(ds.data_vars) >= {"transformer", "gd", "preconditioned_gd", "ols"}),
    "gatmiry2024": (24, "fig1_gaussian_x.nc", lambda ds: set(ds.dims) >= {"kappa", "depth", "looped", "seed"}),
    "yang2024": (30, "fig4.nc", lambda ds: ds.sizes["heads"] == 9 and "excess" in ds),
    "algoformer": (
        6,
        "fig2.nc",
        lambda ds: {"regression_algoformer", "ar_looped", "cot_standard"} <= set(ds.data_vars),
    ),
}


@pytest.mark.slow  # 3 to 20 minutes each on 2 cores: `make test-slow` (and `make reproduce`) run them
@pytest.mark.parametrize("paper", list(PAPERS))
def test_reproduce_quick_passes_every_check(paper, tmp_path):
    """Exactly the asserted rows of each paper pass at quick size: their number is fixed here, so a row demoted
    to "reported" or "not reproduced" fails this test as a failing one does; claims of the paper that this size
    does not assert may be "not reproduced" (with the reason in the report). The default suite keeps the papers'
    theorems as unit tests, their check functions fed right and wrong inputs (test_checks.py), and the reproduce
    pipeline end to end at toy size (test_algoformer_pipeline_... below; the transformer figures' pipelines in
    test_transformer.py)."""
    from jaxicl.experiments import reproduce
    from jaxicl.experiments.report import count_verdicts, headline

    n_asserted, nc, holds = PAPERS[paper]
    (res,) = reproduce([paper], size="quick", out=tmp_path)
    asserted = [c for c in res.checks if c.asserted]
    assert [(c.claim, c.predicted, c.simulated) for c in asserted if c.verdict != "pass"] == []
    assert len(asserted) == n_asserted, [c.claim for c in asserted]
    assert all(c.reason for c in res.checks if c.verdict == "not reproduced")
    report = (tmp_path / "report.md").read_text()
    assert "| claim | predicted | simulated | tolerance | result |" in report
    assert f"{headline(res.checks)}." in report and count_verdicts(res.checks)["FAIL"] == 0
    for rel in res.figures + res.data:
        assert (tmp_path / rel).stat().st_size > 0
        assert rel in report
    import xarray as xr

    assert holds(xr.open_dataset(tmp_path / paper / nc, engine="h5netcdf"))


def _toy_algoformer_cli(tmp_path, monkeypatch):
    """The AlgoFormer reproduction at toy size as the CLI's default size, with a compilation cache of its own (a
    resuming call reads back the first call's programs; conftest's `shared_compilation_cache` points the next test
    back at the session's): the arguments of ``jaxicl reproduce algoformer`` and the toy settings."""
    from jaxicl.experiments import algoformer as A

    tiny = tiny_algoformer(std_layers=1, fig3_loops=((2, 1), (1, 0)))
    monkeypatch.setitem(A.SIZES, "quick", tiny)
    return ["reproduce", "algoformer", "--out", str(tmp_path), "--cache-dir", str(tmp_path / "xla")], tiny


def test_algoformer_pipeline_trains_in_budget_slices_and_resumes_from_its_checkpoints(tmp_path, monkeypatch, capsys):
    """The AlgoFormer reproduction end to end at a toy size (a few steps: its checks are not meaningful here,
    the quick-size run above asserts them), with two of its four parts (``--set parts``: Figs. 2 and 3 on the
    regression task, and Fig. 5; the other two train the same models on other tasks). Under `--budget` every model
    trains one chunk and stops: the report draws the figures marked "partial, step 2 of 4" with their checks
    reported, the command exits 3, and the next call (no budget) resumes every model from its checkpoint at step 2
    and finishes it. The parts left out are one "not applicable" row each (not dropped, not passed), and write no
    figure or data file. (That a resumed run gives the uninterrupted run's numbers is asserted on `train` itself,
    in test_transformer.py.)"""

    import xarray as xr

    sliced, _ = _toy_algoformer_cli(tmp_path, monkeypatch)
    sliced += ["--set", 'parts=["regression", "fig5"]']
    # --plan first: every training run (Fig. 5's σ ensemble as one run of 3 models) measured on two chunks of
    # 2 steps (the chunk the slices below compile too), the plan printed and in report.md, no checkpoint written
    assert cli.main(sliced + ["--plan", "--budget", "30"]) in (0, 1)  # (toy-size checks may fail)
    report = (tmp_path / "report.md").read_text()
    assert "**Training plan**" in report and "training plan" in capsys.readouterr().out
    rows = [line for line in report.splitlines() if line.startswith("| fig") and " × " in line]
    assert len(rows) == 5, rows  # Fig. 2 (regression): 3 models; Fig. 3: one setting more; Fig. 5: one ensemble
    assert sum("| 3 × 4 (4) |" in r for r in rows) == 1 and sum("| 1 × 4 (4) |" in r for r in rows) == 4
    assert "With `--budget 30`: about 1 call(s)" in report
    assert not list(tmp_path.rglob("*.ckpt"))
    assert cli.main(sliced + ["--budget", "1e-6"]) == 3
    assert "run the same command again to resume" in capsys.readouterr().err
    report = (tmp_path / "report.md").read_text()
    assert report.count("partial run (partial, step 2 of 4)") == 3  # all three figures, drawn
    assert "[partial, step 2 of 4] |" in report and "**FAIL**" not in report
    for fig in ("fig2_models.png", "fig3_loops.png", "fig5_newton_gd.png"):
        assert (tmp_path / "algoformer" / fig).stat().st_size > 0
    assert cli.main(sliced + ["--progress"]) in (0, 1)  # to the end (toy-size checks may fail: not meaningful here)
    out = capsys.readouterr().out
    # every model resumed at step 2, announcing the step time its first slice measured, and finished there
    assert out.count("(measured by the previous slice); 2 steps to go") == 5 and out.count("; 0 steps to go") == 5
    report = (tmp_path / "report.md").read_text()
    assert "partial" not in report
    assert len(list((tmp_path / "algoformer" / "checkpoints" / "quick").glob("*.ckpt"))) == 5
    rows = [r for r in (line.split(" | ") for line in report.splitlines() if line.startswith("| Fig")) if len(r) == 5]
    assert [(r[0], r[-1]) for r in rows if r[-1].startswith("not applicable")] == [
        (
            f"| {claim}: every claim",
            f"not applicable: the part {part!r} is not in this run's `parts` (`--trained` and `--full` run every "
            "part) |",
        )
        for claim, part in (("Fig. 2 (ar)", "ar"), ("Fig. 2 (cot)", "cot"))
    ]
    written = sorted(p.name for p in (tmp_path / "algoformer").iterdir() if p.suffix in (".png", ".nc"))
    assert written == ["fig2.nc", "fig2_models.png", "fig3.nc", "fig3_loops.png", "fig5.nc", "fig5_newton_gd.png"]
    assert xr.load_dataset(tmp_path / "algoformer" / "fig5.nc", engine="h5netcdf").sizes == {
        "seed": 1,
        "setting": 1,
        "sigma": 3,
        "iteration": 20,
    }
    fig3 = xr.load_dataset(tmp_path / "algoformer" / "fig3.nc", engine="h5netcdf")
    assert fig3.sizes == {"seed": 1, "setting": 2, "loops": 4}


@pytest.mark.slow  # four processes, each compiling the toy programs afresh: minutes on two cores
def test_algoformer_parts_in_processes_give_the_in_process_run(tmp_path, monkeypatch, capsys):
    """`--jobs`: each of the AlgoFormer's PARTS in a process of its own (started through a wrapper that gives them the
    toy size and this test's float64), the paper assembled here from their datasets. Every model is trained first,
    in process: the parts evaluate from the checkpoints, and the report's checks and the data files are the
    in-process run's (rtol: the processes' XLA thread pools differ). (The orchestration of parts, with stand-in
    processes, is asserted in the default suite below.)"""
    import re

    import xarray as xr

    import jaxicl.experiments as E
    from jaxicl.experiments import algoformer as A

    sliced, tiny = _toy_algoformer_cli(tmp_path, monkeypatch)
    assert cli.main(sliced) in (0, 1)  # toy-size checks may fail: not meaningful here
    capsys.readouterr()
    files = ("fig2.nc", "fig3.nc", "fig5.nc")
    in_process = {f: xr.load_dataset(tmp_path / "algoformer" / f, engine="h5netcdf") for f in files}
    verdict = re.compile(r"\| (pass|reported|\*\*FAIL\*\*|not reproduced: [^|]*|pass \(not asserted: [^|]*\)) \|$")
    rows = lambda: [
        ln
        for ln in (tmp_path / "report.md").read_text().splitlines()  # noqa: E731  (checks table)
        if ln.startswith("| Fig.") and verdict.search(ln)
    ]
    checks = rows()
    wrapper = tmp_path / "child.py"
    wrapper.write_text(
        f"import sys\nimport jax\njax.config.update('jax_enable_x64', True)\nfrom jaxicl import cli\n"
        f"from jaxicl.experiments import algoformer as A\n"
        f"A.SIZES['quick'] = A.{tiny!r}\nsys.exit(cli.main(sys.argv[1:]))\n"
    )
    child = E._child_command
    started = []

    def toy_child(*args, **kwargs):
        cmd = child(*args, **kwargs)
        started.append(cmd[cmd.index("--part") + 1])
        return [sys.executable, str(wrapper), *cmd[4:]]  # cmd[:4]: python -P -m jaxicl.cli

    monkeypatch.setattr(E, "_child_command", toy_child)
    assert cli.main(sliced + ["--jobs", "2"]) in (0, 1)
    # 18 rows: Fig. 2, 3 per task and the AR task's Bayes oracle (reported); Fig. 3, 2; Fig. 5, 3 + one per σ
    assert sorted(started) == sorted(A.PARTS) and len(checks) == 18 and rows() == checks
    assert re.search(
        r"\[jaxicl\] algoformer: \d+ pass, \d+ fail, \d+ pass \(not asserted\), \d+ not reproduced, "
        r"\d+ reported in [\d.]+ s over 4 "
        "processes",
        capsys.readouterr().out,
    )
    for f in files:
        xr.testing.assert_allclose(
            xr.load_dataset(tmp_path / "algoformer" / f, engine="h5netcdf"), in_process[f], rtol=1e-5
        )


def test_jobs_must_be_positive(capsys):
    assert cli.main(["reproduce", "ahn2023", "--jobs", "0", "--out", "unused", "--no-cache"]) == 2
    assert "--jobs must be a positive" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, why",
    [
        (["ahn2023", "gatmiry2024"], "(ahn2023 trains no transformer; gatmiry2024 trains no transformer)"),
        (["zhang2023"], "(zhang2023: Fig. 1's models train only with `fig1` on: add `--set fig1=true`)"),
        (["yang2024", "--skip-transformers"], "(--skip-transformers leaves out every transformer)"),
    ],
)
def test_a_plan_that_would_time_no_training_is_refused_before_any_work(args, why, tmp_path, capsys, monkeypatch):
    """``--plan`` times the transformers' training and runs every other stage in full: where no transformer trains
    (papers that train none, Zhang et al. at quick size with Fig. 1 off, ``--skip-transformers``) it would plan
    nothing after minutes of work, so it is refused, saying why; no paper starts."""
    from jaxicl import experiments

    monkeypatch.setattr(experiments, "_run_with_settings", lambda *a, **k: pytest.fail("a paper started"))
    out = tmp_path / "out"
    assert cli.main(["reproduce", *args, "--plan", "--out", str(out), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert f"jaxicl: --plan times the transformers' training, and this run trains none {why}" in err
    assert not out.exists()
    # the library refuses it too; with Fig. 1 on, Zhang et al. has a training to time
    with pytest.raises(ValueError, match="trains no transformer to time"):
        experiments.reproduce(["ahn2023"], out=out, plan=True)
    modules = experiments._modules(["zhang2023"])
    configs = experiments.effective_settings(modules, "quick", {"zhang2023": {"fig1": True}})
    assert experiments.nothing_to_plan(modules, configs, "quick") is None


def _fake_paper(name, passed=True):
    from jaxicl.experiments import Check, PaperResult

    return PaperResult(
        name, f"title of {name}", "quick", [Check(f"claim of {name}", "1", "1", "exact", passed)], [], []
    )


def test_jobs_run_papers_in_processes_and_report_them_in_the_given_order(tmp_path, monkeypatch):
    """The orchestration of ``--jobs``: one process per paper (here a stand-in that pickles a result, the second
    slower than the first so they finish out of order), results and report.md in the order given; a process that
    dies without a result is an error naming the paper (and its part), raised after the others have finished. The papers
    run whole here (without their transformers) but ahn2023, whose parts are processes of their own."""
    import pickle
    import sys

    import jaxicl.experiments as E

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        delay = {"yang2024": 1.0, "gatmiry2024": 0.0, "ahn2023": 0.0}[name]
        if name == "ahn2023":
            return [sys.executable, "-c", "import sys; sys.exit(7)"]
        data = pickle.dumps([_fake_paper(name)])
        return [
            sys.executable,
            "-c",
            f"import time; time.sleep({delay}); open({str(result_file)!r}, 'wb').write({data!r})",
        ]

    monkeypatch.setattr(E, "_child_command", fake_child)
    results = E.reproduce(["yang2024", "gatmiry2024"], out=tmp_path, jobs=2, transformers=False)
    assert [r.name for r in results] == ["yang2024", "gatmiry2024"]
    report = (tmp_path / "report.md").read_text()
    assert report.index("## yang2024") < report.index("## gatmiry2024")
    with pytest.raises(RuntimeError, match=r"the ahn2023/\w+ reproduction's process exited with status 7"):
        E.reproduce(["gatmiry2024", "ahn2023", "yang2024"], out=tmp_path / "crash", jobs=2, transformers=False)
    # the papers that finished are kept apart: an incomplete run replaces no earlier result
    assert not (tmp_path / "crash" / "report.md").exists()
    report = (tmp_path / "crash" / "incomplete-run" / "report.md").read_text()
    assert "## gatmiry2024" in report and "## yang2024" in report and "## ahn2023" not in report


def test_jobs_start_the_longest_papers_first(tmp_path, monkeypatch):
    """``--jobs`` starts papers (and the AlgoFormer's parts) longest first (their quick wall times), so that two
    workers end together; the report keeps the given order. One worker here, so that the start order is
    deterministic."""
    import pickle
    import sys

    import jaxicl.experiments as E

    monkeypatch.setattr(jobs_module, "job_seconds", jobs_module.reference_seconds)  # not this machine's last run
    assert jobs_module.longest_first(["gatmiry2024", "ahn2023", "unknown", "yang2024", "algoformer", "zhang2023"]) == [
        "ahn2023",
        "algoformer",
        "yang2024",
        "zhang2023",
        "gatmiry2024",
        "unknown",
    ]
    started = []

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        started.append(name)
        data = pickle.dumps([_fake_paper(name)])
        return [sys.executable, "-c", f"open({str(result_file)!r}, 'wb').write({data!r})"]

    monkeypatch.setattr(E, "_child_command", fake_child)
    names = ["gatmiry2024", "yang2024"]  # papers that run whole (Yang et al.'s without its transformers)
    results = E._run_in_processes(names, "quick", tmp_path, False, None, False, jobs=1)
    assert started == ["yang2024", "gatmiry2024"]
    assert [r.name for r in results] == names
    # at quick the parts of the AlgoFormer, of Ahn et al., of Yang et al. and of Zhang et al. (its theory in two:
    # Fig. 1 trains from --trained) are jobs of their own
    jobs = [E._job_name(*j) for j in E._jobs(E._modules(E.available()))]
    assert jobs_module.longest_first(jobs) == [
        "ahn2023/fig1_2",
        "yang2024/transformers",
        "ahn2023/fig3_4",
        "ahn2023/sweeps",
        "gatmiry2024",
        "algoformer/regression",
        "algoformer/cot",
        "algoformer/ar",
        "zhang2023/prediction",
        "yang2024/theory",
        "zhang2023/flows",
        "ahn2023/theory",
    ]


def test_jobs_are_ordered_by_the_last_measured_run_not_by_constants(tmp_path, monkeypatch):
    """The order of ``--jobs`` is measured data: the reference run shipped with the package until this machine has run
    its own, then that run's times (recorded beside the compilation cache, merged, read back); without a cache
    nothing is recorded and the reference orders the jobs."""
    import jaxicl.experiments as E

    reference = jobs_module.reference_seconds()
    assert reference["ahn2023/fig1_2"] > reference["yang2024/transformers"]  # the shipped data, its machine and date
    shipped = __import__("json").loads(jobs_module.REFERENCE.read_text())
    assert all({"machine", "date", "commit", "measured", "seconds"} <= set(run) for run in shipped.values())
    monkeypatch.setattr(jobs_module, "_local_file", lambda: tmp_path / jobs_module.LOCAL_NAME)  # beside a cache
    assert jobs_module.job_seconds() == reference
    jobs_module.record_seconds({"gatmiry2024": 900.0})
    jobs_module.record_seconds({"ahn2023": 1.0})  # merged with the first record
    assert (tmp_path / jobs_module.LOCAL_NAME).is_file()
    assert jobs_module.longest_first(["yang2024", "gatmiry2024", "ahn2023"]) == ["gatmiry2024", "yang2024", "ahn2023"]
    (tmp_path / jobs_module.LOCAL_NAME).write_text("not json")  # unreadable: the reference again
    assert jobs_module.job_seconds() == reference
    # entries that are not seconds are left out (a string made every --jobs run a TypeError)
    (tmp_path / jobs_module.LOCAL_NAME).write_text('{"seconds": {"zhang2023": "slow", "ahn2023": NaN, "yang2024": -1}}')
    assert jobs_module.job_seconds() == reference
    assert jobs_module.longest_first(["gatmiry2024", "yang2024"]) == ["yang2024", "gatmiry2024"]
    # a whole quick --jobs run records its jobs' wall times (here two stand-in processes)
    import pickle
    import sys

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        data = pickle.dumps([_fake_paper(name)])
        return [sys.executable, "-c", f"import time; time.sleep(0.3); open({str(result_file)!r}, 'wb').write({data!r})"]

    monkeypatch.setattr(E, "_child_command", fake_child)
    E._run_in_processes(
        ["yang2024", "gatmiry2024"], "quick", tmp_path / "out", False, None, False, jobs=2, record_times=True
    )
    times = jobs_module.job_seconds()
    assert 0.3 <= times["yang2024"] < 60 and 0.3 <= times["gatmiry2024"] < 60
    monkeypatch.setattr(jobs_module, "_local_file", lambda: None)  # no compilation cache
    jobs_module.record_seconds({"zhang2023": 1.0})
    assert jobs_module.job_seconds() == reference


def test_jobs_of_each_size_start_in_the_order_of_that_sizes_reference_run(tmp_path, monkeypatch):
    """Each size's jobs are ordered by that size's shipped reference run (at ``--trained`` the AlgoFormer's regression
    part, whose Fig. 3 trains 10,000 steps, is among the longest; at quick it is not), not by a quick run's times;
    a size with no reference run of its own (``--full``) by quick's."""
    import pickle
    import sys

    import jaxicl.experiments as E

    monkeypatch.setattr(jobs_module, "_local_file", lambda: tmp_path / jobs_module.LOCAL_NAME)
    jobs_module.record_seconds({"gatmiry2024": 1e6})  # this machine's quick run: it orders quick runs only
    quick, trained = jobs_module.reference_seconds("quick"), jobs_module.reference_seconds("trained")
    assert jobs_module.job_seconds("trained") == trained and jobs_module.job_seconds("full") == quick
    jobs = [E._job_name(*j) for j in E._jobs(E._modules(E.available()), size="trained")]
    assert set(jobs) <= set(trained)  # every job measured
    order = jobs_module.longest_first(jobs, size="trained")
    assert order == sorted(jobs, key=lambda j: -trained[j]) != jobs_module.longest_first(jobs)
    started = []

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        started.append(E._job_name(name, part))
        res = _fake_paper(name) if part is None else E.PartResult(name, part, {})
        return [sys.executable, "-c", f"open({str(result_file)!r}, 'wb').write({pickle.dumps([res])!r})"]

    monkeypatch.setattr(E, "_child_command", fake_child)
    for name in ("algoformer", "zhang2023", "yang2024"):
        monkeypatch.setattr(E._modules([name])[name], "assemble", lambda size, out, parts, name=name: _fake_paper(name))
    E._run_in_processes(["zhang2023", "yang2024", "algoformer"], "trained", tmp_path / "out", False, None, True, jobs=1)
    assert started == [j for j in order if j.split("/")[0] in ("zhang2023", "yang2024", "algoformer")]


def test_jobs_run_the_parts_of_a_paper_in_processes_and_assemble_it_once_all_are_done(tmp_path, monkeypatch, capsys):
    """A paper with ``PARTS`` (the AlgoFormer's: Fig. 2 task by task, Fig. 5) runs each part in a process of its own
    under ``--jobs``, longest first among the other jobs; once its last part is done, its ``assemble`` (called once,
    with every part's result) makes the paper's result, reported in the given order. Here a stand-in paper in two
    parts with stand-in processes (the real AlgoFormer's parts: test_algoformer_pipeline_… above)."""
    import pickle
    import sys
    import types

    import jaxicl.experiments as E

    assembled = []

    def assemble(size, out, parts):
        assembled.append(sorted(p.part for p in parts))
        return E.PaperResult(
            "parted",
            "a paper in two parts",
            size,
            [E.Check(f"claim of {p.part}", "1", "1", "exact", p.datasets["ok"]) for p in parts],
            [],
            [],
        )

    module = types.ModuleType("fake_parted_paper")
    module.PARTS = ("long", "short")
    module.assemble = assemble
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(E.REPRODUCTIONS, "parted", (module.__name__, "a paper in two parts"))
    times = jobs_module.reference_seconds() | {"parted/long": 1000, "parted/short": 1}
    monkeypatch.setattr(jobs_module, "job_seconds", lambda size="quick": times)
    started = []

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        started.append(E._job_name(name, part))
        res = _fake_paper(name) if part is None else E.PartResult(name, part, {"ok": part == "long"})
        return [sys.executable, "-c", f"open({str(result_file)!r}, 'wb').write({pickle.dumps([res])!r})"]

    monkeypatch.setattr(E, "_child_command", fake_child)
    assert E.runs_in_processes(["parted"], jobs=2) and not E.runs_in_processes(["parted"], jobs=1)
    names = ["gatmiry2024", "parted", "yang2024"]  # Yang et al.'s without its transformers: one process
    results = E._run_in_processes(names, "quick", tmp_path, False, None, False, jobs=1)
    assert started == ["parted/long", "yang2024", "gatmiry2024", "parted/short"]
    assert assembled == [["long", "short"]]
    assert [r.name for r in results] == names and [c.passed for c in results[1].checks] == [True, False]
    assert (
        "[jaxicl] parted: 1 pass, 1 fail, 0 pass (not asserted), 0 not reproduced, 0 reported in 0.0 s over 2 "
        "processes" in capsys.readouterr().out
    )
    report = (tmp_path / "report.md").read_text()
    assert report.index("## gatmiry2024") < report.index("## parted") < report.index("## yang2024")


@pytest.mark.parametrize("paper", ["zhang2023", "ahn2023", "yang2024", "algoformer"])
def test_a_paper_in_parts_refuses_an_unknown_part_and_assembles_only_from_every_part(paper, tmp_path):
    """A ``--jobs`` process runs a part by name, and the parent assembles the paper once every part's result is in:
    a name that is no part of the paper, or a missing part's result, is an error naming it, before any work."""
    import jaxicl.experiments as E

    module = E._modules([paper])[paper]
    assert len(E._parts(module, "trained")) > 1
    with pytest.raises(ValueError, match=rf"unknown part\(s\) \['nosuch'\] of {paper}"):
        module.run_parts(["nosuch"], "trained", tmp_path)
    first = E.PartResult(paper, E._parts(module, "trained")[0], {})
    with pytest.raises(ValueError, match=rf"{paper}: the results of part\(s\) \[.+\] are missing"):
        module.assemble("trained", tmp_path, [first])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the watchdog reads CPU time from /proc (Linux)")
def test_jobs_restart_a_paper_whose_process_deadlocks(tmp_path, monkeypatch, capfd):
    """A ``--jobs`` child that stops using CPU time (XLA:CPU's deadlock; here one that sleeps) is stopped after
    ``STALL_SECONDS`` with its Python stacks printed (faulthandler, SIGABRT) and started once more; a second hang is
    an error naming the paper. A child that keeps computing is left alone however long it takes."""
    import pickle
    import sys

    import jaxicl.experiments as E

    monkeypatch.setattr(jobs_module, "STALL_SECONDS", 2.0)
    marker = tmp_path / "started-once"

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        data = pickle.dumps([_fake_paper(name)])
        write = f"open({str(result_file)!r}, 'wb').write({data!r})"
        if name == "gatmiry2024":  # hangs the first time only
            code = (
                f"import os, time\nif not os.path.exists({str(marker)!r}):\n    open({str(marker)!r}, 'w').close()\n"
                f"    time.sleep(60)\n{write}"
            )
        elif Path(out).name == "hang":  # the second run's: hangs every time
            code = "import time; time.sleep(60)"
        else:  # busy for longer than STALL_SECONDS: not a hang
            code = f"import time\nt = time.time()\nwhile time.time() < t + 4: pass\n{write}"
        return [sys.executable, "-c", code]

    monkeypatch.setattr(E, "_child_command", fake_child)
    t0 = time.monotonic()
    # (without their transformers both papers run whole: one process each)
    results = E._run_in_processes(["gatmiry2024", "yang2024"], "quick", tmp_path, False, None, False, jobs=2)
    assert [r.name for r in results] == ["gatmiry2024", "yang2024"] and marker.exists()
    assert time.monotonic() - t0 < 30  # the sleeping process was stopped, not waited for
    captured = capfd.readouterr()  # file descriptors: the child's faulthandler writes to them
    assert "gatmiry2024: its process has used no CPU time" in captured.out
    assert "gatmiry2024: starting it again" in captured.out
    assert "yang2024: its process" not in captured.out
    assert "Fatal Python error: Aborted" in captured.err  # faulthandler's dump of the stopped process
    with pytest.raises(RuntimeError, match="the yang2024 reproduction's process stopped using CPU time twice"):
        # (without its transformers the paper runs whole: one process)
        E._run_in_processes(["yang2024"], "quick", tmp_path / "hang", False, None, False, jobs=1)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the watchdog reads CPU time from /proc (Linux)")
def test_a_process_that_deadlocks_is_started_again_once_then_stopped(tmp_path):
    """``jaxicl.runtime.watchdog.watching``, as a plain ``jaxicl reproduce`` and ``jaxicl sweep`` use it: a process whose
    threads use no CPU time (XLA:CPU's deadlock; here one that sleeps) for ``stall_seconds`` prints its Python stacks
    and starts the same command again; a second stall ends it with ``EXIT_DEADLOCKED``. A busy process, or one whose
    ``with`` block has ended, is left alone."""
    import subprocess
    import sys

    from jaxicl.runtime import watchdog

    starts = tmp_path / "starts"
    hang = (
        f"import time\nfrom jaxicl.runtime.watchdog import watching\nopen({str(starts)!r}, 'a').write('x')\n"
        "with watching(stall_seconds=1.0):\n    time.sleep(60)\n"
    )
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", hang], capture_output=True, text=True, timeout=120)
    assert p.returncode == watchdog.EXIT_DEADLOCKED and starts.read_text() == "xx"
    assert time.monotonic() - t0 < 60  # stopped, not waited for
    assert p.stderr.count("has used (almost) no CPU time") == 2
    assert p.stderr.count("starting the same command again") == 1
    assert "giving up" in p.stderr and 'File "<string>", line 5' in p.stderr  # the stack of the sleeping thread
    # a thread that still wakes now and then (0.6 % of a CPU) does not hide the stall
    poll = (
        "import threading, time\nfrom jaxicl.runtime.watchdog import watching\n"
        "def poll():\n    while True:\n        t = time.perf_counter()\n"
        "        while time.perf_counter() < t + 0.003: pass\n        "
        "time.sleep(0.5)\nthreading.Thread(target=poll, daemon=True).start()\n"
        "with watching(stall_seconds=4.0):\n    time.sleep(60)\n"
    )
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", poll], capture_output=True, text=True, timeout=120)
    assert p.returncode == watchdog.EXIT_DEADLOCKED and time.monotonic() - t0 < 60
    busy = (
        "import time\nfrom jaxicl.runtime.watchdog import watching\nwith watching(stall_seconds=1.0):\n    t = time.time()\n"
        "    while time.time() < t + 3: pass\ntime.sleep(2)\nprint('done')\n"
    )  # idle after the block: fine
    p = subprocess.run([sys.executable, "-c", busy], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "done\n" and "no CPU time" not in p.stderr
    with pytest.raises(ValueError, match="stall_seconds must be a positive"):
        with watchdog.watching(stall_seconds=0):
            pass


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the watchdog reads CPU time from /proc (Linux)")
def test_a_stopped_process_is_not_taken_for_a_deadlocked_one(tmp_path, monkeypatch):
    """Ctrl-Z then ``fg``: time in which a process is stopped (SIGSTOP) does not count as idle, for the watchdog of a
    plain ``jaxicl reproduce``/``sweep`` (its thread is stopped with it) and for a ``--jobs`` parent that watches a
    stopped child (``/proc`` state T). Each is stopped for three times the stall, then finishes its work."""
    import signal
    import subprocess
    import sys
    import threading

    from jaxicl.runtime import watchdog

    marker = tmp_path / "sleeping"
    # busy, then idle for less than the stall (a host-side wait), stopped there for three stalls, then busy again
    work = (
        "import time\nfrom jaxicl.runtime.watchdog import watching\ndef busy(s):\n    t = time.process_time()\n"
        "    while time.process_time() < t + s: pass\nwith watching(stall_seconds=1.0):\n    busy(0.5)\n"
        f"    open({str(marker)!r}, 'w').close()\n    time.sleep(0.7)\n    busy(1.0)\nprint('done')\n"
    )
    p = subprocess.Popen([sys.executable, "-c", work], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not marker.exists():
        time.sleep(0.01)
    time.sleep(0.4)  # the watcher has read the CPU time in the idle spell: it counts from there
    p.send_signal(signal.SIGSTOP)
    time.sleep(3.0)
    assert watchdog.process_stopped(p.pid)
    p.send_signal(signal.SIGCONT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and out == "done\n" and "no CPU time" not in err

    monkeypatch.setattr(jobs_module, "STALL_SECONDS", 1.0)
    pid_file = tmp_path / "pid"
    child = [
        sys.executable,
        "-c",
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "t = time.process_time()\nwhile time.process_time() < t + 1.5: pass",
    ]
    status = []
    watcher = threading.Thread(target=lambda: status.append(jobs_module.run_watched(child, "stopped")))
    watcher.start()
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(pid, signal.SIGCONT)
    watcher.join(timeout=60)
    assert status == [0]  # not None: it was not taken for deadlocked and killed
    # the clock itself: a reading while stopped, or one long after the last (the watcher was stopped too), restarts it
    now = [time.monotonic()]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    clock = watchdog.IdleClock(0.0, max_gap=1.0)
    now[0] += 0.8
    assert clock.idle_seconds(0.0) == pytest.approx(0.8)
    now[0] += 0.8
    assert clock.idle_seconds(0.0) == pytest.approx(1.6)  # idle: counted
    now[0] += 5.0
    assert clock.idle_seconds(0.0) == 0.0  # a gap of 5 s: not observed, not counted
    now[0] += 0.8
    assert clock.idle_seconds(0.0, stopped=True) == 0.0
    now[0] += 0.8
    assert clock.idle_seconds(0.0) == pytest.approx(0.8)
    now[0] += 0.8
    assert clock.idle_seconds(0.0, runnable=True) == 0.0  # a thread waited for a CPU: starved, not idle


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists() or not hasattr(os, "SCHED_IDLE"),
    reason="the watchdog reads thread states from /proc (Linux)",
)
def test_a_starved_process_is_not_taken_for_a_deadlocked_one(tmp_path, monkeypatch):
    """A ``--jobs`` child that gets (almost) no CPU because others take it (here: SCHED_IDLE, on the CPU of a busy
    process) waits to run (state R); a deadlocked one sleeps. The starved child is left alone and finishes. (The
    clock's part, a runnable reading restarting it, is asserted with the stopped one's above.)"""
    import subprocess
    import threading

    from jaxicl.runtime import watchdog

    monkeypatch.setattr(jobs_module, "STALL_SECONDS", 1.0)
    cpu = min(os.sched_getaffinity(0))
    pid_file = tmp_path / "pid"
    pin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n"
    idle = f"{pin}os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    if subprocess.run([sys.executable, "-c", idle], capture_output=True).returncode:
        pytest.skip("this machine refuses a process CPU affinity or the SCHED_IDLE policy: no way to starve one")
    child = [
        sys.executable,
        "-c",
        f"{idle}open({str(pid_file)!r}, 'w').write(str(os.getpid()))\nt = time.time()\nwhile time.time() < t + 4: pass",
    ]
    status = []
    watcher = threading.Thread(target=lambda: status.append(jobs_module.run_watched(child, "starved")))
    watcher.start()
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.05)
    busy = subprocess.Popen([sys.executable, "-c", f"{pin}t = time.time()\nwhile time.time() < t + 5: pass"])
    time.sleep(2.5)
    starved = int(pid_file.read_text())
    assert watchdog.process_cpu_seconds(starved) < 1.0 and watchdog.process_runnable(starved)  # starved, runnable
    watcher.join(timeout=60)
    busy.wait(timeout=60)
    assert status == [0]  # not None: it was not taken for deadlocked and killed
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        assert not watchdog.process_runnable(sleeper.pid)  # asleep: what a deadlocked process looks like
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_plain_reproduce_watches_its_own_process_and_a_jobs_parent_does_not(tmp_path, monkeypatch):
    """The command's own process is watched where it runs the papers itself (no ``--jobs``, or one paper); a
    ``--jobs`` parent, which waits on its children (each watched by it), and a ``--jobs`` child are not."""
    import contextlib

    import jaxicl.experiments as E
    from jaxicl.runtime import watchdog

    watched = []

    @contextlib.contextmanager
    def fake_watching(*args, **kwargs):
        watched.append(True)
        yield None

    monkeypatch.setattr(watchdog, "watching", fake_watching)
    monkeypatch.setattr(E, "reproduce", lambda names, **kwargs: [_fake_paper(n) for n in names])
    base = ["reproduce", "--out", str(tmp_path), "--no-cache"]
    expected = {
        ("ahn2023",): True,
        ("ahn2023", "gatmiry2024"): True,
        ("ahn2023", "gatmiry2024", "--jobs", "2"): False,
        ("gatmiry2024", "--jobs", "2"): True,
        ("ahn2023", "--jobs", "2"): False,  # its parts: processes
        ("algoformer", "--jobs", "2"): False,  # its parts too
        ("ahn2023", "--result-file", str(tmp_path / "r.pkl")): False,
    }
    for extra, watch in expected.items():
        watched.clear()
        assert cli.main(base + list(extra)) == 0
        assert bool(watched) is watch, extra


def test_a_jobs_child_pickles_its_result_and_leaves_the_report_to_its_parent(tmp_path, monkeypatch, capsys):
    import pickle

    import jaxicl.experiments as E

    calls = {}

    def fake_reproduce(names, **kwargs):
        calls.update(kwargs)
        return [_fake_paper(n, passed=False) for n in names]

    monkeypatch.setattr(E, "reproduce", fake_reproduce)
    result_file = tmp_path / "r.pkl"
    rc = cli.main(["reproduce", "ahn2023", "--out", str(tmp_path), "--no-cache", "--result-file", str(result_file)])
    assert rc == 1  # a failed check: the parent reads the result and reports it
    assert calls["write_report"] is False and calls["jobs"] == 1
    (res,) = pickle.loads(result_file.read_bytes())
    assert res.name == "ahn2023" and res.checks[0].passed is False
    assert "[jaxicl] report:" not in capsys.readouterr().out


def test_jobs_give_each_process_its_share_of_the_cores_as_xla_threads(tmp_path, monkeypatch):
    """``--jobs N``: each paper's process starts XLA:CPU with cores // N pool threads (at least one) and then runs on
    every core; one process keeps XLA's default pool."""
    import subprocess
    import sys

    import jaxicl.experiments as E

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux CPU affinity and two CPUs")
    assert jobs_module.cpu_threads_per_process(1) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    assert [jobs_module.cpu_threads_per_process(j) for j in (2, 3, 8)] == [2, 1, 1]
    monkeypatch.undo()
    cmd = E._child_command("ahn2023", "quick", tmp_path, False, None, True, tmp_path / "r.pkl", threads=1)
    assert cmd[cmd.index("--cpu-threads") + 1] == "1"
    assert "--cpu-threads" not in E._child_command("ahn2023", "quick", tmp_path, False, None, True, tmp_path / "r.pkl")
    probe = (
        "import os, sys, collections\nfrom jaxicl.runtime.xla_options import size_cpu_thread_pool\n"
        "if sys.argv[1] != 'default': size_cpu_thread_pool(int(sys.argv[1]))\n"
        "import jax, jax.numpy as jnp\njax.block_until_ready(jnp.ones((300, 300)) @ jnp.ones((300, 300)))\n"
        "tasks = os.listdir('/proc/self/task')\n"
        "pool = sum(open(f'/proc/self/task/{t}/comm').read().strip() == 'tf_XLAEigen' for t in tasks)\n"
        "everywhere = all(os.sched_getaffinity(int(t)) == os.sched_getaffinity(0) for t in tasks)\n"
        "print(pool, everywhere, len(os.sched_getaffinity(0)))"
    )
    run = lambda arg: subprocess.run(
        [sys.executable, "-c", probe, arg],
        capture_output=True,
        text=True,  # noqa: E731
        check=True,
    ).stdout.split()
    default, one = run("default"), run("1")
    assert int(default[0]) > 1  # XLA's own pool: one thread per CPU (the probe's reading of the thread names holds)
    assert one == ["1", "True", default[2]]  # one pool thread, and every thread back on all the CPUs


def test_jobs_processes_share_a_gpu_by_allocating_their_share_of_its_memory_as_needed(monkeypatch):
    """``--jobs N`` on a GPU: JAX's default preallocates 75 % of the device in each process, which leaves too little
    for a second one, so the children allocate as needed unless the user chose (with this, eight processes shared an
    H200: benchmarks/README.md); the faulthandler the watchdog relies on is always on."""
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.setenv("JAXICL_PROBE", "kept")
    env = jobs_module.child_environment()
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["PYTHONFAULTHANDLER"] == "1" and env["JAXICL_PROBE"] == "kept"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    assert jobs_module.child_environment()["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    # each of N processes may allocate an equal share of 90 % of the device, unless the user chose a fraction
    monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    fraction = [jobs_module.child_environment(n)["XLA_PYTHON_CLIENT_MEM_FRACTION"] for n in (1, 4)]
    assert fraction == ["0.900", "0.225"] and "XLA_CLIENT_MEM_FRACTION" not in jobs_module.child_environment(4)
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):  # (jaxlib refuses both at once)
        monkeypatch.setenv(name, "0.5")
        env = jobs_module.child_environment(4)
        assert env[name] == "0.5" and sum(k.endswith("CLIENT_MEM_FRACTION") for k in env) == 1
        monkeypatch.delenv(name)


def test_default_xla_flags_add_fast_cpu_compilation_only_where_jax_runs_on_the_cpu_alone(monkeypatch):
    """The command adds its XLA options to $XLA_FLAGS unless the user named them; LLVM's optimisation level 1 (or
    the CPU options given, as the tests give theirs) only where JAX can only use the CPU ($JAX_PLATFORMS, or no
    accelerator plugin installed)."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    with xla_options.default_xla_flags():
        assert os.environ["XLA_FLAGS"].split() == [
            "--xla_force_host_platform_device_count=2",
            "--xla_gpu_autotune_level=0",
            "--xla_backend_optimization_level=1",
        ]
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"  # as it was after the command
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")  # the user's choice stays
    with xla_options.default_xla_flags():
        assert os.environ["XLA_FLAGS"].split() == ["--xla_backend_optimization_level=3", "--xla_gpu_autotune_level=0"]
        # the tests' own CPU options (conftest.py's TESTS_CPU_XLA_FLAGS), under the same rule
        with xla_options.default_xla_flags({"--xla_backend_optimization_level": "0", "--xla_cpu_foo": "false"}):
            assert os.environ["XLA_FLAGS"].split() == [
                "--xla_backend_optimization_level=3",
                "--xla_gpu_autotune_level=0",
                "--xla_cpu_foo=false",
            ]
    for platforms in ("cuda", "cpu,cuda", "tpu"):
        monkeypatch.setenv("JAX_PLATFORMS", platforms)
        monkeypatch.delenv("XLA_FLAGS", raising=False)
        with xla_options.default_xla_flags():
            assert os.environ["XLA_FLAGS"] == "--xla_gpu_autotune_level=0"
        assert "XLA_FLAGS" not in os.environ
    monkeypatch.delenv("JAX_PLATFORMS")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "jax_plugins" else None)
    assert xla_options.cpu_only() is False  # e.g. jax[cuda12]: its plugin is found without starting a backend


def test_an_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """``--out`` that is a file, or under a read-only directory, is found out at start-up (exit status 2, a sentence
    naming --out), not after minutes of work with a traceback; so is an unusable ``--cache-dir``."""
    import jaxicl.experiments as E

    monkeypatch.setattr(E, "reproduce", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "file").write_text("x")
    assert cli.main(["reproduce", "ahn2023", "--no-cache", "--out", str(tmp_path / "file")]) == 2
    assert f"jaxicl: --out {tmp_path / 'file'} is a file, not a directory." in capsys.readouterr().err
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            assert cli.main(["reproduce", "ahn2023", "--no-cache", "--out", str(ro / "report")]) == 2
            assert f"jaxicl: cannot write to --out {ro / 'report'} (Permission denied)" in capsys.readouterr().err
        finally:
            ro.chmod(0o700)
    if Path("/sys/kernel").is_dir():  # a place that not even root can write to (sysfs)
        assert cli.main(["reproduce", "ahn2023", "--no-cache", "--out", "/sys/jaxicl-report"]) == 2
        assert "jaxicl: cannot write to --out /sys/jaxicl-report (" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"cannot write to the compilation cache .*file/xla \(Not a directory\)"):
        cli.main(["reproduce", "ahn2023", "--cache-dir", str(tmp_path / "file" / "xla"), "--out", str(tmp_path / "o")])


def test_a_jobs_child_runs_the_installed_jaxicl_not_a_package_in_the_working_directory(tmp_path):
    """`--jobs` starts each paper as ``python -P -m jaxicl.cli``: a folder jaxicl/ (an __init__.py and a cli.py that
    write a marker file) in the directory where the command runs is not imported; the child is the installed jaxicl."""
    import subprocess
    import sys

    from jaxicl import experiments as E

    planted = tmp_path / "jaxicl"
    planted.mkdir()
    marker = tmp_path / "planted-code-ran"
    for name in ("__init__.py", "cli.py"):
        (planted / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    cmd = E._child_command("gatmiry2024", "quick", tmp_path / "out", False, None, True, tmp_path / "r.pkl")
    assert cmd[:4] == [sys.executable, "-P", "-m", "jaxicl.cli"]
    done = subprocess.run([*cmd[:4], "list"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "gatmiry2024" in done.stdout, done.stderr
    assert not marker.exists()


def test_one_writer_per_out(tmp_path, capsys):
    """A second run on an --out that a run is writing to is refused at once (exit status 2), naming the first; a
    sweep's output directory likewise; the lock goes with the run that held it."""
    from jaxicl._io import OutputInUse, exclusive_output

    with exclusive_output(tmp_path):
        with pytest.raises(OutputInUse, match="in use by another jaxicl run"):
            with exclusive_output(tmp_path):
                pass
        assert cli.main(["reproduce", "gatmiry2024", "--out", str(tmp_path), "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert "is in use by another jaxicl run (process" in err and "give this run another --out" in err
        assert (
            cli.main(
                [
                    "sweep",
                    "--stage",
                    "zhang2023:balanced_flow",
                    "--grid",
                    "sigma=[0.1]",
                    "--out",
                    str(tmp_path),
                    "--no-cache",
                ]
            )
            == 2
        )
        assert "in use by another jaxicl run" in capsys.readouterr().err
    with exclusive_output(tmp_path):  # released
        pass
    assert not list(tmp_path.glob("*.md"))  # the refused runs wrote nothing


def test_a_settings_file_that_is_not_a_small_regular_file_is_refused_before_it_is_read(tmp_path, capsys):
    """`--config /dev/zero` (endless) and a file over 1 MiB are refused at once, not read through."""
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    for path, why in (("/dev/zero", "is not a regular file"), (str(big), "is over 1 MiB")):
        assert cli.main(["reproduce", "zhang2023", "--config", path, "--out", str(tmp_path / "out")]) == 2
        assert why in capsys.readouterr().err


def test_a_signal_to_a_jobs_run_stops_every_child_and_leaves_no_temporary_folder(tmp_path):
    """SIGTERM to the parent of a `--jobs 2` run: both children (here, processes that sleep) are stopped, the parent
    exits with 143 saying what was kept, and its temporary folder of results is gone."""
    import signal
    import subprocess
    import sys

    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "parent.py"
    script.write_text(f"""
import sys
from pathlib import Path
from jaxicl import experiments as E

def sleeper(name, *args, **kwargs):
    return [sys.executable, "-c", "import os, time; open(os.path.join({str(pids)!r}, str(os.getpid())), 'w'); "
            "time.sleep(120)"]

E._child_command = sleeper
E._run_in_processes(["gatmiry2024", "ahn2023"], "quick", Path({str(tmp_path / "out")!r}), False, None, True, jobs=2)
""")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for _ in range(600):  # both children started (each writes its pid)
        if len(list(pids.iterdir())) == 2:
            break
        time.sleep(0.1)
    children = [int(p.name) for p in pids.iterdir()]
    assert len(children) == 2
    parent.send_signal(signal.SIGTERM)
    out, _ = parent.communicate(timeout=60)
    assert parent.returncode == 143, out
    assert "stopped by SIGTERM" in out

    def running(pid):  # a process that ended is gone, or a zombie that nobody reaped yet
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    for _ in range(100):  # each got SIGTERM before the parent ended: give them a moment to be gone
        if not any(running(pid) for pid in children):
            break
        time.sleep(0.1)
    assert not [pid for pid in children if running(pid)]
    assert not list(tmp_path.glob("jaxicl-results-*"))


@pytest.mark.parametrize(
    "error, status, says",
    [
        ("checkpoint", 2, "was written by other settings"),
        ("disk", 1, "no space left on the disk writing /out/fig.png"),
        ("child", 1, "killed by SIGKILL"),
        ("interrupt", 130, "interrupted; what finished is kept: the same command resumes"),
    ],
)
def test_known_errors_reach_the_user_as_one_message(error, status, says, tmp_path, monkeypatch, capsys):
    """The library's errors of a known cause leave the command as one line on stderr and an exit status, never a
    traceback: a checkpoint of other settings (2), a full disk (1), a --jobs process killed (1), Ctrl-C (130)."""
    import errno

    from jaxicl import experiments as E
    from jaxicl.dynamics.train import CheckpointError

    def fail(*args, **kwargs):
        if error == "checkpoint":
            raise CheckpointError(
                "checkpoint x.ckpt was written by other settings (steps): remove it or use another --out"
            )
        if error == "disk":
            raise OSError(errno.ENOSPC, "No space left on device", "/out/fig.png")
        if error == "interrupt":
            raise KeyboardInterrupt
        raise E.JobFailed("the gatmiry2024 reproduction's process killed by SIGKILL before it finished")

    monkeypatch.setattr(E, "reproduce", fail)
    assert cli.main(["reproduce", "gatmiry2024", "--out", str(tmp_path), "--no-cache"]) == status
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def _fake_training_paper(monkeypatch):
    """A reproduction registered as ``fakepaper``: it writes a data file and a figure, then trains a two-parameter
    model with a checkpoint whose fingerprint holds its ``lr`` (a rerun with another ``lr`` is refused there)."""
    import dataclasses
    import types

    import jax
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optax
    import xarray as xr

    import jaxicl.experiments as E
    from jaxicl.dynamics import train
    from jaxicl.experiments.report import save_dataset, save_paper_figure

    @dataclasses.dataclass(frozen=True)
    class Config:
        lr: float = 0.1
        steps: int = 4

    def run(size="quick", out=Path("unused"), progress=False, budget=None, config=None):
        cfg = config or Config()
        out = Path(out)
        save_dataset(xr.Dataset({"lr": cfg.lr}), out / "fakepaper" / "data.nc")
        fig = plt.figure()
        save_paper_figure(fig, out, "fakepaper", "fig.png")
        res = train(
            lambda w, k, s: jnp.sum(w**2),
            jnp.ones(2),
            cfg.steps,
            jax.random.key(0),
            optimizer=optax.sgd(cfg.lr),
            chunk_size=2,
            config={"lr": cfg.lr},
            progress=False,
            checkpoint=out / "fakepaper" / "checkpoints" / "m.ckpt",
        )
        assert res.step == cfg.steps
        return E.PaperResult(
            "fakepaper", "a fake paper", size, [E.Check(f"lr is {cfg.lr}", "-", "-", "exact", True)], [], []
        )

    module = types.ModuleType("jaxicl_fakepaper")
    module.SIZES, module.run = {"quick": Config(), "full": Config()}, run
    monkeypatch.setitem(sys.modules, "jaxicl_fakepaper", module)
    monkeypatch.setitem(E.REPRODUCTIONS, "fakepaper", ("jaxicl_fakepaper", "a fake paper"))


def test_a_run_refused_half_way_leaves_the_earlier_results_as_they_were(tmp_path, monkeypatch, capsys):
    """A run's results replace those in --out only once the run is complete: a rerun with other settings, refused by
    the training checkpoint after it has written a data file and a figure, leaves the earlier report, data and figure
    byte for byte, and keeps what it wrote apart (out/incomplete-run/); a complete run then replaces them."""
    import xarray as xr

    _fake_training_paper(monkeypatch)
    out = tmp_path / "out"
    args = ["reproduce", "fakepaper", "--out", str(out), "--no-cache"]
    assert cli.main(args) == 0
    files = ("report.md", "fakepaper/data.nc", "fakepaper/fig.png")
    before = {f: (out / f).read_bytes() for f in files}
    assert b"lr is 0.1" in before["report.md"] and not (out / "incomplete-run").exists()
    capsys.readouterr()

    assert cli.main(args + ["--set", "lr=0.2"]) == 2
    err = capsys.readouterr().err
    assert "written by another configuration" in err and "Traceback" not in err and "incomplete-run" in err
    assert {f: (out / f).read_bytes() for f in files} == before
    assert float(xr.load_dataset(out / "incomplete-run" / "fakepaper" / "data.nc")["lr"]) == 0.2

    (out / "fakepaper" / "checkpoints" / "m.ckpt").unlink()  # the user starts that training over
    assert cli.main(args + ["--set", "lr=0.2"]) == 0
    assert "lr is 0.2" in (out / "report.md").read_text()
    assert float(xr.load_dataset(out / "fakepaper" / "data.nc")["lr"]) == 0.2
    assert not (out / "incomplete-run").exists()


def test_a_jobs_child_writes_its_results_where_its_parent_stages_them(tmp_path, monkeypatch):
    """A --jobs parent's staging folder travels to its children (``--results-into``); a child writes there and moves
    nothing into place: the parent does, once every paper is done."""
    import jaxicl.experiments as E
    from jaxicl.experiments.report import staged_results

    _fake_training_paper(monkeypatch)
    out = tmp_path / "out"
    with staged_results(out) as into:
        cmd = E._child_command("fakepaper", "quick", out, False, None, True, tmp_path / "r.pkl")
        assert cmd[cmd.index("--results-into") + 1] == str(into)
        assert cli.main(cmd[cmd.index("reproduce") :] + ["--no-cache"]) == 0
        assert (into / "fakepaper" / "data.nc").exists() and not (out / "fakepaper" / "data.nc").exists()
    assert (out / "fakepaper" / "data.nc").exists() and not into.exists()
