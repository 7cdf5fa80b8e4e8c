"""The ``batch_size`` bench suite: samples/s, peak memory and the largest batch (notebook 06).

``python -m rlgpu_helpers bench batch_size`` runs :func:`measure_batch_size`, three measurements
of one update step (:class:`UpdateStep`) of the course's networks (:data:`NETWORKS`):

* ``"batch_update"``: samples/s and peak memory against the batch size, powers of two
  (:func:`batch_sweep`). The peak is :func:`~rlgpu_helpers.gpu.memory.peak_memory`'s: the CUDA
  allocator's count on a GPU, the profiler's memory accounting on a CPU. On a GPU also the
  memory the caching allocator reserved from the card (:func:`~rlgpu_helpers.gpu.memory.peak_reserved`);
* ``"max_batch"``: the largest batch that fits (:func:`max_batch_search`), found by
  ``gpu.memory.find_max_batch_size``: on a GPU against the card's real memory, on a CPU against
  a memory budget (:func:`default_budget_bytes`). Beside it, the limit predicted from the sweep's
  memory per sample and the memory available (:func:`predicted_max_batch`); the target is that the
  two agree within 10%;
* ``"utilization"``: NVML utilization (on a GPU; CPU % with psutil on a CPU) averaged over a short
  PPO training run (:func:`training_utilization`).

:func:`saturation_batch` marks where samples/s stops growing, and :func:`batch_claim_checks` puts
the guides' statements beside GPU records (from this run or ``data/reference/``). Two lessons
explain the sweep's shape: :func:`phase_peaks` (which part of a step holds its peak memory) and
:func:`allocator_experiment` (on a CPU, glibc's ``malloc`` handing large blocks back to the OS
makes every step fault its memory in again).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from ..core.checks import check_choice, check_choices, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.memory import MIB, find_max_batch_size, peak_memory, peak_reserved, release_memory, try_to_fit
from ..gpu.monitor import UtilizationMonitor
from ..learn.nets import ActorCritic
from ..learn.ppo import PPO
from ..learn.settings import ppo_settings
from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.plots import plot_records
from ..measure.records import Record, check_records, select
from ..measure.table import Table, format_number
from ..measure.timing import rate, time_callable
from ..snake import rules

NAME = "batch_update"
MAX_NAME = "max_batch"
UTILIZATION_NAME = "utilization"
PHASE_NAME = "update_phases"
ALLOCATOR_NAME = "allocator"

NETWORKS = {
    "mlp": "ActorCritic MLP (11 features, 64 wide: PPO's)",
    "cnn": "ActorCritic CNN (3x10x10 grid, 128 wide)",
}
"""The networks measured, by short name: the record variants."""
_SHAPES = {"mlp": (rules.observation_shape("features", 10, 10), 64),
           "cnn": (rules.observation_shape("grid", 10, 10), 128)}

TARGET_RATIO = 0.10
"""How far the batch found may be from the predicted limit (a fraction of it)."""
SATURATION = 0.10
"""Samples/s within this fraction of the best counts as "stopped growing"."""
PEAK_METRICS = ("peak memory", "peak reserved")
"""The sweep's memory metrics: what the step's tensors hold at its peak, and (on a GPU) what the allocator reserved."""


class UpdateStep:
    """``step(batch)``: one update of ``network`` on ``batch`` random samples, on ``device``.

    The shape of PPO's minibatch update: both heads forward, a loss (cross-entropy of the policy
    against random actions plus squared error of the value: a stand-in for the clipped objective,
    which adds only elementwise work), backward, gradient clipping, an Adam step. The model and
    Adam's state are built (one step at batch 2) before any step is measured.
    """

    def __init__(self, network: str, device: str | torch.device | None = None, seed: int = 0):
        check_choice("network", network, tuple(NETWORKS))
        self.network, self.device = network, get_device(device, param="device")
        obs_shape, hidden = _SHAPES[network]
        torch.manual_seed(seed)
        self.obs_shape = obs_shape
        self.model = ActorCritic(obs_shape, hidden=hidden).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self(2)
        self.optimizer.zero_grad(set_to_none=True)

    def loss(self, batch: int) -> torch.Tensor:
        """The forward pass on ``batch`` random samples: the loss, whose graph keeps the activations."""
        obs = torch.rand(batch, *self.obs_shape, device=self.device)
        actions = torch.randint(rules.NUM_ACTIONS, (batch,), device=self.device)
        returns = torch.randn(batch, device=self.device)
        logits, value = self.model(obs)
        return F.cross_entropy(logits, actions) + 0.5 * F.mse_loss(value, returns)

    def backward(self, batch: int) -> None:
        """Forward and backward: new gradients in ``.grad`` (the previous ones freed first)."""
        loss = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    def optimizer_step(self) -> None:
        """Clip the gradients and take the Adam step."""
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        self.optimizer.step()

    def __call__(self, batch: int) -> None:
        self.backward(batch)
        self.optimizer_step()


def default_batch_sizes(network: str, device: str | torch.device | None = None) -> tuple[int, ...]:
    """Powers of two, further on a GPU; the CNN stops earlier on a CPU (each step takes long)."""
    device = get_device(device, param="device")
    top = {("mlp", "cuda"): 22, ("cnn", "cuda"): 18, ("mlp", "cpu"): 16, ("cnn", "cpu"): 11}
    largest = top.get((network, device.type), top[(network, "cpu")])
    return pick(full=tuple(2**k for k in range(4, largest + 1)), quick=(16, 128, 1024))


def default_budget_bytes() -> int:
    """The CPU's memory budget for the search: 256 MiB (16 MiB in quick mode)."""
    return pick(full=256, quick=16) * MIB


