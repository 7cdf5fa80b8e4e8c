"""The ``ddp`` bench suite: PPO's env steps/s and time per update by number of processes (introduced in notebook 10).

``python -m rlgpu_helpers bench ddp`` runs :func:`measure_ddp`. Each point is a real ``torchrun``
of W ranks of :class:`~rlgpu_helpers.learn.ppo_ddp.DistributedPPO` (the ``rank measure``
subcommand), every rank with the same number of games (weak scaling, as CleanRL's
multi-GPU PPO: W ranks collect W times the transitions per iteration). Rank 0 times an iteration,
a rollout and an update (median of repeats, IQR as the spread); the all-reduces are in the update.

* On CPUs: 1, 2 and 4 processes of one thread each (gloo), and one process with every core. A
  process needs a core: past the machine's cores, more processes only share them.
* On a GPU: one process on the GPU (NCCL). NCCL needs one GPU per process, so a one-GPU machine
  cannot show multi-GPU scaling: it shows what DDP costs one process, and its CPU's scaling.

Records: name ``"ddp"``, variant ``"<device>, <T> thread(s) per process"``, metrics ``"env steps/s"``
(all ranks' steps), ``"time per update"`` and ``"time per rollout"`` (ms), params ``{"processes",
"envs_per_process", "threads_per_process", "device", "backend"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tqdm.auto import tqdm

from ..core.checks import check_ints
from ..core.config import pick
from ..core.device import get_device, logical_cores, machine_of
from ..gpu.distributed import run_json
from ..measure.claims import CLAIMS, judge, record_ratio
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number

NAME = "ddp"


def _variant(device: str, threads: int) -> str:
    return f"{device}, {threads} thread{'s' if threads > 1 else ''} per process"


def _records(result: dict, machine: str) -> list[Record]:
    params = {"processes": result["world_size"], "envs_per_process": result["envs_per_process"],
              "threads_per_process": result["threads_per_process"], "device": result["device"],
              "backend": result["backend"]}
    variant = _variant(result["device"], result["threads_per_process"])
    steps = result["env_steps_per_iteration"]
    rate = steps / result["iteration_s"]
    return [Record(NAME, variant, "env steps/s", rate, "steps/s", params, rate * result["iteration_iqr_s"]
                   / result["iteration_s"], machine),
            Record(NAME, variant, "time per update", result["update_s"] * 1e3, "ms", params,
                   result["update_iqr_s"] * 1e3, machine),
            Record(NAME, variant, "time per rollout", result["rollout_s"] * 1e3, "ms", params,
                   result["rollout_iqr_s"] * 1e3, machine)]


def measure_processes(device, processes=(1, 2), *, threads: int = 1, num_envs: int = 64, num_steps: int = 16,
                      repeats: int = 3, timeout_s: float = 300.0, progress: bool = False) -> list[Record]:
    """One torchrun of W ranks for each W in ``processes``, each rank with ``threads`` threads and
    ``num_envs`` games on ``device``; the records of rank 0's timings."""
    device = get_device(device, param="device")
    processes = check_ints("processes", processes)
    machine = machine_of(device)
    records = []
    for count in tqdm(processes, desc=f"ddp on {device.type}", disable=not progress):
        result = run_json(count, ["measure", "--device", device.type, "--num-envs", num_envs, "--num-steps",
                                  num_steps, "--repeats", repeats], threads=threads, timeout_s=timeout_s)
        records += _records(result, machine)
    return records


def measure_ddp(device=None, progress: bool = True, save: Callable[[list[Record]], object] | None = None
                ) -> list[Record]:
    """The ``ddp`` suite (see the module docstring); about 1 minute on a 2-core CPU at full size.

    ``save``: called with each torchrun's records as soon as it ends, so that a run cut off keeps
    those of the torchruns before (the GPU sweep passes it).
    """
    device = get_device(device, param="device")
    size = {"num_envs": pick(full=256, quick=32), "num_steps": pick(full=32, quick=8), "repeats": pick(full=5, quick=2)}
    runs = [("cpu", count, 1, size) for count in pick(full=(1, 2, 4), quick=(1, 2))]
    cores = logical_cores() or 1
    if cores > 1:
        runs.append(("cpu", 1, cores, size))
    if device.type == "cuda":
        runs.append((device, 1, 1, {**size, "num_envs": pick(full=8192, quick=256)}))
    records = []
    for where, count, threads, sizes in tqdm(runs, desc="ddp", disable=not progress):
        made = measure_processes(where, (count,), threads=threads, **sizes)
        records += made
        if save is not None:
            save(made)
    return records


