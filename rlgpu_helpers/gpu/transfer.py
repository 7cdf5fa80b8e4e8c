"""Moving data between the host and a GPU, and hiding the move behind compute.

Introduced in notebook 05.

Every batch a GPU learns from crosses the host link (PCIe) first, at a speed set by where it starts:

* **pageable** memory (any ordinary tensor) may be paged out, so the driver copies it into a
  pinned staging buffer first;
* **pinned** memory (``pin_memory=True``) is read by the GPU's copy engine directly, and the copy
  can run while the host and the GPU do other work. ``t.pin_memory()`` costs about what the
  staging does: pinning pays for buffers allocated pinned once and reused (a replay buffer);
* ``non_blocking=True`` lets the host go on without waiting; a copy *to the host* read before
  ``torch.cuda.synchronize()`` can hold old values (:func:`read_before_sync`).

:func:`copy_of` is each way of copying as a function, for ``bench.transfers`` to time by size;
:func:`nominal_link` reads the PCIe link the GPU sits on, to set measurements beside its promise.
A copy need not be *waited* for: :func:`prefetch_to_device` copies the next batch on a side stream
while the default stream computes; :func:`prefetch_loops` are the loops with and without it, and
:func:`prefetch_timeline` and :func:`plot_timeline` show their copies and kernels per stream.

Without CUDA each function does what can be measured honestly (host-to-host copies, the compute
loop alone) or returns None, and prints what it skipped and why.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

from ..core import compat
from ..core.checks import check_int
from ..core.config import pick
from ..core.device import _command_output, get_device
from .launches import quiet_profiler

H2D, D2H, H2H = "host to device", "device to host", "host to host"
DIRECTIONS = (H2D, D2H)
PAGEABLE, PINNED, PIN_THEN_COPY, NON_BLOCKING = "pageable", "pinned", "pin_memory() then copy", "non_blocking"
VARIANTS = (PAGEABLE, PINNED, PIN_THEN_COPY, NON_BLOCKING)



def copy_of(variant: str, direction: str, pageable, pinned, on_device):
    """One copy of ``variant`` in ``direction``, as a function; the buffers are the same size."""
    if direction == H2H:
        return lambda: on_device.copy_(pageable)  # on a CPU "on_device" is a second host buffer
    if direction == H2D:
        if variant == PAGEABLE:
            return lambda: on_device.copy_(pageable)
        if variant == PINNED:
            return lambda: on_device.copy_(pinned)  # blocking: the host waits for each copy
        if variant == PIN_THEN_COPY:
            return lambda: on_device.copy_(pageable.pin_memory(), non_blocking=True)
        return lambda: on_device.copy_(pinned, non_blocking=True)
    if variant == PAGEABLE:
        return lambda: pageable.copy_(on_device)
    if variant == PINNED:
        return lambda: pinned.copy_(on_device)
    return lambda: pinned.copy_(on_device, non_blocking=True)


# ---------------------------------------------------------------------------- reading too early

_BUSY_SIZE, _BUSY_MATMULS = 4096, 4


@dataclasses.dataclass(frozen=True)
class EarlyRead:
    """A ``non_blocking`` copy of ``elements`` int32 values 1, 2, 3... to a zeroed pinned host buffer, read
    at once and after ``torch.cuda.synchronize()``: ``wrong_before`` and ``wrong_after`` values were
    not there yet, over ``attempts`` tries; ``first_before`` and ``first_after``, the first values read."""

    elements: int
    attempts: int
    wrong_before: int
    wrong_after: int
    first_before: tuple[int, ...]
    first_after: tuple[int, ...]

    def __str__(self) -> str:
        if self.wrong_before == 0:
            return (f"{self.attempts} early read(s) of {self.elements:,} values happened to find the copy "
                    f"complete each time; after synchronizing, {self.wrong_after:,} were wrong")
        return (f"read before synchronizing: {self.wrong_before:,} of {self.elements:,} values wrong "
                f"(first ones {list(self.first_before)}); after synchronizing: {self.wrong_after:,} wrong "
                f"(first ones {list(self.first_after)})")


def read_before_sync(device: str | torch.device | None = None, *, elements: int = 2**20,
                     attempts: int = 10) -> EarlyRead | None:
    """Show that a ``non_blocking`` device-to-host copy read before synchronizing can be wrong.

    As in a training loop, the copy is queued behind GPU work (matmuls standing in for a forward pass),
    so the call returns before the values land; the host reads at once, then after synchronizing,
    up to ``attempts`` times. Elsewhere than CUDA a copy has finished when it returns: None.
    """
    device = get_device(device, param="device")
    elements = check_int("elements", elements, 1, 2**28)
    attempts = check_int("attempts", attempts)
    if device.type != "cuda":
        print(f"no CUDA: on {device.type} a copy to the host has finished when the call returns, so there is "
              "nothing to read too early; the 'non_blocking_read' reference records show it on a GPU.")
        return None
    expected = torch.arange(1, elements + 1, dtype=torch.int32)
    values = expected.to(device)
    busy = torch.randn(_BUSY_SIZE, _BUSY_SIZE, device=device)
    scratch = torch.empty_like(busy)
    host = torch.empty(elements, dtype=torch.int32, pin_memory=True)
    for attempt in range(1, attempts + 1):
        host.zero_()
        for _ in range(_BUSY_MATMULS):
            torch.mm(busy, busy, out=scratch)
        host.copy_(values, non_blocking=True)
        before = host.clone()  # read at once, as code that forgot to synchronize would
        torch.cuda.synchronize(device)
        wrong_before = int((before != expected).sum())
        if wrong_before:
            break
    return EarlyRead(elements, attempt, wrong_before, int((host != expected).sum()),
                     tuple(before[:5].tolist()), tuple(host[:5].tolist()))


# ---------------------------------------------------------------------------- overlap on a side stream

def prefetch_to_device(batches: Iterable[torch.Tensor], device: str | torch.device | None = None
                       ) -> Iterator[torch.Tensor]:
    """Yield each host batch on ``device``; on CUDA, the next one is copied while this one is used.

    The copy of batch i+1 runs on a side stream while the caller's stream computes on batch i; the
    caller's stream waits for it on the GPU (``wait_stream``), never the host, and ``record_stream``
    keeps the allocator from reusing the batch too soon. Batches should be pinned (a pageable copy
    cannot run in the background), and a host batch must not be overwritten while its copy may run.
    Elsewhere each batch is copied with ``.to(device)``.
    """
    device = get_device(device, param="device")
    if device.type != "cuda":
        for batch in batches:
            yield batch.to(device)
        return
    side = torch.cuda.Stream(device)

    def start(batch):
        with torch.cuda.stream(side):
            return batch.to(device, non_blocking=True)

    def hand_over(copied):
        current = torch.cuda.current_stream(device)
        current.wait_stream(side)
        copied.record_stream(current)
        return copied

    pending = None
    for batch in batches:
        ready = hand_over(pending) if pending is not None else None
        pending = start(batch)  # queued after the hand-over: the caller's stream will not wait for it
        if ready is not None:
            yield ready
    if pending is not None:
        yield hand_over(pending)


SERIAL = "copy then compute (one stream)"
PREFETCH = "prefetch on a side stream"
COMPUTE_ONLY = "compute only (a CPU has nothing to copy)"


def prefetch_loops(device: torch.device, rows: int, width: int, batches: int) -> dict:
    """The loops to compare, by name: each copies ``batches`` batches and multiplies each by a weight.

    A batch is ``rows x width`` float32 (pinned on a GPU), two handed out in turn as a replay buffer
    would. ``SERIAL`` copies with ``non_blocking=True`` on the default stream: the host does not wait,
    but the GPU copies and computes one after the other. On a CPU there is one loop, the compute.
    """
    cuda = device.type == "cuda"
    host = [torch.randn(rows, width, pin_memory=cuda) for _ in range(2)]
    order = [host[i % 2] for i in range(batches)]
    weight = torch.randn(width, width, device=device) / math.sqrt(width)
    out = torch.empty(rows, width, device=device)

    def serial():
        for batch in order:
            torch.mm(batch.to(device, non_blocking=True), weight, out=out)

    def prefetch():
        for batch in prefetch_to_device(order, device):
            torch.mm(batch, weight, out=out)

    return {SERIAL: serial, PREFETCH: prefetch} if cuda else {COMPUTE_ONLY: serial}


def prefetch_sizes(device: torch.device, rows, width, batches) -> tuple[int, int, int]:
    """A batch's default shape: 4096 x 4096 float32 on a GPU, where its copy and its matmul take similar
    times; 1024 x 1024 elsewhere, where there is no copy to compare with."""
    side = pick(full=4096 if device.type == "cuda" else 1024, quick=64)
    return (check_int("rows", side if rows is None else rows),
            check_int("width", side if width is None else width),
            check_int("batches", pick(full=20, quick=4) if batches is None else batches))


def no_overlap_reason(device: torch.device) -> str:
    return f"no CUDA: on {device.type} the batches are already in host memory, so there is no copy to overlap"


@dataclasses.dataclass(frozen=True)
class Interval:
    """One piece of GPU work from the profiler: a ``"copy"`` or a ``"kernel"`` on a CUDA stream.

    ``start_ms`` and ``end_ms`` count from the start of its ``loop`` (a name of :func:`prefetch_loops`).
    """

    loop: str
    stream: int
    kind: str
    name: str
    start_ms: float
    end_ms: float


def intervals_from_events(events, loops: Sequence[str]) -> list[Interval]:
    """The GPU work in profiler ``events``, each piece given to the loop whose range holds its start.

    ``events`` are the profiler's (``prof.events()``); each loop ran inside a
    ``torch.profiler.record_function`` of its name, and synchronized before the range ended.
    A GPU event's stream is its ``device_resource_id``.
    """
    ranges = {event.name: event.time_range for event in events
              if event.name in loops and event.device_type == DeviceType.CPU}
    intervals = []
    for event in events:
        if event.device_type != DeviceType.CUDA or event.name in loops:  # skip the annotations' GPU copies
            continue
        start, end = event.time_range.start, event.time_range.end
        for loop, span in ranges.items():
            if span.start <= start <= span.end:
                kind = "copy" if event.name.startswith("Memcpy") else "kernel"
                intervals.append(Interval(loop, event.device_resource_id, kind, event.name,
                                          (start - span.start) / 1e3, (end - span.start) / 1e3))
    return intervals


def prefetch_timeline(device: str | torch.device | None = None, *, rows: int | None = None,
                      width: int | None = None, batches: int = 4,
                      trace_path: str | Path | None = None) -> list[Interval] | None:
    """Both loops of :func:`prefetch_loops` under the profiler: their copies and kernels per stream.

    Each loop runs once to warm up, then once recorded. ``trace_path`` also saves the profiler's
    chrome trace (JSON; open it in ui.perfetto.dev). Returns the :class:`Interval` list for
    :func:`plot_timeline`; None without CUDA (nothing to overlap) or when the profiler saw no
    GPU work (it needs CUPTI), saying which.
    """
    device = get_device(device, param="device")
    rows, width, batches = prefetch_sizes(device, rows, width, batches)
    if trace_path is not None and not isinstance(trace_path, (str, Path)):
        raise TypeError(f"trace_path={trace_path!r} must be a str, a Path or None")
    if device.type != "cuda":
        print(f"{no_overlap_reason(device)}, and no GPU timeline to record.")
        return None
    loops = prefetch_loops(device, rows, width, batches)
    for loop in loops.values():
        loop()
    torch.cuda.synchronize(device)
    try:
        with quiet_profiler(), compat.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for name, loop in loops.items():
                with record_function(name):
                    loop()
                    torch.cuda.synchronize(device)
    except RuntimeError as error:  # no CUPTI, or a profiler already running
        print(f"The profiler could not trace CUDA here ({error}): no timeline.")
        return None
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
    intervals = intervals_from_events(prof.events(), list(loops))
    if not intervals:
        print("The profiler recorded no GPU work (it needs NVIDIA's CUPTI library): no timeline.")
        return None
    return intervals


def plot_timeline(intervals: Sequence[Interval]):
    """Draw :func:`prefetch_timeline`'s intervals: one panel per loop, one row per CUDA stream.

    Copies and kernels get their own colours, and the panels share the time axis, so the loop
    whose copies run beside its kernels visibly ends sooner. Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    intervals = list(intervals)
    if not intervals:
        raise ValueError("intervals=[] holds nothing to plot")
    bad = [i for i in intervals if not isinstance(i, Interval)]
    if bad:
        raise TypeError(f"intervals must hold only Interval objects, not {bad[0]!r}")
    colors = {"copy": "tab:orange", "kernel": "tab:blue"}
    loops = list(dict.fromkeys(i.loop for i in intervals))
    fig, axes = plt.subplots(len(loops), 1, sharex=True, squeeze=False, layout="constrained",
                             figsize=(8, 1.2 + 1.6 * len(loops)))
    for ax, loop in zip(axes[:, 0], loops):
        mine = [i for i in intervals if i.loop == loop]
        streams = sorted({i.stream for i in mine})
        for row, stream in enumerate(streams):
            for kind, color in colors.items():
                bars = [(i.start_ms, i.end_ms - i.start_ms) for i in mine if i.stream == stream and i.kind == kind]
                ax.broken_barh(bars, (row - 0.35, 0.7), facecolor=color, edgecolor="white", linewidth=0.5)
        ax.set_yticks(range(len(streams)), [f"stream {stream}" for stream in streams])
        ax.set_ylim(-0.6, len(streams) - 0.4)
        ax.set_ylabel("CUDA stream")
        ax.set_title(f"{loop}: GPU work ends at {max(i.end_ms for i in mine):.2f} ms")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time since the loop started (ms)")
    fig.legend(handles=[Patch(color=color, label=kind) for kind, color in colors.items()], loc="outside right")
    fig.suptitle("GPU timeline from the profiler: host-to-device copies and kernels, per stream")
    plt.close(fig)  # returned, not also drawn by pyplot at the end of a notebook cell
    return fig


