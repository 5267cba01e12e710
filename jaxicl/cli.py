"""Command line: ``jaxicl list``, ``jaxicl reproduce [NAME ...] [--quick|--full] [--out DIR]``, ``jaxicl sweep CONFIG``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_list(args) -> int:
    from .experiments import REPRODUCTIONS

    width = max(len(n) for n in REPRODUCTIONS)
    for name, (_, desc) in REPRODUCTIONS.items():
        print(f"{name:<{width}}  {desc}")
    return 0


def _cmd_reproduce(args) -> int:
    from .experiments import available, reproduce

    names = args.names or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"jaxicl: unknown reproduction {', '.join(unknown)}; available: {', '.join(available())}",
              file=sys.stderr)
        return 2
    size = "full" if args.full else "quick"
    results = reproduce(names, size=size, out=args.out, progress=args.progress or sys.stderr.isatty())
    report = Path(args.out) / "report.md"
    failed = [(r.name, c.claim) for r in results for c in r.checks if c.passed is False]
    print(f"[jaxicl] report: {report.resolve()}")
    for name, claim in failed:
        print(f"[jaxicl] FAILED {name}: {claim}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_sweep(args) -> int:
    from .sweep import SweepConfigError
    from .sweep_config import ConfigError, load_config, run_config

    try:
        cfg = load_config(args.config)
        ds = run_config(cfg, progress=args.progress or None)
    except (ConfigError, SweepConfigError) as e:
        print(f"jaxicl sweep: {e}", file=sys.stderr)
        return 2
    out = Path(cfg["outputs"]["dir"])
    print(ds)
    print(f"[jaxicl] wrote {out / 'dataset.nc'} and {out / 'plot.png'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxicl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the registered reproductions")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("reproduce", help="reproduce papers' figures and theorem checks; writes OUT/report.md")
    p.add_argument("names", nargs="*", help="reproductions to run (default: all, see `jaxicl list`)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="quick size (default): minutes on a 2-core CPU")
    g.add_argument("--full", action="store_true", help="the papers' sizes (long; GPU recommended)")
    p.add_argument("--out", default="jaxicl-report", help="output directory (default: ./jaxicl-report)")
    p.add_argument("--progress", action="store_true", help="print per-stage timings and solver progress")
    p.set_defaults(func=_cmd_reproduce)
    p = sub.add_parser("sweep", help="run a sweep described in a TOML file (see jaxicl.sweep_config)")
    p.add_argument("config", help="TOML file: [task], [model], [dynamics], [grid], [outputs]")
    p.add_argument("--progress", action="store_true", help="progress bar even when not on a terminal")
    p.set_defaults(func=_cmd_sweep)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
