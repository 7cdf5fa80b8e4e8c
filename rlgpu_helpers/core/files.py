"""The course's files: where ``data/`` is, and writes that never leave half a file.

Introduced in notebook 00. :func:`data_dir` finds the checkout's ``data/`` folder.
:func:`atomic_write` writes benchmark records and training checkpoints (notebook 11) so that a
kill mid-write (Ctrl-C, a Colab disconnect, a preempted machine) leaves the old complete file or
the new one, never half of one: the data goes to a temporary file in the same folder, is flushed,
and is renamed over the target (atomic within one file system). A full disk is one
:class:`DiskFullError` naming the file and the bytes, and the file there before stays.

:func:`exclusive_lock` keeps two processes from writing one thing at once (two ``bench --save``
merging into one reference file, two ``train`` runs into one folder). The lock is the operating
system's (``flock``), so it dies with its process, and a killed run's lock file is taken over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from glob import escape as glob_escape
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

DATA_ENV_VAR = "RLGPU_DATA_DIR"
"""Names another folder to use instead of the checkout's ``data/`` (the GPU sweep's dry runs write there)."""


FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
"""The errors of a write that found no room: a full disk, a file-size limit (``ulimit -f``), a quota."""


class DiskFullError(OSError):
    """A write that found no room, with the file (or folder) and the bytes it needed."""

    def __init__(self, path: str | Path, needed: int, error: OSError):
        super().__init__(error.errno, f"could not write {path}: no room for its {needed:,} bytes "
                                      f"({error.strerror or error}): free some disk space, or raise the "
                                      "file-size limit (ulimit -f), and try again")
        self.path, self.needed = Path(path), needed


def is_full(error: BaseException) -> bool:
    """Whether ``error`` says a write found no room (:data:`FULL`)."""
    return isinstance(error, OSError) and error.errno in FULL


def atomic_write(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it to ``path``.

    No room for it (:func:`is_full`) is a :class:`DiskFullError`; ``path`` is then as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only; give the usual mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if is_full(error):
            raise DiskFullError(path, len(data), error) from None
        raise
    _fsync_folder(path.parent)
    return path


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk, so a rename in it survives a power cut (POSIX only)."""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_temporaries(path: str | Path) -> list[Path]:
    """Delete the ``*.tmp`` files that killed :func:`atomic_write` calls to ``path`` left; returns them.

    Only for a caller that holds the folder (see :func:`exclusive_lock`): another process's write
    in progress would lose its temporary file.
    """
    path = Path(path)
    stale = sorted(path.parent.glob(f"{glob_escape(path.name)}.*.tmp"))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


class LockHeld(RuntimeError):
    """Another running process holds the lock; ``holder`` is its pid (None if it wrote none yet)."""

    def __init__(self, path: Path, holder: int | None):
        self.path, self.holder = path, holder
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(f"{path} is held by {who}; wait for it to finish or stop it")


@contextlib.contextmanager
def exclusive_lock(path: str | Path, *, wait: bool = True) -> Iterator[Path]:
    """Hold an exclusive lock on the file ``path`` (created if missing) for the ``with`` block.

    The file records the holder's pid. ``wait=False`` raises :class:`LockHeld` with that pid
    instead of waiting. The operating system releases the lock when its process ends, however it
    ends, so a pid left by a killed process is stale: the lock is taken and a line says so.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    try:
        try:
            _lock(fd, wait)
        except OSError:  # held: BlockingIOError (flock) or PermissionError (msvcrt)
            raise LockHeld(path, _pid_in(fd)) from None
        stale = _pid_in(fd)
        if stale is not None and stale != os.getpid():
            print(f"{path}: taking over a stale lock of process {stale}, which has ended")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        yield path
        os.ftruncate(fd, 0)  # a clean exit leaves no pid behind
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, wait: bool) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    else:  # one byte far past the pid, so the pid stays readable by the process refused
        os.lseek(fd, 1 << 30, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)


def _pid_in(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 32).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _umask() -> int:
    """The process's file-creation mask (reading it means setting it, so set it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def data_dir() -> Path:
    """The checkout's ``data/`` folder (reference results, trained agents).

    Found next to the package, so it works from a clone installed with ``pip install -e .``;
    the environment variable ``RLGPU_DATA_DIR``, where set, names another folder instead.
    """
    other = os.environ.get(DATA_ENV_VAR)
    if other:
        if not Path(other).is_dir():
            raise FileNotFoundError(f"environment variable {DATA_ENV_VAR}={other!r} is not a folder")
        return Path(other)
    path = Path(__file__).resolve().parents[2] / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"no data/ folder at {path}: install the package from a clone of "
                                "the course repository with `pip install -e .`")
    return path
