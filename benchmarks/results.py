"""Benchmark results as data. A script records its rows with where, when and at what commit they were measured
(`record`): ``benchmarks/results/<bench>/<date>-<machine>-[<variant>-]<commit>.json`` (``$JAXICL_BENCH_RESULTS``
instead of ``benchmarks/results`` where it is set). ``benchmarks/render.py`` writes the tables of benchmarks/README.md
from the latest result of each machine and variant, so the README shows current numbers and the history stays in
these files and in git.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path

RESULTS = Path(__file__).with_name("results")
ENV = "JAXICL_BENCH_RESULTS"  # another folder for the results (a trial run, a machine whose results are copied back)
COMMIT = "JAXICL_BENCH_COMMIT"  # the commit measured, where the tree has no git history (a copy sent to a GPU machine)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    if os.environ.get(COMMIT):
        return os.environ[COMMIT]
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict:
    """Where this process measures: a label (the accelerator's kind, else the CPU and its cores), the backend, the
    versions (jax, jaxlib, Python), the commit and the date."""
    import jax
    import jaxlib

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    backend = jax.default_backend()
    kind = jax.devices()[0].device_kind if backend != "cpu" else None
    return {
        "machine": f"{kind} ({cores} CPU cores)" if kind else f"{cores}-core {_cpu_model()}",
        "backend": backend,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def record(
    bench: str, rows: list[dict], *, variant: str = "", where: dict | None = None, results: Path | None = None
) -> Path:
    """Write ``rows`` (a list of flat dicts: the numbers, with the columns that say what each is) as one result of the
    benchmark ``bench``, with `machine`'s description (or ``where``); returns the file. ``variant`` names what one
    command of a benchmark that several commands share measured (bench_transformer's model, size and dtype): the
    README shows the latest result of each machine and variant."""
    where = where or machine()
    folder = results or Path(os.environ.get(ENV) or RESULTS)
    name = "-".join(filter(None, (where["date"], _slug(where["machine"]), _slug(variant), where["commit"])))
    path = folder / bench / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"bench": bench, **where, **({"variant": variant} if variant else {}), "rows": rows}
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"[results] {path}", flush=True)
    return path