def _rate(step: UpdateStep, batch: int, device: torch.device) -> tuple[float, float]:
    """Samples/s of ``step(batch)`` and its spread (IQR), runs of about 0.2 s each."""
    return rate(lambda: step(batch), batch, pick(full=0.2, quick=0.02), warmup=1, repeats=pick(full=5, quick=3),
                device=device)


def batch_sweep(device: str | torch.device | None = None, *, networks=tuple(NETWORKS), batch_sizes=None,
                progress: bool = True, machine: str | None = None) -> list[Record]:
    """Samples/s and peak memory of one update at each batch size, per network.

    Returns ``"batch_update"`` records, params ``{"batch_size", "device"}``: metric
    ``"throughput"`` (samples/s, with its IQR), ``"peak memory"`` (MiB) and on a GPU ``"peak reserved"``
    (MiB, what the card must give: :func:`~rlgpu_helpers.gpu.memory.peak_reserved`). A batch that runs
    out of device memory ends its network's sweep (printed).
    """
    device = get_device(device, param="device")
    networks = check_choices("networks", networks, tuple(NETWORKS))
    if batch_sizes is not None:
        batch_sizes = check_ints("batch_sizes", batch_sizes)
    label = machine_of(device, machine)
    jobs = [(network, batch) for network in networks
            for batch in (batch_sizes or default_batch_sizes(network, device))]
    records, steps, too_big = [], {}, set()
    for network, batch in tqdm(jobs, desc="update step by batch size", disable=not progress):
        if network in too_big:
            continue
        if network not in steps:
            steps[network] = UpdateStep(network, device)
        step = steps[network]
        measured, why = try_to_fit(lambda: (_rate(step, batch, device), *_peaks(step, batch, device)), device)
        if why is not None:
            too_big.add(network)
            print(f"{NETWORKS[network]}: batch {batch:,} ran out of {device.type} memory ({why}); "
                  "no larger batch measured")
            continue
        (rate, spread), *peaks = measured
        params = {"batch_size": batch, "device": device.type}
        records.append(Record(NAME, NETWORKS[network], "throughput", rate, "samples/s", params, spread, label))
        for metric, peak in zip(PEAK_METRICS, peaks):
            records.append(Record(NAME, NETWORKS[network], metric, peak / MIB, "MiB", params, None, label))
    return records


def _peaks(step: UpdateStep, batch: int, device: torch.device) -> tuple[int, ...]:
    """Bytes of :data:`PEAK_METRICS` for ``step(batch)``: the peak everywhere, the reserved memory on a GPU."""
    call = functools.partial(step, batch)
    if device.type != "cuda":
        return (peak_memory(call, device),)
    return peak_memory(call, device), peak_reserved(call, device)


