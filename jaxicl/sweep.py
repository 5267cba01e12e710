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
``meta`` under the same ``out`` is an error.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ._io import atomic_output, atomic_write_text

__all__ = ["sweep", "flatten_grid", "SweepConfigError"]


class SweepConfigError(ValueError):
    """The grid or the output directory does not match what the sweep needs."""


def _axis_values(name, values) -> np.ndarray:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
    if arr.ndim != 1:
        raise SweepConfigError(f"grid axis {name!r} must be a 1-D list of values, got shape {arr.shape}.")
    if arr.size == 0:
        raise SweepConfigError(f"grid axis {name!r} is empty.")
    if arr.dtype.kind not in "biuf":
        raise SweepConfigError(f"grid axis {name!r} must hold numbers, got dtype {arr.dtype}.")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int32)
    return arr


def flatten_grid(grid: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(axes, points): each axis's values, and each axis's value at every point of the product
    (C order: the last axis varies fastest)."""
    if not grid:
        raise SweepConfigError("the grid has no axes.")
    axes = {name: _axis_values(name, vals) for name, vals in grid.items()}
    idx = np.meshgrid(*[np.arange(v.size) for v in axes.values()], indexing="ij")
    points = {name: vals[i.reshape(-1)] for (name, vals), i in zip(axes.items(), idx)}
    return axes, points


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
    cfg = out / "config.json"
    if not cfg.exists():
        out.mkdir(parents=True, exist_ok=True)
        return None
    old = json.loads(cfg.read_text())
    points = old.pop("chunk_points", old.get("chunk_size"))
    new = json.loads(json.dumps(fingerprint))  # the same normalisation (tuples -> lists) as on disk
    if old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise SweepConfigError(
            f"{out} holds a different sweep (differs in: {', '.join(diff)}). Use another `out` "
            "directory, or delete this one to start over."
        )
    return int(points)


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
    return jax.jit(jax.vmap(one_point, in_axes=(0, None)), in_shardings=(sharding, _point_sharding(devices, ())),
                   out_shardings=sharding)


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
            f"{budget / 2**30:.2f} GiB: reduce the work per point (batch, steps recorded) or raise memory_budget.")
    return chunk_size, fn


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
            traced scalars: float for real axes, int32 for integer axes). If it also takes ``key``,
            it receives ``fold_in(key, seed)`` (``seed`` must then be an axis). Returns a pytree of
            arrays (a dict gives named variables).
        grid: axis name → 1-D list of numbers.
        chunk_size: points per compiled call (default: up to 1024), rounded up to a multiple of the device count;
            either way lowered until the compiled program fits in ``memory_budget``.
        out: directory for resumable chunk files (see module docstring).
        devices: devices of the 1-D mesh (default ``jax.devices()``: all processes' devices).
        key: base PRNG key for ``key``-taking run functions (default ``PRNGKey(0)``).
        meta: JSON-serialisable description of anything ``run_fn`` captures (task, dynamics): it is
            part of the fingerprint that guards ``out`` and lands in the dataset's attrs.
        output_dims: variable name → names of its own dimensions (default ``{name}_0``, …).
        output_coords: coordinates for those dimensions.
        progress: tqdm bar over points (default: when stderr is a terminal).
        memory_budget: bytes per device one compiled chunk may use (default :func:`device_memory_budget`:
            3/4 of the device's memory). A chunk whose program needs more (XLA's buffer assignment) is split
            into smaller chunks, which give the same numbers.
    """
    import xarray as xr

    from . import __version__

    axes, points = flatten_grid(grid)
    n_points = next(iter(points.values())).size
    devices = list(devices) if devices is not None else jax.devices()
    n_dev = len(devices)
    requested = chunk_size
    if chunk_size is None:
        chunk_size = min(1024, -(-n_points // n_dev) * n_dev)
    if chunk_size < 1:
        raise SweepConfigError(f"chunk_size must be >= 1, got {chunk_size}.")
    chunk_size = -(-int(chunk_size) // n_dev) * n_dev  # a multiple of the device count

    params = inspect.signature(run_fn).parameters
    takes_key = "key" in params
    missing = [a for a in axes if a not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values())]
    if missing:
        raise SweepConfigError(f"run_fn has no argument for grid axis(es) {missing}.")
    if takes_key and "seed" not in axes:
        raise SweepConfigError("run_fn takes `key`, so the grid needs a `seed` axis (it folds into the key).")
    base_key = jax.random.PRNGKey(0) if key is None else key
    budget = device_memory_budget(devices[0]) if memory_budget is None else int(memory_budget)

    sharding = _point_sharding(tuple(devices))
    def as_jax_dtype(v):
        return v.astype(np.int32) if v.dtype.kind in "iu" else v.astype(jnp.result_type(float))

    def chunk_inputs(c):
        lo = c * chunk_size
        idx = np.minimum(np.arange(lo, lo + chunk_size), n_points - 1)  # pad by repeating the last point
        local = {k: as_jax_dtype(v[idx]) for k, v in points.items()}
        return {
            k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index])
            for k, v in local.items()
        }

    def gather(tree):
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            tree = multihost_utils.process_allgather(tree, tiled=True)
        return jax.tree_util.tree_map(np.asarray, tree)

    out_dir = Path(out) if out is not None else None
    fingerprint = _fingerprint(run_fn, axes, "auto" if requested is None else chunk_size, meta)
    dtypes = tuple((k, as_jax_dtype(v[:1]).dtype) for k, v in points.items())
    stored = _prepare_out(out_dir, fingerprint) if out_dir is not None else None
    program = None
    if stored is not None:  # resuming: the chunks on disk fix the chunk size
        chunk_size = stored
    else:
        chunk_size, program = _fitting_chunk(run_fn, takes_key, tuple(devices), dtypes, chunk_size, base_key, budget)
        if out_dir is not None and jax.process_index() == 0:
            atomic_write_text(out_dir / "config.json", json.dumps({**fingerprint, "chunk_points": chunk_size}, indent=1))
    n_chunks = -(-n_points // chunk_size)

    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_points, unit="pt", desc="sweep", smoothing=0.1)

    results, names = [], None
    for c in range(n_chunks):
        path = out_dir / f"chunk_{c:05d}.npz" if out_dir is not None else None
        if path is not None and path.exists():
            with np.load(path) as f:
                leaves = [f[f"leaf_{i}"] for i in range(len(f.files) - 1)]
                chunk_names = json.loads(str(f["names"]))
        else:
            program = program or _compiled(run_fn, takes_key, tuple(devices), dtypes, chunk_size, base_key)
            tree = gather(program(chunk_inputs(c), base_key))
            leaves = jax.tree_util.tree_leaves(tree)
            chunk_names = _leaf_names(tree)
            if path is not None and jax.process_index() == 0:
                with atomic_output(path, ".npz") as tmp:
                    np.savez(tmp, names=json.dumps(chunk_names), **{f"leaf_{i}": leaf for i, leaf in enumerate(leaves)})
        names = names or chunk_names
        results.append(leaves)
        if bar is not None:
            bar.update(min(chunk_size, n_points - c * chunk_size))
    if bar is not None:
        bar.close()

    stacked = [np.concatenate([r[i] for r in results])[:n_points] for i in range(len(names))]
    shape = tuple(v.size for v in axes.values())
    output_dims = dict(output_dims or {})
    data_vars = {}
    for name, arr in zip(names, stacked):
        arr = arr.reshape(shape + arr.shape[1:])
        extra = tuple(output_dims.get(name, tuple(f"{name}_{i}" for i in range(arr.ndim - len(shape)))))
        if len(extra) != arr.ndim - len(shape):
            raise SweepConfigError(f"output_dims[{name!r}] = {extra} but the output has {arr.ndim - len(shape)} own dims.")
        data_vars[name] = (tuple(axes) + extra, arr)
    attrs = {
        "config": json.dumps(fingerprint),
        "jaxicl_version": __version__,
        "jax_version": jax.__version__,
        "backend": jax.default_backend(),
        "device_count": n_dev,
        "process_count": jax.process_count(),
        "chunk_size": chunk_size,
        "n_chunks": n_chunks,
        "memory_budget_bytes": budget,
    }
    return xr.Dataset(data_vars, coords={**{k: v for k, v in axes.items()}, **dict(output_coords or {})}, attrs=attrs)
