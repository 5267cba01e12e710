"""Reproductions: one module per paper, each with ``run(size, out) -> PaperResult``."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import sys
import time
from pathlib import Path

from .. import dynamics
from .._io import atomic_write_text
from ..runtime import placement
from ..runtime.budget import TimeBudget, plan_markdown
from ..runtime.jobs import (
    child_environment,
    cpu_threads_per_process,
    longest_first,
    record_seconds,
    run_watched,
    stopping_children_on_signals,
)
from ..runtime.profiling import Stage, StageTimer, total
from . import settings
from .report import (
    Check,
    PaperResult,
    PartResult,
    headline,
    render_markdown,
    result_path,
    staged_results,
    staging_folder,
)
from .report import recording as report_settings

# name -> (module, one-line description); later issues add their papers here.
REPRODUCTIONS = {
    "zhang2023": ("jaxicl.experiments.zhang2023", "Zhang, Frei & Bartlett: one-layer LSA trained by gradient flow"),
    "ahn2023": (
        "jaxicl.experiments.ahn2023",
        "Ahn, Cheng, Daneshmand & Sra: linear transformers learn preconditioned GD",
    ),
    "gatmiry2024": (
        "jaxicl.experiments.gatmiry2024",
        "Gatmiry, Saunshi, Reddi, Jegelka & Kumar: depth vs looping under task diversity",
    ),
    "yang2024": (
        "jaxicl.experiments.yang2024",
        "Yang, Huang, Liang & Chi: multi-head softmax attention learns ridge regression",
    ),
    "algoformer": (
        "jaxicl.experiments.algoformer",
        "AlgoFormer: standard vs looped vs pre/loop/post transformers; vs GD and Newton",
    ),
}


class JobFailed(RuntimeError):
    """A process of a ``--jobs`` run ended without its result (a crash, a kill, a second deadlock)."""


def available() -> list[str]:
    return list(REPRODUCTIONS)


def _trains(module) -> bool:
    """Whether a reproduction trains transformers (its ``run`` takes a ``budget``)."""
    return "budget" in inspect.signature(module.run).parameters


def _modules(names: list[str], transformers: bool = True) -> dict:
    """The reproductions' modules by name; without ``transformers``, those made only of transformers left out."""
    modules = {name: importlib.import_module(REPRODUCTIONS[name][0]) for name in names}
    if not transformers:
        modules = {n: m for n, m in modules.items() if not getattr(m, "TRANSFORMERS_ONLY", False)}
    return modules


