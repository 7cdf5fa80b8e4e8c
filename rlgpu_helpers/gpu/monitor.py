"""Watching a training run from the outside: sampled utilization (introduced in notebook 06).

* :class:`UtilizationMonitor` samples in a background thread while your code runs. On a GPU
  it asks NVML (package ``nvidia-ml-py``, imported as ``pynvml``) for "utilization" and used
  memory. NVML's utilization is **the share of the last sample period (1/6 s to 1 s, by GPU)
  in which at least one kernel was running**: one tiny kernel on one of 132 SMs counts as 100%.
  It says the GPU was never idle, not that its SMs were busy. On a CPU (or a GPU without NVML) it
  samples this process with ``psutil``: CPU time used as a share of all logical cores, and the
  resident memory.

The view from the inside, ``torch.profiler`` over PPO's iterations, is in ``learn/profile.py``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Sequence

import psutil
import torch

from ..core.checks import check_number
from ..core.device import get_device, logical_cores

MIB = 2**20
NVML_MEANING = "NVML utilization: % of the sample period in which at least one kernel ran (not SMs busy)"
PSUTIL_MEANING = "psutil: this process's CPU time as % of all logical cores"


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading: seconds since the monitor started, utilization in %, memory in MiB."""

    time_s: float
    utilization_pct: float
    memory_mib: float


def _nvml():
    """The ``pynvml`` module of ``nvidia-ml-py``, or None where it is not installed."""
    with warnings.catch_warnings():  # the deprecated `pynvml` package warns on import
        warnings.simplefilter("ignore")
        try:
            import pynvml
        except ImportError:
            return None
    return pynvml


def nvml_handle(nvml, device: torch.device):
    """NVML's handle of the CUDA ``device``, found by its UUID.

    NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``, whereas torch's
    ``cuda:i`` is the i-th *visible* GPU: with ``CUDA_VISIBLE_DEVICES=2``, ``cuda:0`` is NVML's
    GPU 2. The UUID names the same GPU for both.
    """
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


class UtilizationMonitor:
    """Samples utilization and memory every ``interval`` seconds in a background thread.

    Use it as a context manager (``with UtilizationMonitor(device) as monitor: train()``) or with
    :meth:`start` and :meth:`stop`; ``monitor.samples`` holds the readings, ``monitor.source``
    what they mean (NVML on a GPU where ``nvidia-ml-py`` is installed, else ``psutil``).
    """

    def __init__(self, device: str | torch.device | None = None, interval: float = 0.1):
        self.device = get_device(device, param="device")
        self.interval = check_number("interval", interval, above=0)
        self.samples: list[Sample] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._nvml = _nvml() if self.device.type == "cuda" else None
        self.source = NVML_MEANING if self._nvml is not None else PSUTIL_MEANING

    def _reader(self):
        """A function returning (utilization %, memory MiB) now: NVML's, or psutil's where NVML fails."""
        if self._nvml is not None:
            nvml = self._nvml
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as error:
                return self._without_nvml(f"NVML did not start ({error})")
            try:
                handle = nvml_handle(nvml, self.device)
            except nvml.NVMLError as error:
                nvml.nvmlShutdown()
                return self._without_nvml(f"NVML does not know {self.device} ({error})")
            return lambda: (float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                            nvml.nvmlDeviceGetMemoryInfo(handle).used / MIB)

        process, cores = psutil.Process(), logical_cores() or 1
        process.cpu_percent(None)  # the first call only starts the clock
        return lambda: (process.cpu_percent(None) / cores, process.memory_info().rss / MIB)

    def _without_nvml(self, reason: str):
        """psutil's reader instead of NVML's, saying why."""
        print(f"{reason}: measuring with psutil instead.")
        self._nvml, self.source = None, PSUTIL_MEANING
        return self._reader()

    def _run(self, read, started: float) -> None:
        while not self._stop.wait(self.interval):
            utilization, memory = read()
            self.samples.append(Sample(time.perf_counter() - started, utilization, memory))

    def start(self) -> UtilizationMonitor:
        """Start sampling (a second start while running is an error)."""
        if self._thread is not None:
            raise RuntimeError("this monitor is already running: stop() it first")
        self.samples, read = [], self._reader()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(read, time.perf_counter()),
                                        name="UtilizationMonitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        """Stop sampling, wait for the thread to end, and return the samples."""
        if self._thread is None:
            raise RuntimeError("this monitor is not running: start() it first")
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
        return self.samples

    def __enter__(self) -> UtilizationMonitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def plot_utilization(samples: Sequence[Sample], source: str, title: str = "Utilization during training"):
    """Utilization (%) and memory (MiB) against time, one panel each; returns the Figure."""
    import matplotlib.pyplot as plt

    samples = list(samples)
    if not samples or not all(isinstance(s, Sample) for s in samples):
        raise ValueError(f"samples={samples[:3]!r}... must be a non-empty list of Sample")
    times = [s.time_s for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True, layout="constrained")
    top.plot(times, [s.utilization_pct for s in samples], marker=".")
    top.set_ylim(0, 105)
    top.set_ylabel("utilization (%)")
    top.set_title(f"{title}\n{source}", fontsize="medium")
    bottom.plot(times, [s.memory_mib for s in samples], marker=".", color="tab:orange")
    bottom.set_ylim(0, max(s.memory_mib for s in samples) * 1.1)
    bottom.set_ylabel("memory used (MiB)")
    bottom.set_xlabel("time since the monitor started (s)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    plt.close(fig)
    return fig


# ---------------------------------------------------------------------------- the profiler
