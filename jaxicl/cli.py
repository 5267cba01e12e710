"""Command line: ``jaxicl list``, ``jaxicl reproduce [NAME ...] [--quick|--trained|--full] [--out DIR]``, ``jaxicl sweep CONFIG``.

``reproduce`` and ``sweep`` use JAX's persistent compilation cache (see `jaxicl.runtime.compilation_cache`), and start
the same command again, once, if XLA:CPU deadlocks them (`jaxicl.runtime.watchdog`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from ._io import exclusive_output, writable_directory
from .runtime import watchdog
from .runtime.xla_options import default_xla_flags, size_cpu_thread_pool


def _size(args) -> str:
    """The size named on the command line (`jaxicl.experiments.settings.SIZE_NAMES`), quick by default."""
    return "full" if args.full else "trained" if args.trained else "quick"


def _cmd_config(args) -> int:
    from .experiments import _modules, available
    from .experiments.settings import field_docs, to_toml

    if args.name not in available():
        print(f"jaxicl: unknown reproduction {args.name}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    module = _modules([args.name])[args.name]
    size = _size(args)
    cfg = module.SIZES[size]
    docs, headings = field_docs(cfg)  # the class's comments, then the module's own
    docs.update(getattr(module, "SETTINGS_DOCS", {}))
    print(to_toml(cfg, module.SIZES, size, docs, f"jaxicl reproduce {args.name}: {module.TITLE}", headings), end="")
    return 0


def _cmd_list(args) -> int:
    from .experiments import REPRODUCTIONS

    width = max(len(n) for n in REPRODUCTIONS)
    for name, (_, desc) in REPRODUCTIONS.items():
        print(f"{name:<{width}}  {desc}")
    return 0


def _use_cache(args) -> None:
    """The persistent compilation cache (on unless ``--no-cache``), announced on stderr."""
    from .runtime import compilation_cache

    if args.no_cache:
        return
    try:
        path = compilation_cache.enable(args.cache_dir)
    except ValueError as e:
        raise SystemExit(f"jaxicl: {e}")
    print(f"[jaxicl] compilation cache: {path} (--no-cache to turn it off)", file=sys.stderr, flush=True)


def _overrides(args, names: list[str]) -> dict | None:
    """The settings of ``--config FILE`` then ``--set KEY=VALUE`` (later ones win), for the one paper named; a
    SettingsError if they cannot apply."""
    from .experiments import settings

    if not args.set and not args.config:
        return None
    if len(names) != 1:
        raise settings.SettingsError(
            "--set and --config change one paper's settings: name that paper "
            "(e.g. `jaxicl reproduce gatmiry2024 --set kappas=[2,16,64]`)."
        )
    values = dict(settings.read_file(args.config)) if args.config else {}
    values.update(settings.parse_assignment(a) for a in args.set or ())
    return {names[0]: values}


def _cmd_reproduce(args) -> int:
    from .experiments import _modules, available, effective_settings, nothing_to_plan
    from .experiments.settings import SettingsError

    names = args.names or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(
            f"jaxicl: unknown reproduction {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr
        )
        return 2
    size = _size(args)
    try:  # every setting checked before any work
        overrides = _overrides(args, names)
        modules = _modules(names, not args.skip_transformers)
        configs = effective_settings(modules, size, overrides, not args.skip_transformers)
    except SettingsError as e:
        print(f"jaxicl: {e}", file=sys.stderr)
        return 2
    if args.plan and (why := nothing_to_plan(modules, configs, size, not args.skip_transformers)):
        print(
            f"jaxicl: --plan times the transformers' training, and this run trains none ({why}); the same command "
            "without --plan runs the rest",
            file=sys.stderr,
        )
        return 2
    if args.budget is not None and not args.budget > 0:
        print(f"jaxicl: --budget must be a positive number of minutes, got {args.budget}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"jaxicl: --jobs must be a positive number of processes, got {args.jobs}", file=sys.stderr)
        return 2
    child = args.result_file is not None  # one paper (or part) of a --jobs run: its parent holds --out and its report
    with contextlib.ExitStack() as stack:
        try:  # before any work: a report that cannot be written is found out now, not after minutes of training
            writable_directory(args.out, "--out")
            if not child:  # one writer per --out (its --jobs children write under the parent's lock)
                stack.enter_context(exclusive_output(args.out))
        except ValueError as e:  # OutputInUse among them
            print(f"jaxicl: {e}", file=sys.stderr)
            return 2
        return _reproduce_in(args, names, size, overrides, configs, child)


def _reproduce_in(args, names, size, overrides, configs, child: bool) -> int:
    """`_cmd_reproduce` once its settings are checked and its --out is this run's."""
    from .experiments.report import staged_results

    _use_cache(args)
    # a --jobs child writes its results where its parent stages them (the parent moves them into place)
    with staged_results(args.out, into=args.results_into) if args.results_into else contextlib.nullcontext():
        return _reproduce_here(args, names, size, overrides, configs, child)