def effective_settings(modules: dict, size: str, overrides: dict | None, transformers: bool = True) -> dict:
    """name -> the paper's ``Config`` at ``size`` with its ``overrides`` (name -> {setting: value}) applied and
    checked (`SettingsError` naming the setting), for every paper in
    ``modules``; None for a paper without overrides (it runs at ``size``). Checked before any work. Without
    ``transformers``, a paper's ``TRANSFORMER_SETTINGS`` (the nested config of its transformers) are off: setting
    one is an error, as is changing any setting that the run at the new settings never reads
    (`settings.refuse_unread`: a figure switched off)."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(modules))
    if unknown:
        raise settings.SettingsError(f"settings given for {', '.join(unknown)}, which this run does not reproduce.")

    def base(module):
        off = None if transformers else getattr(module, "TRANSFORMER_SETTINGS", None)
        return module.SIZES[size] if off is None else dataclasses.replace(module.SIZES[size], **{off: None})

    def changed(module, values):
        before = base(module)
        cfg = settings.apply(before, values)
        settings.refuse_unread(cfg, before)
        return cfg

    return {name: changed(module, overrides[name]) if overrides.get(name) else None for name, module in modules.items()}


def _run_with_settings(module, size: str, config, call):
    """``call()`` at the paper's size, or ``call(config=config)`` at changed settings; the effective settings are
    recorded in the data files, and the changed ones in the result."""
    effective = config or getattr(module, "SIZES", {}).get(size)
    with report_settings(settings.flat(effective)) if effective is not None else contextlib.nullcontext():
        res = call() if config is None else call(config=config)
    if config is not None and isinstance(res, PaperResult):
        res.settings = settings.differences(config, module.SIZES[size])
    return res


def _parts(module, size: str, config=None, transformers: bool = True) -> tuple:
    """A paper's parts (independent pieces of work: `PartResult`) at its effective settings (``config``, None: the
    size's): ``parts_of(config)`` of a paper whose parts depend on its settings, else its ``PARTS``; () for a paper
    that runs whole."""
    if not hasattr(module, "parts_of"):
        return tuple(getattr(module, "PARTS", None) or ())
    cfg = config or module.SIZES[size]
    off = None if transformers else getattr(module, "TRANSFORMER_SETTINGS", None)
    return tuple(module.parts_of(cfg if off is None else dataclasses.replace(cfg, **{off: None})))


def _jobs(
    modules: dict, configs: dict | None = None, size: str = "quick", transformers: bool = True
) -> list[tuple[str, str | None]]:
    """The processes of a ``--jobs`` run: (paper, part) for each part of a paper (`_parts` at its effective
    settings, ``configs``: name -> Config or None), else (paper, None)."""
    configs = configs or {}
    return [
        (name, part)
        for name, m in modules.items()
        for part in _parts(m, size, configs.get(name), transformers) or (None,)
    ]


def _job_name(name: str, part: str | None) -> str:
    return name if part is None else f"{name}/{part}"


def runs_in_processes(
    names: list[str], jobs: int, transformers: bool = True, configs: dict | None = None, size: str = "quick"
) -> bool:
    """Whether `reproduce` runs these papers at ``size`` in processes of their own, one per paper or part of a paper
    (``jobs`` > 1 and more than one of those to run), rather than in the calling process; ``configs``: the
    papers' effective settings (`effective_settings`), where any changed."""
    return jobs > 1 and len(_jobs(_modules(names, transformers), configs, size, transformers)) > 1


def nothing_to_plan(modules: dict, configs: dict, size: str, transformers: bool = True) -> str | None:
    """Why ``--plan`` would time no training in a run of ``modules`` at ``size`` and their effective settings
    (``configs``: name -> Config or None, `effective_settings`), or None where some paper trains transformers there.
    ``--plan`` times only the softmax transformers' training (`jaxicl.runtime.planning`); where none trains, it would
    run every other stage in full and plan nothing."""
    if not transformers:
        return "--skip-transformers leaves out every transformer"
    why = []
    for name, module in modules.items():
        if not _trains(module):
            why.append(f"{name} trains no transformer")
            continue
        unread = (configs.get(name) or module.SIZES[size]).unread()
        field = getattr(module, "TRANSFORMER_SETTINGS", None)
        if field not in unread:
            return None
        why.append(f"{name}: {unread[field]}")  # a figure switched off (Zhang et al.'s Fig. 1 at quick size)
    return "; ".join(why)


def _print_summary(name: str, res: PaperResult, timing: Stage, processes: int = 1) -> None:
    where = "" if processes == 1 else f" over {processes} processes"
    print(
        f"[jaxicl] {name}: {headline(res.checks)} in {timing.wall:.1f} s{where} (compile {timing.compile:.1f} "
        f"s, {timing.programs} XLA "
        f"programs, {timing.cache_hits} from the persistent cache)",
        flush=True,
    )
    for fig, status in res.partial.items():
        then = "timed by --plan" if res.planned else "run the same command again to resume"
        print(f"[jaxicl] {name}: {fig} is {status}; {then}", flush=True)


