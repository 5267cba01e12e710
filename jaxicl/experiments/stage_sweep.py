"""Sweeps over any setting of a reproduction's stage: ``jaxicl sweep --stage PAPER:STAGE --grid FIELD=[v1, v2, …]``.

A *stage* is a function of a paper's ``Config`` alone (its ``SWEEPABLE`` table names them; ``jaxicl sweep
--list-stages`` lists them all), returning its checks and an ``xarray.Dataset``, or only the dataset. A stage sweep
runs the stage at every point of the grid (the cartesian product of the ``grid``'s lists of scalar settings, each
validated like ``--set`` before any work, on top of ``size`` and ``overrides``) and returns one dataset:

- every variable of the stage's datasets, with the grid's settings as new leading dimensions (points whose stage
  datasets have other sizes are padded with NaN);
- ``verdict`` (grid × check): each check's verdict at each point ("pass", "FAIL", "not reproduced", "not
  applicable", "reported"), ``margin`` (grid × check) how far a claim not asserted at that point is from its
  threshold (empty for the others), and ``check_claim`` (check) the claims as the first point words them, so that
  one can read where a theorem's premise stops holding, its prediction stops matching, or a trained claim starts
  to hold;
- a dimension or variable of a stage's own named like a grid setting becomes ``stage_NAME`` (Gatmiry's models'
  ``seed`` against the grid's ``seed``).

The points run one after another, each a full stage with its own compiled programs; points whose shapes agree reuse
them (JAX's compilation caches), so a grid over a value (σ, κ, a step count) compiles once and one over a size (d,
depth) once per size. A stage whose function names ``grid_axes`` sweeps a grid over those settings itself, as one
compiled, vmapped program (``jaxicl.sweep``): ``lsa:flow``, the LSA flow sweep that ``jaxicl sweep FILE.toml`` runs
(`BUILTIN`), takes κ, N and the seed that way. A list setting the stage itself sweeps as one vmapped program (e.g.
Gatmiry's ``kappas``) is set as a whole with ``--set``, not gridded. With ``out``, each point's dataset is written as it finishes
(``out/points/point-K.nc``, carrying a digest of its settings): an interrupted sweep run again resumes, computing only
the points missing or whose settings changed.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
from pathlib import Path

import numpy as np
import xarray as xr

from . import settings
from .report import save_dataset

# Stages that are not a paper's: name -> module (with ``SIZES`` and ``SWEEPABLE`` like a reproduction's)
BUILTIN = {"lsa": "jaxicl.experiments.lsa_sweep"}  # the LSA flow sweep of `jaxicl sweep FILE.toml`


def _module(paper: str):
    from . import REPRODUCTIONS, available

    if paper in BUILTIN:
        return importlib.import_module(BUILTIN[paper])
    if paper not in REPRODUCTIONS:
        raise settings.SettingsError(f"unknown reproduction {paper!r}; one of {available() + list(BUILTIN)}.")
    return importlib.import_module(f"jaxicl.experiments.{paper}")


def stages() -> dict[str, str]:
    """``"paper:stage"`` -> what it computes, for every reproduction's ``SWEEPABLE`` stages (and `BUILTIN`'s)."""
    from . import available

    out = {}
    for paper in available() + list(BUILTIN):
        for name, fn in getattr(_module(paper), "SWEEPABLE", {}).items():
            out[f"{paper}:{name}"] = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
    return out


def _stage(stage: str):
    paper, colon, name = stage.partition(":")
    module = _module(paper)
    table = getattr(module, "SWEEPABLE", {})
    if name not in table:
        what = f"has no sweepable stage {name!r}" if colon else f"is a paper: --stage takes {paper}:STAGE"
        raise settings.SettingsError(
            f"{paper} {what}; its stages: {sorted(table) or 'none'} (`jaxicl sweep --list-stages`)."
        )
    return paper, module, table[name]


# Points a stage sweep runs one after another at most (each a whole stage): a grid with more is refused before any
# point is built; a stage that sweeps its grid itself, as one vmapped program, takes `MAX_VMAPPED_POINTS`
MAX_POINTS = 10_000
MAX_VMAPPED_POINTS = 1_000_000


def _checked_axes(base, grid: dict[str, list], limit: int) -> dict[str, list]:
    """The grid's axes, checked before any point is built: each a non-empty list of a scalar setting's values, at
    most ``limit`` points in all (counted from the axes' lengths), each value valid alone (validated as ``--set`` does,
    once per value) and distinct once validated (``2`` and ``2.0`` are one κ). Returns the values as the Config holds
    them."""
    if not grid:
        raise settings.SettingsError("a stage sweep needs a grid: --grid SETTING=[v1, v2, ...].")
    fields = settings.flat(base)
    for key, values in grid.items():
        if key in fields and isinstance(fields[key], (tuple, list)):
            raise settings.SettingsError(
                f"{key} is a list setting, which the stage sweeps itself: set it whole with --set {key}=[...], and grid "
                "over scalar settings."
            )
        if not isinstance(values, (list, tuple)) or not values:
            raise settings.SettingsError(f"grid {key}: give a non-empty list of values, e.g. {key}=[1, 2].")
    n = int(np.prod([len(v) for v in grid.values()], dtype=object))
    if n > limit:
        shape = " × ".join(str(len(v)) for v in grid.values())
        raise settings.SettingsError(
            f"the grid has {n:,} points ({shape}), more than the {limit:,} this stage sweep "
            "runs: sweep fewer values, or split the grid over several runs."
        )
    axes = {
        key: [settings.flat(settings.apply(base, {key: value}))[key] for value in values]
        for key, values in grid.items()
    }
    for key, values in axes.items():
        repeated = sorted({repr(v) for v in values if values.count(v) > 1})
        if repeated:
            raise settings.SettingsError(
                f"grid {key}: the value(s) {', '.join(repeated)} appear more than once; each "
                "point of a grid is computed once."
            )
    return axes


def _points(base, grid: dict[str, list]) -> list[tuple[dict, object]]:
    """Every point of a grid that `_checked_axes` passed, as (setting -> value, its Config), each combination
    validated before any work."""
    keys = list(grid)
    points = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point = dict(zip(keys, combo))
        points.append((point, settings.apply(base, point)))  # SettingsError names the key and the value
    return points


def _digest(stage: str, cfg) -> str:
    flat = {k: repr(v) for k, v in settings.flat(cfg).items()}
    return hashlib.sha256(json.dumps([stage, flat], sort_keys=True).encode()).hexdigest()[:16]


def _without_attrs(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` without its dataset attributes (a point's digest, a stage's own notes): the sweep sets its own."""
    ds = ds.copy()
    ds.attrs = {}
    return ds


