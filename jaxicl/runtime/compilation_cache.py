"""JAX's persistent compilation cache, as the ``jaxicl`` command uses it.

A compiled XLA program is written to disk and read back by the next process that compiles the same program,
so a second ``jaxicl reproduce`` skips most of XLA's compilation (tracing and lowering still run). The cache is
JAX's own: its key hashes the lowered program, the compile options, the backend and device kind, and the
jax/jaxlib versions, so a changed model, another machine or another JAX version compiles afresh; a stale entry
is never used for a different program.

The ``jaxicl`` command enables it by default under `default_dir` (``$JAXICL_CACHE_DIR``, else
``$XDG_CACHE_HOME/jaxicl/xla``, else ``~/.cache/jaxicl/xla``); ``--cache-dir`` overrides the place and
``--no-cache`` turns it off. Library users call `enable` themselves (or set JAX's own options).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

# cache every program: reading one back (~1 ms) beats compiling even a one-op program (10–100 ms)
MIN_COMPILE_SECONDS = 0.0


def default_dir() -> Path:
    """``$JAXICL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxicl/xla``, else ``~/.cache/jaxicl/xla``."""
    if os.environ.get("JAXICL_CACHE_DIR"):
        return Path(os.environ["JAXICL_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "jaxicl" / "xla"


def enable(path: str | os.PathLike | None = None, min_compile_seconds: float = MIN_COMPILE_SECONDS) -> Path:
    """Cache every program that takes at least ``min_compile_seconds`` to compile under ``path`` (default
    `default_dir`); returns the directory. Raises ``ValueError`` if it cannot be created or written."""
    from .._io import writable_directory

    path = Path(path).expanduser() if path is not None else default_dir()
    try:
        writable_directory(path, "the compilation cache")
    except ValueError as e:
        raise ValueError(f"{e} Pass --cache-dir DIR or --no-cache.") from None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _reset()
    return path


def disable() -> None:
    """Stop reading and writing the persistent cache in this process."""
    jax.config.update("jax_compilation_cache_dir", None)
    _reset()


def _reset() -> None:
    # JAX initialises its cache object once, on the first compilation; a later change of directory needs a reset
    from jax._src import compilation_cache

    compilation_cache.reset_cache()
