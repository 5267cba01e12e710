"""Atomic file output: write to a temporary file in the same directory, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (0644 under umask 022): ``mkstemp`` creates
    its file 0600, which would leave every output unreadable to the user's colleagues. Linux shows the umask in
    /proc/self/status; elsewhere it is set and put back at once (``os.umask`` is the only portable way to read it)."""
    try:
        with open("/proc/self/status") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0)
        os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path, suffix: str = ""):
    """Yield a temporary path next to ``path``; on success rename it onto ``path`` (atomic on POSIX),
    on failure remove it. Readers never see a half-written file, and the file gets the permissions of any file
    this process creates (the umask's), not ``mkstemp``'s private 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def writable_directory(path, what: str) -> Path:
    """``path`` as a directory this process can write to, created if missing; a ``ValueError`` naming ``what`` and
    the reason otherwise (checked by writing a file there: permissions alone do not say, e.g. for root or a read-only
    mount)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file, not a directory.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".jaxicl-write-test"):
            pass
    except OSError as e:
        raise ValueError(f"cannot write to {what} {path} ({e.strerror or e}).") from None
    return path


def read_toml(path, what: str) -> dict:
    """The TOML file ``path`` as a dict; a ``ValueError`` naming it (as ``what``, e.g. "config file") and what is wrong
    if it is missing, a directory, unreadable or not TOML."""
    import tomllib

    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{what} {path} does not exist.") from None
    except IsADirectoryError:
        raise ValueError(f"{what} {path} is a directory: give the path of a TOML file.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or e}.") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path} is not valid TOML: {e}") from None


def atomic_write_text(path, text: str) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(text)
