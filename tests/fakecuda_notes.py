"""What a fake CUDA dry run records (``tests/fakecuda.py``): notes, and the place in the code of each.

A :class:`Note` is one kind of finding (:data:`PROBLEMS`: those a hot loop must not have), what
happened, and where: the innermost frame of this repository outside the harness, and the frame of
torch's own code that made the call, if any (Adam, autocast). :class:`Recorder` keeps a run's notes,
decides what a sync, a copy or a host tensor is where it happens (in a hot loop, in a capture, in
set-up) and holds the counters that show the code under test ran; ``Recorder.current`` is the
active ``FakeCuda``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
import sys
from pathlib import Path

import torch

CUDA = torch.device("cuda", 0)
ROOT = Path(__file__).resolve().parents[1]
_HARNESS = str(Path(__file__).resolve().with_name("fakecuda"))  # fakecuda.py and its fakecuda_*.py modules
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
# torch's own machinery between a call and the harness's handlers: never the place to name.
_TORCH_PLUMBING = ("overrides.py", "_tensor.py", "_subclasses/", "utils/_python_dispatch.py", "utils/_contextlib.py")

PROBLEMS = ("sync", "cpu-in-hot", "h2d-in-hot", "cpu-scalar-in-hot", "capture", "mismatch")
"""The kinds of note that a hot loop must not have (``sync-outside-hot`` and ``cpu-in-torch`` are not problems)."""


# ---------------------------------------------------------------------------- notes and where they come from

@dataclasses.dataclass(frozen=True)
class Note:
    """One kind of finding: its kind (see the module docstring), what happened, and where."""

    kind: str
    what: str
    file: str
    line: int
    function: str
    torch_site: str | None = None

    @property
    def key(self) -> str:
        """``"kind file:function"``, how allow-lists name a note (line numbers move)."""
        return f"{self.kind} {self.file}:{self.function}"

    def describe(self, count: int) -> str:
        inside = f"  [in torch: {self.torch_site}]" if self.torch_site else ""
        return f"{self.kind:<17} x{count:<4} {self.file}:{self.line} ({self.function})  {self.what}{inside}"


def _caller() -> tuple[str, int, str]:
    """``(file, line, function)`` of the code that made the current torch call.

    The innermost frame in this repository outside the harness (the package, or a test), else the
    innermost one outside torch. Files are named relative to the repository; a comprehension or
    lambda is named by the function around it.
    """
    frame, fallback = sys._getframe(1), None
    while frame is not None:
        filename = _real(frame.f_code.co_filename)
        if not filename.startswith(_HARNESS) and not filename.startswith(_TORCH_DIR):
            if filename.startswith(str(ROOT)) and "site-packages" not in filename:
                return _describe_frame(frame)
            fallback = fallback or frame
        frame = frame.f_back
    return _describe_frame(fallback) if fallback is not None else ("?", 0, "?")


@functools.cache
def _real(filename: str) -> str:
    """A code object's file name as a resolved path (a venv or a checkout may be reached through links)."""
    return os.path.realpath(filename)


def _describe_frame(frame) -> tuple[str, int, str]:
    path = Path(_real(frame.f_code.co_filename))
    file = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    line, outer = frame.f_lineno, frame
    while outer.f_code.co_name.startswith("<") and outer.f_back is not None \
            and outer.f_back.f_code.co_filename == outer.f_code.co_filename:
        outer = outer.f_back
    return file, line, outer.f_code.co_name


def torch_caller() -> str | None:
    """The innermost frame of torch's own code that made the current call (Adam, autocast), if any."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = _real(frame.f_code.co_filename)
        if filename.startswith(_TORCH_DIR) and not any(part in filename for part in _TORCH_PLUMBING):
            file = Path(filename).relative_to(_TORCH_DIR).as_posix()
            return f"torch/{file}:{frame.f_lineno} ({frame.f_code.co_name})"
        if not filename.startswith(_HARNESS) and not filename.startswith(_TORCH_DIR):
            return None  # reached the caller: the call was not made inside torch
        frame = frame.f_back
    return None


def on_cuda(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cuda"


def is_device_mismatch(error: RuntimeError) -> bool:
    message = str(error)  # torch 2.13 says "two devices", 2.11 "two different devices"
    return "two devices" in message or "two different devices" in message


# ---------------------------------------------------------------------------- the record of a run

class Recorder:
    """What a dry run under fake CUDA noted, and how often; its hot loops and captures; its counters.

    One at a time: ``Recorder.current`` is the active one (a ``FakeCuda``), which the stand-ins for
    CUDA report to.
    """

    current: Recorder | None = None

    def __init__(self):
        self.notes: collections.Counter[Note] = collections.Counter()
        self.hot_depth = 0
        self.hot_label = ""
        self.calls: collections.Counter[str] = collections.Counter()
        self.capturing = 0
        self.captures = 0
        self.replays = 0
        self.backwards = 0

    # -- recording

    def note(self, kind: str, what: str, torch_site: str | None = None) -> None:
        self.notes[Note(kind, what, *_caller(), torch_site)] += 1

    def note_sync(self, what: str) -> None:
        """A wait for the device: illegal in a capture, a problem in a hot loop, set-up elsewhere."""
        if self.capturing:
            self.note("capture", f"a sync: {what}", torch_caller())
        else:
            self.note("sync" if self.hot_depth else "sync-outside-hot", what, torch_caller())

    def note_copy(self, source: torch.device, destination: torch.device, non_blocking: bool, pinned: bool) -> None:
        """A copy between host and device (``pinned``: its host side is pinned memory).

        Only a non_blocking copy with pinned memory runs without the host waiting, and only it can
        be captured: any other copy to the host is a sync, any other copy to the device waits too.
        """
        asynchronous = non_blocking and pinned
        if source.type == "cuda" and destination.type == "cpu" and not asynchronous:
            self.note_sync("a blocking copy to the host")
        elif source.type == "cpu" and destination.type == "cuda":
            how = ("non_blocking, from pinned memory" if asynchronous else
                   "from pageable memory, staged by the host" if non_blocking else "blocking: it waits for the device")
            if self.capturing and not asynchronous:
                self.note("capture", f"a host-to-device copy ({how}) cannot be captured")
            elif self.hot_depth:
                self.note("h2d-in-hot", f"a host-to-device copy ({how}) in {self.hot_label}")

    def note_host_tensor(self, what: str) -> None:
        """A tensor made in host memory: a problem in a hot loop, unless torch.optim makes it (Adam's step counts)."""
        if self.hot_depth:
            site = torch_caller()
            if site is not None and site.startswith("torch/optim/"):
                self.note("cpu-in-torch", what, site)
            else:
                self.note("cpu-in-hot", f"{what} in {self.hot_label}", site)

    # -- regions and counters

    @contextlib.contextmanager
    def hot(self, label: str):
        """A hot loop: host tensors, host-to-device copies and syncs in it are problems."""
        self.hot_depth += 1
        outer, self.hot_label = self.hot_label, label
        try:
            yield
        finally:
            self.hot_depth -= 1
            self.hot_label = outer

    # -- results

    def problems(self) -> dict[Note, int]:
        """The notes of :data:`PROBLEMS` kinds, and how often each happened (empty: a clean run)."""
        return {note: count for note, count in self._sorted() if note.kind in PROBLEMS}

    def report(self) -> str:
        """Every note, one line each: kind, count, place, what."""
        return "\n".join(note.describe(count) for note, count in self._sorted())

    def _sorted(self) -> list[tuple[Note, int]]:
        return sorted(self.notes.items(), key=lambda item: (item[0].kind, item[0].file, item[0].line))
