"""The ``replay`` bench suite: every replay buffer sampled, weighed and trained with (notebook 05).

``python -m rlgpu_helpers bench replay`` runs :func:`measure_replay`, three measurements of the
buffers of :mod:`rlgpu_helpers.replay` (by their short names, ``replay.KINDS``):

* ``"replay_sample"``: samples/s against batch size (:func:`sampling_throughput`), each buffer
  filled to ``capacity``, the batch delivered on the learner's device; TorchRL's buffers
  (:data:`TORCHRL`) in the same run when it is installed (extra ``compare``);
* ``"replay_memory"``: the MiB each buffer's storage takes, by place (host, pinned, device, files);
* ``"replay_dqn"``: env steps/s of ``learn.dqn.DQN`` with each buffer: what a buffer costs inside a
  training loop, sharing the step with the env and the network.

On a CPU, ``"tensor"`` and ``"host"`` are the same buffer, so only ``"tensor"`` is measured, and
``"pinned"`` has no stream to prefetch on. :func:`target_checks` states the lesson's targets;
:func:`replay_claim_checks` judges the guide's statements on replay memory (on GPU records).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of, synchronize
from ..core.logs import only_logs_from
from ..gpu.sync import audit_syncs
from ..learn.dqn import DQN, DQNConfig
from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.records import Record, select
from ..measure.table import Table, format_number
from ..measure.timing import rate
from ..replay import KINDS, make_buffer
from ..snake import rules

NAME = "replay_sample"
MEMORY_NAME = "replay_memory"
DQN_NAME = "replay_dqn"

LABELS = {
    "deque": "DequeReplay",
    "arrays": "ArrayReplay",
    "host": "TensorReplayBuffer (pageable host memory)",
    "pinned": "PinnedReplayBuffer",
    "tensor": "TensorReplayBuffer",
    "memmap": "MemmapReplayBuffer",
    "prioritized": "PrioritizedReplayBuffer",
}
"""The variant of each buffer's records."""

TORCHRL = {
    "tensor": "TorchRL ReplayBuffer + LazyTensorStorage",
    "memmap": "TorchRL ReplayBuffer + LazyMemmapStorage",
    "prioritized": "TorchRL PrioritizedReplayBuffer + LazyTensorStorage",
}
"""TorchRL's counterpart of three of our buffers, as record variants."""

OBS_TYPE = "features"
"""The observation the buffers hold: the DQN's default, as the DQN runs here."""

TARGET_BATCH = 256
"""The batch size of the CPU target: TensorReplayBuffer against DequeReplay."""
TARGET_SPEEDUP = 20.0
GPU_TARGET_BATCH = 4096
"""The batch size of the GPU targets and verdicts: GPU-resident and pinned against pageable."""
GPU_TARGETS = {"tensor": 10.0, "pinned": 2.0}
"""On a GPU, samples/s of these buffers against ``"host"`` (pageable) at :data:`GPU_TARGET_BATCH`."""


def default_kinds(device: str | torch.device | None = None) -> tuple[str, ...]:
    """Every buffer, except ``"host"`` where it is the same as ``"tensor"`` (a CPU)."""
    device = get_device(device, param="device")
    return tuple(kind for kind in KINDS if device.type == "cuda" or kind != "host")


def default_batch_sizes() -> tuple[int, ...]:
    return pick(full=(32, 256, 1024, 4096, 16384), quick=(32, 256))


def default_capacity() -> int:
    return pick(full=100_000, quick=5_000)


def torchrl_available() -> bool:
    """Whether TorchRL can be imported (extra ``compare``)."""
    try:
        import torchrl.data  # noqa: F401
    except ImportError:
        return False
    return True


def _obs_shape() -> tuple[int, ...]:
    return rules.observation_shape(OBS_TYPE, 10, 10)


def random_transitions(rows: int, obs_shape, device: torch.device, generator: torch.Generator) -> dict:
    """``rows`` random transitions, as ``add`` takes them: what a buffer holds does not change
    how fast it samples."""
    def uniform(*shape):
        return torch.rand(shape, generator=generator).to(device)
    return {"obs": uniform(rows, *obs_shape),
            "actions": torch.randint(rules.NUM_ACTIONS, (rows,), generator=generator).to(device),
            "rewards": uniform(rows),
            "next_obs": uniform(rows, *obs_shape),
            "terminated": (uniform(rows) < 0.05).float()}