def _reproduce_here(args, names, size, overrides, configs, child: bool) -> int:
    from .experiments import reproduce, runs_in_processes
    from .experiments.report import headline

    if args.part is not None:  # one part of a paper, in a --jobs run's process: its parent assembles the paper
        return _reproduce_part(args, names, size, overrides)
    # papers run in this process: it watches itself for XLA:CPU's deadlock (a --jobs parent watches its children)
    in_process = not child and (
        args.plan or not runs_in_processes(names, args.jobs, not args.skip_transformers, configs, size)
    )
    with watchdog.watching() if in_process else contextlib.nullcontext():
        results = reproduce(
            names,
            size=size,
            out=args.out,
            progress=args.progress or (sys.stderr.isatty() and not child),
            budget_minutes=args.budget,
            transformers=not args.skip_transformers,
            jobs=args.jobs,
            write_report=not child,
            overrides=overrides,
            plan=args.plan,
            record_times=True,
        )
    if child:
        _write_result(args.result_file, results)
    report = Path(args.out) / "report.md"
    failed = [(r.name, c.claim) for r in results for c in r.checks if c.verdict == "FAIL"]
    if not child:
        print(f"[jaxicl] {headline([c for r in results for c in r.checks])}; report: {report.resolve()}")
    for name, claim in failed:
        print(f"[jaxicl] FAILED {name}: {claim}", file=sys.stderr)
    if failed:
        return 1
    partial = [r.name for r in results if not r.complete]
    if partial and args.plan:
        print(
            "[jaxicl] --plan: the plan is in the report; the figures are drawn from the few steps measured",
            file=sys.stderr,
        )
    elif partial:
        print(
            f"[jaxicl] training unfinished in {', '.join(partial)} (budget reached): run the same command again to "
            "resume",
            file=sys.stderr,
        )
        return 3
    return 0


def _write_result(path, results) -> None:
    """A --jobs child's results, pickled for its parent (atomically: a killed child leaves no half a file)."""
    import pickle

    from ._io import atomic_output

    with atomic_output(path) as tmp:
        Path(tmp).write_bytes(pickle.dumps(results))


def _reproduce_part(args, names: list[str], size: str, overrides: dict | None = None) -> int:
    from .experiments import reproduce_part

    if len(names) != 1 or args.result_file is None:
        print("jaxicl: --part takes one paper and a --result-file", file=sys.stderr)
        return 2
    try:
        results = reproduce_part(
            names[0],
            args.part,
            size=size,
            out=args.out,
            progress=args.progress,
            budget_minutes=args.budget,
            overrides=(overrides or {}).get(names[0]),
        )
    except ValueError as e:
        print(f"jaxicl: {e}", file=sys.stderr)
        return 2
    _write_result(args.result_file, results)
    return 0


def _print_stages(table: dict[str, str]) -> None:
    """Each stage's name on a line of its own, then what it computes, indented and wrapped to the terminal's width
    (a docstring's ``code`` printed as `code`)."""
    import shutil
    import textwrap

    width = max(40, min(shutil.get_terminal_size().columns, 120))
    for name, what in table.items():
        print(name)
        print(textwrap.fill(what.replace("``", "`"), width, initial_indent="    ", subsequent_indent="    "))


