"""The ``precision`` bench suite: speed, memory and learning in each precision (notebook 08).

``python -m rlgpu_helpers bench precision`` runs :func:`measure_precision`, two measurements:

* ``"precision_step"`` and ``"precision_memory"`` (:func:`step_records`): one training step of
  the Snake actor-critic (``gpu.precision.TrainStep``) at hidden widths from the Snake net's 64
  up to 4,096, in every precision the device has (``gpu.precision.available_precisions``): the
  step time (ms) and its memory: the most it holds at any moment (``gpu.memory.peak_memory``: the
  CUDA allocator's peak, or the CPU allocator's as the profiler counts it) plus the weights and
  Adam's moments it keeps between steps. A precision a CPU only emulates (fp16 without AMX-FP16) is measured at the
  small widths only, where its step still takes a moment;
* the same two measurements at the capstone PPO's own net and batches (:func:`batch_records`):
  acting's batch (``num_envs``) and the update's minibatch, where the activations dominate the
  memory; :func:`batch_table` shows them, and :func:`capstone_precision_table` the capstone's
  env steps/s with and without its chosen precision (``bench capstone`` records);
* ``"precision_ppo"`` (:func:`ppo_records`): PPO (:func:`ppo_config`, the start preset) trained
  for the same env steps from the same seed in each of :data:`LEARNING_VARIANTS` (the bf16 ones
  where the device multiplies bf16 natively): fp32, bf16 autocast around each forward pass, and
  the whole run inside one bf16 autocast region (the mistake); the mean score at the end and env
  steps/s, with the learning curves for plotting.

:func:`precision_claim_checks` judges the guides' statements on mixed precision, and
:func:`target_checks` the lesson's GPU target (bf16 at least twice fp32 from width 1,024).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_ints, check_seed
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.memory import peak_memory
from ..gpu.precision import (
    PRECISIONS,
    PrecisionPolicy,
    autocast,
    available_precisions,
    device_traits,
)
from ..learn.ppo import PPO, PPOConfig
from ..learn.train_step import ScalerStep, TrainStep, step_flops
from ..learn.training import train
from ..learn.settings import ppo_settings
from ..learn.tune import CAPSTONE_OBS
from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.records import Record, check_records, select
from ..measure.table import Table, format_number
from ..measure.timing import time_sized
from .ablation import ABLATION, BASELINE
from .time_to_score import chosen_on_file

NAME = "precision_step"
MEMORY_NAME = "precision_memory"
PPO_NAME = "precision_ppo"
MEMORY_METRIC = "peak memory"
"""The memory of a step: what it holds at its peak (``gpu.memory.peak_memory``) plus the weights and
Adam's moments it keeps between steps (``TrainStep.standing_bytes``)."""
EMULATED_MAX_HIDDEN = 256
"""The widest net a precision the device only emulates is measured at (fp16 on most CPUs)."""
TARGET_HIDDEN, TARGET_SPEEDUP = 1024, 2.0
"""The lesson's GPU target: bf16 at least ``TARGET_SPEEDUP`` x fp32 from this width up."""
SIXTEEN_BIT = ("bf16", "fp16")
LEARNING_VARIANTS = {
    "fp32": "fp32",
    "bf16": "bf16 autocast around each forward pass (PPOConfig.precision)",
    "bf16 whole run": "the whole run inside one bf16 autocast region (the mistake)",
}
"""How :func:`ppo_runs` can train PPO: its variant names and what each one does."""


def default_hiddens() -> tuple[int, ...]:
    return pick(full=(64, 256, 1024, 4096), quick=(64, 256))


def default_batch_size(device: str | torch.device | None = None) -> int:
    """4,096 on a GPU (a smaller batch leaves it idle: ``bench.batch_size``), 256 on a CPU (128 in quick mode)."""
    return 4096 if get_device(device, param="device").type == "cuda" else pick(full=256, quick=128)