def _fill(add, capacity: int, obs_shape, device: torch.device) -> None:
    """``capacity`` random transitions through ``add(fields)``, in chunks of at most 4,096."""
    generator = torch.Generator().manual_seed(0)
    for start in range(0, capacity, 4096):
        add(random_transitions(min(4096, capacity - start), obs_shape, device, generator))


def _ours(kind: str, capacity: int, obs_shape, device: torch.device):
    buffer = make_buffer(kind, capacity, obs_shape, device)
    _fill(lambda fields: buffer.add(**fields), capacity, obs_shape, device)
    return buffer, buffer.sample


def _torchrl(kind: str, capacity: int, obs_shape, device: torch.device, scratch: str):
    """TorchRL's counterpart of ``kind``: storage where ours keeps it, batches to ``device``."""
    from tensordict import TensorDict
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer

    if kind == "memmap":
        buffer = ReplayBuffer(storage=LazyMemmapStorage(capacity, scratch_dir=scratch))
    elif kind == "prioritized":
        buffer = PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity, device=device))
    else:
        buffer = ReplayBuffer(storage=LazyTensorStorage(capacity, device=device))
    _fill(lambda fields: buffer.extend(TensorDict(fields, batch_size=[fields["obs"].shape[0]])),
          capacity, obs_shape, device)
    return buffer, lambda batch_size: buffer.sample(batch_size).to(device)


def _rate(sample, batch_size: int, device: torch.device) -> tuple[float, float]:
    """Samples/s of ``sample(batch_size)`` and its spread (IQR), runs of about 0.2 s each."""
    return rate(lambda: sample(batch_size), batch_size, pick(full=0.2, quick=0.01), probes=3,
                repeats=pick(full=7, quick=3), device=device)


def sampling_throughput(device: str | torch.device | None = None, *, kinds=None, batch_sizes=None,
                        capacity: int | None = None, torchrl: bool = True, progress: bool = True,
                        machine: str | None = None) -> list[Record]:
    """Samples/s against batch size of each buffer in ``kinds`` (and of TorchRL's, when installed).

    Returns ``"replay_sample"`` records (metric ``"throughput"``, samples/s, params
    ``{"batch_size", "capacity", "device"}``) and, for our buffers, ``"replay_memory"`` records
    (MiB, params ``{"place", "capacity", "device"}``). ``torchrl=False`` leaves TorchRL out. A
    TorchRL buffer that cannot be built here (its compiled extension does not load with this
    torch, say) is left out, and what went wrong is printed.
    """
    device = get_device(device, param="device")
    kinds = default_kinds(device) if kinds is None else check_choices("kinds", kinds, tuple(KINDS))
    batch_sizes = default_batch_sizes() if batch_sizes is None else check_ints("batch_sizes", batch_sizes)
    capacity = default_capacity() if capacity is None else check_int("capacity", capacity)
    label = machine_of(device, machine)
    obs_shape = _obs_shape()
    jobs = [(LABELS[kind], kind, _ours) for kind in kinds]
    if torchrl and torchrl_available():
        jobs += [(TORCHRL[kind], kind, _torchrl) for kind in kinds if kind in TORCHRL]
    records = []
    # TorchRL logs every storage it initializes (INFO, on stdout): keep only its warnings
    with tempfile.TemporaryDirectory(prefix="rlgpu-torchrl-") as scratch, only_logs_from("torchrl", logging.WARNING):
        for variant, kind, build in tqdm(jobs, desc="replay buffers", disable=not progress):
            if build is _torchrl:
                try:
                    buffer, sample = _torchrl(kind, capacity, obs_shape, device, scratch)
                except (ImportError, RuntimeError) as error:
                    print(f"{variant}: not measured, TorchRL could not build it here "
                          f"(torch {torch.__version__}): {str(error).removesuffix(' See warning above.')}")
                    continue
            else:
                buffer, sample = _ours(kind, capacity, obs_shape, device)
            params = {"capacity": capacity, "device": device.type}
            for batch_size in batch_sizes:
                rate, spread = _rate(sample, batch_size, device)
                records.append(Record(NAME, variant, "throughput", rate, "samples/s",
                                      {"batch_size": batch_size, **params}, spread, label))
            if build is _ours:
                for place, nbytes in buffer.memory_bytes().items():
                    records.append(Record(MEMORY_NAME, variant, "memory", nbytes / 2**20, "MiB",
                                          {"place": place, **params}, None, label))
                buffer.close()
            del buffer, sample
    return records


