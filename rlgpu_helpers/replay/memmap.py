"""A replay buffer stored in memory-mapped files: larger than RAM, and kept across restarts.

Introduced in notebook 05.

``MemmapReplayBuffer`` is a ``TensorReplayBuffer`` whose tensors are views of files in a folder:
one file per field, a small JSON header and a count. The operating system pages rows in and out,
so the capacity may exceed RAM (the files are sparse; a capacity the disk cannot hold is refused
up front, as writing a mapped page on a full disk kills the process), and the contents outlive
the process: ``MemmapReplayBuffer.open(path)`` maps the same files again.

Transitions are committed whole, so a process killed at any moment leaves no torn row. The count
(every transition ever added, ``count.bin``) is written after the rows; once the ring is full, a
batch goes to a journal first, and opening a folder whose journal is set finishes the copy. A
kill loses at most the add it interrupted; :meth:`MemmapReplayBuffer.flush` guards a power cut.

Other guards: one buffer at a time holds a folder (``core.files.exclusive_lock``); creating is
retry-safe (the header is written last); a folder that is not a buffer's (foreign files, a bad
header, data files of the wrong size) is refused before anything is written; a temporary buffer
(``path=None``) is deleted on ``close``, at garbage collection or at exit, and those a killed
process left are deleted by the next one. ``state_dict`` of a buffer in a named folder refers to
the files instead of copying them; loading it goes back to that count (newer whole transitions
may remain in its slots, never torn ones). Samples are gathered on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path

import numpy as np
import torch

from ..core.checks import check_int, check_ints
from ..core.device import get_device
from ..core.files import DiskFullError, LockHeld, atomic_write, exclusive_lock, is_full
from .base import DTYPES, FIELDS
from .tensor import TensorReplayBuffer

FORMAT = "rlgpu-replay-memmap/2"
HEADER = "header.json"
COUNT = "count.bin"
LOCK = "lock"
TEMPORARY_PREFIX = "rlgpu-replay-"
_WRITTEN, _JOURNAL_ROWS, _JOURNAL_FROM = 0, 1, 2
"""Slots of ``count.bin``: transitions committed, rows in the journal (0: none), the count it goes after."""


def _own_files() -> set[str]:
    """Every file name a buffer's folder may hold."""
    return ({HEADER, COUNT, LOCK} | {f"{name}.bin" for name in FIELDS}
            | {f"journal-{name}.bin" for name in FIELDS})