def _cmd_stage_sweep(args) -> int:
    """``jaxicl sweep --stage PAPER:STAGE --grid KEY=[...]``: experiments.stage_sweep."""
    from .experiments import settings
    from .experiments.stage_sweep import check_stage_sweep, stages, sweep_stage, verdict_table

    if args.list_stages:
        _print_stages(stages())
        return 0
    if args.config is not None:
        print("jaxicl sweep: give a TOML file or --stage, not both", file=sys.stderr)
        return 2
    try:
        grid = dict(settings.parse_assignment(a) for a in args.grid or ())
        overrides = dict(settings.parse_assignment(a) for a in args.set or ())
        check_stage_sweep(args.stage, grid, _size(args), overrides)  # bad input leaves no --out behind
        writable_directory(args.out, "--out")
        with exclusive_output(args.out):  # one writer per --out
            _use_cache(args)
            ds = sweep_stage(
                args.stage,
                grid,
                _size(args),
                overrides,
                args.out,
                progress=args.progress or sys.stderr.isatty(),
            )
    except (settings.SettingsError, ValueError) as e:  # OutputInUse among them
        print(f"jaxicl sweep: {e}", file=sys.stderr)
        return 2
    print(ds)
    print(verdict_table(ds))
    print(f"[jaxicl] wrote {Path(args.out) / 'sweep.nc'}")
    return 0


def _cmd_sweep(args) -> int:
    from .experiments.settings import SettingsError
    from .experiments.stage_sweep import check_stage_sweep, sweep_stage
    from .sweep import SweepConfigError
    from .sweep_config import ConfigError, as_stage, load_config

    if args.stage or args.list_stages:
        return _cmd_stage_sweep(args)
    if args.config is None:
        print(
            "jaxicl sweep: give a TOML file, or --stage PAPER:STAGE --grid SETTING=[...] (--list-stages)",
            file=sys.stderr,
        )
        return 2
    try:
        cfg = load_config(args.config)
        grid, overrides, out = as_stage(cfg)  # the file is one case of `--stage lsa:flow`
        check_stage_sweep("lsa:flow", grid, overrides=overrides)  # bad input leaves no outputs.dir behind
        writable_directory(out, "outputs.dir")
        with exclusive_output(out, "outputs.dir"), watchdog.watching():  # one writer; a deadlocked sweep is started
            _use_cache(args)
            ds = sweep_stage("lsa:flow", grid, overrides=overrides, out=out, progress=args.progress)  # again, resumes
    except (ConfigError, SweepConfigError, SettingsError, ValueError) as e:  # OutputInUse among them
        print(f"jaxicl sweep: {e}", file=sys.stderr)
        return 2
    out = Path(cfg["outputs"]["dir"])
    print(ds)
    print(f"[jaxicl] wrote {out / 'dataset.nc'} and {out / 'plot.png'}")
    return 0


def _add_device_option(p) -> None:
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default=None,
        help="where work runs (jaxicl.runtime.placement): auto (default) puts sequential small work (flows, closed "
        "forms, checks) on the host CPU and training, sweeps and large Monte Carlo on the accelerator; "
        "cpu or gpu put everything there (default: $JAXICL_DEVICE, else auto)",
    )


def _add_cache_options(p) -> None:
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="persistent XLA compilation cache (default: $JAXICL_CACHE_DIR or ~/.cache/jaxicl/xla)",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the persistent compilation cache")


_DESCRIPTION = """\
Simulate the training dynamics of the in-context learning papers' models and check each paper's theorems and
figures against the simulation (a pass/fail report with figures and data).

`reproduce` and `sweep` keep compiled programs in a persistent cache, and start the same command again, once, if
XLA:CPU deadlocks them."""

_EXIT_STATUS = """\
exit status: 0 every asserted check passed; 1 one failed (named on stderr), a process died or the disk is full;
2 bad input (refused before any work); 3 a --budget run has training left (run the same command again);
130 interrupted by Ctrl-C (the same command resumes); 141 its output closed by the reader (`| head`)."""

