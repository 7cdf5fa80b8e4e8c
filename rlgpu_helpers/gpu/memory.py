"""Peak memory of a call, and the largest batch that fits (introduced in notebook 06).

A bigger batch keeps a GPU busier until its memory runs out. So, how much memory does one step
take, and how big a batch fits?

* :func:`peak_memory` runs a call twice, a warm-up (which builds lazy state such as Adam's moments)
  and the measured call, and returns the most memory the second held beyond what it started with:
  the peak of a step that repeats. On a GPU, the caching allocator's own count
  (``max_memory_allocated``; ``nvidia-smi`` shows more, as the cache keeps freed blocks). On a CPU,
  the running sum of the allocations and frees the profiler reports, with the warm-up profiled
  too, or the step's free of the previous step's gradients would go uncounted.
* :func:`peak_reserved` (CUDA only): what the card must give for the call, from an empty cache;
  more than ``peak_memory``, as blocks are rounded up and fragment.
* :func:`find_max_batch_size` doubles the batch until a step runs out of memory, then bisects,
  each GPU trial from an empty cache (cached blocks could make a batch fit that a fresh run does
  not). :func:`try_to_fit` tells out-of-memory, including a CUDA library's plain ``RuntimeError``,
  from real errors. The answer keeps a safety margin, as memory fragments over a run.
  :func:`check_largest_batch` judges the search written by hand (notebook 06's exercise).

A CPU has no out-of-memory error to find (the system swaps, or kills the process), so there the
search runs against an explicit budget (``budget_bytes``, :func:`within_budget`): the caller's
choice, not the machine's memory, so the same code and tests run everywhere.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity

from ..core import compat
from ..core.checks import check_int, check_number
from ..core.device import get_device, synchronize
from .launches import quiet_profiler

ALLOCATION_FAILURES = (
    "CUDA error: out of memory",  # an allocation outside the caching allocator (a kernel's, a context's)
    "CUBLAS_STATUS_ALLOC_FAILED",  # cuBLAS's handle or workspace, at the first matmul of a new shape
    "CUDNN_STATUS_ALLOC_FAILED",  # cuDNN's workspace
    "CUSOLVER_STATUS_ALLOC_FAILED",
    "CUSPARSE_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
)
"""What the plain ``RuntimeError`` of a CUDA library says when its own allocation fails."""
MIB = 2**20


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out: ``torch.OutOfMemoryError`` (the caching allocator's),
    or the plain ``RuntimeError`` of a CUDA library whose own allocation failed (:data:`ALLOCATION_FAILURES`)."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in ALLOCATION_FAILURES)


def try_to_fit(fn: Callable[[], object], device: str | torch.device | None = None) -> tuple[object, str | None]:
    """``(fn(), None)``, or ``(None, why)`` when ``fn`` ran out of memory (:func:`is_out_of_memory`).

    After a failure the memory is handed back (:func:`release_memory`) outside the ``except``
    block: inside it the traceback still holds the failed call's tensors (pytorch/pytorch#18853).
    ``why`` is the first line of the error. Any other error goes up as it is.
    """
    try:
        return fn(), None
    except (torch.OutOfMemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise
        why = str(error).splitlines()[0][:160]
    release_memory(device)
    return None, why


def _check_callable(name: str, fn) -> None:
    if not callable(fn):
        raise TypeError(f"{name}={fn!r} must be callable")


def _profiled_memory(fn: Callable[[], object]):
    """The CPU profiler of one ``fn()`` call, with its memory accounting."""
    with quiet_profiler(), compat.profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return prof


def peak_memory(fn: Callable[[], object], device: str | torch.device | None = None) -> int:
    """Bytes a second ``fn()`` held at its peak beyond what was allocated when it started; the
    first call is a warm-up (see the module docstring for why, and how on a GPU and on a CPU)."""
    _check_callable("fn", fn)
    device = get_device(device, param="device")
    if device.type == "cuda":
        fn()
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - before)

    _profiled_memory(fn)  # the warm-up, profiled: the allocator now reports the frees of what it left
    prof = _profiled_memory(fn)
    held = peak = 0
    for event in sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                        key=lambda e: e.start_ns()):
        held += event.nbytes()
        peak = max(peak, held)
    return peak


def peak_reserved(fn: Callable[[], object], device: str | torch.device | None = None) -> int:
    """Bytes the CUDA caching allocator reserved from the card at the peak of a second ``fn()``, started
    from an empty cache, beyond what it held before: the free memory the call needs (see the module
    docstring). The first call is a warm-up, as in :func:`peak_memory`. CUDA only: a CPU has no cache."""
    _check_callable("fn", fn)
    device = get_device(device, param="device")
    if device.type != "cuda":
        raise ValueError(f"device={str(device)!r}: peak_reserved measures the CUDA caching allocator; "
                         "use peak_memory elsewhere")
    fn()
    synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_reserved(device)
    fn()
    synchronize(device)
    return max(0, torch.cuda.max_memory_reserved(device) - before)


def release_memory(device: str | torch.device | None = None) -> None:
    """Collect garbage and hand the caching allocator's free blocks back (after an OOM)."""
    device = get_device(device, param="device")
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def within_budget(step: Callable[[int], object], budget_bytes: int,
                  device: str | torch.device | None = None) -> Callable[[int], int]:
    """``step`` under a memory budget: a call runs ``step(batch)`` through :func:`peak_memory` (a
    warm-up, then the measured step) and returns its peak in bytes, or raises
    ``torch.OutOfMemoryError`` when the peak exceeds ``budget_bytes`` (a budget, not the device
    running out: the step did run)."""
    _check_callable("step", step)
    budget_bytes = check_int("budget_bytes", budget_bytes)
    device = get_device(device, param="device")

    def budgeted(batch: int) -> int:
        peak = peak_memory(lambda: step(batch), device)
        if peak > budget_bytes:
            raise torch.OutOfMemoryError(
                f"batch {batch}: peak {peak:,} B is over the budget of {budget_bytes:,} B (a budget, not a real OOM)")
        return peak

    return budgeted