def dqn_throughput(device: str | torch.device | None = None, *, kinds=None, seconds: float | None = None,
                   progress: bool = True, machine: str | None = None, **config) -> list[Record]:
    """Env steps/s of ``learn.dqn.DQN`` with each buffer in ``kinds``, learning from the start.

    Each run trains for ``seconds`` (after one untimed iteration), three times; the record is
    the median (``"replay_dqn"``, steps/s, params ``{"device", "num_envs", "batch_size"}``).
    ``DQNConfig``'s defaults, learning from the first step; ``config`` overrides its fields
    (``num_envs``, ``batch_size``, ...).
    """
    device = get_device(device, param="device")
    kinds = default_kinds(device) if kinds is None else check_choices("kinds", kinds, tuple(KINDS))
    seconds = pick(full=4.0, quick=0.3) if seconds is None else check_number("seconds", seconds, above=0)
    label = machine_of(device, machine)
    records = []
    for kind in tqdm(kinds, desc="DQN with each buffer", disable=not progress):
        settings = DQNConfig(**{"buffer": kind, "device": str(device), "learning_starts": 0,
                                "buffer_size": pick(full=100_000, quick=5_000),
                                "steps_per_iteration": pick(full=32, quick=4), **config})
        learner = DQN(settings)
        learner.iterate()
        rates = []
        for _ in range(3):
            synchronize(device)
            start, steps = time.perf_counter(), learner.env_steps
            while time.perf_counter() - start < seconds:
                learner.iterate()
            synchronize(device)
            rates.append((learner.env_steps - steps) / (time.perf_counter() - start))
        rates.sort()
        learner.buffer.close()
        records.append(Record(DQN_NAME, LABELS[kind], "throughput", rates[1], "steps/s",
                              {"device": device.type, "num_envs": settings.num_envs,
                               "batch_size": settings.batch_size}, rates[2] - rates[0], label))
    return records