_EPILOG = f"""\
examples:
  jaxicl list                                # the papers, one per line
  jaxicl reproduce                           # every paper at the quick size, into ./jaxicl-report
  jaxicl reproduce gatmiry2024 --set d=20    # one paper, one setting changed
  jaxicl reproduce --trained --budget 60     # the trained size, an hour at a time
  jaxicl config yang2024 > mine.toml         # a paper's settings, each with what it means
  jaxicl sweep --stage gatmiry2024:constructions --grid eps=[1e-3,1e-6]  # one stage over a grid

{_EXIT_STATUS}
`jaxicl COMMAND --help` for each command's options."""

_SWEEP_EPILOG = """\
examples:
  jaxicl sweep --list-stages                 # the stages --stage can run
  jaxicl sweep --stage gatmiry2024:constructions --grid eps=[1e-3,1e-6] --grid d=[5,10]  # a grid of 2 x 2 points
  jaxicl sweep --stage lsa:flow --grid kappa=[1,4,16] --grid n_context=[5,10,20] --set d=3 --out lsa

--stage writes OUT/sweep.nc: the stage's outputs with the settings as dimensions, and for a stage with checks each
check's verdict at every point. Points (or chunks of points) are saved as they end: the same command resumes."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxicl",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the registered reproductions")
    p.set_defaults(func=_cmd_list)
    _add_reproduce_command(sub)
    _add_config_command(sub)
    _add_sweep_command(sub)
    return parser


def _add_reproduce_command(sub) -> None:
    """`jaxicl reproduce`: its sizes, output, progress, time budget, jobs and settings."""
    p = sub.add_parser(
        "reproduce",
        help="reproduce papers' figures and theorem checks; writes OUT/report.md",
        description="Reproduce the figures and theorem checks of the papers named (all when none is named) into\n"
        "OUT/report.md, with each paper's figures (PNG) and data (netCDF) under OUT/NAME/.",
        epilog=_EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("names", nargs="*", help="reproductions to run (default: all, see `jaxicl list`)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="quick size (default): minutes on a 2-core CPU")
    g.add_argument(
        "--trained",
        action="store_true",
        help="trains long enough to assert the claims about trained models, over three seeds (hours on a CPU)",
    )
    g.add_argument("--full", action="store_true", help="the papers' sizes (long; GPU recommended)")
    p.add_argument("--out", default="jaxicl-report", help="output directory (default: ./jaxicl-report)")
    p.add_argument(
        "--progress",
        action="store_true",
        help="print per-stage timings (compile vs run, XLA programs) and solver/training progress",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="wall clock for this call: transformer training stops at it, checkpointed; run the same "
        "command again to resume (exit status 3 while unfinished)",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="measure every transformer training run on a few steps and print (and write into report.md) "
        "models × steps, step time, ETA and the --budget slices it would take; trains nothing more. "
        "Runs the papers one after another (--jobs is ignored)",
    )
    p.add_argument(
        "--skip-transformers",
        action="store_true",
        help="leave out the figures that train softmax transformers (Zhang Fig. 1, Yang Figs. 2(b)/5, "
        "AlgoFormer): the theory and the linear models only",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N papers at once, each in its own process (default 1); the report is the same",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change one setting of the paper named (a TOML value: --set kappas=[2,16,64] --set d=20); "
        "`jaxicl config NAME` lists them",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="settings from a TOML file (as `jaxicl config NAME` prints); --set wins over it",
    )
    p.add_argument("--result-file", default=None, help=argparse.SUPPRESS)  # a --jobs parent's per-paper process
    p.add_argument("--results-into", default=None, help=argparse.SUPPRESS)  # ... writes into its parent's staging
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)  # a --jobs parent's process for part of a paper
    p.add_argument("--cpu-threads", type=int, default=None, help=argparse.SUPPRESS)  # its share of the cores
    _add_cache_options(p)
    _add_device_option(p)
    p.set_defaults(func=_cmd_reproduce)


def _add_config_command(sub) -> None:
    """`jaxicl config NAME`: a paper's settings at a size, as TOML."""
    p = sub.add_parser("config", help="print a paper's settings as a TOML file to start from (--config FILE)")
    p.add_argument("name", help="the reproduction (see `jaxicl list`)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="the quick size's settings (default)")
    g.add_argument("--trained", action="store_true", help="the size where the trained claims are asserted")
    g.add_argument("--full", action="store_true", help="the paper's size")
    p.set_defaults(func=_cmd_config)


def _add_sweep_command(sub) -> None:
    """`jaxicl sweep`: a TOML-described sweep, or a reproduction's stage over a grid."""
    p = sub.add_parser(
        "sweep",
        help="run a sweep described in a TOML file (see jaxicl.sweep_config), or a "
        "reproduction's stage over a grid of its settings (--stage)",
        description="Run the LSA gradient-flow sweep a TOML file describes, or one stage of a reproduction at every "
        "point\nof a grid over its settings (--stage), validated like --set before any work.",
        epilog=_SWEEP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="TOML file: [task], [model], [dynamics], [grid], [outputs]")
    p.add_argument(
        "--stage",
        metavar="PAPER:STAGE",
        help="a reproduction's stage to run at every grid point (--list-stages lists them)",
    )
    p.add_argument(
        "--grid",
        action="append",
        metavar="SETTING=[V1,V2,...]",
        help="with --stage: one axis of the grid over the paper's scalar settings (repeat for more)",
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="with --stage: a setting for every point")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="with --stage: from the quick settings (default)")
    g.add_argument("--trained", action="store_true", help="with --stage: from the trained size's settings")
    g.add_argument("--full", action="store_true", help="with --stage: from the papers' settings")
    p.add_argument(
        "--out", default="jaxicl-sweep", help="with --stage: output directory, resumable (default: ./jaxicl-sweep)"
    )
    p.add_argument("--list-stages", action="store_true", help="list the stages --stage can run")
    p.add_argument("--progress", action="store_true", help="progress bar even when not on a terminal")
    _add_cache_options(p)
    _add_device_option(p)
    p.set_defaults(func=_cmd_sweep)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with default_xla_flags() if args.command in ("reproduce", "sweep") else contextlib.nullcontext():
        with contextlib.ExitStack() as stack:
            if args.command in ("reproduce", "sweep"):
                from .runtime import placement

                try:  # before any backend starts: --device cpu keeps JAX off the accelerator
                    stack.enter_context(placement.command_line(args.device or placement.mode()))
                except (RuntimeError, ValueError) as e:  # no accelerator for gpu; a bad $JAXICL_DEVICE
                    print(f"jaxicl: {e}", file=sys.stderr)
                    return 2
            if getattr(args, "cpu_threads", None):
                size_cpu_thread_pool(args.cpu_threads)
            return _known_errors_as_messages(args.func, args)