def reproduce_part(
    name: str,
    part: str,
    size: str = "quick",
    out="jaxicl-report",
    progress: bool = False,
    budget_minutes: float | None = None,
    overrides: dict | None = None,
) -> list[PartResult]:
    """One part of a paper (of its `_parts`; a ``--jobs`` run's process): trained and evaluated, checkpointed under
    ``out``, its datasets returned for the paper's ``assemble`` (no report written)."""
    module = _modules([name])[name]
    config = effective_settings({name: module}, size, {name: overrides} if overrides else None)[name]
    if part not in _parts(module, size, config):
        raise ValueError(f"{name} has no part {part!r}; its parts: {list(_parts(module, size, config))}.")
    print(f"[jaxicl] reproducing {name}/{part} ({size}) ...", flush=True)
    whole = StageTimer()
    budget = None if budget_minutes is None else TimeBudget(60 * budget_minutes)
    with placement.on("latency"):  # the library's throughput-bound calls move to the accelerator themselves
        (res,) = _run_with_settings(
            module,
            size,
            config,
            lambda **c: module.run_parts([part], size=size, out=Path(out), progress=progress, budget=budget, **c),
        )
    done = whole.lap(part)
    print(
        f"[jaxicl] {name}/{part}: done in {done.wall:.1f} s (compile {done.compile:.1f} s, {done.programs} XLA "
        f"programs, {done.cache_hits} from the persistent cache)",
        flush=True,
    )
    return [res]


def reproduce(
    names=None,
    size: str = "quick",
    out="jaxicl-report",
    progress: bool = False,
    budget_minutes: float | None = None,
    transformers: bool = True,
    jobs: int = 1,
    write_report: bool = True,
    overrides: dict | None = None,
    plan: bool = False,
    record_times: bool = False,
) -> list[PaperResult]:
    """Run reproductions and write ``out/report.md`` with checks tables, figures and data.

    ``out``'s earlier results are replaced only once this run's are complete (`report.staged_results`): until then
    they are written to ``out/incomplete-run/``, which an interrupted or failed run leaves with what it finished.

    ``budget_minutes``: wall clock for the whole call; the papers that train transformers share what is left of
    it when each starts (equal shares), and train each model for its share, checkpointed: the same call again
    resumes. Figures from unfinished models are drawn and marked "partial" (``PaperResult.partial``).
    ``transformers=False`` leaves out every figure that trains softmax transformers (and papers made only of them).
    ``jobs`` > 1 runs up to that many papers at once, each in its own ``jaxicl reproduce NAME`` process (see
    `_run_in_processes`); the results and the report are those of a sequential run, in the order given.
    ``write_report=False`` leaves ``out/report.md`` alone (the per-paper processes of ``jobs`` > 1).
    ``overrides``: paper -> {setting: value} (`jaxicl.experiments.settings`), checked before any work; the
    report names the settings that differ from ``size``'s.
    ``plan``: every training run measures its step time on a few steps (`jaxicl.dynamics.planning`) instead of
    training, and each paper's notes get the plan (models × steps, step time, time left, ``--budget`` slices); one
    process (``jobs`` is ignored), so that the step times are measured alone.
    ``record_times``: a whole quick run in processes records each job's wall time beside the compilation cache, for the
    next run's order (`jaxicl.runtime.jobs.record_seconds`; the command line's runs do)."""
    names = list(names) if names else available()
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        raise ValueError(f"unknown reproduction(s) {unknown}; available: {available()} (see `jaxicl list`).")
    if size not in settings.SIZE_NAMES:
        raise ValueError(f"size must be one of {settings.SIZE_NAMES}, got {size!r}.")
    if budget_minutes is not None and not budget_minutes > 0:
        raise ValueError(f"budget_minutes must be positive, got {budget_minutes}.")
    if int(jobs) != jobs or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs}.")
    out = Path(out)
    modules = _modules(names, transformers)
    configs = effective_settings(modules, size, overrides, transformers)
    if plan and (why := nothing_to_plan(modules, configs, size, transformers)):
        raise ValueError(f"plan: this run trains no transformer to time ({why}).")
    with staged_results(out):  # out's results are replaced once this run's are complete
        end = None if budget_minutes is None else time.time() + 60 * budget_minutes
        if runs_in_processes(names, jobs, transformers, configs, size) and not plan:
            return _run_in_processes(
                list(modules), size, out, progress, end, transformers, int(jobs), overrides, record_times
            )
        results = []
        for i, (name, module) in enumerate(modules.items()):
            print(f"[jaxicl] reproducing {name} ({size}) ...", flush=True)
            whole = StageTimer()
            kwargs = {} if transformers or not _trains(module) else {"transformers": False}
            if end is not None and transformers and _trains(module):
                training_left = sum(_trains(m) for m in list(modules.values())[i:])  # papers still to train
                kwargs["budget"] = TimeBudget(max(end - time.time(), 1e-3) / training_left)
            with placement.on("latency"), dynamics.planning() if plan else contextlib.nullcontext([]) as planned:
                # (the library's throughput-bound calls move to the accelerator themselves)
                res = _run_with_settings(
                    module,
                    size,
                    configs[name],
                    lambda **c: module.run(size=size, out=out, progress=progress, **kwargs, **c),
                )
            if planned:
                table = plan_markdown(planned, budget_minutes)
                res.notes.append(
                    "**Training plan** (`--plan`: each run measured on a few steps; nothing else trained):\n\n" + table
                )
                print(f"[jaxicl] {name}: training plan\n{table}", flush=True)
            done = whole.lap(name)
            if res.stages:  # what the paper's own stages do not cover: figures, data files, set-up
                rest = total(res.stages)
                res.stages.append(
                    Stage(
                        "figures, data files, set-up",
                        max(done.wall - rest.wall, 0.0),
                        max(done.compile - rest.compile, 0.0),
                        done.programs - rest.programs,
                        done.cache_hits - rest.cache_hits,
                    )
                )
            _print_summary(name, res, done)
            results.append(res)
            if write_report:
                # the papers finished so far (out/incomplete-run/report.md until the run is complete)
                atomic_write_text(result_path(out / "report.md"), render_markdown(results))
        return results


