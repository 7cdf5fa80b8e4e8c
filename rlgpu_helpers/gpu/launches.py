"""Counting what a call asks of a device: operations launched, bytes moved (notebook 04).

* :func:`count_launches`: operations launched per call. On CUDA, the GPU work items
  ``torch.profiler`` traces; on a CPU, the aten operators the dispatcher runs, without views,
  allocations and other operators that compute nothing.
* :func:`traffic_bytes`: the bytes every operator of a call reads and writes, seen through a
  ``TorchDispatchMode``. An estimate, and it says so: nothing stays cached between operators,
  gathers and scatters move only the elements they select, views and allocations move nothing. A
  fused kernel (``torch.compile``, notebook 09) moves fewer bytes than this.

:func:`quiet_profiler` keeps the profiler's own lines (Kineto's, written to standard error, which
a notebook shows as an error) out, and lets any other message through. ``bench.launch`` applies
both counts to ``VecSnake``'s step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..core import compat
from ..core.checks import check_int
from ..core.device import get_device, synchronize

# Kineto's own progress lines ("USDT:2026-01-31 12:00:00 123:123 File.cpp:52] profiler_start"), its
# failed look for a GPU when a CUDA build of torch runs on a machine without one (a Colab CPU
# session, a laptop), and the CPU allocator's note that a block allocated before profiling was freed
# during it (memory profiling).
_KINETO_CHATTER = re.compile(r"^(USDT|STAGE|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\]"
                             r"|^ERROR:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ DeviceProperties\.cpp:\d+\] "
                             r"gpuGetDeviceCount failed with code \d+$"
                             r"|^\[W\d+ [\d:.]+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated "
                             r"before the profiling started")


@contextlib.contextmanager
def quiet_profiler():
    """Keep the profiler's own progress lines off standard error; pass every other line on.

    Kineto writes them from C++ straight to file descriptor 2, below Python's ``sys.stderr``,
    so the descriptor itself is pointed at a temporary file for the duration and read back.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
    kept = [line for line in text.splitlines() if line.strip() and not _KINETO_CHATTER.match(line)]
    if kept:
        print("\n".join(kept), file=sys.stderr)


_NO_KERNEL = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::scalar_tensor",
              "aten::lift_fresh", "aten::resize_", "aten::set_", "aten::detach", "aten::resolve_conj",
              "aten::resolve_neg"}


_view_ops: dict[str, bool] = {}


def _is_view_op(name: str) -> bool:
    """Whether the aten operator ``name`` returns an alias of its input (a view: no kernel runs)."""
    if name not in _view_ops:
        packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
        view = False
        if packet is not None:
            for overload in packet.overloads():
                op = getattr(packet, overload)
                returns = op._schema.returns
                if returns and returns[0].alias_info is not None and not returns[0].alias_info.is_write:
                    view = True
                    break
        _view_ops[name] = view
    return _view_ops[name]


@dataclasses.dataclass(frozen=True)
class LaunchCount:
    """Operations launched per call of a function, and what was counted."""

    per_call: float
    counted: str


CPU_COUNTED = "aten operators that run a kernel (dispatcher, CPU)"


CUDA_COUNTED = "GPU work items: kernels, copies, fills (profiler, CUDA)"


CUDA_RUNTIME_COUNTED = "kernel launch calls (profiler, CUDA runtime)"


def count_launches(fn: Callable[[], object], device: str | torch.device | None = None, *,
                   calls: int = 5, warmup: int = 2) -> LaunchCount:
    """Operations launched per call of ``fn()`` on ``device``, from ``torch.profiler``.

    On CUDA: the GPU work items traced (kernels, copies, fills), else the runtime's kernel launch
    calls, else the CPU count. On a CPU: the aten operators each call dispatches (views, allocations
    and no-ops left out). ``warmup`` calls first, then ``calls`` counted.
    """

    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    device = get_device(device)
    calls, warmup = check_int("calls", calls), check_int("warmup", warmup, 0)
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type != "cuda":
        with _Traffic() as dispatched:
            for _ in range(calls):
                fn()
        return LaunchCount(dispatched.operators / calls, CPU_COUNTED)
    with quiet_profiler():
        with compat.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            synchronize(device)
        events = list(prof.events())
    on_gpu = [e for e in events if e.device_type == DeviceType.CUDA]
    if on_gpu:
        return LaunchCount(len(on_gpu) / calls, CUDA_COUNTED)
    launches = [e for e in events if e.name.split("_v")[0] in
                ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")]
    return LaunchCount(len(launches) / calls, CUDA_RUNTIME_COUNTED)


_GATHERS = {"aten::index_select", "aten::gather", "aten::index", "aten::embedding", "aten::take"}


_SCATTERS = {"aten::scatter_", "aten::scatter", "aten::scatter_add_", "aten::scatter_add", "aten::index_add_",
             "aten::index_add", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_",
             "aten::index_copy_", "aten::index_fill_", "aten::put_"}


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class _Traffic(TorchDispatchMode):
    """Counts the aten operators that run a kernel, and adds up the bytes they read and write."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.operators = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        if name in _NO_KERNEL or _is_view_op(name):
            return out
        self.operators += 1
        written = _tensors(out)
        read = _tensors((args, {k: v for k, v in kwargs.items() if k != "out"}))
        if name in _GATHERS and read:
            # Only the selected elements of the source are read: as many as the output holds.
            source = read[0]
            selected = sum(t.numel() for t in written) * source.element_size()
            self.bytes += sum(map(_nbytes, read[1:])) + selected + sum(map(_nbytes, written))
        elif name in _SCATTERS and read:
            # Only the indexed elements of the target are written: as many as the index or
            # the values hold (the largest of the other tensor arguments).
            target, others = read[0], read[1:]
            touched = max((t.numel() for t in others), default=0)
            self.bytes += sum(map(_nbytes, others)) + touched * target.element_size()
        elif name == "aten::copy_" and read:
            self.bytes += sum(map(_nbytes, read[1:])) + _nbytes(read[0])  # the target is written, not read
        else:
            self.bytes += sum(map(_nbytes, read)) + sum(map(_nbytes, written))
        return out


def traffic_bytes(fn: Callable[[], object], *, calls: int = 1) -> float:
    """Bytes the operators of one call of ``fn()`` read and write, on average over ``calls`` calls.

    An estimate (see the module docstring): each aten operator reads each of its inputs and
    writes each of its outputs once; gathers and scatters are charged for the elements they
    select; views and allocations for nothing.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    calls = check_int("calls", calls)
    with _Traffic() as traffic:
        for _ in range(calls):
            fn()
    return traffic.bytes / calls
