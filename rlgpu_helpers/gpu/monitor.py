"""Watching a training run: sampled utilization, and the profiler (introduced in notebook 06).

Two ways to see whether the hardware is busy, from the outside and from the inside:

* :class:`UtilizationMonitor` samples in a background thread while your code runs. On a GPU
  it asks NVML (package ``nvidia-ml-py``, imported as ``pynvml``) for "utilization" and used
  memory. NVML's utilization is **the share of the last sample period (1/6 s to 1 s, by GPU)
  in which at least one kernel was running**: one tiny kernel on one of 132 SMs counts as 100%.
  It says the GPU was never idle, not that its SMs were busy. On a CPU (or a GPU without NVML) it
  samples this process with ``psutil``: CPU time used as a share of all logical cores, and the
  resident memory.
* :func:`profile_ppo` runs a few PPO iterations under ``torch.profiler`` with a schedule (skip
  one, warm up one, record the rest), labels the env step, the rollout and the update with
  ``record_function``, and writes a trace that Perfetto (ui.perfetto.dev) or ``chrome://tracing``
  opens. :func:`top_operators` and :func:`time_shares` read it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import psutil
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, schedule

from ..core import compat
from ..core.checks import check_int, check_number
from ..core.device import get_device, logical_cores
from ..measure.table import Table, format_number
from .launches import quiet_profiler

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

LABELS = ("iteration", "rollout", "env", "learn")
"""The ``record_function`` ranges :func:`profile_ppo` puts around each part of an iteration."""


def _labelled(fn, label: str):
    """``fn`` run inside ``record_function(label)``."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return run


def profile_ppo(learner, iterations: int = 3, trace_path: str | Path | None = None, *, wait: int = 1,
                warmup: int = 1) -> torch.profiler.profile:
    """Profile ``wait + warmup + iterations`` iterations of a ``learn.ppo.PPO``; record ``iterations``.

    label: the env step ("env"), the rollout around it ("rollout"), the update ("learn"), each
           iteration as a whole ("iteration"): this learner's methods, wrapped on the instance
    record: CPU activity, and CUDA activity on a GPU
    trace: written to ``trace_path`` (Chrome trace JSON) when given
    The wrapped methods are restored afterwards. Returns the profiler (``key_averages()`` etc.).
    """
    iterations = check_int("iterations", iterations)
    wait, warmup = check_int("wait", wait, 0), check_int("warmup", warmup, 0)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if learner.device.type == "cuda" else [])
    targets = ((learner.env, "step", "env"), (learner, "_collect", "rollout"), (learner, "_update", "learn"))
    for owner, method, label in targets:
        setattr(owner, method, _labelled(getattr(owner, method), label))
    try:
        with quiet_profiler(), compat.profile(activities=activities,
                                       schedule=schedule(wait=wait, warmup=warmup, active=iterations)) as prof:
            for _ in range(wait + warmup + iterations):
                with torch.profiler.record_function("iteration"):
                    learner.iterate()
                prof.step()
    finally:
        for owner, method, _ in targets:
            delattr(owner, method)
    if trace_path is not None:
        Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
        with quiet_profiler():
            prof.export_chrome_trace(str(trace_path))
    return prof


def time_shares(prof) -> Table:
    """The host time of the recorded iterations split into env, acting, learning and the rest.

    acting = rollout - env (the policy's forward pass, sampling, storing, GAE); other = iteration
    - rollout - learn (on a GPU, mostly the host waiting for the device at the one read per
    iteration). On a GPU the ranges time the host, which queues work ahead of the device.
    """
    host = dict.fromkeys(LABELS, 0.0)  # µs; the host's ranges only (a GPU trace repeats them on the device)
    for event in prof.events():
        if event.name in host and event.device_type == DeviceType.CPU:
            host[event.name] += event.cpu_time_total
    missing = [label for label, total in host.items() if total == 0]
    if missing:
        raise ValueError(f"the profile holds no {missing} ranges: profile it with profile_ppo")
    parts = {"env (VecSnake.step)": host["env"], "acting (policy, sampling, storage, GAE)": host["rollout"] - host["env"],
             "learning (update epochs)": host["learn"],
             "other (the host read, bookkeeping)": host["iteration"] - host["rollout"] - host["learn"]}
    whole = host["iteration"]
    rows = [[part, format_number(us / 1e3), f"{100 * us / whole:.1f}"] for part, us in parts.items()]
    return Table(["part of an iteration", "host time (ms)", "share (%)"], rows, [False, True, True])


def top_operators(prof, limit: int = 10) -> Table:
    """The operators with the most self time (device time on a GPU, else CPU), and their shares."""
    limit = check_int("limit", limit)
    averages = [a for a in prof.key_averages() if a.key not in LABELS and not a.key.startswith("ProfilerStep")]
    on_device = any(a.self_device_time_total > 0 for a in averages)
    self_time = (lambda a: a.self_device_time_total) if on_device else (lambda a: a.self_cpu_time_total)
    total = sum(self_time(a) for a in averages) or 1.0
    where = "device" if on_device else "CPU"
    rows = [[a.key, str(a.count), format_number(self_time(a) / 1e3), f"{100 * self_time(a) / total:.1f}"]
            for a in sorted(averages, key=self_time, reverse=True)[:limit]]
    return Table(["operator", "calls", f"self {where} time (ms)", f"share of all {where} time (%)"], rows,
                 [False, True, True, True])