def _run_point(fn, cfg) -> xr.Dataset:
    out = fn(cfg)
    checks, ds = out if isinstance(out, tuple) else ([], out)
    ds = ds if isinstance(ds, xr.Dataset) else xr.Dataset(ds)
    ds = _without_attrs(ds)
    if checks:
        ds["verdict"] = ("check", np.array([c.verdict for c in checks], dtype=object).astype(str))
        ds["check_claim"] = ("check", np.array([c.claim for c in checks], dtype=object).astype(str))
        ds["margin"] = ("check", np.array([c.margin for c in checks], dtype=object).astype(str))
    return ds


def check_stage_sweep(stage: str, grid: dict[str, list], size: str = "quick", overrides: dict | None = None) -> None:
    """Refuse (`settings.SettingsError`) a stage sweep whose stage, size, settings or grid are bad, as `sweep_stage`
    does before any work: ``jaxicl sweep`` calls it before it creates or locks ``--out``, so that a mistyped command
    leaves nothing behind."""
    _validated(stage, grid, size, overrides)


def _validated(stage: str, grid: dict[str, list], size: str, overrides: dict | None):
    """(module, stage function, base Config, checked axes, points) of a stage sweep, everything validated and no point
    computed; ``points`` is None for a stage that sweeps ``grid`` itself, as one vmapped program (its ``grid_axes``)."""
    _, module, fn = _stage(stage)
    if size not in module.SIZES:
        raise settings.SettingsError(f"size must be one of {sorted(module.SIZES)}, got {size!r}.")
    base = settings.apply(module.SIZES[size], overrides or {})
    vmapped = set(grid) <= set(getattr(fn, "grid_axes", ()))
    axes = _checked_axes(base, grid, MAX_VMAPPED_POINTS if vmapped else MAX_POINTS)  # no point built yet
    return module, fn, base, axes, None if vmapped else _points(base, grid)


