"""The course's files: where ``data/`` is, and writes that never leave half a file.

Introduced in notebook 00. :func:`data_dir` finds the checkout's ``data/`` folder (reference
results, trained agents). :func:`atomic_write` writes benchmark records (notebook 00) and
training checkpoints (notebook 11) so that each file is either the old complete version or the
new complete one, never half of one. A kill in the middle of a write (Ctrl-C, a Colab
disconnect, a preempted machine) must not leave a truncated file that breaks the next run. So
the data goes to a temporary file in the same folder, is flushed to disk, and only then renamed
over the target: a rename within one file system is atomic. A kill during the write leaves at
most a stray ``*.tmp`` file, which nothing reads.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

DATA_ENV_VAR = "RLGPU_DATA_DIR"
"""Names another folder to use instead of the checkout's ``data/`` (the GPU sweep's dry runs write there)."""


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(file)`` on a temporary file, fsync it, then rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only; give the usual mode
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