class MemmapReplayBuffer(TensorReplayBuffer):
    """A ring of transitions in memory-mapped files in the folder ``path``.

    ``path`` None: a fresh temporary folder. An empty or missing folder: a new buffer there. A folder
    holding a buffer: opened with its contents; ``capacity`` and ``obs_shape`` must match it.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 path: str | Path | None = None, num_actions: int | None = None):
        capacity, obs_shape = check_int("capacity", capacity), check_ints("obs_shape", obs_shape)
        get_device(device, param="device")  # checked before any file is touched
        self._maps: dict[str, np.memmap] = {}
        self._journal: dict[str, np.memmap] = {}
        self._lock = contextlib.ExitStack()
        temporary = path is None
        if temporary:
            remove_stale_temporaries()
            path = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX))
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"path={str(self.path)!r} is a file, not a folder")
        self._check_folder(read_header(self.path), capacity, obs_shape)
        made_folder, creating = not self.path.exists(), False
        try:
            self._lock.enter_context(exclusive_lock(self.path / LOCK, wait=False))
            header = read_header(self.path)  # again, now that no other buffer can be making one
            self._check_folder(header, capacity, obs_shape)
            creating = header is None
            self._mode = "w+" if creating else "r+"
            if creating:
                for name in _own_files() - {LOCK}:  # an unfinished creation's files
                    (self.path / name).unlink(missing_ok=True)
            self.id = header["id"] if header is not None else uuid.uuid4().hex
            self._files_bytes = _allocated_bytes(self.path)
            super().__init__(capacity, obs_shape, device, storage_device="cpu", num_actions=num_actions)
            self._count = np.memmap(self.path / COUNT, dtype=np.int64, mode=self._mode, shape=(4,))
            if header is None:
                self._write_header()
            self._recover()
        except BaseException:
            self._maps, self._journal = {}, {}
            if temporary or made_folder:
                shutil.rmtree(self.path, ignore_errors=True)
            elif creating:  # out of disk space, say: leave the folder as it was given, for a retry
                for name in _own_files() - {LOCK}:
                    (self.path / name).unlink(missing_ok=True)
            self._lock.close()
            raise
        # Released by close, or when the buffer is collected or the interpreter exits.
        self._cleanup = weakref.finalize(self, _release, self._lock, self.path if temporary else None)
        self.temporary = temporary

    def _check_folder(self, header: dict | None, capacity: int, obs_shape: tuple) -> None:
        """Refuse a folder that is not a buffer's, or a buffer of another capacity or shape."""
        if header is not None:
            for name, given, stored in (("capacity", capacity, header["capacity"]),
                                        ("obs_shape", obs_shape, tuple(header["obs_shape"]))):
                if given != stored:
                    raise ValueError(f"{name}={given!r} does not match the buffer in {self.path} ({name} "
                                     f"{stored!r}): open it with MemmapReplayBuffer.open(path)")
        elif self.path.is_dir() and set(os.listdir(self.path)) - _own_files():
            raise ValueError(f"path={str(self.path)!r} holds files but no {HEADER}: not a replay buffer's "
                             "folder; give an empty or new folder")

    @classmethod
    def open(cls, path: str | Path, device: str | torch.device = "cpu", *,
             num_actions: int | None = None) -> MemmapReplayBuffer:
        """The buffer stored in the folder ``path``, with its contents; an error if there is none."""
        header = read_header(Path(path))
        if header is None:
            raise ValueError(f"path={str(path)!r} holds no replay buffer (no {HEADER})")
        return cls(header["capacity"], header["obs_shape"], device, path=path, num_actions=num_actions)

    def _room(self) -> tuple[int, str]:
        """The disk's free space, plus what the files already hold (sparse files take blocks as rows are written)."""
        return shutil.disk_usage(self.path).free + self._files_bytes, f"disk space in {self.path}"

    def _allocate(self, name: str) -> torch.Tensor:
        shape = (self.capacity, *self.field_shape(name))
        file = self.path / f"{name}.bin"
        try:
            self._maps[name] = np.memmap(file, dtype=_numpy_dtype(name), mode=self._mode, shape=shape)
        except OSError as error:
            if is_full(error):  # a file-size limit (ulimit -f) refuses the sparse file's size itself
                raise DiskFullError(file, math.prod(shape) * _numpy_dtype(name).itemsize, error) from None
            raise
        return torch.from_numpy(self._maps[name])

    def _write_header(self) -> None:
        """The last file of a new buffer: until it exists, the folder is an unfinished creation."""
        header = {"format": FORMAT, "id": self.id, "capacity": self.capacity, "obs_shape": list(self.obs_shape),
                  "dtypes": {name: _numpy_dtype(name).name for name in FIELDS}}
        atomic_write(self.path / HEADER, json.dumps(header, indent=1).encode())

    def _recover(self) -> None:
        """Take the count from ``count.bin``, finishing an add a kill interrupted after its journal."""
        written, rows, since = (int(v) for v in self._count[:3])
        if written < 0 or not 0 <= rows <= self.capacity or (rows and since not in (written, written - rows)):
            raise ValueError(f"{self.path / COUNT} holds {[written, rows, since]}: a corrupt buffer folder")
        if rows and since == written:  # killed while copying the journal into the ring: copy it again
            self._set_count(since)
            self._open_journal(rows, "r+")
            super()._store({name: torch.from_numpy(self._journal[name][:rows]) for name in FIELDS}, rows)
            written = since + rows
        self._commit(written)

    def _set_count(self, written: int) -> None:
        self.written = written
        self.pos, self.size = written % self.capacity, min(written, self.capacity)

    def _commit(self, written: int) -> None:
        """The count after the rows: one int64 store, which a kill cannot tear."""
        self._count[_WRITTEN] = written
        self._count[_JOURNAL_ROWS] = 0
        self._set_count(written)

    def _open_journal(self, rows: int, mode: str) -> None:
        for name in FIELDS:
            self._journal[name] = np.memmap(self.path / f"journal-{name}.bin", dtype=_numpy_dtype(name), mode=mode,
                                            shape=(rows, *self.field_shape(name)))

    def memory_bytes(self) -> dict[str, int]:
        """The files' size; the rows in use occupy page cache, which the OS manages."""
        return {"files": sum(m.nbytes for m in self._maps.values())}

    def flush(self) -> None:
        """Write the mapped rows, then the count, to disk (a process kill loses nothing even without it)."""
        self._check_open()
        for array in (*self._maps.values(), *self._journal.values(), self._count):
            array.flush()

    def state_dict(self) -> dict:
        """A temporary buffer's rows (as every buffer's); a named folder's reference to its files.

        The reference: ``{"memmap": folder, "id": the buffer's id, "written": the count, "size"}``,
        after a flush. See the module docstring for what loading it restores.
        """
        if self.temporary:
            return super().state_dict()
        self._settle_checks()
        self.flush()
        return {"memmap": str(self.path.resolve()), "id": self.id, "written": self.written, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        """Rows of any buffer's state (written in, then counted), or this folder's own reference."""
        if isinstance(state, dict) and "memmap" in state:
            self._check_open()
            written = self._checked_reference(state)
            self._commit(written)
            self._invalid = None
            self._make_value_checks()
            return
        super().load_state_dict(state)

    def _checked_reference(self, state: dict) -> int:
        if state.get("memmap") != str(self.path.resolve()) or state.get("id") != self.id:
            raise ValueError(f"state refers to the buffer {state.get('id')!r} in {state.get('memmap')!r}; this "
                             f"buffer is {self.id!r} in {str(self.path.resolve())!r}: open that folder to load it")
        written = check_int("state['written']", state.get("written"), 0, self.written)
        if state.get("size") != min(written, self.capacity):
            raise ValueError(f"state['size']={state.get('size')!r} must be {min(written, self.capacity)} "
                             f"for written={written}")
        return written

    def close(self) -> None:
        """Flush, unmap and unlock the files (a temporary folder is deleted); the buffer is unusable after."""
        if self.closed:
            return
        self.flush()
        for name in FIELDS:
            setattr(self, name, None)
        self._maps, self._journal = {}, {}
        self._cleanup()

    @property
    def closed(self) -> bool:
        return not self._maps

    def __enter__(self) -> MemmapReplayBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"the replay buffer in {self.path} is closed")

    # Every access to the rows goes through these, so a closed buffer says so.
    def _store(self, fields: dict, count: int) -> None:
        """Rows first, then the count; through the journal where counted rows get overwritten."""
        self._check_open()
        written = self.written
        if written + count <= self.capacity:  # only empty slots: a kill leaves them uncounted
            super()._store(fields, count)
            self._commit(written + count)
            return
        if not self._journal or self._journal["obs"].shape[0] < count:
            self._open_journal(count, "w+")
        for name, value in fields.items():
            torch.from_numpy(self._journal[name][:count]).copy_(value)
        self._count[_JOURNAL_FROM] = written
        self._count[_JOURNAL_ROWS] = count  # the journal is whole: from here on the add completes
        super()._store({name: torch.from_numpy(self._journal[name][:count]) for name in FIELDS}, count)
        self._commit(written + count)

    def _gather(self, indices: torch.Tensor) -> dict:
        self._check_open()
        return super()._gather(indices)

    def _rows(self) -> dict:
        self._check_open()
        return super()._rows()

    def _put_rows(self, fields: dict, size: int) -> None:
        """Nothing counted while the rows are replaced, then all of them."""
        self._check_open()
        self._commit(0)
        super()._put_rows(fields, size)
        self._commit(size)