def sweep_stage(
    stage: str,
    grid: dict[str, list],
    size: str = "quick",
    overrides: dict | None = None,
    out: str | Path | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """Run ``stage`` ("paper:name") at every point of ``grid`` (setting -> list of values) on top of ``size``'s
    config with ``overrides``; returns the stacked dataset (module docstring). With ``out``, resumable point by
    point, and the result is also written to ``out/sweep.nc``. Bad input is refused first, as `check_stage_sweep`
    refuses it."""
    import jax
    from tqdm.auto import tqdm

    module, fn, base, whole, points = _validated(stage, grid, size, overrides)
    attrs = dict(
        stage=stage,
        size=size,
        grid=json.dumps({k: list(v) for k, v in grid.items()}),
        settings=json.dumps({k: repr(v) for k, v in (overrides or {}).items()}),
    )
    if points is None:  # the stage sweeps the grid itself, as one program
        with jax.enable_x64(getattr(module, "STAGE_X64", True)):
            ds = fn(base, grid=whole, out=out, progress=progress)
        ds = ds.assign_attrs(attrs)
        if out is not None:
            save_dataset(ds, Path(out) / "sweep.nc")
        return ds
    folder = None if out is None else Path(out) / "points"
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    results = []
    for i, (point, cfg) in enumerate(tqdm(points, disable=not progress, unit="point", desc=stage)):
        digest = _digest(stage, cfg)
        path = None if folder is None else folder / f"point-{i:05d}.nc"
        ds = None
        if path is not None and path.exists():
            try:
                stored = xr.load_dataset(path, engine="h5netcdf")
                ds = stored if stored.attrs.get("digest") == digest else None
            except (OSError, ValueError):
                ds = None  # unreadable: computed again
        if ds is None:
            with jax.enable_x64(getattr(module, "STAGE_X64", True)):
                ds = _run_point(fn, cfg)
            if path is not None:
                save_dataset(ds.assign_attrs(digest=digest, stage=stage, point=json.dumps(point)), path)
        results.append(_without_attrs(ds))
    keys = list(grid)
    claims = _claims_over_the_grid(results)
    # dimensions without coordinates get positions, so that points of other sizes align (padded with NaN)
    # a stage's own dimension or variable named like a grid setting (Gatmiry's `seed` dimension, its models' seeds,
    # against the grid's `seed`, the PRNG seed of the run) is renamed `stage_NAME`
    results = [r.rename({n: f"stage_{n}" for n in keys if n in r.variables or n in r.dims}) for r in results]
    results = [
        r.drop_vars("check_claim", errors="ignore").assign_coords(
            {d: np.arange(n) for d, n in r.sizes.items() if d not in r.coords}
        )
        for r in results
    ]
    # the points' dimension, named apart from any a stage's dataset has (Gatmiry's Fig. 2 has a "point")
    dim = "grid_point"
    stacked = xr.concat(results, dim=dim, join="outer")
    stacked = stacked.assign_coords({k: (dim, [p[k] for p, _ in points]) for k in keys})
    stacked = stacked.set_index({dim: keys}).unstack(dim) if len(keys) > 1 else stacked.swap_dims({dim: keys[0]})
    if claims is not None:
        stacked["check_claim"] = claims
    stacked.attrs.update(attrs)
    if out is not None:
        save_dataset(stacked, Path(out) / "sweep.nc")
    return stacked


def _claims_over_the_grid(results: list[xr.Dataset]) -> xr.DataArray | None:
    """Each check's claim, worded for every point: where the points word it differently (a claim that quotes a swept
    setting, e.g. "worst error ≤ 0.01"), the words that differ read "[by point]"."""
    if "check_claim" not in results[0]:
        return None
    first = results[0]["check_claim"]
    texts = [
        [str(r["check_claim"].values[j]) for r in results if "check_claim" in r and j < r["check_claim"].size]
        for j in range(first.size)
    ]

    def one(wordings: list[str]) -> str:
        words = [w.split(" ") for w in wordings]
        if len({len(w) for w in words}) > 1:
            return "[as worded at the first point] " + wordings[0]
        return " ".join(ws[0] if len(set(ws)) == 1 else "[by point]" for ws in zip(*words))

    return first.copy(data=np.array([one(t) for t in texts]))


def verdict_table(ds: xr.Dataset) -> str:
    """Markdown: per check, how many grid points gave each verdict, and the first point where it did not pass."""
    if "verdict" not in ds:
        return "(this stage has no checks)"
    grid = [d for d in ds["verdict"].dims if d != "check"]
    v = ds["verdict"].transpose(*grid, "check")
    margins = ds["margin"].transpose(*grid, "check") if "margin" in ds else None
    lines = [
        "| check | verdicts over the grid | first point not passing | margins (grid order) |",
        "|---|---|---|---|",
    ]
    for j in range(ds.sizes["check"]):
        col = v.isel(check=j)
        values = col.values.ravel()
        counts = ", ".join(f"{n} {name}" for name, n in zip(*np.unique(values, return_counts=True)))
        bad = [idx for idx in np.ndindex(col.shape) if col.values[idx] not in ("pass", "reported")]
        first = ", ".join(f"{g} = {ds[g].values[i]}" for g, i in zip(grid, bad[0])) if bad else "—"
        shown = [] if margins is None else [str(m) for m in margins.isel(check=j).values.ravel() if str(m)]
        lines.append(f"| {str(ds['check_claim'].values[j])[:90]} | {counts} | {first} | {', '.join(shown) or '—'} |")
    return "\n".join(lines)
