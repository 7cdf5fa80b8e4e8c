"""Watching PPO from the inside: ``torch.profiler`` over a few iterations (introduced in notebook 06).

:func:`profile_ppo` runs a few PPO iterations under ``torch.profiler`` with a schedule (skip one,
warm up one, record the rest), labels the env step, the rollout and the update with
``record_function``, and writes a trace that Perfetto (ui.perfetto.dev) or ``chrome://tracing``
opens. :func:`top_operators` and :func:`time_shares` read it. The view from the outside, sampled
utilization, is ``gpu.monitor.UtilizationMonitor``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, schedule

from ..core import compat
from ..core.checks import check_int
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