def _release(lock: contextlib.ExitStack, temporary: Path | None) -> None:
    """Unlock a buffer's folder, and delete it if it is a temporary one."""
    if temporary is not None:
        shutil.rmtree(temporary, ignore_errors=True)
    lock.close()


def _allocated_bytes(path: Path) -> int:
    """Disk bytes the data files in ``path`` already hold (sparse files hold fewer than their size)."""
    names = [path / f"{name}.bin" for name in FIELDS]
    return sum(getattr(p.stat(), "st_blocks", 0) * 512 for p in names if p.is_file())


def remove_stale_temporaries(folder: str | Path | None = None) -> list[Path]:
    """Delete the temporary buffer folders (``rlgpu-replay-*``) that killed processes left; returns them.

    Stale: its lock records a pid and no process holds it (the system drops a lock when its process
    ends, however it ends). A folder whose lock has no pid yet (being made) is left alone.
    """
    removed = []
    for candidate in sorted(Path(folder or tempfile.gettempdir()).glob(f"{TEMPORARY_PREFIX}*")):
        lock = candidate / LOCK
        try:
            if not lock.is_file() or not lock.read_text().strip():
                continue
            with contextlib.redirect_stdout(io.StringIO()), exclusive_lock(lock, wait=False):  # quiet takeover
                shutil.rmtree(candidate, ignore_errors=True)
        except (LockHeld, OSError):
            continue
        removed.append(candidate)
    return removed