@dataclasses.dataclass(frozen=True)
class BatchSearch:
    """What :func:`find_max_batch_size` found: every batch tried (in order) and whether it fit."""

    trials: tuple[tuple[int, bool], ...]
    margin: float
    budget_bytes: int | None
    max_batch: int

    @property
    def largest_fit(self) -> int | None:
        """The largest batch that fit (None: not even the first)."""
        return max((b for b, fit in self.trials if fit), default=None)

    @property
    def first_failure(self) -> int | None:
        """The smallest batch that did not fit (None: every batch up to ``max_batch`` fit)."""
        return min((b for b, fit in self.trials if not fit), default=None)

    @property
    def batch_size(self) -> int | None:
        """The batch to use: the largest that fit, less the margin (at least 1)."""
        largest = self.largest_fit
        return None if largest is None else max(1, math.floor(largest * (1 - self.margin)))

    def __str__(self) -> str:
        limit = (f"budget {self.budget_bytes / MIB:,.1f} MiB (not a real OOM)" if self.budget_bytes is not None
                 else "the device's memory")
        if self.largest_fit is None:
            return f"not even batch {self.trials[0][0]} fits ({limit})"
        beyond = (f"first failure at {self.first_failure:,}" if self.first_failure is not None
                  else f"everything up to max_batch={self.max_batch:,} fit")
        return (f"largest batch that fits: {self.largest_fit:,} ({beyond}; {len(self.trials)} trials, {limit}); "
                f"with a {self.margin:.0%} margin: {self.batch_size:,}")


def _fits(step: Callable[[int], object], batch: int, device: torch.device) -> bool:
    """Whether ``step(batch)`` ran without running out of memory, on a GPU from an empty cache."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return try_to_fit(lambda: step(batch), device)[1] is None


def find_max_batch_size(step: Callable[[int], object], device: str | torch.device | None = None, *,
                        budget_bytes: int | None = None, start: int = 1, max_batch: int = 2**26,
                        margin: float = 0.1) -> BatchSearch:
    """The largest batch ``step(batch)`` runs with, by doubling from ``start`` then bisecting.

    grow: batch = start, 2 start, 4 start, ... until a step runs out of memory (or ``max_batch``)
    bisect: between the last batch that fit and the first that did not, down to one sample
    result: :class:`BatchSearch`; ``.batch_size`` is the largest fit less ``margin`` (a fraction)

    On a GPU every trial starts from an empty cache, so a trial does not depend on those before it.
    ``budget_bytes`` runs every step under :func:`within_budget`: required on a CPU; on a GPU, None
    means the card's memory.
    """
    _check_callable("step", step)
    device = get_device(device, param="device")
    start = check_int("start", start)
    max_batch = check_int("max_batch", max_batch, minimum=start)
    margin = check_number("margin", margin, at_least=0, below=1)
    if budget_bytes is None and device.type != "cuda":
        raise ValueError(f"budget_bytes=None: on {device.type} give a memory budget in bytes "
                         "(only a GPU has an out-of-memory error to find)")
    if budget_bytes is not None:
        budget_bytes = check_int("budget_bytes", budget_bytes)
        step = within_budget(step, budget_bytes, device)
    trials = []
    good, bad, batch = None, None, start
    while bad is None:
        fit = _fits(step, batch, device)
        trials.append((batch, fit))
        if not fit:
            bad = batch
        elif batch == max_batch:
            break
        else:
            good, batch = batch, min(2 * batch, max_batch)
    if good is not None and bad is not None:
        while bad - good > 1:
            middle = (good + bad) // 2
            fit = _fits(step, middle, device)
            trials.append((middle, fit))
            good, bad = (middle, bad) if fit else (good, middle)
    return BatchSearch(tuple(trials), margin, budget_bytes, max_batch)


def check_largest_batch(search: Callable[[Callable[[int], object]], int | None],
                        limits: tuple[int, ...] = (1, 412, 1000, 4096, 70_001)) -> str:
    """A verdict on a search written by hand, ``search(step) -> the largest batch that fits``.

    ``step(batch)`` raises ``torch.OutOfMemoryError`` above a limit known here, one per
    ``limits``. Right means every limit found, trying no more batches than doubling from 1 and
    then bisecting needs (:func:`find_max_batch_size`: 2 log2(limit) + 3 at most). A wrong answer
    is a verdict, not an exception.
    """
    _check_callable("search", search)
    limits = tuple(check_int(f"limits[{i}]", limit) for i, limit in enumerate(limits))
    most = 0
    for limit in limits:
        tried = []

        def step(batch: int, limit: int = limit, tried: list = tried) -> None:
            tried.append(batch)
            if batch > limit:
                raise torch.OutOfMemoryError(f"batch {batch} is over the limit of {limit} (a test, not a real OOM)")
        found = search(step)
        if found != limit:
            return (f"not yet: for a step that fits up to {limit:,} samples your search returned {found!r} "
                    f"(after trying {len(tried)} batches)")
        batches = len(set(tried))
        if batches > 2 * math.log2(limit) + 3:
            return (f"right answers, but slow: {batches} batches tried to find a limit of {limit:,} "
                    f"(doubling, then bisecting, needs at most {2 * math.log2(limit) + 3:.0f})")
        most = max(most, batches)
    return (f"right: your search found all {len(limits)} limits (up to {max(limits):,}), trying at most {most} "
            "batches for each")
