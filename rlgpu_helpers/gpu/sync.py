"""Host-device synchronizations: find them with the sync audit, and check inputs without them.

Introduced in notebook 04.

A GPU runs the work the host queues while the host runs ahead. Whenever the host needs a value
the GPU computes (``.item()``, ``bool(t)`` in an ``if``, ``.cpu()``, the size of ``nonzero()``'s
result), it waits until the queue has drained: a synchronization. At small sizes one per step can
cost more than the step.

:func:`audit_syncs` calls a function once and reports every synchronization, by operator, count
and source line. On CUDA it asks the runtime (``torch.cuda.set_sync_debug_mode("warn")``, which
misses some, and the profiler's count of synchronizing runtime calls beside it). On a CPU nothing
waits, so it intercepts the operators that *would* synchronize on a GPU: host reads of a value,
copies to the host, and operators whose output size depends on the data (``nonzero``, boolean
masks, ``unique``...). So a test on a laptop proves a hot loop sync-free before it meets a GPU.
The CPU rules know where a tensor would live only from its use: they skip ``torch.optim``'s
host-side step counters, take a ``torch.device`` to be the device the code runs on, and count a
``.cpu()`` or an input check that a GPU would not make.

:class:`DeferredCheck` is the other half of the lesson: check an input on the device and never
wait. A failure is recorded in a small device tensor, copied to the host without waiting, and
raised once the copy has arrived (``VecSnake`` checks its actions so).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import sys
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity
from torch.utils._python_dispatch import TorchDispatchMode

from ..core import compat
from ..core.checks import check_choice, check_int
from ..core.device import get_device
from ..measure.table import Table
from .launches import quiet_profiler

METHODS = ("cuda", "rules")
_SYNC_WARNING = "called a synchronizing CUDA operation"
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_OPTIM_DIR = str(Path(torch.__file__).resolve().parent / "optim")
_THIS_FILE = str(Path(__file__).resolve())
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]

# Tensor methods that read a value or copy a tensor to the host (the CPU rules).
_HOST_READS = {
    "item": "Tensor.item()",
    "__bool__": "bool(tensor), e.g. an if on a tensor",
    "__int__": "int(tensor)",
    "__float__": "float(tensor)",
    "__index__": "a tensor used as a Python index",
    "tolist": "Tensor.tolist()",
    "numpy": "Tensor.numpy()",
    "cpu": "Tensor.cpu()",
    "__repr__": "printing a tensor",
    "__format__": "formatting a tensor",
}
# aten operators that synchronize on a GPU whatever their arguments (the CPU rules).
_SYNCING_OPS = {
    "aten::_local_scalar_dense": "a tensor's value read on the host",
    "aten::nonzero": "nonzero (its output size depends on the data)",
    "aten::masked_select": "masked_select (its output size depends on the data)",
    "aten::_unique": "unique (its output size depends on the data)",
    "aten::_unique2": "unique (its output size depends on the data)",
    "aten::unique_dim": "unique (its output size depends on the data)",
    "aten::unique_consecutive": "unique_consecutive (its output size depends on the data)",
    "aten::equal": "torch.equal (returns a Python bool)",
    "aten::bincount": "bincount (its output size depends on the data)",
}
# Synchronizing CUDA runtime calls, as the profiler names them (the CUDA method).
_RUNTIME_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
MULTINOMIAL = "multinomial (checks its input with .item() in this torch)"


@functools.cache
def multinomial_synchronizes() -> bool:
    """Whether this torch's ``torch.multinomial(probs, 1)`` reads a value on the host, and so waits on a GPU.

    Measured, not looked up by version: older versions check the probabilities with ``.item()``,
    newer ones with ``_assert_async``, which fails on the device and never waits. Both run the same
    code on a CPU, where the profiler tells them apart: a host read (``aten::_local_scalar_dense``)
    outside an ``_assert_async``. The answer decides whether the CPU rules count ``multinomial``.
    """
    probs = torch.ones(2, 3)
    with quiet_profiler(), compat.profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.multinomial(probs, 1)
    for event in prof.events():
        if event.name == "aten::_local_scalar_dense":
            parents, parent = set(), event.cpu_parent
            while parent is not None:
                parents.add(parent.name)
                parent = parent.cpu_parent
            if "aten::multinomial" in parents and "aten::_assert_async" not in parents:
                return True
    return False


@dataclasses.dataclass(frozen=True)
class SyncRow:
    """One kind of synchronization: the operator, how many times, and where in the source."""

    operator: str
    count: int
    where: str


@dataclasses.dataclass
class SyncReport:
    """What :func:`audit_syncs` found; ``str()`` gives a table, Jupyter shows HTML.

    ``method`` is ``"cuda"`` (the CUDA runtime's own count) or ``"rules"`` (operators that would
    synchronize on a GPU). ``runtime_calls`` holds the profiler's count of synchronizing CUDA
    runtime calls by name (CUDA method only; None where the profiler could not run).
    """

    method: str
    rows: list[SyncRow]
    runtime_calls: dict[str, int] | None = None

    @property
    def total(self) -> int:
        """Synchronizations found, all operators together."""
        return sum(row.count for row in self.rows)

    def table(self) -> Table:
        rows = [[row.operator, str(row.count), row.where] for row in self.rows]
        return Table(["operator", "count (syncs)", "where"], rows, [False, True, False])

    def __str__(self) -> str:
        if not self.rows:
            return f"no host-device synchronizations found ({self.method})"
        return f"{self.total} host-device synchronization(s) found ({self.method}):\n{self.table()}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<p>{self}</p>"
        return f"<p>{self.total} host-device synchronization(s) found ({self.method}):</p>{self.table()._repr_html_()}"


def audit_syncs(fn: Callable[[], object], device: str | torch.device | None = None, *,
                method: str | None = None, warmup: int = 1) -> SyncReport:
    """Call ``fn()`` and report every host-device synchronization it makes.

    ``device`` is the device ``fn`` works on (default: the best available); it picks the method:
    ``"cuda"`` on a CUDA device, ``"rules"`` anywhere else. ``method="rules"`` applies the CPU
    rules on a GPU too, to compare them with what the runtime says. ``warmup`` untimed calls run
    first, outside the audit, so one-time set-up (allocations, library handles) is not counted.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    device = get_device(device, param="device")
    method = check_choice("method", method if method is not None else
                          ("cuda" if device.type == "cuda" else "rules"), METHODS)
    if method == "cuda" and device.type != "cuda":
        raise ValueError(f"method='cuda' needs a CUDA device, not device={str(device)!r}")
    for _ in range(check_int("warmup", warmup, 0)):
        fn()
    if method == "cuda":
        return _audit_cuda(fn, device)
    found = collections.Counter()
    # "scalars": the tensors PyTorch made of Python numbers, by id; weak, so that a freed one's
    # id, reused by a later tensor, does not pass that tensor off as a number.
    state = {"host_read": 0, "scalars": weakref.WeakValueDictionary(), "multinomial": multinomial_synchronizes()}
    with _DispatchRules(found, state), _FunctionRules(found, state):
        fn()
    return SyncReport("rules", _rows(found))