def step_records(device: str | torch.device | None = None, *, hiddens=None, batch_size: int | None = None,
                 precisions=None, progress: bool = True, machine: str | None = None) -> list[Record]:
    """Step time (``"precision_step"``, ms) and memory (``"precision_memory"``, MiB) of a
    ``TrainStep`` for each width in ``hiddens`` and each precision (default: all the device has).

    Params: ``{"hidden", "batch_size", "device"}``, and for memory ``"standing_mib"`` too (the
    weights and Adam's moments, :data:`MEMORY_METRIC`); the variant is the precision. Each time is
    the median of runs of about 0.1 s (spread: the IQR).
    """
    device = get_device(device, param="device")
    traits = device_traits(device)
    hiddens = default_hiddens() if hiddens is None else check_ints("hiddens", hiddens)
    batch_size = default_batch_size(device) if batch_size is None else check_int("batch_size", batch_size)
    have = available_precisions(traits)
    precisions = have if precisions is None else check_choices("precisions", precisions, have)
    emulated = {"bf16": not traits.bf16_native, "fp16": not traits.fp16_native}
    label, records, skipped = machine_of(device, machine), [], set()
    jobs = [(hidden, precision) for hidden in hiddens for precision in precisions]
    for hidden, precision in tqdm(jobs, desc="precision x width", disable=not progress):
        if emulated.get(precision) and hidden > EMULATED_MAX_HIDDEN:
            skipped.add(precision)
            continue
        step = TrainStep(precision, hidden, batch_size, device)
        timing = time_sized(step, pick(full=0.1, quick=0.01), repeats=pick(full=5, quick=3), device=device)
        params = {"hidden": hidden, "batch_size": batch_size, "device": device.type}
        records.append(Record(NAME, precision, "step time", timing.median * 1e3, "ms", params, timing.iqr * 1e3, label))
        standing = step.standing_bytes()
        peak = peak_memory(step, device) + standing
        records.append(Record(MEMORY_NAME, precision, MEMORY_METRIC, peak / 2**20, "MiB",
                              {**params, "standing_mib": standing / 2**20}, None, label))
        del step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for precision in sorted(skipped):
        print(f"{precision}: measured only up to width {EMULATED_MAX_HIDDEN} on {device.type}: this device "
              f"emulates it, so one step of a wider net takes far longer than fp32's")
    return records