def _numpy_dtype(name: str) -> np.dtype:
    return np.dtype(str(DTYPES[name]).removeprefix("torch."))


def read_header(path: Path) -> dict | None:
    """The checked header of the buffer in folder ``path``; None if it has none; ValueError if
    the header or the data files are not a buffer's (corrupt or foreign)."""
    file = path / HEADER
    if not file.is_file():
        return None
    try:
        header = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{file} is not valid JSON ({error}): a corrupt or foreign folder") from None
    if isinstance(header, dict) and header.get("format") == "rlgpu-replay-memmap/1":
        raise ValueError(f"{file}: a buffer of an older format, whose count a kill could tear: open it with the "
                         "version that made it and load its state_dict() into a new buffer")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{file} is not a replay buffer header (no \"format\": \"{FORMAT}\"): a foreign folder")
    try:
        capacity = check_int(f"{file}: capacity", header.get("capacity"))
        obs_shape = check_ints(f"{file}: obs_shape", header.get("obs_shape"))
    except TypeError as error:
        raise ValueError(str(error)) from None
    if not re.fullmatch(r"[0-9a-f]{32}", str(header.get("id"))):
        raise ValueError(f"{file}: id={header.get('id')!r} must be 32 hex digits")
    dtypes = {name: _numpy_dtype(name).name for name in FIELDS}
    if header.get("dtypes") != dtypes:
        raise ValueError(f"{file}: dtypes={header.get('dtypes')!r} must be {dtypes}")
    sizes = {f"{name}.bin": capacity * int(np.prod(obs_shape) if name in ("obs", "next_obs") else 1)
             * np.dtype(dtypes[name]).itemsize for name in FIELDS}
    for name, expected in {**sizes, COUNT: 32}.items():
        data = path / name
        found = data.stat().st_size if data.is_file() else None
        if found != expected:
            state = "is missing" if found is None else f"has {found} bytes"
            raise ValueError(f"{data} {state}, expected {expected} bytes: a corrupt buffer folder")
    return {"capacity": capacity, "obs_shape": obs_shape, "id": header["id"]}