def _rows(found: collections.Counter) -> list[SyncRow]:
    return [SyncRow(operator, count, where) for (operator, where), count in found.most_common()]


def _where() -> str | None:
    """The innermost frame outside torch and this module, as ``file:line (function)``.

    None when ``torch.optim`` is on the stack: optimizers keep their step counters on the host
    on every device, so reading them never synchronizes.
    """
    frame = sys._getframe(1)
    where = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_OPTIM_DIR):
            return None
        if where is None and not filename.startswith(_TORCH_DIR) and filename != _THIS_FILE:
            path = Path(filename)
            if filename.startswith("<"):
                shown = filename  # code compiled from a string (exec, compile): "<string>", not a file
            else:
                try:
                    shown = path.resolve().relative_to(_PACKAGE_PARENT).as_posix()
                except ValueError:
                    shown = path.name
            where = f"{shown}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return where or "?"


class _FunctionRules(TorchFunctionMode):
    """Counts Tensor methods that read values or copy to the host (they would synchronize on a GPU)."""

    def __init__(self, found: collections.Counter, state: dict):
        super().__init__()
        self.found, self.state = found, state

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        operator = _HOST_READS.get(name)
        if name == "to" and _copies_to_host(args[1:], kwargs):
            operator = "Tensor.to('cpu')"
        if operator is None:
            return func(*args, **kwargs)
        where = _where()
        if where is not None:
            self.found[(operator, where)] += 1
        self.state["host_read"] += 1  # the aten operators inside are this read, not another
        try:
            return func(*args, **kwargs)
        finally:
            self.state["host_read"] -= 1


