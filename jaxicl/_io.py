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


# A settings or sweep file is a few kilobytes: one larger than this is refused before it is read through
MAX_TOML_BYTES = 1 << 20


def read_toml(path, what: str) -> dict:
    """The TOML file ``path`` as a dict; a ``ValueError`` naming it (as ``what``, e.g. "config file") and what is wrong
    if it is missing, a directory, not a regular file (``/dev/zero``, a pipe), over `MAX_TOML_BYTES`, unreadable or not
    TOML."""
    import stat
    import tomllib

    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError
        if not stat.S_ISREG(path.stat().st_mode):
            raise ValueError(f"{what} {path} is not a regular file: give the path of a TOML file.")
        with open(path, "rb") as f:
            raw = f.read(MAX_TOML_BYTES + 1)
        if len(raw) > MAX_TOML_BYTES:
            raise ValueError(f"{what} {path} is over {MAX_TOML_BYTES >> 20} MiB: a settings file is a few kilobytes.")
        return tomllib.loads(raw.decode())
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


class OutputInUse(ValueError):
    """Another jaxicl run is writing to the same output directory."""


@contextlib.contextmanager
def exclusive_output(directory, what: str = "--out"):
    """Within the block, this process is the only jaxicl run writing to ``directory``: an advisory lock on
    ``directory/.jaxicl.lock`` (the operating system releases it when the process ends, however it ends). A second run
    is refused at once with `OutputInUse`, naming the first (its process id and command) and what to do. POSIX only:
    elsewhere, no lock."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    import sys

    path = Path(directory) / ".jaxicl.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            raise OutputInUse(
                f"{what} {directory} is in use by another jaxicl run ({holder}): wait for it to end, or "
                f"give this run another {what}."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()}: {' '.join(sys.argv)}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
