"""How fast the ``"win"`` preset trains, setting by setting: the tuning a GPU runs first (notebook 12).

:func:`speed_settings` lists the configurations that matter on a device, each the preset with a
few settings changed (``bench win_speed``). The ladder starts from the plain loop, eager in fp32,
and adds one technique at a time: the device's 16-bit precision (``gpu.precision``), then on a
GPU CUDA graphs, then compile (``gpu.graphs``), which makes the preset; on a CPU, compile. The old GPU preset
(the CNN trunk, 8,192-row minibatches, eager fp32) stands before it, the run the first GPU records
come from. Then the shapes of the work: minibatches of 4,096 and 8,192 rows, four times the games,
the CNN trunk, each with CUDA graphs and no compile on a GPU (a capture takes seconds, a compile a
minute), eager on a CPU.

:func:`measure_win_speed` prepares each configuration (``PPO.warm_up``: its compile and capture,
timed apart; an eager one plays an iteration first), then times whole iterations for about
``seconds``, the rollout and the update apart, and hands each configuration's records to ``save``
as soon as they are made: a run cut off keeps what it measured. On a GPU, one iteration of the old
and of the new preset is also profiled (``learn.profile.device_timeline``): the GPU's work items
and the share of the iteration it sat idle. Speed only: what a setting does to the time to win is
a training run's question (``bench wins``).
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of, synchronize
from ..gpu.graphs import can_measure_compiled
from ..learn.ppo import PPO, PPOConfig
from ..learn.profile import device_timeline
from ..learn.settings import ppo_settings, preset_settings, settings_dict
from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.records import Record, select
from ..measure.table import Table, format_number

NAME = "win speed"
PROFILE_NAME = "win profile"
LAUNCHES, EAGER, SHAPES = "launches", "eager", "shapes"
GROUPS = (LAUNCHES, EAGER, SHAPES)
"""The groups of :func:`speed_settings`: the preset and the launch settings below it (the old GPU preset,
CUDA graphs alone), the eager rungs of the ladder, and the shapes of the work."""
PROFILED = ("the preset", "the old GPU preset")
"""The configurations whose iteration is profiled on a GPU (by the start of their names)."""


def _minibatches(base: dict, rows: int) -> int:
    """``num_minibatches`` for minibatches of ``rows`` rows in ``base``'s rollout (one, if the rollout is smaller)."""
    return max(1, base["num_envs"] * base["num_steps"] // rows)


def old_gpu_preset(base: dict) -> dict:
    """The GPU's ``"win"`` preset before its tuning, as changes to ``base`` (the preset): the CNN trunk, gamma
    0.995, GAE's lambda 0.95, 8,192-row minibatches, eager in fp32. The first GPU records ran it."""
    return {"net": "ego_cnn", "gamma": 0.995, "gae_lambda": 0.95, "precision": "fp32", "compile": False,
            "cuda_graphs": False, "num_minibatches": _minibatches(base, 8192)}


def speed_settings(device, groups=GROUPS, base: dict | PPOConfig | None = None) -> dict[str, dict]:
    """The configurations :func:`measure_win_speed` times on ``device``, by name: changes to ``base``.

    In the ladder's order (the old GPU preset, eager fp32, eager in the 16-bit format, CUDA graphs,
    the preset), then the shapes. ``groups``: which of :data:`GROUPS` to take. ``base``: the
    settings they change (default: the preset on ``device``, ``preset_settings("win", device)``,
    which needs no such device here; a smaller config for a quick run).
    """
    device = torch.device(device)
    groups = check_choices("groups", groups, GROUPS)
    base = preset_settings("win", device) if base is None else base
    base = settings_dict(base) if isinstance(base, PPOConfig) else base
    half = base["precision"]  # the device's 16-bit format, or fp32 where it has none
    gpu = device.type == "cuda"
    plain = {"precision": "fp32", "compile": False, "cuda_graphs": False}
    rows = []  # (group, name, changes)
    if gpu:
        rows.append((LAUNCHES, "the old GPU preset: CNN trunk, 8,192 rows, eager, fp32", old_gpu_preset(base)))
    rows.append((EAGER, "eager, fp32", plain))
    if half != "fp32":
        rows.append((EAGER, f"eager, {half}", {**plain, "precision": half}))
    if gpu:
        rows.append((LAUNCHES, f"CUDA graphs, {half}", {**plain, "precision": half, "cuda_graphs": True}))
    rows.append((LAUNCHES, f"the preset: compiled{' + CUDA graphs' if gpu else ''}, {half}", {}))
    below, launches = {"compile": False}, "CUDA graphs" if gpu else "eager"
    for minibatch in (4096, 8192):
        rows.append((SHAPES, f"{minibatch:,}-row minibatches ({launches}, {half})",
                     {**below, "num_minibatches": _minibatches(base, minibatch)}))
    rows.append((SHAPES, f"{4 * base['num_envs']:,} games ({launches}, {half})",
                 {**below, "num_envs": 4 * base["num_envs"], "num_minibatches": 4 * base["num_minibatches"]}))
    rows.append((SHAPES, f"CNN trunk ({launches}, {half})", {**below, "net": "ego_cnn"}))
    return {name: changes for group, name, changes in rows if group in groups}


def time_iterations(learner: PPO, seconds: float, *, at_least: int = 1) -> tuple[list[float], list[float]]:
    """Seconds of the rollout and of the update of whole iterations, timed apart (the device waited for
    at each end), until ``seconds`` have passed and at least ``at_least`` iterations ran."""
    rollouts, updates = [], []
    spent = 0.0
    while spent < seconds or len(rollouts) < at_least:
        with learner.matmul_precision():
            synchronize(learner.device)
            start = time.perf_counter()
            learner.collect()
            synchronize(learner.device)
            middle = time.perf_counter()
            learner.update()
            synchronize(learner.device)
        rollouts.append(middle - start)
        updates.append(time.perf_counter() - middle)
        spent += rollouts[-1] + updates[-1]
    return rollouts, updates


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def speed_records(name: str, changes: dict, learner: PPO, setup_s: float, rollouts: list[float],
                  updates: list[float], machine: str) -> list[Record]:
    """One configuration's records: env steps/s of whole iterations, the rollout's and the update's
    seconds, the seconds of one optimizer step, and the setup (compile and capture) apart."""
    c = learner.config
    steps = c.num_envs * c.num_steps
    optimizer_steps = c.update_epochs * c.num_minibatches
    iterations = [r + u for r, u in zip(rollouts, updates)]
    rates = [steps / s for s in iterations]
    params = {"num_envs": c.num_envs, "minibatch_rows": steps // c.num_minibatches, "net": c.net,
              "precision": c.precision, "compile": c.compile, "cuda_graphs": c.cuda_graphs, "size": c.height,
              "device": learner.device.type, "iterations": len(iterations),
              "changes": ", ".join(f"{key}={value!r}" for key, value in sorted(changes.items()))}
    update = statistics.median(updates)
    return [
        Record(NAME, name, "throughput", statistics.median(rates), "steps/s", params, _iqr(rates), machine),
        Record(NAME, name, "rollout time", statistics.median(rollouts), "s", params, _iqr(rollouts), machine),
        Record(NAME, name, "update time", update, "s", params, _iqr(updates), machine),
        Record(NAME, name, "optimizer step time", update / optimizer_steps * 1e3, "ms",
               {**params, "optimizer_steps": optimizer_steps}, _iqr(updates) / optimizer_steps * 1e3, machine),
        Record(NAME, name, "setup time", setup_s, "s", params, None, machine),
    ]


def profile_records(name: str, learner: PPO, machine: str) -> list[Record]:
    """One profiled iteration on a GPU (:func:`~rlgpu_helpers.learn.profile.device_timeline`): its work items,
    graph launches, and the share of it the GPU sat idle."""
    timeline = device_timeline(learner)
    params = {"num_envs": learner.config.num_envs, "precision": learner.config.precision,
              "compile": learner.config.compile, "cuda_graphs": learner.config.cuda_graphs,
              "device": learner.device.type}
    return [Record(PROFILE_NAME, name, "work items per iteration", timeline.work_items, "kernels", params, None, machine),
            Record(PROFILE_NAME, name, "graph launches per iteration", timeline.graph_launches, "launches", params,
                   None, machine),
            Record(PROFILE_NAME, name, "GPU idle share", 100 * timeline.idle_share, "%", params, None, machine),
            Record(PROFILE_NAME, name, "iteration wall time", timeline.wall_s, "s", params, None, machine)]


def measure_win_speed(device, progress: bool = True, *, groups=GROUPS, seconds: float | None = None,
                      size: int | None = None, names=None, save: Callable[[list[Record]], object] | None = None,
                      **overrides) -> list[Record]:
    """The ``bench win_speed`` suite: each of :func:`speed_settings` (or those named in ``names``) timed on ``device``.

    Full size: the preset on the 10x10 board, about 10 s of iterations per configuration. Quick:
    a small preset on 6x6 for a fraction of a second, to check that it runs. ``overrides``:
    ``PPOConfig`` settings over the preset's (``ppo_settings``), before each configuration's own
    changes (``dataclasses.replace``). ``save``: called with each configuration's records as soon as
    they are measured. Without a compiler for the device, the configurations that compile are left
    out, and one printed line says why.
    """
    device = get_device(device, param="device")
    seconds = check_number("seconds", pick(full=10.0, quick=0.2) if seconds is None else seconds, above=0)
    size = check_int("size", pick(full=10, quick=6) if size is None else size)
    quick = pick(full={}, quick={"num_envs": 32, "num_steps": 16, "hidden": 16, "num_minibatches": 4})
    base = ppo_settings(device, "win", size=size, overrides=[*quick.items(), *overrides.items()])
    configs = speed_settings(device, groups, base)
    if names is not None:
        configs = {name: configs[name] for name in check_choices("names", names, tuple(configs))}
    machine, records = machine_of(device), []
    for name, changes in tqdm(configs.items(), desc="configurations", disable=not progress):
        config = dataclasses.replace(base, **changes)
        if config.compile and not can_measure_compiled(device, "win speed, the compiled configurations"):
            continue  # a learner would run it eagerly, under a compiled configuration's name
        learner = PPO(config)
        setup = learner.warm_up()
        if not setup:  # eager: one iteration pays the first calls' costs (cuBLAS, the allocator)
            time_iterations(learner, 0.0, at_least=1)
        rollouts, updates = time_iterations(learner, seconds)
        made = speed_records(name, changes, learner, setup, rollouts, updates, machine)
        if device.type == "cuda" and name.startswith(PROFILED):
            made += profile_records(name, learner, machine)
        if save is not None:
            save(made)
        records += made
        del learner
        gc.collect()  # its captured graphs hold their memory until the learner's reference cycles are collected
        torch._dynamo.reset()  # each configuration compiles its own: start afresh
    return records


def speed_table(records) -> Table:
    """One row per configuration of ``bench win_speed`` records, per machine: env steps/s, the parts, the setup."""
    records = select(records, name=NAME)
    rows = []
    for machine in dict.fromkeys(r.machine for r in records):
        for variant in dict.fromkeys(r.variant for r in records if r.machine == machine):
            value = {r.metric: r for r in records if r.machine == machine and r.variant == variant}
            throughput = value["throughput"]
            rows.append([machine, variant, f"{throughput.value:,.0f}",
                         format_number(value["rollout time"].value * 1e3),
                         format_number(value["update time"].value * 1e3),
                         format_number(value["optimizer step time"].value),
                         format_number(value["setup time"].value)])
    return Table(["machine", "configuration", "env steps/s", "rollout (ms)", "update (ms)", "optimizer step (ms)",
                  "compile and capture (s)"], rows, [False, False, True, True, True, True, True])


def profile_table(records) -> Table:
    """One row per profiled iteration (``"win profile"`` records), per machine: what the GPU ran and how idle it sat."""
    records = select(records, name=PROFILE_NAME)
    rows = []
    for machine in dict.fromkeys(r.machine for r in records):
        for variant in dict.fromkeys(r.variant for r in records if r.machine == machine):
            value = {r.metric: r.value for r in records if r.machine == machine and r.variant == variant}
            rows.append([machine, variant, f"{value['work items per iteration']:,.0f}",
                         f"{value['graph launches per iteration']:,.0f}", format_number(value["GPU idle share"]),
                         format_number(value["iteration wall time"] * 1e3)])
    return Table(["machine", "configuration", "GPU work items per iteration", "graph launches", "GPU idle (%)",
                  "iteration (ms)"], rows, [False, False, True, True, True, True])


def speed_claim_checks(records, machine: str) -> list[ClaimCheck]:
    """The peers' figures beside ``machine``'s ``bench win_speed`` records: LeanRL's speed-up from compile and CUDA
    graphs (the preset against its eager rung in the same precision) and PufferLib's end-to-end steps/s (the preset's)."""
    mine = [r for r in select(records, name=NAME, metric="throughput") if r.machine == machine]
    preset = next((r for r in mine if r.variant.startswith("the preset")), None)
    eager = next((r for r in mine if preset is not None and r.variant == f"eager, {preset.params['precision']}"),
                 None)
    device = "cuda" if machine.startswith("gpu-") else "cpu"
    checks = []
    claim = CLAIMS["leanrl-ppo-atari"]
    if preset is None or eager is None:
        checks.append(ClaimCheck(claim, f"the preset and its eager rung: not both on file for {machine}"))
    else:
        speedup, spread = record_ratio(preset, eager)
        checks.append(ClaimCheck(claim, f"{preset.variant} over {eager.variant}, {machine}",
                                 judge(claim, speedup, spread, device=device)))
    claim = CLAIMS["pufferlib-4m-sps"]
    if preset is None:
        checks.append(ClaimCheck(claim, f"the preset: not on file for {machine}"))
    else:
        checks.append(ClaimCheck(claim, f"{preset.variant}, {machine}",
                                 judge(claim, preset.value, preset.spread or 0.0, device=device)))
    return checks


def speed_target_lines(records, machine: str) -> list[str]:
    """Issue 34's speed targets, read on ``machine``'s ``bench win_speed`` records of the preset: 2M env steps/s
    or more, and one optimizer step of 1,024 rows in 0.5 ms or less (the medians of its iterations)."""
    mine = {r.metric: r for r in select(records, name=NAME) if r.machine == machine and r.variant.startswith(
        "the preset")}
    if not mine:
        return [f"{machine}: the preset's speed is not on file ('bench win_speed')"]
    rate, step = mine["throughput"], mine["optimizer step time"]
    rows = step.params["minibatch_rows"]
    return [f"{machine}, {rate.variant}: 2M env steps/s or more: {'met' if rate.value >= 2e6 else 'not met'} "
            f"({rate.value:,.0f} steps/s)",
            f"{machine}, {step.variant}: one optimizer step of {rows:,} rows in 0.5 ms or less: "
            f"{'met' if step.value <= 0.5 and rows == 1024 else 'not met'} ({format_number(step.value)} ms)"]