def _copies_to_host(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the host: a blocking ``.to("cpu")``.

    Only a device written as a string counts. Device-generic code passes a ``torch.device``
    (``.to(self.device)``), which is the device the code runs on, wherever that is.
    """
    if kwargs.get("non_blocking") or (len(args) > 1 and args[1] is True):
        return False  # no wait: the copy is unsafe to read before a sync, but it is no sync
    target = args[0] if args else kwargs.get("device")
    return isinstance(target, str) and target.split(":")[0] == "cpu"


class _DispatchRules(TorchDispatchMode):
    """Counts aten operators that would synchronize on a GPU."""

    def __init__(self, found: collections.Counter, state: dict):
        super().__init__()
        self.found, self.state = found, state

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func._schema.name == "aten::lift_fresh":
            self.state["scalars"][id(out)] = out  # a Python number assigned into a tensor
        elif self.state["host_read"] == 0:
            operator = self._syncing(func, args, kwargs)
            where = _where() if operator is not None else None
            if where is not None:
                self.found[(operator, where)] += 1
        return out

    def _syncing(self, func, args, kwargs) -> str | None:
        name = func._schema.name
        if name in _SYNCING_OPS:
            return _SYNCING_OPS[name]
        if name == "aten::multinomial":
            return MULTINOMIAL if self.state["multinomial"] else None
        if name in ("aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"):
            masks = [i for i in args[1] if i is not None and i.dtype in (torch.bool, torch.uint8)]
            if not masks:
                return None
            if name == "aten::index":
                return "boolean-mask indexing x[mask]"
            # x[mask] = <Python number> becomes masked_fill on a GPU: no sync.
            return None if id(args[2]) in self.state["scalars"] else "boolean-mask assignment x[mask] = tensor"
        if func.name() == "aten::repeat_interleave.Tensor" and kwargs.get("output_size") is None:
            return "repeat_interleave without output_size"
        return None


def _audit_cuda(fn, device: torch.device) -> SyncReport:
    """The CUDA method: sync debug warnings traced to operators, and the profiler's count."""
    found = collections.Counter()

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = func(*args, **(kwargs or {}))
            _sort_warnings(caught, found, func.name())
            return out

    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with Trace():
                    fn()
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        _sort_warnings(caught, found, "CUDA runtime call")

    torch.cuda.synchronize(device)
    runtime_calls = _profile_runtime_syncs(run, device)
    return SyncReport("cuda", _rows(found), runtime_calls)


def _sort_warnings(caught, found: collections.Counter, operator: str) -> None:
    """Count the sync warnings under ``operator``; warn the others again as they were."""
    for warning in caught:
        if _SYNC_WARNING in str(warning.message):
            found[(operator, f"{Path(warning.filename).name}:{warning.lineno}")] += 1
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _profile_runtime_syncs(run, device: torch.device) -> dict[str, int] | None:
    """Run ``run()`` under the profiler; synchronizing CUDA runtime calls by name, beyond an
    empty run's (the profiler's own). None where the profiler cannot trace CUDA here."""
    def count(body) -> collections.Counter:
        with quiet_profiler(), compat.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            body()
        calls = collections.Counter()
        for event in prof.events():
            name = event.name.split("_v")[0]
            if name in _RUNTIME_SYNCS:
                calls[name] += 1
        return calls

    try:
        empty = count(lambda: None)
        calls = count(run)
    except RuntimeError as error:  # no CUPTI, or a profiler already running
        print(f"The profiler could not trace CUDA here ({error}); counting the sync warnings only.")
        run()
        return None
    return {name: calls[name] - empty[name] for name in _RUNTIME_SYNCS if calls[name] > empty[name]}


class DeferredCheck:
    """A check made on the device whose failure is raised on the host later, without waiting.

    ``record(bad, values)`` notes the first ``values[i]`` where ``bad[i]`` holds, with device operations
    only, starts copying the note to the host, and returns the device flag ``pending``, set until the
    failure is raised: callers freeze their state with it, so bad input never takes effect.
    ``raise_if_failed()`` raises ``ValueError(describe(index, value, calls_ago))`` once the note is on
    the host (a non-blocking ``Event.query`` on CUDA, never a wait); then the check is clear again.
    """

    def __init__(self, device: str | torch.device, describe: Callable[[int, int, int], str]):
        self.device = get_device(device, param="device")
        self._describe = describe
        # The note: failed (0/1), the call that failed, the index and the value.
        self._note = torch.zeros(4, dtype=torch.int64, device=self.device)
        self._calls_on_device = torch.zeros((), dtype=torch.int64, device=self.device)
        self._calls = 0
        self._reported = 0
        if self.device.type == "cpu":
            self._host, self._event = self._note, None  # the note is already in host memory
        else:
            cuda = self.device.type == "cuda"
            self._host = torch.zeros(4, dtype=torch.int64, pin_memory=cuda)
            self._event = torch.cuda.Event() if cuda else None
        self._host_view = self._host.numpy()  # read with NumPy: no torch operator, no audit row

    @staticmethod
    def _refuse_capture() -> None:
        """A CUDA graph cannot hold the check: querying its event while capturing is illegal
        (cudaErrorStreamCaptureUnsupported), and a replay would note failures no one reads."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("a DeferredCheck cannot run inside a CUDA graph capture: its event cannot be queried "
                               "while capturing, and replays would report nothing. Capture the code without the "
                               "check (VecSnake(check_action_values=False)) and check the inputs before replaying")

    def record(self, bad: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Note the first bad value (device operations only); returns the 0-d ``pending`` flag."""
        self._refuse_capture()
        self._calls += 1
        self._calls_on_device.add_(1)
        first = bad.to(torch.uint8).argmax().view(1)
        new = torch.cat([bad.any().view(1), self._calls_on_device.view(1), first,
                         values.index_select(0, first)]).to(torch.int64)
        self._note.copy_(torch.where(self._note[0] != 0, self._note, new))
        if self._event is not None:
            self._host.copy_(self._note, non_blocking=True)
            self._event.record()
        elif self._host is not self._note:
            self._host.copy_(self._note)  # an accelerator without events: this copy waits
        return self._note[0] != 0

    def raise_if_failed(self) -> None:
        """Raise the recorded failure if its note has reached the host; never waits."""
        self._refuse_capture()
        if self._event is not None and not self._event.query():
            return
        failed, call, index, value = (int(v) for v in self._host_view)
        if failed and call > self._reported:
            self._reported = call
            self._note.zero_()
            raise ValueError(self._describe(index, value, self._calls - call))