def _known_errors_as_messages(func, args) -> int:
    """``func(args)``, with the errors the library raises for a known cause printed as one message (what, where, what
    to do) instead of a traceback: bad input (a checkpoint or chunk of other settings, a sweep that cannot fit, a
    setting) exits 2; a --jobs process that died and a full disk exit 1, saying what was kept; Ctrl-C exits 130; a
    reader that closes the output (a pipe into ``head``) ends the command quietly with 141, as a shell reports a
    command that SIGPIPE ended."""
    import errno

    from .dynamics.train import CheckpointError
    from .experiments import JobFailed
    from .experiments.settings import SettingsError
    from .sweep import SweepConfigError
    from .sweep_config import ConfigError

    try:
        status = func(args)
        sys.stdout.flush()  # a reader gone since the last write is found here, not by the interpreter's exit
        return status
    except BrokenPipeError:  # the reader of stdout is gone: nothing more can be shown, and no traceback either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's flush at exit fails too
        return 141
    except (CheckpointError, SweepConfigError, SettingsError, ConfigError) as e:
        print(f"jaxicl: {e}", file=sys.stderr)
        return 2
    except JobFailed as e:
        print(f"jaxicl: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(
            f"jaxicl: no space left on the disk writing {e.filename or 'a result'}: free some space and run the same "
            "command again (finished papers, checkpoints and sweep chunks are kept; partly written files are not: "
            "every result is written to a temporary file first)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:  # Ctrl-C: no traceback; a --jobs child stays quiet (its parent says this)
        if getattr(args, "result_file", None) is None:
            print("jaxicl: interrupted; what finished is kept: the same command resumes", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
