"""Watching PPO from the inside: ``torch.profiler`` over a few iterations (introduced in notebook 06).

:func:`profile_ppo` runs a few PPO iterations under ``torch.profiler`` with a schedule (skip one,
warm up one, record the rest), labels the env step, the rollout and the update with
``record_function``, and writes a trace that Perfetto (ui.perfetto.dev) or ``chrome://tracing``
opens. :func:`top_operators` and :func:`time_shares` read it. :func:`device_timeline` reads one
iteration as a GPU lived it: how many kernels it ran and the share of the iteration it sat idle,
waiting for the host (notebook 12). The view from the outside, sampled utilization, is
``gpu.monitor.UtilizationMonitor``.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, schedule

from ..core import compat
from ..core.checks import check_int
from ..core.device import synchronize
from ..gpu.launches import quiet_profiler
from ..measure.table import Table, format_number

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
    targets = ((learner.env, "step", "env"), (learner, "collect", "rollout"), (learner, "update", "learn"))
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


@dataclasses.dataclass(frozen=True)
class DeviceTimeline:
    """What a GPU did during one PPO iteration, read from ``torch.profiler``'s trace (:func:`device_timeline`)."""

    work_items: int
    """Kernels, copies and fills the GPU ran (those inside CUDA graphs too)."""
    graph_launches: int
    """CUDA graph replays the host asked for: each runs many of the work items with one launch."""
    busy_s: float
    """Seconds during which at least one work item ran (the union of their intervals)."""
    wall_s: float
    """Seconds from the start of the iteration on the host to the end of its last work item."""

    @property
    def idle_share(self) -> float:
        """The share of the iteration the GPU ran nothing: waiting for the host's next launch or read."""
        return max(0.0, 1.0 - self.busy_s / self.wall_s)


def device_timeline(learner) -> DeviceTimeline:
    """Profile one ``learner.iterate()`` on its CUDA device and say how busy the GPU was.

    Prepare the learner first (``warm_up``, and an iteration or two): a first iteration's compile
    or capture is not what this measures. Annotations (``record_function`` ranges, which the trace
    repeats on the device's timeline) are not work items and do not count as busy.
    """
    if learner.device.type != "cuda":
        raise ValueError(f"device_timeline reads a GPU's trace: the learner is on {learner.device}")
    synchronize(learner.device)
    with quiet_profiler(), compat.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.profiler.record_function("iteration"):
            learner.iterate()
        synchronize(learner.device)
    events = list(prof.events())
    start = min(e.time_range.start for e in events if e.name == "iteration" and e.device_type == DeviceType.CPU)
    work = sorted((e.time_range.start, e.time_range.end) for e in events
                  if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                  and e.name not in LABELS)
    if not work:
        raise RuntimeError("the profiler recorded no GPU work (no CUPTI here?)")
    busy, end = 0.0, -float("inf")  # the union of the intervals, in µs
    for lo, hi in work:
        if hi > end:
            busy += hi - max(lo, end)
            end = hi
    launches = sum(e.name.startswith("cudaGraphLaunch") for e in events)
    return DeviceTimeline(len(work), launches, busy / 1e6, (end - start) / 1e6)