def _child_command(
    name: str,
    size: str,
    out: Path,
    progress: bool,
    end: float | None,
    transformers: bool,
    result_file: Path,
    threads: int | None = None,
    part: str | None = None,
    device: str | None = None,
    overrides: dict | None = None,
) -> list[str]:
    """``jaxicl reproduce NAME`` (``--part PART``: that part of it) as a process that pickles its result to
    ``result_file`` and writes no report.md, with this process's size, output directory, budget end and compilation
    cache, and XLA:CPU's thread pool sized to ``threads`` (`jaxicl.runtime.xla_options.size_cpu_thread_pool`; None: XLA's
    default)."""
    import jax

    # -P: the working directory is not put first on sys.path, so a folder jaxicl/ where the command runs (another
    # checkout, a planted package) is not what the child imports
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "jaxicl.cli",
        "reproduce",
        name,
        f"--{size}",
        "--out",
        str(out),
        "--result-file",
        str(result_file),
    ]
    cmd += [] if part is None else ["--part", part]
    staging = staging_folder(out)
    cmd += [] if staging is None else ["--results-into", str(staging)]  # the parent moves them into place
    cmd += [] if device is None else ["--device", device]
    for key, value in (overrides or {}).items():
        cmd += ["--set", f"{key}={settings.toml_value(value)}"]
    cmd += ["--progress"] if progress else []
    cmd += [] if transformers else ["--skip-transformers"]
    cmd += [] if end is None else ["--budget", repr(max(end - time.time(), 0.06) / 60)]
    cache = jax.config.jax_compilation_cache_dir
    cmd += ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    return cmd + ([] if threads is None else ["--cpu-threads", str(threads)])