# ---------------------------------------------------------------------------- the nominal link

PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""GB/s one PCIe lane carries in each direction, by generation, after line encoding (8b/10b up
to gen 2, 128b/130b from gen 3, FLIT in gen 6): gen 3 x16 gives 15.8 GB/s, gen 5 x16 63 GB/s."""


@dataclasses.dataclass(frozen=True)
class Link:
    """A PCIe link: its generation and lanes, and the GB/s it carries each way."""

    generation: int
    lanes: int

    def __post_init__(self):
        check_int("generation", self.generation)
        check_int("lanes", self.lanes)
        if self.generation not in PCIE_LANE_GBS:
            raise ValueError(f"generation={self.generation!r} must be a PCIe generation in {sorted(PCIE_LANE_GBS)}")

    @property
    def gbs_per_direction(self) -> float:
        return PCIE_LANE_GBS[self.generation] * self.lanes

    def __str__(self) -> str:
        return f"PCIe gen {self.generation} x{self.lanes}: {self.gbs_per_direction:.1f} GB/s per direction (nominal)"


def parse_link(text: str) -> Link:
    """A :class:`Link` from nvidia-smi's ``pcie.link.gen.max,pcie.link.width.max`` answer, e.g. ``"5, 16"``."""
    if not isinstance(text, str):
        raise TypeError(f"text={text!r} must be a str, not {type(text).__name__}")
    match = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"text={text!r} must be '<generation>, <lanes>', as nvidia-smi prints them")
    return Link(int(match[1]), int(match[2]))


def nominal_link(device: str | torch.device | None = None) -> Link | None:
    """The PCIe link between the host and CUDA ``device`` as nvidia-smi reports it: the maximum generation
    and width both sides support (an idle GPU drops to a lower one). None, with the reason printed,
    without CUDA or when nvidia-smi cannot tell."""
    device = get_device(device, param="device")
    if device.type != "cuda":
        print(f"no CUDA: {device.type} has no host-GPU link to read.")
        return None
    gpu = f"GPU-{torch.cuda.get_device_properties(device).uuid}"
    answer = _command_output(["nvidia-smi", "-i", gpu, "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                              "--format=csv,noheader,nounits"])
    if answer is None:
        print("nvidia-smi is missing or failed: the nominal link is unknown.")
        return None
    try:
        return parse_link(answer)
    except ValueError as error:
        print(f"nvidia-smi gave no PCIe link ({error}): the nominal link is unknown.")
        return None