PHASES = {
    "forward": lambda step, batch: step.loss(batch),
    "forward and backward": lambda step, batch: step.backward(batch),
    "clip and Adam step": lambda step, batch: step.optimizer_step(),
    "whole step": lambda step, batch: step(batch),
}
"""The parts of an update whose peaks :func:`phase_peaks` measures, each a call ``(step, batch)``."""


def phase_peaks(network: str = "cnn", batch_sizes=None, device: str | torch.device | None = None, *,
                machine: str | None = None) -> list[Record]:
    """Where an update's peak memory is: the peak of each of :data:`PHASES`, per batch.

    The forward pass keeps activations in proportion to the batch (backward frees them as it
    goes); clipping and Adam's step work on the parameters, so their temporaries do not depend on
    the batch. A step's peak is the larger of the two, not their sum. Returns ``"update_phases"``
    records: metric the phase, MiB, params ``{"batch_size", "device"}``.
    """
    check_choice("network", network, tuple(NETWORKS))
    device = get_device(device, param="device")
    batch_sizes = check_ints("batch_sizes", batch_sizes or pick(full=(16, 64, 256, 1024), quick=(16, 64, 256)))
    step, label = UpdateStep(network, device), machine_of(device, machine)
    records = []
    for batch in batch_sizes:
        params = {"batch_size": batch, "device": device.type}
        for phase, run in PHASES.items():
            peak = peak_memory(functools.partial(run, step, batch), device)
            records.append(Record(PHASE_NAME, NETWORKS[network], phase, peak / MIB, "MiB", params, None, label))
    return records


def phase_table(records: Sequence[Record]) -> Table:
    """Per machine, network and batch: the peak of each phase (MiB), and which phase holds the step's."""
    chosen = select(records, name=PHASE_NAME)
    keys = sorted({(r.machine, r.variant, r.params["batch_size"]) for r in chosen})
    rows = []
    for machine, variant, batch in keys:
        peaks = {r.metric: r.value for r in chosen
                 if (r.machine, r.variant, r.params["batch_size"]) == (machine, variant, batch)}
        parts = {phase: peaks[phase] for phase in ("forward and backward", "clip and Adam step") if phase in peaks}
        rows.append([machine, variant, f"{batch:,}", *(format_number(peaks[p]) if p in peaks else "" for p in PHASES),
                     max(parts, key=parts.get) if parts else ""])
    columns = ["machine", "network", "batch (samples)", *(f"{phase} (MiB)" for phase in PHASES), "the step's peak is in"]
    return Table(columns, rows, [False, False, True, *(True for _ in PHASES), False])


KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**40)}
"""Environment variables that make glibc's ``malloc`` keep freed memory in the process: serve
blocks up to 1 GiB from its heap (not from fresh ``mmap`` pages) and never hand the heap's top back."""
MMAP_THRESHOLD_MAX = 32 * MIB
"""glibc's largest automatic ``mmap`` threshold on 64-bit Linux: a freed block above it goes back to the OS."""