def _run_in_processes(
    names: list[str],
    size: str,
    out: Path,
    progress: bool,
    end: float | None,
    transformers: bool,
    jobs: int,
    overrides: dict | None = None,
    record_times: bool = False,
) -> list[PaperResult]:
    """Each paper in its own process, or each part of a paper with ``PARTS`` (`reproduce_part`; the paper is
    assembled here once all its parts are done), up to ``jobs`` at once, all sharing the persistent compilation cache.

    Several processes use a machine better than one: XLA compiles on one thread, and the reproductions' many small
    programs keep about 1.4 of two cores busy (benchmarks/README.md). Their output interleaves, each summary line names
    its paper; ``out/report.md`` is rewritten in the given order as each paper finishes. A budget is the whole call's
    wall clock: a process that starts later gets what is left of it. Processes start longest first (`longest_first`, by
    the measured times of ``size``), so the machine is not left to one long job at the end. Each starts XLA:CPU with its
    share of the cores as intra-op threads (`cpu_threads_per_process`). A process that uses no CPU time for
    `jaxicl.runtime.watchdog.STALL_SECONDS` has deadlocked (`run_watched`): its Python stacks are printed and it is
    started once more. With ``record_times``, a whole quick run records each job's wall time for the next run's order
    (`record_seconds`). A process that fails (not a failed check: a crash, or a second deadlock) raises ``RuntimeError``
    naming the paper (and part) once the others have finished (`JobFailed`)."""
    import tempfile
    import threading
    from concurrent.futures import ThreadPoolExecutor

    modules = _modules(names, transformers)
    configs = effective_settings(modules, size, overrides, transformers)
    todo = _jobs(modules, configs, size, transformers)
    device = placement.mode()  # every process places its work by the run's mode (one rule: runtime.placement)
    env = child_environment(min(jobs, len(todo)))  # and takes its share of an accelerator's memory
    results: dict[str, PaperResult] = {}
    parts: dict[str, list[PartResult]] = {name: [] for name in names}
    lock = threading.Lock()
    threads = cpu_threads_per_process(jobs)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="jaxicl-results-") as tmp:

        def one(job):
            name, part = job
            label = _job_name(name, part)
            t0 = time.perf_counter()
            result_file = Path(tmp) / f"{label.replace('/', '-')}.pkl"
            mine = (overrides or {}).get(name)
            settings = {"overrides": mine} if mine else {}
            res = _job_result(
                label,
                _child_command(
                    name, size, out, progress, end, transformers, result_file, threads, part, device, **settings
                ),
                result_file,
                env,
            )
            with lock:
                seconds[label] = time.perf_counter() - t0
                if part is not None:  # the paper's last part assembles it (datasets -> checks, figures, files)
                    parts[name].append(res)
                    if len(parts[name]) < sum(n == name for n, _ in todo):
                        return
                    res = _run_with_settings(
                        modules[name],
                        size,
                        configs[name],
                        lambda **c: modules[name].assemble(size, out, parts[name], **c),
                    )
                    _print_summary(name, res, total(res.stages), len(parts[name]))
                results[name] = res
                atomic_write_text(
                    result_path(out / "report.md"), render_markdown([results[n] for n in names if n in results])
                )

        # a SIGTERM or SIGINT stops every child before this process ends, and the folder above is removed
        with stopping_children_on_signals(), ThreadPoolExecutor(max_workers=jobs) as pool:
            order = {_job_name(*j): j for j in todo}  # submitted longest first, reported in the given order
            futures = [pool.submit(one, order[label]) for label in longest_first(list(order), size=size)]
    if record_times and size == "quick" and end is None:  # whole runs only: a slice says nothing of a job's length
        record_seconds(seconds)
    for future in futures:  # the first crash, once every paper has finished
        if future.exception() is not None:
            raise future.exception()
    return [results[n] for n in names if n in modules]


def _job_result(label: str, command: list[str], result_file: Path, env: dict[str, str]):
    """Run one job's process, ``command`` in ``env``, and return the result it pickled into ``result_file``. A
    deadlocked process is stopped and started once more (the compilation cache and the training checkpoints keep its
    work); a second deadlock, or a process that ends without a result, raises `JobFailed` naming the job."""
    import pickle
    import signal

    for attempt in (1, 2):
        rc = run_watched(command, label, env)
        if rc is not None:
            break
        if attempt == 1:
            print(f"[jaxicl] {label}: starting it again", flush=True)
    if rc is None:
        raise JobFailed(
            f"the {label} reproduction's process stopped using CPU time twice (XLA:CPU "
            "deadlock, see benchmarks/README.md); its Python stacks are printed above"
        )
    if not result_file.exists():
        why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
        raise JobFailed(
            f"the {label} reproduction's process {why} before it finished (its output is above); "
            "the other papers' results are in the incomplete run's report, its training checkpoints "
            "are kept: the same command resumes"
        )
    with open(result_file, "rb") as f:
        (res,) = pickle.load(f)
    return res


__all__ = [
    "Check",
    "JobFailed",
    "PaperResult",
    "PartResult",
    "REPRODUCTIONS",
    "available",
    "reproduce",
    "reproduce_part",
]