def measure_replay(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``replay`` bench suite (see the module docstring): about 3 minutes on 2 CPU cores."""
    device = get_device(device, param="device")
    return sampling_throughput(device, progress=progress) + dqn_throughput(device, progress=progress)


AUDITED = ("tensor", "pinned", "prioritized")
"""The buffers whose hot calls the sync audit checks (the host-storage ones copy a GPU batch to
the host in ``add``, which waits by design)."""


def buffer_sync_table(device: str | torch.device | None = None, *, kinds=AUDITED, batch_size: int = 64) -> Table:
    """The sync audit (``gpu.sync.audit_syncs``) of each buffer's ``add`` and ``sample``, and of
    ``update_priorities`` for the prioritized one: the synchronizations each call makes.

    Each call is audited after one untimed call. On a CPU the audit applies the GPU rules; on CUDA a
    last column counts the runtime calls that make the host wait (:func:`runtime_waits`), which also
    sees a wait on an event (``PinnedReplayBuffer.sample`` waiting for the last ``add``'s copies).
    """
    device = get_device(device, param="device")
    kinds = check_choices("kinds", kinds, tuple(KINDS))
    batch_size = check_int("batch_size", batch_size)
    generator = torch.Generator().manual_seed(0)
    obs_shape = _obs_shape()
    rows = []
    for kind in kinds:
        buffer = make_buffer(kind, 4 * batch_size, obs_shape, device)
        fields = random_transitions(batch_size, obs_shape, device, generator)
        buffer.add(**fields)
        batch = buffer.sample(batch_size)
        calls = {"add": lambda: buffer.add(**fields), "sample": lambda: buffer.sample(batch_size)}
        if kind == "prioritized":
            priorities = torch.rand(batch_size, device=device) + 0.1
            calls["update_priorities"] = lambda: buffer.update_priorities(batch["indices"], priorities)
        for call, fn in calls.items():
            report = audit_syncs(fn, device)
            operators = ", ".join(f"{row.operator} x{row.count}" for row in report.rows)
            row = [LABELS[kind], call, str(report.total), operators or "none", report.method]
            rows.append(row + [runtime_waits(report.runtime_calls)] if device.type == "cuda" else row)
        buffer.close()
    columns = ["buffer", "call", "syncs per call", "operators", "audit method"]
    extra = ["CUDA runtime waits (profiler)"] if device.type == "cuda" else []
    return Table(columns + extra, rows, [False, False, True, False, False] + [False] * len(extra))


def runtime_waits(calls: dict[str, int] | None) -> str:
    """The profiler's count of waiting CUDA runtime calls (``SyncReport.runtime_calls``), as a cell."""
    if calls is None:
        return "profiler could not trace CUDA"
    return ", ".join(f"{name} x{count}" for name, count in sorted(calls.items()) if count) or "none"


def priority_draws_table(priorities: torch.Tensor, sample: dict, *, alpha: float, beta: float) -> Table:
    """Per slot of a prioritized buffer: the formulas beside what ``sample`` drew.

    ``priorities`` holds slot i's priority ``p_i``; ``sample`` is a ``PrioritizedReplayBuffer``
    sample of many draws. The probability ``P(i) = p_i ** alpha / sum_j p_j ** alpha`` stands
    beside the share of draws that picked slot i, and the weight ``(P(i) / min_j P(j)) ** -beta``
    beside the weight the sample gave it ("not drawn" for a slot it never picked).
    """
    if not isinstance(priorities, torch.Tensor) or priorities.dim() != 1 or priorities.numel() == 0:
        raise ValueError(f"priorities={priorities!r} must be a non-empty 1-d tensor")
    if not isinstance(sample, dict) or not {"indices", "weights"} <= set(sample):
        raise ValueError("sample must be a PrioritizedReplayBuffer sample, with 'indices' and 'weights'")
    alpha = check_number("alpha", alpha, at_least=0)
    beta = check_number("beta", beta, at_least=0)
    priorities = priorities.double().cpu()
    indices, weights = sample["indices"].cpu(), sample["weights"].double().cpu()
    slots = priorities.numel()
    if indices.numel() and not 0 <= int(indices.min()) <= int(indices.max()) < slots:
        raise ValueError(f"sample['indices'] reach outside the {slots} slots of priorities")
    expected = priorities**alpha / (priorities**alpha).sum()
    formula = (expected / expected.min()) ** -beta
    observed = torch.bincount(indices, minlength=slots) / max(indices.numel(), 1)
    drawn = torch.full((slots,), float("nan"), dtype=torch.float64).scatter_(0, indices, weights)
    rows = [[str(i), format_number(float(priorities[i])), f"{expected[i]:.4f}", f"{observed[i]:.4f}",
             f"{formula[i]:.4f}", "not drawn" if drawn[i].isnan() else f"{drawn[i]:.4f}"] for i in range(slots)]
    return Table(["slot", "priority", "expected P", "observed share", "weight (formula)", "weight (sampled)"], rows,
                 [True] * 6)


# ---------------------------------------------------------------------------- reading the records

def _rate_at(records: list[Record], variant: str, batch_size: int, machine: str,
             device: str | None = None) -> Record | None:
    where = {} if device is None else {"device": device}
    return next(iter(select(records, variant=variant, machine=machine, batch_size=batch_size, **where)), None)


def sampling_table(records: Sequence[Record]) -> Table:
    """Samples/s per buffer (rows) and batch size (columns), for each machine and device."""
    sampling = select(records, name=NAME)
    batch_sizes = sorted({r.params["batch_size"] for r in sampling})
    rows = []
    for machine, device, variant in dict.fromkeys((r.machine, r.params["device"], r.variant) for r in sampling):
        cells = []
        for batch_size in batch_sizes:
            found = _rate_at(sampling, variant, batch_size, machine, device)
            cells.append(format_number(found.value) if found else "")
        rows.append([machine, device, variant, *cells])
    columns = ["machine", "device", "buffer", *(f"batch {b:,} (samples/s)" for b in batch_sizes)]
    return Table(columns, rows, [False, False, False, *([True] * len(batch_sizes))])


def memory_table(records: Sequence[Record]) -> Table:
    """MiB each buffer's storage takes, by place, and per stored transition (bytes)."""
    memory = select(records, name=MEMORY_NAME)
    rows = [[r.machine, r.variant, r.params["place"], format_number(r.value),
             format_number(r.value * 2**20 / r.params["capacity"])] for r in memory]
    return Table(["machine", "buffer", "where", "storage (MiB)", "per transition (bytes)"], rows,
                 [False, False, False, True, True])


def target_checks(records: Sequence[Record]) -> Table:
    """The lesson's targets against this run's sampling records (one machine).

    * on any machine: ``TensorReplayBuffer`` at least :data:`TARGET_SPEEDUP` x ``DequeReplay``
      at batch :data:`TARGET_BATCH`;
    * each of our buffers at least as fast as its TorchRL counterpart, at every batch size
      measured (when TorchRL was);
    * on a GPU: :data:`GPU_TARGETS` at :data:`GPU_TARGET_BATCH`.
    """
    sampling = select(records, name=NAME)
    rows = []

    def row(target, top, bottom, at_least):
        if top is None or bottom is None:
            rows.append([target, "not measured", ""])
            return
        ratio, spread = record_ratio(top, bottom)
        rows.append([target, f"{format_number(ratio)} ± {format_number(spread)}x",
                     "met" if ratio >= at_least else "missed"])

    for machine, device in dict.fromkeys((r.machine, r.params["device"]) for r in sampling):
        on = f" ({device}, {machine})"
        def at(kind_label, batch_size):
            return _rate_at(sampling, kind_label, batch_size, machine, device)
        row(f"{LABELS['tensor']} ≥ {TARGET_SPEEDUP:g}x {LABELS['deque']}, batch {TARGET_BATCH}{on}",
            at(LABELS["tensor"], TARGET_BATCH), at(LABELS["deque"], TARGET_BATCH), TARGET_SPEEDUP)
        batch_sizes = sorted({r.params["batch_size"] for r in sampling if r.machine == machine})
        for kind, theirs in TORCHRL.items():
            for batch_size in batch_sizes:
                if at(theirs, batch_size) is not None:
                    row(f"{LABELS[kind]} ≥ {theirs}, batch {batch_size:,}{on}",
                        at(LABELS[kind], batch_size), at(theirs, batch_size), 1.0)
        if device == "cuda":
            for kind, at_least in GPU_TARGETS.items():
                row(f"{LABELS[kind]} ≥ {at_least:g}x {LABELS['host']}, batch {GPU_TARGET_BATCH:,}{on}",
                    at(LABELS[kind], GPU_TARGET_BATCH), at(LABELS["host"], GPU_TARGET_BATCH), at_least)
    return Table(["target", "measured (ratio of samples/s)", "outcome"], rows, [False, True, False])


NO_GPU_RECORD = ("no GPU record, from this run or in data/reference/: both buffers are the same "
                 "host memory on a CPU (the GPU sweep's `bench replay` measures it)")


def replay_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """The guide's statements on replay memory, judged on each GPU machine's sampling records.

    * "pinned-replay": ``PinnedReplayBuffer`` over ``TensorReplayBuffer`` in pageable host
      memory, samples/s at :data:`GPU_TARGET_BATCH`;
    * "replay-on-gpu": ``TensorReplayBuffer`` on the GPU over the same pageable one.

    ``records`` come first, then ``reference`` (a machine is judged once). A CPU answers
    neither: where no GPU record is found, the check says so and has no verdict.
    """
    sampling = select(list(records) + list(reference), name=NAME)
    machines = list(dict.fromkeys(r.machine for r in sampling if r.params.get("device") == "cuda"))
    checks = []
    for key, kind in (("pinned-replay", "pinned"), ("replay-on-gpu", "tensor")):
        claim = CLAIMS[key]
        for machine in machines:
            top = _rate_at(sampling, LABELS[kind], GPU_TARGET_BATCH, machine, "cuda")
            bottom = _rate_at(sampling, LABELS["host"], GPU_TARGET_BATCH, machine, "cuda")
            if top is None or bottom is None:
                checks.append(ClaimCheck(claim, f"{machine}: no {LABELS[kind]} and pageable records at "
                                                f"batch {GPU_TARGET_BATCH:,}"))
                continue
            ratio, spread = record_ratio(top, bottom)
            checks.append(ClaimCheck(claim, f"{LABELS[kind]} over {LABELS['host']}, batch "
                                            f"{GPU_TARGET_BATCH:,}, cuda, {machine}", judge(claim, ratio, spread)))
        if not machines:
            checks.append(ClaimCheck(claim, NO_GPU_RECORD))
    return checks


def dqn_table(records: Sequence[Record]) -> Table:
    """DQN env steps/s with each buffer, and against ``TensorReplayBuffer`` on the same machine."""
    dqn = select(records, name=DQN_NAME)
    rows = []
    for r in dqn:
        base = next((b for b in dqn if b.machine == r.machine and b.params == r.params
                     and b.variant == LABELS["tensor"]), None)
        rows.append([r.machine, r.params["device"], r.variant, format_number(r.value),
                     f"{r.value / base.value:.2f}x" if base else ""])
    return Table(["machine", "device", "buffer", "DQN (env steps/s)", f"vs {LABELS['tensor']}"], rows,
                 [False, False, False, True, True])
