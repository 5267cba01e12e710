"""Atomic file output: write to a temporary file in the same directory, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_output(path, suffix: str = ""):
    """Yield a temporary path next to ``path``; on success rename it onto ``path`` (atomic on POSIX),
    on failure remove it. Readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_text(path, text: str) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(text)