def ppo_batches(device: str | torch.device | None = None, records=None) -> tuple[int, dict[str, int]]:
    """The width of the capstone PPO's net on this device, and the two batches it runs that net on.

    ``"acting"``: one forward pass per env step, on ``num_envs`` observations; ``"update
    minibatch"``: forward and backward on ``num_envs * num_steps / num_minibatches`` transitions.
    The settings are the capstone's on file for this machine (``time_to_score.chosen_on_file``
    in ``records``, default ``data/reference/``), else the ones it starts from (``obs=CAPSTONE_OBS``).
    """
    device = get_device(device, param="device")
    config = ppo_settings(device, obs=CAPSTONE_OBS, overrides=chosen_on_file(device, records) or {})
    return config.hidden, {"acting": config.num_envs,
                           "update minibatch": config.num_envs * config.num_steps // config.num_minibatches}


def batch_records(device: str | torch.device | None = None, *, progress: bool = True, machine: str | None = None,
                  records=None) -> list[Record]:
    """:func:`step_records` of the capstone PPO's net at its two batches (:func:`ppo_batches`).

    In fp32 and the 16-bit formats the device has (fp16 only where it multiplies fp16 natively);
    each record's params add ``"batch_of"``: ``"acting"`` or ``"update minibatch"``.
    """
    device = get_device(device, param="device")
    traits = device_traits(device)
    have = available_precisions(traits)
    precisions = [p for p in ("fp32", *SIXTEEN_BIT) if p in have and (p != "fp16" or traits.fp16_native)]
    hidden, batches = ppo_batches(device, records)
    measured = []
    for role, batch in batches.items():
        for record in step_records(device, hiddens=(hidden,), batch_size=batch, precisions=precisions,
                                   progress=progress, machine=machine):
            record.params["batch_of"] = role
            measured.append(record)
    return measured


def batch_table(records: Sequence[Record]) -> Table:
    """Per machine and batch of :func:`batch_records`: each precision's step time (and speedup over
    fp32), fp32's memory and the share of it held by the weights and Adam's moments, and each 16-bit
    precision's memory (fp32's over it)."""
    steps = [r for r in select(records, name=NAME) if "batch_of" in r.params]
    memory = [r for r in select(records, name=MEMORY_NAME) if "batch_of" in r.params]
    sixteen = [p for p in SIXTEEN_BIT if any(r.variant == p for r in steps)]
    rows = []
    for key in dict.fromkeys((r.machine, r.params["device"], r.params["batch_of"]) for r in steps):
        def find(group, variant, key=key):
            return next((r for r in group if (r.machine, r.params["device"], r.params["batch_of"]) == key
                         and r.variant == variant), None)

        base, base_memory = find(steps, "fp32"), find(memory, "fp32")
        if base is None or base_memory is None:
            continue
        times, sizes = [], []
        for precision in sixteen:
            fast, small = find(steps, precision), find(memory, precision)
            times.append(f"{format_number(fast.value)} ({base.value / fast.value:.2f}x)" if fast else "")
            sizes.append(f"{format_number(small.value)} ({base_memory.value / small.value:.2f}x)" if small else "")
        share = base_memory.params["standing_mib"] / base_memory.value
        rows.append([*key, f"{base.params['batch_size']:,}", f"{base.params['hidden']:,}", format_number(base.value),
                     *times, format_number(base_memory.value), f"{share:.0%}", *sizes])
    columns = ["machine", "device", "batch of", "rows", "width", "fp32 step (ms)",
               *(f"{p} step (ms, speedup)" for p in sixteen), "fp32 memory (MiB)", "weights + Adam (share)",
               *(f"{p} memory (MiB, fp32 over it)" for p in sixteen)]
    return Table(columns, rows, [False, False, False, True, True, True, *([True] * len(sixteen)), True, True,
                                 *([True] * len(sixteen))])


def capstone_precision_table(records: Sequence[Record]) -> Table:
    """Per machine with a capstone ablation on file (``bench capstone``): PPO's env steps/s in the
    precision the capstone chose and with notebook 08 switched off (fp32, all else the same)."""
    runs = select(records, name=ABLATION, metric="throughput")
    rows = []
    for machine in dict.fromkeys(r.machine for r in runs):
        mine = [r for r in runs if r.machine == machine]
        chosen = max((r for r in mine if r.variant == BASELINE), key=lambda r: r.date, default=None)
        off = max((r for r in mine if r.variant.startswith("08")), key=lambda r: r.date, default=None)
        if chosen is None or off is None:
            continue
        rows.append([machine, f"{chosen.params['num_envs']:,}", chosen.params["precision"], format_number(chosen.value),
                     off.params["precision"], format_number(off.value), f"{chosen.value / off.value:.2f}x"])
    if not rows:
        rows.append(["no capstone ablation with notebook 08 switched off in these records", "", "", "", "", "", ""])
    return Table(["machine", "games (acting batch)", "chosen", "env steps/s", "08 off", "env steps/s",
                  "chosen over 08 off"], rows, [False, True, False, True, False, True, True])


def learning_variants(device: str | torch.device | None = None) -> tuple[str, ...]:
    """fp32, and the bf16 variants where the device multiplies bf16 natively (fp16 would need a GradScaler in PPO's update)."""
    return tuple(LEARNING_VARIANTS) if device_traits(device).bf16_native else ("fp32",)


def default_ppo_steps(device: str | torch.device | None = None) -> int:
    """Env steps per PPO run: enough to see learning, within the notebook's budget."""
    on_gpu = get_device(device, param="device").type == "cuda"
    return pick(full=3_000_000 if on_gpu else 240_000, quick=16_384)


def default_seeds() -> tuple[int, ...]:
    """Seeds per variant: three at full size (to see how much seeds alone differ), one in quick mode."""
    return pick(full=(0, 1, 2), quick=(0,))


def ppo_config(device: str | torch.device | None = None, seed: int = 0, precision: str = "fp32") -> PPOConfig:
    """The PPO of the comparison: the start preset on a GPU, a smaller rollout on a CPU (32 steps on both)."""
    device = get_device(device, param="device")
    return ppo_settings(device, envs=None if device.type == "cuda" else 256,
                        overrides={"num_steps": 32, "seed": seed, "precision": precision})


def ppo_runs(device: str | torch.device | None = None, *, variants=None, steps: int | None = None,
             seeds=None, progress: bool = True) -> dict:
    """Train ``ppo_config(device, seed)`` for ``steps`` env steps per seed in each of ``variants``.

    Returns ``{variant: [TrainingResult per seed]}``. ``"fp32"`` and ``"bf16"`` set
    ``PPOConfig.precision``, which autocasts each forward pass on its own. ``"bf16 whole run"``
    trains the fp32 config inside one bf16 autocast region held open for the whole run
    (``gpu.precision.autocast`` around ``train``): acting, the update and every optimizer step in
    the same region.
    """
    device = get_device(device, param="device")
    variants = learning_variants(device) if variants is None else check_choices(
        "variants", variants, tuple(LEARNING_VARIANTS))
    steps = default_ppo_steps(device) if steps is None else check_int("steps", steps)
    seeds = default_seeds() if seeds is None else tuple(check_ints("seeds", seeds, 0))
    results = {}
    for variant in variants:
        results[variant] = []
        for seed in seeds:
            check_seed("seeds", seed)
            if variant == "bf16 whole run":
                policy = PrecisionPolicy(device.type, "bf16", False, False, ("one autocast region around the run",))
                learner = PPO(ppo_config(device, seed))  # outside: its first rating is in inference mode
                with autocast(policy, device):
                    # Before torch 2.11 the region cached the casts made in inference mode (acting)
                    # without their autograd link, and a layer first run there got no gradient, or
                    # backward failed (PyTorch issue 158232). A forward pass with gradients first
                    # caches the weights as 2.11 and later do at the first update (there it changes
                    # nothing); the weights the run learns with stay stale on every version.
                    learner.model(learner.next_obs)
                    result = train(learner, steps=steps, progress=progress)
            else:
                result = train(PPO(ppo_config(device, seed, variant)), steps=steps, progress=progress)
            results[variant].append(result)
    return results


def _check_runs(results) -> dict:
    if (not isinstance(results, dict) or not results
            or not all(isinstance(runs, list) and runs for runs in results.values())):
        raise ValueError(f"results={results!r} must be the dict ppo_runs returns: a non-empty list of runs per variant")
    return results


def ppo_records(results: dict, device: str | torch.device | None = None, machine: str | None = None) -> list[Record]:
    """Per variant of :func:`ppo_runs`: the final mean score over its seeds and the median env steps/s.

    The score is the mean over seeds of each run's mean score of its last 100 games (food per
    game), with the standard deviation across seeds as its spread (none from one seed); a run in
    which no game finished counts as 0.
    """
    device = get_device(device, param="device")
    label, records = machine_of(device, machine), []
    for variant, runs in _check_runs(results).items():
        params = {"env_steps": runs[0].env_steps, "num_envs": runs[0].config["num_envs"], "device": device.type,
                  "seeds": len(runs)}
        scores = torch.tensor([run.mean_score or 0.0 for run in runs], dtype=torch.float64)
        spread = scores.std().item() if len(runs) > 1 else None
        records.append(Record(PPO_NAME, variant, "mean score", scores.mean().item(), "food/game", params, spread,
                              label))
        rate = statistics.median(run.steps_per_second for run in runs)
        records.append(Record(PPO_NAME, variant, "throughput", rate, "steps/s", params, None, label))
    return records


def learning_verdicts(records: Sequence[Record]) -> list[str]:
    """For each 16-bit variant beside fp32 on the same machine: is its final score within the seeds' noise?

    "unharmed" when the difference of the mean scores is at most twice the standard error of
    that difference (the seeds' standard deviations), "worse" or "better" beyond it, and "one seed
    each: no noise to compare with" when there is a single seed.
    """
    scores = {(r.machine, r.params["device"], r.variant): r for r in check_records(records)
              if r.name == PPO_NAME and r.metric == "mean score"}
    lines = []
    for (machine, device, variant), record in scores.items():
        base = scores.get((machine, device, "fp32"))
        if variant == "fp32" or base is None:
            continue
        difference = record.value - base.value
        head = (f"{variant} ({machine}, {device}): {record.value:.2f} food/game against fp32's {base.value:.2f}, "
                f"{difference:+.2f}")
        if record.spread is None or base.spread is None:
            lines.append(f"{head}; one seed each: no noise to compare with")
            continue
        noise = math.hypot(record.spread / math.sqrt(record.params["seeds"]),
                           base.spread / math.sqrt(base.params["seeds"]))
        outcome = "unharmed" if abs(difference) <= 2 * noise else ("worse" if difference < 0 else "better")
        lines.append(f"{head}, seeds' noise ±{2 * noise:.2f} (two standard errors over "
                     f"{record.params['seeds']} and {base.params['seeds']} seeds): {outcome}")
    return lines


def measure_precision(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``precision`` bench suite (see the module docstring): about 3 minutes on 2 CPU cores."""
    device = get_device(device, param="device")
    return (step_records(device, progress=progress) + batch_records(device, progress=progress)
            + ppo_records(ppo_runs(device, progress=progress), device))


# ---------------------------------------------------------------------------- reading the records

def _sweep(records: Sequence[Record], name: str) -> list[Record]:
    """The records called ``name`` of the width sweep (:func:`step_records`), without those of :func:`batch_records`."""
    return [r for r in select(records, name=name) if "batch_of" not in r.params]


def _at(records: list[Record], machine: str, device: str, hidden: int, precision: str) -> Record | None:
    return next(iter(select(records, machine=machine, device=device, hidden=hidden, variant=precision)), None)


def _setups(records: list[Record]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r.machine, r.params["device"]) for r in records))


def step_table(records: Sequence[Record]) -> Table:
    """Per machine, device and width: the work of a step, each precision's time and speedup over fp32,
    fp32's achieved GFLOP/s."""
    steps = _sweep(records, NAME)
    precisions = [p for p in PRECISIONS if any(r.variant == p for r in steps)]
    rows = []
    for machine, device in _setups(steps):
        for hidden in sorted({r.params["hidden"] for r in steps if r.machine == machine}):
            base = _at(steps, machine, device, hidden, "fp32")
            if base is None:
                continue
            flops = step_flops(hidden, base.params["batch_size"])
            cells = []
            for precision in precisions:
                found = _at(steps, machine, device, hidden, precision)
                cells.append(f"{format_number(found.value)} ({base.value / found.value:.2f}x)" if found else "")
            rows.append([machine, device, f"{hidden:,}", f"{base.params['batch_size']:,}", format_number(flops / 1e9),
                         *cells, format_number(flops / (base.value / 1e3) / 1e9)])
    columns = ["machine", "device", "hidden width", "batch", "work (GFLOP/step)",
               *(f"{p} step (ms, speedup)" for p in precisions), "fp32 achieved (GFLOP/s)"]
    return Table(columns, rows, [False, False, True, True, True, *([True] * len(precisions)), True])


def memory_table(records: Sequence[Record]) -> Table:
    """Memory of a step per width and precision, and fp32's over each (how many times smaller)."""
    memory = _sweep(records, MEMORY_NAME)
    precisions = [p for p in PRECISIONS if any(r.variant == p for r in memory)]
    rows = []
    for machine, device in _setups(memory):
        for hidden in sorted({r.params["hidden"] for r in memory if r.machine == machine}):
            base = _at(memory, machine, device, hidden, "fp32")
            if base is None:
                continue
            cells = []
            for precision in precisions:
                found = _at(memory, machine, device, hidden, precision)
                cells.append(f"{format_number(found.value)} ({base.value / found.value:.2f}x)" if found else "")
            rows.append([machine, device, f"{hidden:,}", *cells])
    columns = ["machine", "device", "hidden width", *(f"{p} (MiB, fp32 over it)" for p in precisions)]
    return Table(columns, rows, [False, False, True, *([True] * len(precisions))])


def small_net_summary(records: Sequence[Record]) -> list[str]:
    """Per machine and device: from the smallest width to the next, how the work and fp32's step time grew.

    Work that grows many times while the time barely moves means the step is paying a fixed cost
    per call (Python, kernel launches, the optimizer's loop), not arithmetic.
    """
    steps, lines = _sweep(records, NAME), []
    for machine, device in _setups(steps):
        hiddens = sorted({r.params["hidden"] for r in steps if r.machine == machine and r.variant == "fp32"})
        if len(hiddens) < 2:
            continue
        small, next_up = (_at(steps, machine, device, h, "fp32") for h in hiddens[:2])
        work = step_flops(hiddens[1], next_up.params["batch_size"]) / step_flops(hiddens[0], small.params["batch_size"])
        lines.append(f"{machine} ({device}): width {hiddens[0]} -> {hiddens[1]}: {work:.1f}x the work, "
                     f"fp32 step time {next_up.value / small.value:.2f}x")
    return lines


def target_checks(records: Sequence[Record]) -> Table:
    """The lesson's GPU target on each GPU machine: bf16 ≥ ``TARGET_SPEEDUP`` x fp32 at every width ≥ ``TARGET_HIDDEN``."""
    steps, rows = _sweep(records, NAME), []
    for machine, device in _setups(steps):
        if device != "cuda":
            continue
        for hidden in sorted({r.params["hidden"] for r in steps if r.machine == machine and r.params["hidden"]
                              >= TARGET_HIDDEN}):
            base, fast = _at(steps, machine, device, hidden, "fp32"), _at(steps, machine, device, hidden, "bf16")
            target = f"bf16 ≥ {TARGET_SPEEDUP:g}x fp32, width {hidden:,} ({machine})"
            if base is None or fast is None:
                rows.append([target, "not measured", ""])
                continue
            ratio, spread = record_ratio(base, fast)  # fp32 time over bf16 time
            rows.append([target, f"{format_number(ratio)} ± {format_number(spread)}x",
                         "met" if ratio >= TARGET_SPEEDUP else "missed"])
    if not rows:
        rows.append([f"bf16 ≥ {TARGET_SPEEDUP:g}x fp32 from width {TARGET_HIDDEN:,}, on a GPU",
                     "not measured: no GPU record in these records", ""])
    return Table(["target", "measured (fp32 time over bf16 time)", "outcome"], rows, [False, True, False])


def scaler_table(trace: Sequence[ScalerStep]) -> Table:
    """The steps of ``learn.train_step.scaler_trace`` as a table: the scale each used, whether its batch
    held a NaN, whether the scaler skipped it, and the scale after it."""
    if not all(isinstance(row, ScalerStep) for row in trace):
        raise TypeError(f"trace={trace!r:.80} must be the list of ScalerStep that scaler_trace returns")
    rows = [[str(row.step), f"{row.scale:,.0f}", str(row.poisoned), str(row.skipped), f"{row.next_scale:,.0f}"]
            for row in trace]
    return Table(["step", "scale used", "NaN in batch", "skipped", "next scale"], rows, [True, True, False, False, True])


NO_GPU = "no GPU record, from this run or in data/reference/ (the GPU sweep's `bench precision` measures it)"
SPEED_CLAIMS = {"amp-speedup": SIXTEEN_BIT, "amp-up-to-2x": SIXTEEN_BIT, "fp16-speedup": ("fp16",)}
"""The speed claims, and the 16-bit formats that may answer each (the faster one measured does)."""


def _best(records: list[Record], machine: str, device: str, formats) -> tuple[Record, Record, str] | None:
    """At the widest width measured in fp32: the fp32 record, the fastest of ``formats``, and its name."""
    hiddens = [r.params["hidden"] for r in records if r.machine == machine and r.params["device"] == device
               and r.variant == "fp32"]
    if not hiddens:
        return None
    hidden = max(hiddens)
    base = _at(records, machine, device, hidden, "fp32")
    found = [r for r in (_at(records, machine, device, hidden, p) for p in formats) if r is not None]
    if not found:
        return None
    fast = min(found, key=lambda r: r.value)
    return base, fast, fast.variant


def _most_activations(memory: list[Record], machine: str, device: str, formats) -> tuple[Record, Record, str] | None:
    """The fp32 memory record whose weights and Adam's moments hold the smallest share of it (where the
    activations dominate most), the smallest of ``formats`` at the same width and batch, and its name."""
    mine = [r for r in memory if r.machine == machine and r.params["device"] == device and "standing_mib" in r.params]
    bases = [r for r in mine if r.variant == "fp32"]
    if not bases:
        return None
    base = min(bases, key=lambda r: r.params["standing_mib"] / r.value)
    same = [r for r in mine if r.variant in formats and (r.params["hidden"], r.params["batch_size"])
            == (base.params["hidden"], base.params["batch_size"])]
    if not same:
        return None
    small = min(same, key=lambda r: r.value)
    return base, small, small.variant


def precision_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """The guides' statements on mixed precision, each beside the measurement that answers it.

    * speed ("amp-speedup", "amp-up-to-2x", "fp16-speedup"): fp32 step time over the fastest
      16-bit autocast allowed, at the widest width measured, one check per GPU machine (``records``
      first, then ``reference``); they are about GPUs, so a CPU answers none of them;
    * "amp-memory": fp32's memory over the 16-bit precision's (bf16 on a CPU, the smaller of bf16
      and fp16 on a GPU), on every machine, twice: where the activations dominate the memory (the
      record whose weights and Adam's moments hold the smallest share of it, such as a large batch
      of :func:`batch_records`), the case the claim is about, and at the widest width of the sweep,
      where the weights and Adam's moments dominate and 16 bits cannot shrink them.
    """
    everything = list(records) + list(reference)
    steps = _sweep(everything, NAME)
    memory = select(everything, name=MEMORY_NAME)
    gpus = [(m, d) for m, d in _setups(steps) if d == "cuda"]
    checks = []
    for key, formats in SPEED_CLAIMS.items():
        claim = CLAIMS[key]
        for machine, device in gpus:
            found = _best(steps, machine, device, formats)
            if found is None:
                checks.append(ClaimCheck(claim, f"{machine}: no fp32 and {'/'.join(formats)} step records"))
                continue
            base, fast, name = found
            checks.append(ClaimCheck(claim, f"fp32 over {name}, width {base.params['hidden']:,}, batch "
                                            f"{base.params['batch_size']:,}, cuda, {machine}",
                                     judge(claim, *record_ratio(base, fast))))
        if not gpus:
            checks.append(ClaimCheck(claim, NO_GPU))
    claim = CLAIMS["amp-memory"]
    for machine, device in _setups(memory):
        formats = SIXTEEN_BIT if device == "cuda" else ("bf16",)
        widest = _best([r for r in memory if "batch_of" not in r.params], machine, device, formats)
        found = [f for f in (_most_activations(memory, machine, device, formats), widest) if f is not None]
        if len(found) == 2 and found[0][0] is found[1][0]:
            found.pop()  # the same record answers both
        for base, small, name in found:
            share = (f" (weights and Adam {base.params['standing_mib'] / base.value:.0%} of it)"
                     if "standing_mib" in base.params else "")
            checks.append(ClaimCheck(claim, f"peak memory of a step{share}, fp32 over {name}, width "
                                            f"{base.params['hidden']:,}, batch {base.params['batch_size']:,}, "
                                            f"{device}, {machine}", judge(claim, base.value / small.value, device=device)))
    if not memory:
        checks.append(ClaimCheck(claim, "no memory record in these records"))
    return checks


def ppo_table(records: Sequence[Record]) -> Table:
    """Per machine and variant (:data:`LEARNING_VARIANTS`): env steps per run, seeds, the final mean score ± its spread across seeds, env steps/s."""
    ppo = select(records, name=PPO_NAME)
    rows = []
    for machine, device, precision in dict.fromkeys((r.machine, r.params["device"], r.variant) for r in ppo):
        mine = {r.metric: r for r in ppo if (r.machine, r.params["device"], r.variant) == (machine, device, precision)}
        steps = next(iter(mine.values())).params["env_steps"]
        score = mine["mean score"]
        score = format_number(score.value) + (f" ± {format_number(score.spread)}" if score.spread is not None else "")
        rate = format_number(mine["throughput"].value) if "throughput" in mine else ""
        seeds = next(iter(mine.values())).params.get("seeds", 1)
        rows.append([machine, device, precision, f"{steps:,}", str(seeds), score, rate])
    return Table(["machine", "device", "variant", "env steps per run", "seeds",
                  "mean score, last 100 games (food/game)", "env steps/s"], rows,
                 [False, False, False, True, True, True, True])


def plot_learning(results: dict):
    """Learning curves of :func:`ppo_runs`: mean score of the last 100 games against env steps, one colour per variant, a line per seed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for index, (variant, runs) in enumerate(_check_runs(results).items()):
        for number, run in enumerate(runs):
            points = [p for p in run.curve if p["mean_score"] is not None]
            ax.plot([p["env_steps"] for p in points], [p["mean_score"] for p in points], color=f"C{index}",
                    linewidth=1.2, alpha=0.8, label=LEARNING_VARIANTS.get(variant, variant) if number == 0 else None)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean score, last 100 games (food/game)")
    ax.set_title("PPO on Snake: the same seeds and env steps in each variant")
    ax.legend()
    plt.close(fig)  # shown once, as the cell's value
    return fig
