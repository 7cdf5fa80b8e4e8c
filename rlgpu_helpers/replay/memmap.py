"""A replay buffer stored in memory-mapped files: larger than RAM, and kept across restarts.

Introduced in notebook 05.

``MemmapReplayBuffer`` is a ``TensorReplayBuffer`` whose tensors are views of files in a folder
(NumPy memmaps wrapped by ``torch.from_numpy``): one file per field, ``capacity`` rows each, and
a small JSON header. The operating system pages rows in and out on demand, so:

- the capacity may exceed the machine's RAM: the files are created sparse (no disk blocks until
  a row is written), and only the rows in use need memory, as page cache the OS can drop;
- the contents outlive the process: ``MemmapReplayBuffer.open(path)`` (or the constructor with
  the same ``path``, capacity and shape) maps the same files again, with the same transitions.

What reopening finds is what :meth:`MemmapReplayBuffer.flush` last saved: ``flush`` writes the
mapped rows to disk, then the header (format, capacity, observation shape, dtypes, write
position, size) atomically (``core.files.atomic_write``). ``close`` flushes and unmaps; a
buffer is also a context manager. After a crash the folder reopens with the header of the last
flush, and the rows written since are newer transitions in slots the header already counted,
or beyond its size (unused).

A folder that is not a buffer's is refused before anything is written: a folder with other
files and no header ("foreign"), a header that is not valid JSON or not this format, or data
files of the wrong size ("corrupt"), each with the path and what is wrong. Samples are
gathered on the CPU and delivered to ``device``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import torch

from ..core.checks import check_int, check_ints
from ..core.device import get_device
from ..core.files import atomic_write
from .base import DTYPES, FIELDS
from .tensor import TensorReplayBuffer

FORMAT = "rlgpu-replay-memmap/1"
HEADER = "header.json"


class MemmapReplayBuffer(TensorReplayBuffer):
    """A ring of transitions in memory-mapped files in the folder ``path``.

    ``path`` None: a fresh temporary folder, deleted on ``close`` or when the buffer is garbage
    collected. An empty or missing folder: a new buffer is created there. A folder holding a
    buffer: it is opened with its contents, and ``capacity`` and ``obs_shape`` must match it.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 path: str | Path | None = None):
        capacity, obs_shape = check_int("capacity", capacity), check_ints("obs_shape", obs_shape)
        get_device(device, param="device")  # checked before any file is touched
        if path is None:
            path = Path(tempfile.mkdtemp(prefix="rlgpu-replay-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, path, ignore_errors=True)
        else:
            self._cleanup = None
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"path={str(self.path)!r} is a file, not a folder")
        header = read_header(self.path)
        if header is not None:
            for name, given, stored in (("capacity", capacity, header["capacity"]),
                                        ("obs_shape", obs_shape, tuple(header["obs_shape"]))):
                if given != stored:
                    raise ValueError(f"{name}={given!r} does not match the buffer in {self.path} ({name} "
                                     f"{stored!r}): open it with MemmapReplayBuffer.open(path)")
        elif self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"path={str(self.path)!r} holds files but no {HEADER}: not a replay buffer's "
                             "folder; give an empty or new folder")
        self._mode = "r+" if header is not None else "w+"
        self.path.mkdir(parents=True, exist_ok=True)
        self._maps: dict[str, np.memmap] = {}
        super().__init__(capacity, obs_shape, device, storage_device="cpu")
        if header is None:
            self.flush()
        else:
            self.pos, self.size = header["pos"], header["size"]

    @classmethod
    def open(cls, path: str | Path, device: str | torch.device = "cpu") -> MemmapReplayBuffer:
        """The buffer stored in the folder ``path``, with its contents; an error if there is none."""
        header = read_header(Path(path))
        if header is None:
            raise ValueError(f"path={str(path)!r} holds no replay buffer (no {HEADER})")
        return cls(header["capacity"], header["obs_shape"], device, path=path)

    def _allocate(self, name: str) -> torch.Tensor:
        shape = (self.capacity, *self.field_shape(name))
        self._maps[name] = np.memmap(self.path / f"{name}.bin", dtype=_numpy_dtype(name), mode=self._mode,
                                     shape=shape)
        return torch.from_numpy(self._maps[name])

    def memory_bytes(self) -> dict[str, int]:
        """The files' size; the rows in use occupy page cache, which the OS manages."""
        return {"files": sum(m.nbytes for m in self._maps.values())}

    def flush(self) -> None:
        """Write the mapped rows to disk, then the header: what a reopened buffer will hold."""
        self._check_open()
        for array in self._maps.values():
            array.flush()
        header = {"format": FORMAT, "capacity": self.capacity, "obs_shape": list(self.obs_shape),
                  "dtypes": {name: _numpy_dtype(name).name for name in FIELDS},
                  "pos": self.pos, "size": self.size}
        atomic_write(self.path / HEADER, lambda f: f.write(json.dumps(header, indent=1).encode()))

    def close(self) -> None:
        """Flush and unmap the files (a temporary folder is deleted); the buffer is unusable after."""
        if self.closed:
            return
        self.flush()
        for name in FIELDS:
            setattr(self, name, None)
        self._maps = {}
        if self._cleanup is not None:
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
        self._check_open()
        super()._store(fields, count)

    def _gather(self, indices: torch.Tensor) -> dict:
        self._check_open()
        return super()._gather(indices)

    def _rows(self) -> dict:
        self._check_open()
        return super()._rows()

    def _put_rows(self, fields: dict, size: int) -> None:
        self._check_open()
        super()._put_rows(fields, size)


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
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{file} is not a replay buffer header (no \"format\": \"{FORMAT}\"): a foreign folder")
    try:
        capacity = check_int(f"{file}: capacity", header.get("capacity"))
        obs_shape = check_ints(f"{file}: obs_shape", header.get("obs_shape"))
        size = check_int(f"{file}: size", header.get("size"), 0, capacity)
        pos = check_int(f"{file}: pos", header.get("pos"), 0, capacity - 1)
    except TypeError as error:
        raise ValueError(str(error)) from None
    if size < capacity and pos != size:
        raise ValueError(f"{file}: pos={pos} must equal size={size} until the buffer is full")
    dtypes = {name: _numpy_dtype(name).name for name in FIELDS}
    if header.get("dtypes") != dtypes:
        raise ValueError(f"{file}: dtypes={header.get('dtypes')!r} must be {dtypes}")
    for name in FIELDS:
        data = path / f"{name}.bin"
        rows = np.prod(obs_shape) if name in ("obs", "next_obs") else 1
        expected = capacity * int(rows) * np.dtype(dtypes[name]).itemsize
        found = data.stat().st_size if data.is_file() else None
        if found != expected:
            state = "is missing" if found is None else f"has {found} bytes"
            raise ValueError(f"{data} {state}, expected {expected} bytes: a corrupt buffer folder")
    return {"capacity": capacity, "obs_shape": obs_shape, "pos": pos, "size": size}
