"""Timing a piece of work honestly: warm-up, device synchronization, repeats, median.

Introduced in notebook 00; every benchmark in the course times its work with :func:`time_callable`.

GPU calls return before the work is done, the first calls of anything pay one-time costs, and a
shared machine is noisy. So :func:`time_callable` runs untimed warm-up calls, waits for the
device before and after each timed run, repeats the run, and returns a :class:`Timing` whose
median and interquartile range (IQR) shrug off a disturbed run.
"""

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from ..core.checks import check_int, check_number
from ..core.device import get_device, synchronize
from .table import format_number


def _format_seconds(seconds: float) -> str:
    for scale, unit in ((1, "s"), (1e3, "ms"), (1e6, "µs")):
        if seconds * scale >= 1:
            return f"{format_number(seconds * scale)} {unit}"
    return f"{format_number(seconds * 1e9)} ns"


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call over repeated runs, with the statistics benchmarks report."""

    times: tuple[float, ...]

    def __post_init__(self):
        if not self.times or any(t < 0 for t in self.times):
            raise ValueError(f"times={self.times!r} must be a non-empty sequence of non-negative seconds")

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the runs."""
        q1, q3 = np.percentile(self.times, [25, 75])
        return float(q3 - q1)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def rate(self, work: float) -> tuple[float, float]:
        """``work`` per second at the median time, and the interquartile range of that rate.

        For example ``timing.rate(2 * n**3 / 1e12)`` gives TFLOP/s for an n x n matmul.
        """
        check_number("work", work, above=0)
        rates = work / np.asarray(self.times)
        q1, q3 = np.percentile(rates, [25, 75])
        return float(np.median(rates)), float(q3 - q1)

    def __str__(self) -> str:
        return (f"median {_format_seconds(self.median)} (IQR {_format_seconds(self.iqr)}, "
                f"min {_format_seconds(self.min)}, max {_format_seconds(self.max)}; {len(self.times)} runs)")


def time_callable(fn: Callable[[], object], *, warmup: int = 1, repeats: int = 5, number: int = 1,
                  device: str | torch.device | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed runs of ``number`` calls each.

    Returns seconds *per call*. A run of several calls times work too short for one call to be
    measured well, and lets GPU calls queue back to back as they do in a training loop.
    The device (default: the best available, as in ``get_device()``) is synchronized before
    the first timed run and after each one, so queued GPU work is counted. Warm-up calls pay
    one-time costs (memory allocation, kernel selection, caches) that would skew the first run.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats, 1)
    check_int("number", number, 1)
    device = get_device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / number)
    return Timing(tuple(times))


def time_sized(fn: Callable[[], object], run_s: float, *, repeats: int = 5, warmup: int | None = None,
               probes: int = 1, device: str | torch.device | None = None) -> Timing:
    """Time ``fn()`` in runs of about ``run_s`` seconds each: probe once, then size the runs.

    One warm-up call and ``probes`` timed calls estimate the time of a call; that sets
    ``number``, the calls per run, so that each run lasts about ``run_s`` (work too short to be
    timed alone is repeated). Then :func:`time_callable` with ``warmup`` untimed calls (default:
    one run's worth, at most 100) and ``repeats`` runs of ``number`` calls.
    """
    check_number("run_s", run_s, above=0)
    probe = time_callable(fn, warmup=1, repeats=probes, device=device).median
    number = max(1, math.ceil(run_s / max(probe, 1e-9)))
    warmup = min(number, 100) if warmup is None else warmup
    return time_callable(fn, warmup=warmup, repeats=repeats, number=number, device=device)


def rate(fn: Callable[[], object], work: float, run_s: float, **options) -> tuple[float, float]:
    """``work`` per second of ``fn()``, the median over runs, and its IQR: :func:`time_sized`
    (``options`` go to it), then :meth:`Timing.rate`. ``rate(step, num_envs, 0.2)`` gives steps/s."""
    return time_sized(fn, run_s, **options).rate(work)
