"""Wall time of each quick reproduction with a cold and a warm compilation cache, per backend.

For each paper, ``jaxicl reproduce NAME --quick`` runs twice, each time in a fresh process with a fresh ``--out``
(no training checkpoint is reused): first with an empty compilation cache (cold), then with the cache the first run
filled (warm). The command's own summary line gives the compile time, the number of XLA programs and the cache hits
(``jaxicl reproduce --progress`` splits them by stage; ``--stages`` prints that table from each run's report.md).
One markdown row per paper and backend:

    | paper | backend | checks | cold: wall / compile / programs | warm: wall / compile / from cache | cold ÷ warm |

With two backends (``--platforms gpu cpu``) a second table gives each paper's CPU ÷ GPU wall-time ratio, cold and
warm: issue 15's item 3 asks for ≥ 5× against a 2-core CPU, which ``--cpu-cores 2`` imitates on a bigger machine by
pinning the CPU runs to two CPUs (XLA:CPU sizes its thread pool from them).

``--jobs N`` runs the papers at once instead, one ``jaxicl reproduce NAME ... --quick --jobs N`` command cold and one
warm, and reports each paper's own wall time from its summary line: an upper bound on the paper run alone, since
the papers share the machine. That fits every paper, cold and warm, into one device call (each paper alone takes
minutes on a GPU, benchmarks/README.md). ``--timeout S`` stops each command (its processes too) after S seconds
(``--timeout COLD,WARM``: each its own); ``--keep DIR`` keeps the reports under DIR;
the papers that had not finished are reported as such. ``--cold-only`` skips the warm runs (half the time).

The runs inherit the environment: ``JAXICL_UNROLL``, ``JAXICL_REMAT`` and ``JAXICL_TRAINING_AUTOTUNE_LEVEL`` set how the
transformers' training programs compile (README, "Command line", XLA options); the header line prints those set.

Run: ``python benchmarks/bench_reproduce.py [NAME ...] [--platforms gpu cpu] [--cpu-cores 2] [--skip-transformers]
[--stages] [--jobs N] [--timeout S[,S]] [--keep DIR] [--cold-only]`` (default: every paper, JAX's default backend).
Minutes per paper
on a 2-core CPU (``make reproduce``'s numbers in benchmarks/README.md); ``--skip-transformers`` leaves out the
transformer trainings (and the AlgoFormer paper). The rows are recorded as ``bench_reproduce``
(``benchmarks/results.py``), one variant per way of running (alone or ``--jobs N``, the papers, the transformers in
or out).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import record  # benchmarks/results.py

SUMMARY = re.compile(
    r"\[jaxicl\] (?P<name>\S+): (?P<passed>\d+) pass, (?P<failed>\d+) fail, (?:\d+ pass \(not asserted\), )?"
    r"\d+ not reproduced, (?:\d+ not applicable, )?\d+ reported(?:; formulas: \d+ pass, \d+ fail)? "
    r"in (?P<wall>[\d.]+) s "
    r"(?:over \d+ processes )?\(compile (?P<compile>[\d.]+) s, (?P<programs>\d+) XLA programs, (?P<hits>\d+) from the "
    r"persistent cache\)"
)


@dataclasses.dataclass
class Run:
    seconds: float  # the whole command, start-up included
    passed: int
    failed: int
    compile: float
    programs: int
    hits: int
    report: Path


def run_reproduce(
    names: list[str],
    out: Path,
    cache: Path,
    platform: str | None,
    cpus: list[int] | None,
    transformers: bool,
    jobs: int = 1,
    timeout: float | None = None,
) -> tuple[float, dict[str, Run]]:
    """``jaxicl reproduce NAMES --quick --jobs JOBS`` in a fresh process group, into ``out`` (a new directory) with the
    compilation cache ``cache``, stopped with all its processes after ``timeout`` seconds: (the command's wall time,
    a :class:`Run` for each paper that finished, its ``seconds`` the paper's own wall time from its summary line)."""
    cmd = [
        sys.executable,
        "-m",
        "jaxicl.cli",
        "reproduce",
        *names,
        "--quick",
        "--jobs",
        str(jobs),
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
    ]
    cmd += [] if transformers else ["--skip-transformers"]
    env = dict(os.environ) | ({"JAX_PLATFORMS": platform} if platform else {})
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, preexec_fn=pin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the --jobs children too
        stdout, stderr = proc.communicate()
        timed_out = True
    seconds = time.perf_counter() - t
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.log").write_text(stdout + stderr)  # what an unfinished paper had done
    # a command stopped before its end leaves the papers that finished in incomplete-run/ (experiments.report)
    report = out / "report.md" if (out / "report.md").exists() else out / "incomplete-run" / "report.md"
    runs = {
        m["name"]: Run(
            float(m["wall"]),
            int(m["passed"]),
            int(m["failed"]),
            float(m["compile"]),
            int(m["programs"]),
            int(m["hits"]),
            report,
        )
        for m in SUMMARY.finditer(stdout)
    }
    if not timed_out and (proc.returncode not in (0, 1) or not runs):  # 1: a check failed (in the row), else it broke
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return seconds, runs


def reproduce_once(
    name: str, out: Path, cache: Path, platform: str | None, cpus: list[int] | None, transformers: bool
) -> Run:
    """One paper alone (:func:`run_reproduce`), its ``seconds`` the whole command's, start-up included."""
    seconds, runs = run_reproduce([name], out, cache, platform, cpus, transformers)
    return dataclasses.replace(runs[name], seconds=seconds)


def stage_table(report: Path, name: str) -> str:
    """The stage table ("Where the time went") of paper ``name`` in a report.md."""
    text = report.read_text()
    start = text.find("| stage |", max(text.find(f"## {name}:"), 0))
    end = text.find("\n\n", start)
    return text[start : end if end > 0 else None]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="papers (default: all, see `jaxicl list`)")
    ap.add_argument(
        "--platforms",
        nargs="+",
        default=[None],
        help="JAX_PLATFORMS of each set of runs, e.g. gpu cpu (default: JAX's default backend)",
    )
    ap.add_argument(
        "--cpu-cores",
        type=int,
        default=None,
        help="pin the runs whose platform is cpu to this many CPUs (default: all)",
    )
    ap.add_argument("--skip-transformers", action="store_true", help="leave out the transformer trainings")
    ap.add_argument("--stages", action="store_true", help="print each run's per-stage table")
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="run the papers at once in one command with --jobs N (per-paper times: upper bounds)",
    )
    ap.add_argument(
        "--timeout", default=None, help="with --jobs: stop each command after S seconds (COLD,WARM: each its own)"
    )
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="with --jobs: write the reports (and the compilation cache) under this directory instead of "
        "a temporary one that is removed",
    )
    ap.add_argument("--cold-only", action="store_true", help="only the runs with an empty compilation cache")
    args = ap.parse_args()
    try:
        timeouts = [float(t) for t in args.timeout.split(",")] if args.timeout else [None]
    except ValueError:
        ap.error(f"--timeout takes seconds, or COLD,WARM seconds, not {args.timeout!r}")
    if len(timeouts) > 2:
        ap.error(f"--timeout takes at most two values (COLD,WARM), not {args.timeout!r}")
    timeouts = dict(zip(("cold", "warm"), timeouts * (3 - len(timeouts))))
    from jaxicl.experiments import _modules, available

    names = args.names or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        ap.error(f"unknown reproduction(s) {unknown}; available: {available()}")
    names = list(_modules(names, not args.skip_transformers))  # papers made only of transformers: none left
    cpus = (
        sorted(os.sched_getaffinity(0))[: args.cpu_cores]
        if args.cpu_cores and hasattr(os, "sched_getaffinity")
        else None
    )
    settings = {
        k: v
        for k, v in os.environ.items()
        if k in ("JAXICL_UNROLL", "JAXICL_REMAT", "JAXICL_TRAINING_AUTOTUNE_LEVEL", "JAXICL_BATCH_MEMBERS", "XLA_FLAGS")
    }
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}"
        + (f"; cpu runs pinned to CPUs {cpus}" if cpus else "")
        + "".join(f"; {k}={v}" for k, v in settings.items()),
        flush=True,
    )
    kinds = ("cold",) if args.cold_only else ("cold", "warm")
    print(
        "| paper | backend | checks | cold: wall / compile / programs | warm: wall / compile / from cache | "
        "cold ÷ warm |\n|---|---|---|---|---|---|",
        flush=True,
    )
    walls = {}
    rows = []

    def row(name, label, pinned, runs):
        cold, warm = runs.get("cold"), runs.get("warm")
        walls[name, label] = (cold and cold.seconds, warm and warm.seconds)
        checks = next((f"{r.passed} pass, {r.failed} fail" for r in (warm, cold) if r), "—")
        cold_s = f"{cold.seconds:.1f} s / {cold.compile:.1f} s / {cold.programs}" if cold else "not finished"
        warm_s = (
            f"{warm.seconds:.1f} s / {warm.compile:.1f} s / {warm.hits} of {warm.programs}"
            if warm
            else "not finished"
            if "warm" in runs
            else "—"
        )
        ratio = f"{cold.seconds / warm.seconds:.2f}×" if cold and warm else "—"
        print(
            f"| {name} | {label}{' (' + str(len(pinned)) + ' CPUs)' if pinned else ''} | {checks} | {cold_s} | "
            f"{warm_s} | {ratio} |",
            flush=True,
        )
        rows.append(
            {
                "paper": name,
                "platform": label + (f" ({len(pinned)} CPUs)" if pinned else ""),
                "checks": checks,
                "cold wall (s)": cold.seconds if cold else "not finished",
                "cold compile (s)": cold.compile if cold else "",
                "XLA programs": cold.programs if cold else "",
                "warm wall (s)": warm.seconds if warm else ("not finished" if "warm" in runs else ""),
                "warm compile (s)": warm.compile if warm else "",
                "from cache": f"{warm.hits} of {warm.programs}" if warm else "",
                "cold ÷ warm": cold.seconds / warm.seconds if cold and warm else "",
            }
        )
        if args.stages:
            for what, run in runs.items():
                if run and run.report.exists():
                    print(f"\n{name}, {label}, {what}:\n{stage_table(run.report, name)}\n", flush=True)

    for platform in args.platforms:
        label = platform or "default"
        pinned = cpus if platform == "cpu" else None
        if args.jobs:  # every paper at once, cold then warm
            with tempfile.TemporaryDirectory(prefix="bench_reproduce_") as tmp:
                where = Path(args.keep or tmp) / label
                together = {
                    what: run_reproduce(
                        names,
                        where / what,
                        where / "cache",
                        platform,
                        pinned,
                        not args.skip_transformers,
                        args.jobs,
                        timeouts[what],
                    )
                    for what in kinds
                }
                for name in names:
                    row(name, label, pinned, {what: runs.get(name) for what, (_, runs) in together.items()})
                warm = f"{together['warm'][0]:.1f} s" if "warm" in together else "—"
                print(
                    f"| all, --jobs {args.jobs} (whole command) | {label} | | {together['cold'][0]:.1f} s | {warm} | |",
                    flush=True,
                )
                rows.append(
                    {
                        "paper": f"all, --jobs {args.jobs} (whole command)",
                        "platform": label,
                        "cold wall (s)": together["cold"][0],
                        "warm wall (s)": together["warm"][0] if "warm" in together else "",
                    }
                )
            continue
        for name in names:
            with tempfile.TemporaryDirectory(prefix=f"bench_reproduce_{name}_") as tmp:  # cache and both --out
                row(
                    name,
                    label,
                    pinned,
                    {
                        what: reproduce_once(
                            name, Path(tmp) / what, Path(tmp) / "cache", platform, pinned, not args.skip_transformers
                        )
                        for what in kinds
                    },
                )
    mode = f"--jobs {args.jobs}" if args.jobs else "each paper alone"
    record(
        "bench_reproduce",
        rows,
        variant=" ".join(
            [mode, *names]
            + ["--skip-transformers"] * args.skip_transformers
            + [f"{k}={v}" for k, v in settings.items()]
        ),
    )
    if len(args.platforms) == 2:
        a, b = (p or "default" for p in args.platforms)
        print(f"\n| paper | {b} ÷ {a}, cold | {b} ÷ {a}, warm |\n|---|---|---|")
        ratio = lambda x, y: f"{y / x:.2f}× ({y:.0f} s / {x:.0f} s)" if x and y else "—"  # noqa: E731
        for name in names:
            (ca, wa), (cb, wb) = walls[name, a], walls[name, b]
            print(f"| {name} | {ratio(ca, cb)} | {ratio(wa, wb)} |")


if __name__ == "__main__":
    main()