def scaling_table(records: Sequence[Record]) -> Table:
    """Env steps/s and time per update by processes, per machine and variant, each against 1 process."""
    groups = {}
    for r in check_records(records):
        if r.name == NAME:
            groups.setdefault((r.machine, r.variant), {}).setdefault(r.params["processes"], {})[r.metric] = r
    rows = []
    for (machine, variant), by_count in groups.items():
        base = by_count.get(1, {})
        for count in sorted(by_count):
            row = [machine, variant, str(count)]
            for metric in ("env steps/s", "time per update"):
                record, first = by_count[count].get(metric), base.get(metric)
                row.append(format_number(record.value) if record else "")
                row.append(f"{record.value / first.value:.2f}x" if record and first else "")
            rate, first = by_count[count].get("env steps/s"), base.get("env steps/s")
            row.append(f"{rate.value / first.value / count:.0%}" if rate and first else "")
            rows.append(row)
    columns = ["machine", "processes run as", "processes", "env steps/s (all ranks)", "vs 1 process",
               "time per update (ms)", "vs 1 process", "scaling efficiency (speedup / processes)"]
    return Table(columns, rows, [False, False, True, True, True, True, True, True])


def against_one_thread(records: Sequence[Record]) -> list[str]:
    """Each of this run's CPU points as env steps/s against one single-thread process, one line each.

    Several single-thread processes also get their share of linear scaling (speedup / processes);
    a process of several threads is set beside the same baseline, which it competes with.
    """
    rates = {(r.variant, r.params["processes"]): r.value for r in check_records(records)
             if r.name == NAME and r.metric == "env steps/s" and r.params["device"] == "cpu"}
    single = rates.get((_variant("cpu", 1), 1))
    if single is None:
        raise ValueError("records hold no 'env steps/s' of one single-thread CPU process, the baseline")
    lines = []
    for (variant, count), rate in sorted(rates.items()):
        share = f" ({rate / single / count:.0%} of linear)" if variant == _variant("cpu", 1) and count > 1 else ""
        lines.append(f"{variant}, {count} process{'es' if count > 1 else ''}: {rate:,.0f} env steps/s, "
                     f"{rate / single:.2f}x one single-thread process{share}")
    return lines


def proof_table(result: dict) -> Table:
    """:func:`~rlgpu_helpers.learn.ppo_ddp.ddp_proof`'s result: one row per way of computing the gradient."""
    rows = [[way["way"], f"{way['relative_difference']:.2e}", f"{way['max_difference_between_ranks']:.1e}",
             str(way["allreduces"])] for way in result["ways"]]
    columns = [f"gradient on {result['world_size']} ranks x {result['minibatch_per_rank']} transitions",
               f"vs 1 process on all {result['minibatch']} (max |diff| / max |grad|)",
               "largest difference between ranks", "gradient all-reduces"]
    return Table(columns, rows, [False, True, True, True])


GPU_CLAIMS = {"ddp-further-speedup": 2, "ddp-diminishing-beyond-4": 8}
"""Each multi-GPU claim and the number of GPUs it needs measured."""


def claim_verdicts(records: Sequence[Record]) -> Table:
    """The guide's multi-GPU claims beside GPU records of several processes, where any exist.

    ``ddp-further-speedup``: env steps/s of the most GPU processes measured against one, on the
    same machine. ``ddp-diminishing-beyond-4``: 8 GPUs against 4. Without such records the row
    says "not measured" (CPU processes are not GPUs: they are not judged against these claims).
    """
    rates = {}
    for r in check_records(records):
        if r.name == NAME and r.metric == "env steps/s" and r.params["device"] == "cuda":
            rates.setdefault(r.machine, {})[r.params["processes"]] = r
    rows = []
    for key, needed in GPU_CLAIMS.items():
        claim = CLAIMS[key]
        shown, outcome = f"not measured: no records of {needed} or more GPU processes", "not measured"
        for machine, by_count in rates.items():
            top = max(by_count)
            low = 4 if key == "ddp-diminishing-beyond-4" else 1
            if top >= needed and low in by_count:
                verdict = judge(claim, *record_ratio(by_count[top], by_count[low]))
                shown = f"{format_number(verdict.measured)} ± {format_number(verdict.spread)} x ({top} vs {low}, {machine})"
                outcome = verdict.outcome
        rows.append([claim.quote, claim.about, claim.figure, shown, outcome])
    return Table(["claim (guide's words)", "about", "claimed", "measured", "verdict"], rows,
                 [False, False, True, True, False])


def gpu_processes_measured(records: Sequence[Record]) -> int:
    """The most GPU processes any ``ddp`` record was measured with (0: none)."""
    return max([r.params["processes"] for r in records if r.name == NAME and r.params["device"] == "cuda"],
               default=0)
