"""Sweeps: a grid of points evaluated as one compiled, vmapped program, sharded over devices.

    ds = jaxicl.sweep(run_fn, {"kappa": [2., 4., 8.], "depth": range(1, 11), "seed": range(3)})

The cartesian product of the axes is flattened and evaluated ``chunk_size`` points at a time by
``jit(vmap(run_fn))`` with the points sharded over a 1-D mesh of ``devices`` (default: every
device of every process, so the same code runs under ``jax.distributed``). Every chunk has the same
shape (the last one is padded), so the whole grid is **one** compilation; axes that would change
array shapes (depth, loop count, heads, context length) must be handled inside ``run_fn`` by padding
to the largest value and masking, with the value arriving as a traced integer.

The chunk size is lowered until one compiled chunk fits in the device's memory (``memory_budget``; XLA's own
buffer assignment is the measure), so a grid too large for one program on a GPU runs as several.

With ``out=DIR`` every finished chunk is written atomically (``chunk_XXXXX.npz``) next to a
``config.json`` fingerprint; running the same sweep again loads finished chunks and computes only
the rest, so an interrupted sweep loses no finished work. A different grid, chunk size, function or
``meta`` under the same ``out`` is an error, and so is an unreadable ``config.json``. Each chunk file records the grid
positions it holds and its sweep's config: one that is unreadable (truncated), of other positions (copied) or of
another sweep is computed again and rewritten, with a `ResumeWarning` naming it; it is never used.

The grid is checked before any work: axes of finite numbers; and the outputs of all its points must fit in memory,
checked once the program is compiled, before any chunk runs (each chunk's points are computed when it runs, so the
grid itself is never built whole).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import numbers
import os
import sys
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ._io import atomic_output, atomic_write_text, writable_directory
from .runtime import placement

__all__ = ["sweep", "flatten_grid", "SweepConfigError", "ResumeWarning"]


class SweepConfigError(ValueError):
    """The grid or the output directory does not match what the sweep needs."""


def _axis_values(name, values) -> np.ndarray:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise SweepConfigError(f"grid axis {name!r} must be a list of numbers, got {values!r}.")
    if not isinstance(values, np.ndarray):  # a list: each entry one number, booleans only in an all-boolean axis
        values = list(values)
        all_bool = all(isinstance(v, (bool, np.bool_)) for v in values)
        for i, v in enumerate(values):
            if np.ndim(v) != 0:
                raise SweepConfigError(f"grid axis {name!r} must be a flat list of numbers: entry {i} is {v!r}.")
            if not isinstance(v, (numbers.Real, np.number, np.bool_)) or (
                isinstance(v, (bool, np.bool_)) and not all_bool
            ):
                raise SweepConfigError(f"grid axis {name!r} must hold numbers: entry {i} is {v!r}.")
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise SweepConfigError(f"grid axis {name!r} must be a flat list of numbers, got shape {arr.shape}.")
    if arr.size == 0:
        raise SweepConfigError(f"grid axis {name!r} is empty.")
    if arr.dtype.kind not in "biuf":
        raise SweepConfigError(f"grid axis {name!r} must hold numbers, got dtype {arr.dtype}.")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise SweepConfigError(f"grid axis {name!r} must hold finite numbers: entry {bad} is {arr[bad]}.")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int32)
    return arr


def host_memory_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _check_fits(what: str, need: int, limit: int | None) -> None:
    """A `SweepConfigError` if ``need`` bytes exceed ``limit`` (default: half of this machine's memory)."""
    allowed = "allowed" if limit is not None else "allowed (half of this machine's memory)"
    limit = int(0.5 * host_memory_bytes()) if limit is None else limit
    if need > limit:
        raise SweepConfigError(
            f"{what} need {need / 2**30:.3g} GiB, more than the {limit / 2**30:.3g} GiB {allowed}: "
            "use fewer or shorter axes, or split the grid into several sweeps."
        )


def _grid_axes(grid: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Each axis's values, checked (a flat, non-empty list of finite numbers)."""
    if not isinstance(grid, Mapping):
        raise SweepConfigError(f"the grid must be a mapping of axis name -> list of values, got {type(grid).__name__}.")
    if not grid:
        raise SweepConfigError("the grid has no axes.")
    return {name: _axis_values(name, vals) for name, vals in grid.items()}


def _points(axes: Mapping[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Each axis's value at the points ``index`` of the flattened product (C order: the last axis varies fastest)."""
    idx = np.unravel_index(index, tuple(v.size for v in axes.values()))
    return {name: vals[i] for (name, vals), i in zip(axes.items(), idx)}


def flatten_grid(
    grid: Mapping[str, Any], max_bytes: int | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(axes, points): each axis's values, and each axis's value at every point of the product
    (C order: the last axis varies fastest). The grid's size is checked before the points are built: they may
    use at most ``max_bytes`` (default: half of this machine's memory). `sweep` never builds them all: it
    computes each chunk's points when it runs it."""
    axes = _grid_axes(grid)
    n_points = math.prod(v.size for v in axes.values())
    shape = " x ".join(str(v.size) for v in axes.values())
    _check_fits(
        f"the grid's {n_points:,} points ({shape})",
        n_points * sum(v.dtype.itemsize + 8 for v in axes.values()),
        max_bytes,
    )
    return axes, _points(axes, np.arange(n_points))


def _code_digest(code, h=None):
    """Hash of a function's bytecode and constants, nested code objects included (their repr
    holds a memory address, so they are hashed recursively rather than printed)."""
    h = h or hashlib.sha256()
    h.update(code.co_code)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())
    return h


def _fingerprint(run_fn, axes, chunk_size, meta) -> dict:
    code = getattr(run_fn, "__code__", None)
    code_hash = _code_digest(code).hexdigest()[:16] if code else None
    return {
        "function": getattr(run_fn, "__qualname__", repr(run_fn)),
        "function_code": code_hash,
        "grid": {k: v.tolist() for k, v in axes.items()},
        "chunk_size": chunk_size if chunk_size == "auto" else int(chunk_size),
        "meta": meta,
    }


def _prepare_out(out: Path, fingerprint: dict) -> int | None:
    """Check that ``out`` holds this sweep (or nothing yet); return the chunk size its chunks were written with
    (None for a new sweep; the caller writes ``config.json`` once it has chosen one)."""
    try:
        writable_directory(out, "the sweep's directory")
    except ValueError as e:
        raise SweepConfigError(str(e)) from None
    cfg = out / "config.json"
    if not cfg.exists():
        return None
    try:
        old = json.loads(cfg.read_text())
        points = int(old.pop("chunk_points", old.get("chunk_size")))
        if points < 1:
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError, KeyError):
        raise SweepConfigError(
            f"{cfg} is unreadable or not a sweep's config.json (truncated or overwritten?). Delete {out} to start the "
            "sweep over, or use another `out` directory."
        ) from None
    new = json.loads(json.dumps(fingerprint))  # the same normalisation (tuples -> lists) as on disk
    if old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise SweepConfigError(
            f"{out} holds a different sweep (differs in: {', '.join(diff)}). Use another `out` "
            "directory, or delete this one to start over."
        )
    return points


class ResumeWarning(UserWarning):
    """A file a resumed run found could not be used (unreadable, or of other points) and is computed again."""


def _config_digest(fingerprint: dict, chunk_points: int) -> str:
    """What a chunk file records of the sweep it belongs to: a hash of ``config.json``'s content."""
    text = json.dumps({**json.loads(json.dumps(fingerprint)), "chunk_points": int(chunk_points)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _save_chunk(path: Path, names: list[str], leaves: list, lo: int, hi: int, digest: str) -> None:
    """A chunk file: its outputs, the grid positions ``[lo, hi)`` it holds and the digest of its sweep's config."""
    with atomic_output(path, ".npz") as tmp:
        np.savez(
            tmp,
            names=json.dumps(names),
            positions=np.array([lo, hi]),
            config=digest,
            **{f"leaf_{i}": leaf for i, leaf in enumerate(leaves)},
        )


def _load_chunk(path: Path, lo: int, hi: int, digest: str, chunk_size: int, like: tuple | None):
    """(names, leaves) of a finished chunk file after checking that it holds grid positions ``[lo, hi)`` of this
    sweep (``digest``), ``chunk_size`` points per output, with the names, shapes and dtypes of the other chunks
    (``like``); None, with a `ResumeWarning` naming the file and why, if it does not (it is then computed
    again and rewritten)."""
    import warnings

    try:
        with np.load(path, allow_pickle=False) as f:
            files = set(f.files)
            if not {"names", "positions", "config"} <= files:
                why = "it records no grid positions (written by an older jaxicl, or not a chunk file)"
            elif f["positions"].tolist() != [lo, hi]:
                why = f"it holds grid positions {f['positions'].tolist()}, not [{lo}, {hi})"
            elif str(f["config"]) != digest:
                why = "it belongs to another sweep (its config differs from config.json)"
            else:
                names = json.loads(str(f["names"]))
                leaves = [f[f"leaf_{i}"] for i in range(len(names))]
                meta = (names, [(x.shape[1:], x.dtype) for x in leaves])
                if any(x.shape[:1] != (chunk_size,) for x in leaves):
                    why = f"its outputs do not have {chunk_size} points"
                elif like is not None and meta != like:
                    why = "its outputs' names, shapes or dtypes differ from the other chunks'"
                else:
                    return names, leaves
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # truncated, garbage
        why = f"it is unreadable ({type(e).__name__}: {e})"
    warnings.warn(f"{path}: {why}; computing these points again and rewriting it.", ResumeWarning, stacklevel=3)
    return None


def _leaf_names(tree) -> list[str]:
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    names = []
    for path, _ in paths:
        parts = []
        for p in path:
            key = getattr(p, "key", getattr(p, "name", getattr(p, "idx", None)))
            parts.append(str(key))
        names.append("/".join(parts) if parts else "output")
    return names


_COMPILED: dict = {}


def _point_sharding(devices: tuple, spec=("points",)):
    """Sharding over a 1-D mesh of ``devices`` along the flattened points (``spec=()``: replicated)."""
    mesh = jax.sharding.Mesh(np.asarray(devices), ("points",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def device_memory_budget(device=None, fraction: float = 0.75) -> int:
    """Bytes a compiled program may use on ``device`` (default: the first device): ``fraction`` of what the
    device reports it can allocate (``memory_stats()['bytes_limit']``, e.g. a GPU's memory), or of the host's
    physical memory shared among its devices when the device reports nothing (CPU)."""
    device = device or jax.devices()[0]
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # some backends do not implement it
        pass
    if stats and stats.get("bytes_limit"):
        return int(fraction * stats["bytes_limit"])
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(fraction * host / max(1, len(jax.local_devices(backend=device.platform))))


def program_bytes(compiled) -> int:
    """Peak bytes per device of a compiled program as XLA assigns its buffers: arguments, outputs and
    temporaries (0 when the backend does not report it)."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        return 0
    if m is None:
        return 0
    return int(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)


def _batched(run_fn, takes_key: bool, devices: tuple):
    """``jit(vmap(run_fn))`` over points sharded on ``devices``, the base key replicated."""

    def one_point(point, base_key):
        kwargs = dict(point)
        if takes_key:
            kwargs["key"] = jax.random.fold_in(base_key, point["seed"])
        return run_fn(**kwargs)

    sharding = _point_sharding(devices)
    return jax.jit(
        jax.vmap(one_point, in_axes=(0, None)),
        in_shardings=(sharding, _point_sharding(devices, ())),
        out_shardings=sharding,
    )


def _replicated_key(key, devices) -> jax.Array:
    """The sweep's base key (``PRNGKey(0)`` if ``key`` is None) replicated on the mesh of ``devices``, wherever made."""
    return jax.device_put(jax.random.PRNGKey(0) if key is None else key, _point_sharding(tuple(devices), ()))


def _point_dtypes(axes: dict) -> tuple:
    """(name, dtype) of each grid axis as a point's input (`_as_jax_dtype`): with the chunk size, the program's key."""
    return tuple((k, _as_jax_dtype(v[:1]).dtype) for k, v in axes.items())


def _compiled(run_fn, takes_key: bool, devices: tuple, dtypes: tuple, chunk_size: int, base_key):
    """The compiled program for chunks of ``chunk_size`` points, one per (run_fn, devices, point dtypes, chunk
    size), reused across calls: a second sweep of the same function and chunk shape does not compile again."""
    cache_key = (run_fn, takes_key, devices, dtypes, chunk_size, base_key.shape, str(base_key.dtype))
    fn = _COMPILED.get(cache_key)
    if fn is None:
        sharding = _point_sharding(devices)
        shapes = {name: jax.ShapeDtypeStruct((chunk_size,), dtype, sharding=sharding) for name, dtype in dtypes}
        fn = _batched(run_fn, takes_key, devices).lower(shapes, base_key).compile()
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        _COMPILED[cache_key] = fn
    return fn


def _fitting_chunk(run_fn, takes_key, devices, dtypes, chunk_size, base_key, budget: int):
    """(chunk size, compiled program): ``chunk_size`` if its program fits in ``budget`` bytes per device, else
    the largest multiple of the device count that does (the memory of a vmapped program grows linearly with the
    points; the estimate is verified by compiling again)."""
    n_dev = len(devices)
    while True:
        fn = _compiled(run_fn, takes_key, devices, dtypes, chunk_size, base_key)
        need = program_bytes(fn)
        if need <= budget or chunk_size <= n_dev:
            break
        per_dev = chunk_size // n_dev
        smaller = max(1, min(per_dev - 1, int(per_dev * budget / need * 0.9)))
        chunk_size = smaller * n_dev
    if need > budget:
        raise SweepConfigError(
            f"one point per device needs {need / 2**30:.2f} GiB, more than the memory budget of "
            f"{budget / 2**30:.2f} GiB: reduce the work per point (batch, steps recorded) or raise memory_budget."
        )
    return chunk_size, fn


@placement.placed("throughput")  # many points at once fill an accelerator (jaxicl.runtime.placement)
def sweep(
    run_fn: Callable[..., Any],
    grid: Mapping[str, Any],
    *,
    chunk_size: int | None = None,
    out: str | os.PathLike | None = None,
    devices=None,
    key: jax.Array | None = None,
    meta: Mapping[str, Any] | None = None,
    output_dims: Mapping[str, tuple[str, ...]] | None = None,
    output_coords: Mapping[str, Any] | None = None,
    progress: bool | None = None,
    memory_budget: int | None = None,
):
    """Evaluate ``run_fn(**point)`` at every point of ``grid``; return an ``xarray.Dataset``.

    Args:
        run_fn: a function of one point, with one keyword argument per grid axis (values arrive as
            traced scalars: JAX's float for real axes, its int for integer axes). If it also takes ``key``,
            it receives ``fold_in(key, seed)`` (``seed`` must then be an axis). Returns a pytree of
            arrays (a dict gives named variables).
        grid: axis name → 1-D list of numbers.
        chunk_size: points per compiled call (default 1024), at most the grid's points, rounded up to a multiple of
            the device count; either way lowered until the compiled program fits in ``memory_budget``.
        out: directory for resumable chunk files (see module docstring).
        devices: devices of the 1-D mesh (default: where `jaxicl.runtime.placement` puts throughput-bound work, every
            process's accelerators, or the host's CPU devices under ``--device cpu``).
        key: base PRNG key for ``key``-taking run functions (default ``PRNGKey(0)``).
        meta: JSON-serialisable description of anything ``run_fn`` captures (task, dynamics): it is
            part of the fingerprint that guards ``out`` and lands in the dataset's attrs.
        output_dims: variable name → names of its own dimensions (default ``{name}_0``, …).
        output_coords: coordinates for those dimensions.
        progress: tqdm bar over points (default: when stderr is a terminal).
        memory_budget: bytes per device one compiled chunk may use (default `device_memory_budget`:
            3/4 of the device's memory). A chunk whose program needs more (XLA's buffer assignment) is split
            into smaller chunks, which give the same numbers.

    Returns:
        An ``xarray.Dataset`` with one dimension per grid axis (its values as coordinates) and one variable per
        output leaf, its own dimensions after the grid's.

    Example:
        ```python
        import jax.numpy as jnp
        import jaxicl as icl

        def run_fn(kappa, n):  # the exact loss of the optimal one-step LSA, Zhang et al. Lemma 5.3
            lam = jnp.linspace(1.0, kappa, 3)
            gamma = (1 + 1 / n) * jnp.diag(lam) + lam.sum() / n * jnp.eye(3)
            return 0.5 * lam.sum() - 0.5 * jnp.trace(jnp.diag(lam) ** 2 @ jnp.linalg.inv(gamma))

        ds = icl.sweep(run_fn, grid={"kappa": [1.0, 4.0, 16.0], "n": [5, 10, 20]}, progress=False)
        assert ds["output"].shape == (3, 3)
        ```
    """
    from . import _validate

    if not callable(run_fn):
        raise TypeError(f"run_fn must be a function of one grid point, got {run_fn!r}.")
    if chunk_size is not None:
        chunk_size = _validate.integer("sweep: chunk_size", chunk_size)
    if memory_budget is not None:
        memory_budget = _validate.integer("sweep: memory_budget", memory_budget, low=1)
    axes = _grid_axes(grid)
    n_points = math.prod(v.size for v in axes.values())
    devices = list(devices) if devices is not None else placement.devices_for("throughput")
    if not devices:
        raise SweepConfigError("devices is empty: pass at least one device (default: jax.devices()).")
    n_dev = len(devices)

    def up(n):  # the next multiple of the device count
        return -(-n // n_dev) * n_dev

    requested = None if chunk_size is None else up(chunk_size)
    # never more points than the grid has: a chunk is padded by repeating the last point, so a larger one would
    # compute its padding (64 points for a grid of 4)
    chunk_size = min(up(n_points), up(1024) if requested is None else requested)
    takes_key = _takes_key(run_fn, axes)
    base_key = _replicated_key(key, devices)
    budget = device_memory_budget(devices[0]) if memory_budget is None else int(memory_budget)
    out_dir = Path(out) if out is not None else None
    # the requested size, not the capped one: a directory written before chunks were capped at the grid's points
    # records the same fingerprint, and resumes with the chunk size it holds
    fingerprint = _fingerprint(run_fn, axes, "auto" if requested is None else requested, meta)
    dtypes = _point_dtypes(axes)

    stored_chunk_size = _prepare_out(out_dir, fingerprint) if out_dir is not None else None
    program, outputs_checked = None, False
    if stored_chunk_size is not None:  # resuming: the chunks on disk fix the chunk size
        chunk_size = stored_chunk_size
    else:
        chunk_size, program = _fitting_chunk(run_fn, takes_key, tuple(devices), dtypes, chunk_size, base_key, budget)
        _check_outputs_fit(axes, _out_bytes(program) // chunk_size)
        outputs_checked = True
        if out_dir is not None and jax.process_index() == 0:
            atomic_write_text(
                out_dir / "config.json", json.dumps({**fingerprint, "chunk_points": chunk_size}, indent=1)
            )
    n_chunks = -(-n_points // chunk_size)
    digest = _config_digest(fingerprint, chunk_size)
    bar = _progress_bar(n_points, progress)
    sharding = _point_sharding(tuple(devices))
    results, names, like = [], None, None
    for c in range(n_chunks):
        lo, hi = c * chunk_size, min((c + 1) * chunk_size, n_points)
        path = out_dir / f"chunk_{c:05d}.npz" if out_dir is not None else None
        saved = _load_chunk(path, lo, hi, digest, chunk_size, like) if path is not None and path.exists() else None
        if saved is not None:
            chunk_names, leaves = saved
        else:
            program = program or _compiled(run_fn, takes_key, tuple(devices), dtypes, chunk_size, base_key)
            tree = _gather(program(_chunk_inputs(axes, lo, chunk_size, sharding), base_key))
            leaves = jax.tree_util.tree_leaves(tree)
            chunk_names = _leaf_names(tree)
            if path is not None and jax.process_index() == 0:
                _save_chunk(path, chunk_names, leaves, lo, hi, digest)
        if not outputs_checked:  # resuming: the first chunk tells (every chunk holds chunk_size points)
            _check_outputs_fit(axes, sum(np.asarray(x).nbytes for x in leaves) // chunk_size)
            outputs_checked = True
        names = names or chunk_names
        like = like or (names, [(np.shape(x)[1:], np.asarray(x).dtype) for x in leaves])
        results.append(leaves)
        if bar is not None:
            bar.update(hi - lo)
    if bar is not None:
        bar.close()
    attrs = _attrs(json.dumps(fingerprint), devices, chunk_size, n_chunks, budget)
    return _dataset(axes, names, results, output_dims, output_coords, attrs)


def _out_bytes(program) -> int:
    """Bytes of a compiled chunk's outputs."""
    leaves = jax.tree_util.tree_leaves(program.out_info)
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in leaves)


def _attrs(config: str, devices: list, chunk_size: int, n_chunks: int, budget: int) -> dict:
    """The dataset's record of how it was computed: the sweep's config, versions, the platform of the devices it ran
    on (``--device cpu`` on a GPU machine: ``cpu``) and chunking."""
    from . import __version__

    return {
        "config": config,
        "jaxicl_version": __version__,
        "jax_version": jax.__version__,
        "backend": devices[0].platform,
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "chunk_size": chunk_size,
        "n_chunks": n_chunks,
        "memory_budget_bytes": budget,
    }


def _takes_key(run_fn, axes) -> bool:
    """Whether ``run_fn`` takes a ``key``; every grid axis must be one of its arguments, and a key needs a seed axis."""
    params = inspect.signature(run_fn).parameters
    takes_key = "key" in params
    missing = [a for a in axes if a not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values())]
    if missing:
        raise SweepConfigError(f"run_fn has no argument for grid axis(es) {missing}.")
    if takes_key and "seed" not in axes:
        raise SweepConfigError("run_fn takes `key`, so the grid needs a `seed` axis (it folds into the key).")
    return takes_key


def _as_jax_dtype(v: np.ndarray) -> np.ndarray:
    """Integer axes arrive in JAX's int, real ones in JAX's float (int64 and float64 under x64: an int32 N would make
    ``1 / N`` float32 inside a float64 program)."""
    return v.astype(jnp.result_type(int) if v.dtype.kind in "iu" else jnp.result_type(float))


def _chunk_inputs(axes, lo: int, chunk_size: int, sharding) -> dict[str, jax.Array]:
    """The chunk of points from flat index ``lo``, sharded over the mesh; the last chunk is padded by repeating the
    grid's last point, so every chunk has the same shape (one compilation)."""
    n_points = math.prod(v.size for v in axes.values())
    idx = np.minimum(np.arange(lo, lo + chunk_size), n_points - 1)
    local = {k: _as_jax_dtype(v) for k, v in _points(axes, idx).items()}
    return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index]) for k, v in local.items()}


def _gather(tree):
    """A chunk's outputs on this host (every process's shards, under ``jax.distributed``) as numpy arrays."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree_util.tree_map(np.asarray, tree)


def _check_outputs_fit(axes, point_bytes: int) -> None:
    """The outputs of every point, gathered on the host and stacked (twice their size at the end), fit in memory;
    ``point_bytes`` is measured from the compiled program, or from the first chunk read back."""
    n_points = math.prod(v.size for v in axes.values())
    shape = " x ".join(str(v.size) for v in axes.values())
    _check_fits(
        f"the outputs of the grid's {n_points:,} points ({shape}; {point_bytes:,} bytes each, gathered on "
        "the host and stacked)",
        2 * n_points * point_bytes,
        None,
    )


def _progress_bar(n_points: int, progress: bool | None):
    """A tqdm bar over points (default: when stderr is a terminal), or None."""
    if not (sys.stderr.isatty() if progress is None else progress):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=n_points, unit="pt", desc="sweep", smoothing=0.1)


def _dataset(axes, names, results, output_dims, output_coords, attrs):
    """The chunks' outputs stacked into an ``xarray.Dataset``: the grid's dimensions, then each output's own."""
    import xarray as xr

    n_points = math.prod(v.size for v in axes.values())
    stacked = [np.concatenate([r[i] for r in results])[:n_points] for i in range(len(names))]
    shape = tuple(v.size for v in axes.values())
    output_dims = dict(output_dims or {})
    data_vars = {}
    for name, arr in zip(names, stacked):
        arr = arr.reshape(shape + arr.shape[1:])
        extra = tuple(output_dims.get(name, tuple(f"{name}_{i}" for i in range(arr.ndim - len(shape)))))
        if len(extra) != arr.ndim - len(shape):
            raise SweepConfigError(
                f"output_dims[{name!r}] = {extra} but the output has {arr.ndim - len(shape)} own dims."
            )
        data_vars[name] = (tuple(axes) + extra, arr)
    return xr.Dataset(data_vars, coords={**{k: v for k, v in axes.items()}, **dict(output_coords or {})}, attrs=attrs)