def _minor_page_faults() -> int | None:
    """This process's minor page faults so far (None where ``resource`` is missing: Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def fault_rates(network: str, batch_sizes, repeats: int) -> list[tuple[int, float, float, float | None]]:
    """``(batch, samples/s, IQR, minor page faults per sample)`` of the CPU update, in this process."""
    step = UpdateStep(check_choice("network", network, tuple(NETWORKS)), "cpu")
    rows = []
    for batch in check_ints("batch_sizes", batch_sizes):
        step(batch)
        before = _minor_page_faults()
        timing = time_callable(functools.partial(step, batch), warmup=1, repeats=check_int("repeats", repeats),
                               device="cpu")  # the default, a GPU where there is one, would sync it in the count
        after = _minor_page_faults()
        faults = None if before is None else (after - before) / ((1 + repeats) * batch)
        rows.append((batch, *timing.rate(batch), faults))
    return rows


def allocator_experiment(network: str = "cnn", batch_sizes=None, *, repeats: int | None = None,
                         machine: str | None = None) -> list[Record]:
    """The CPU update's samples/s and page faults with glibc's default ``malloc`` (this process)
    and with :data:`KEEP_FREED_MEMORY` (a child process, where the variables take effect at start).

    By default glibc hands a freed block above its ``mmap`` threshold (at most
    :data:`MMAP_THRESHOLD_MAX`) straight back to the OS; the next step's block of the same size
    then gets fresh pages, and the kernel zero-fills each 4 KiB page at its first touch (a minor
    page fault). Returns ``"allocator"`` records: ``"throughput"`` (samples/s, IQR) and ``"page
    faults"`` (per sample), variants ``"glibc default"`` and ``"glibc keeping freed memory"``;
    only the first where the C library is not glibc (printed).
    """
    check_choice("network", network, tuple(NETWORKS))
    batch_sizes = check_ints("batch_sizes", batch_sizes or pick(full=(1024, 2048), quick=(2048,)))
    repeats = pick(full=3, quick=1) if repeats is None else check_int("repeats", repeats)
    runs = {"glibc default": fault_rates(network, batch_sizes, repeats)}
    if platform.libc_ver()[0] != "glibc":
        print(f"the C library here is not glibc ({platform.libc_ver()[0] or 'unknown'}): "
              f"{' and '.join(KEEP_FREED_MEMORY)} would change nothing, so the comparison is skipped")
    else:
        code = ("import json; from rlgpu_helpers.bench.batch_size import fault_rates; "
                f"print(json.dumps(fault_rates({network!r}, {list(batch_sizes)!r}, {repeats})))")
        child = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                               env={**os.environ, **KEEP_FREED_MEMORY})
        if child.returncode != 0:
            raise RuntimeError(f"the child process with {KEEP_FREED_MEMORY} failed: {child.stderr.strip()[-500:]}")
        runs["glibc keeping freed memory"] = [tuple(row) for row in json.loads(child.stdout.splitlines()[-1])]
    label, records = machine_of("cpu", machine), []
    for variant, rows in runs.items():
        for batch, samples_per_s, spread, faults in rows:
            params = {"batch_size": batch, "device": "cpu", "network": network}
            records.append(Record(ALLOCATOR_NAME, variant, "throughput", samples_per_s, "samples/s", params, spread,
                                  label))
            if faults is not None:
                records.append(Record(ALLOCATOR_NAME, variant, "page faults", faults, "per sample", params, None,
                                      label))
    return records


def allocator_table(records: Sequence[Record]) -> Table:
    """Per machine, allocator setting and batch: samples/s (± IQR) and page faults per sample."""
    rates = sorted(select(records, name=ALLOCATOR_NAME, metric="throughput"),
                   key=lambda r: (r.machine, r.params["network"], r.params["batch_size"], r.variant))
    rows = []
    for r in rates:
        faults = next((o.value for o in select(records, name=ALLOCATOR_NAME, metric="page faults")
                       if (o.machine, o.variant, o.params) == (r.machine, r.variant, r.params)), None)
        rows.append([r.machine, r.params["network"], f"{r.params['batch_size']:,}", r.variant, format_number(r.value),
                     format_number(r.spread or 0), "" if faults is None else format_number(faults)])
    columns = ["machine", "network", "batch (samples)", "malloc", "throughput (samples/s)", "IQR (samples/s)",
               "minor page faults per sample"]
    return Table(columns, rows, [False, False, True, False, True, True, True])


def _of(records, name: str, variant: str, metric: str, machine: str | None = None) -> list[Record]:
    return sorted((r for r in check_records(records) if (r.name, r.variant, r.metric) == (name, variant, metric)
                   and (machine is None or r.machine == machine)), key=lambda r: r.params["batch_size"])


def saturation_batch(records: Sequence[Record], variant: str, machine: str | None = None,
                     tolerance: float = SATURATION) -> int | None:
    """The smallest batch whose samples/s is within ``tolerance`` of the best measured (None: no records)."""
    tolerance = check_number("tolerance", tolerance, at_least=0, below=1)
    rates = _of(records, NAME, variant, "throughput", machine)
    if not rates:
        return None
    best = max(r.value for r in rates)
    return next(r.params["batch_size"] for r in rates if r.value >= (1 - tolerance) * best)


def memory_per_sample(records: Sequence[Record], variant: str, machine: str | None = None,
                      metric: str = "peak memory") -> tuple[float, float]:
    """``metric`` (one of :data:`PEAK_METRICS`) as ``fixed + per_sample * batch``: a least-squares line
    through the largest half of the batches (where the fixed costs, and on a GPU the 2 and 20 MiB
    buffers the allocator gives tensors under 10 MiB, no longer dominate). Returns (fixed bytes, bytes
    per sample)."""
    check_choice("metric", metric, PEAK_METRICS)
    peaks = _of(records, NAME, variant, metric, machine)
    if len(peaks) < 2:
        raise ValueError(f"need {metric} records at two batch sizes or more of {variant!r}, got {len(peaks)}")
    chosen = peaks[len(peaks) // 2:] if len(peaks) >= 4 else peaks[-2:]
    slope, intercept = np.polyfit([r.params["batch_size"] for r in chosen], [r.value * MIB for r in chosen], 1)
    return float(intercept), float(slope)


def predicted_max_batch(sweep: Sequence[Record], variant: str, available_bytes: int,
                        machine: str | None = None) -> float | None:
    """The largest batch of ``variant`` the sweep predicts: (available - fixed) / bytes per sample
    (:func:`memory_per_sample`), or None without peaks at two batch sizes.

    Where the sweep has ``"peak reserved"`` (a GPU's), the line is through it, not through ``"peak
    memory"``: a step fits when the card can give what the caching allocator reserves, which at the
    peak of a large step is more than its tensors hold (``gpu.memory.peak_reserved`` says why).
    Predicted from the tensors alone, the limit came out 12% above the largest batch an H200 fit.
    """
    available_bytes = check_number("available_bytes", available_bytes, above=0)
    for metric in reversed(PEAK_METRICS):
        if len(_of(sweep, NAME, variant, metric, machine)) >= 2:
            fixed, per_sample = memory_per_sample(sweep, variant, machine, metric)
            return (available_bytes - fixed) / per_sample
    return None


def _available_bytes(device: torch.device, budget_bytes: int | None) -> int:
    """What a step may use: the budget, or the GPU's free memory plus the allocator's idle cache."""
    if budget_bytes is not None:
        return budget_bytes
    release_memory(device)
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def max_batch_search(device: str | torch.device | None = None, sweep: Sequence[Record] = (), *,
                     networks=tuple(NETWORKS), budget_bytes: int | None = None, progress: bool = True,
                     machine: str | None = None) -> list[Record]:
    """The largest batch of each network's update that fits, and the limit the sweep predicts.

    Searches with ``find_max_batch_size`` (on a CPU under ``budget_bytes``, default
    :func:`default_budget_bytes`; on a GPU the real memory unless a budget is given). With
    ``sweep`` records of this machine, also predicts the limit (:func:`predicted_max_batch`).
    Returns ``"max_batch"`` records (samples; metrics ``"largest fit"``, ``"with margin"``,
    ``"predicted"``; params ``{"limit", "device", "trials"}``).
    """
    device = get_device(device, param="device")
    networks = check_choices("networks", networks, tuple(NETWORKS))
    if budget_bytes is None and device.type != "cuda":
        budget_bytes = default_budget_bytes()
    if budget_bytes is not None:
        budget_bytes = check_int("budget_bytes", budget_bytes)
    label = machine_of(device, machine)
    limit = f"budget {budget_bytes / MIB:,.0f} MiB" if budget_bytes is not None else "device memory"
    records = []
    for network in tqdm(networks, desc="largest batch that fits", disable=not progress):
        step = UpdateStep(network, device)
        available = _available_bytes(device, budget_bytes)
        search = find_max_batch_size(step, device, budget_bytes=budget_bytes, start=16, max_batch=2**27)
        params = {"limit": limit, "device": device.type, "trials": len(search.trials)}
        if search.largest_fit is None:
            print(f"{NETWORKS[network]}: {search}")
            continue
        records.append(Record(MAX_NAME, NETWORKS[network], "largest fit", search.largest_fit, "samples", params,
                              None, label))
        records.append(Record(MAX_NAME, NETWORKS[network], "with margin", search.batch_size, "samples", params,
                              None, label))
        mine = [r for r in check_records(sweep) if r.machine == label and r.params.get("device") == device.type]
        predicted = predicted_max_batch(mine, NETWORKS[network], available)
        if predicted is not None:
            records.append(Record(MAX_NAME, NETWORKS[network], "predicted", predicted, "samples", params, None,
                                  label))
        del step
        release_memory(device)
    return records


def max_batch_table(records: Sequence[Record]) -> Table:
    """Per machine and network: the limit, the largest batch found, the prediction, how far apart."""
    found = select(records, name=MAX_NAME, metric="largest fit")
    rows = []
    for r in found:
        same = {o.metric: o.value for o in check_records(records) if o.name == MAX_NAME and o.machine == r.machine
                and o.variant == r.variant and o.params == r.params}
        predicted = same.get("predicted")
        gap = f"{100 * (r.value / predicted - 1):+.1f}" if predicted else "no sweep to predict from"
        within = ("yes" if abs(r.value / predicted - 1) <= TARGET_RATIO else "no") if predicted else ""
        rows.append([r.machine, r.variant, r.params["limit"], f"{r.value:,.0f}", f"{same.get('with margin', 0):,.0f}",
                     f"{predicted:,.0f}" if predicted else "", gap, within, str(r.params["trials"])])
    columns = ["machine", "network", "limit", "largest fit (samples)", "less the margin (samples)",
               "predicted from the sweep (samples)", "found vs predicted (%)", f"within {TARGET_RATIO:.0%}",
               "trials"]
    return Table(columns, rows, [False, False, False, True, True, True, True, False, True])


def sweep_table(records: Sequence[Record]) -> Table:
    """Per machine, network and batch: samples/s (± IQR), peak memory, and memory per sample."""
    rows = []
    for r in sorted(select(records, name=NAME, metric="throughput"),
                    key=lambda r: (r.machine, r.variant, r.params["batch_size"])):
        peak = next((o.value for o in records if o.name == NAME and o.metric == "peak memory"
                     and o.machine == r.machine and o.variant == r.variant and o.params == r.params), None)
        batch = r.params["batch_size"]
        rows.append([r.machine, r.variant, f"{batch:,}", format_number(r.value), format_number(r.spread or 0),
                     format_number(peak) if peak else "", format_number(peak * MIB / batch) if peak else ""])
    columns = ["machine", "network", "batch (samples)", "throughput (samples/s)", "IQR (samples/s)",
               "peak memory (MiB)", "peak per sample (bytes)"]
    return Table(columns, rows, [False, False, True, True, True, True, True])


def plot_sweep(records: Sequence[Record], metric: str, this_machine: str | None = None):
    """``plot_records`` of one metric against the batch, with a dotted line where each of
    ``this_machine``'s networks stops growing (:func:`saturation_batch`)."""
    check_choices("metric", metric, ("throughput", "peak memory"))
    chosen = select(records, name=NAME, metric=metric)
    title = {"throughput": "One update step: samples/s against batch size",
             "peak memory": "One update step: peak memory against batch size"}[metric]
    fig = plot_records(chosen, "batch_size", xlabel="batch size (samples)", title=title, this_machine=this_machine)
    ax = fig.axes[0]
    mine = [line for line in ax.get_lines() if str(line.get_label()).startswith(f"{this_machine} (this machine)")]
    for index, line in enumerate(mine):
        variant = next(v for v in NETWORKS.values() if v in str(line.get_label()))
        knee = saturation_batch(records, variant, this_machine)
        if knee is not None:
            ax.axvline(knee, color=line.get_color(), linestyle=":", linewidth=1.5)
            ax.annotate(f" stops growing: {knee:,}", (knee, 0.97 - 0.07 * index), xycoords=("data", "axes fraction"),
                        fontsize="small", color=line.get_color(), ha="left", va="top")
    return fig


def training_utilization(device: str | torch.device | None = None, *, seconds: float | None = None,
                         interval: float = 0.1, machine: str | None = None, **config):
    """Train PPO for ``seconds`` under a :class:`~rlgpu_helpers.gpu.monitor.UtilizationMonitor`.

    PPO's settings: ``ppo_settings(device, overrides=config)``. Returns the
    monitor's samples, what they mean, and a ``"utilization"`` record (mean %, its IQR;
    params ``{"device", "source", "num_envs"}``).
    """
    device = get_device(device, param="device")
    seconds = pick(full=10.0, quick=1.0) if seconds is None else check_number("seconds", seconds, above=0)
    learner = PPO(ppo_settings(device, overrides=config))
    learner.iterate()
    with UtilizationMonitor(device, interval) as monitor:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            learner.iterate()
    values = [s.utilization_pct for s in monitor.samples]
    if len(values) < 2:
        raise RuntimeError(f"the monitor took {len(values)} samples in {seconds} s: use a smaller interval")
    q1, _, q3 = statistics.quantiles(values, n=4)
    source = "nvml" if device.type == "cuda" and "NVML" in monitor.source else "psutil"
    record = Record(UTILIZATION_NAME, "PPO training", "mean utilization", statistics.fmean(values), "%",
                    {"device": device.type, "source": source, "num_envs": learner.config.num_envs}, q3 - q1,
                    machine_of(device, machine))
    return monitor.samples, monitor.source, record


def measure_batch_size(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``batch_size`` bench suite (see the module docstring)."""
    device = get_device(device, param="device")
    sweep = batch_sweep(device, progress=progress)
    _, _, utilization = training_utilization(device)
    return sweep + max_batch_search(device, sweep, progress=progress) + [utilization]


# ---------------------------------------------------------------------------- the guides' statements

_GPU_MODELS = {"batch-rtx-3060-3070": ("3060", "3070"), "batch-rtx-3080-3090": ("3080", "3090"),
               "batch-rtx-4090": ("4090",), "batch-a100": ("a100",)}
"""The claims about one GPU model, and what its machine label contains."""
SMALL_BATCH = 64
"""The small batch of "larger batches better utilize GPU"."""
NOT_ON_GPU = "not measured: a GPU statement, and no GPU record in this run or in data/reference/"


def batch_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """The guide's batch sizes per GPU, "larger batches better utilize GPU" and the 70-90%
    utilization, each beside the GPU records that answer it (``device == "cuda"``).

    * per GPU model: :func:`saturation_batch` of PPO's MLP on a machine of that model;
    * larger batches: samples/s at the largest batch measured over batch :data:`SMALL_BATCH`,
      PPO's MLP, per GPU machine;
    * utilization: the mean NVML utilization of a PPO run, per GPU machine.
    A CPU record answers none of them (a CPU has no GPU utilization to compare).
    """
    everything = [r for r in check_records(list(records) + list(reference)) if r.params.get("device") == "cuda"]
    machines = list(dict.fromkeys(r.machine for r in everything))
    mlp = NETWORKS["mlp"]
    checks = []
    for key, models in _GPU_MODELS.items():
        claim = CLAIMS[key]
        matching = [m for m in machines if any(model in m for model in models)]
        for machine in matching:
            knee = saturation_batch(everything, mlp, machine)
            if knee is not None:
                checks.append(ClaimCheck(claim, f"{mlp}, {machine}", judge(claim, knee, 0.0)))
        if not any(c.claim is claim for c in checks):
            checks.append(ClaimCheck(claim, f"not measured: no GPU record with {' or '.join(models)} in its name"))
    claim = CLAIMS["larger-batches-utilize"]
    for machine in machines:
        rates = _of(everything, NAME, mlp, "throughput", machine)
        small = next((r for r in rates if r.params["batch_size"] == SMALL_BATCH), None)
        if small is not None and rates[-1] is not small:
            checks.append(ClaimCheck(claim, f"{mlp}, batch {rates[-1].params['batch_size']:,} over {SMALL_BATCH}, "
                                     f"{machine}", judge(claim, *record_ratio(rates[-1], small))))
    if not any(c.claim is claim for c in checks):
        checks.append(ClaimCheck(claim, NOT_ON_GPU))
    claim = CLAIMS["utilization-70-90"]
    for r in everything:
        if r.name == UTILIZATION_NAME and r.params.get("source") == "nvml":
            checks.append(ClaimCheck(claim, f"PPO, {r.params['num_envs']:,} games, {r.machine}",
                                     judge(claim, max(r.value, 1e-9), r.spread or 0.0)))
    if not any(c.claim is claim for c in checks):
        checks.append(ClaimCheck(claim, NOT_ON_GPU + " (CPU % from psutil is not GPU utilization)"))
    return checks
