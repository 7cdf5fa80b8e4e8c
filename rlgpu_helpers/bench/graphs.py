"""The ``graphs`` bench suite: time per step eager, compiled and graph-captured (introduced in notebook 09).

``python -m rlgpu_helpers bench graphs`` runs :func:`measure_graphs`. Records:

* ``"graphs_op_time"``: the time of ``a + b`` eager against the tensors' size (elements), µs.
  Flat at small sizes: the fixed cost of one operator (``bench.launch``'s launch floor).
* ``"graphs_launches"``: operators launched per call of each part, eager
  (``bench.launch.count_launches``): what the fixed cost is paid on.
* ``"graphs_step"``: time per call of each **part** (µs, median and IQR) for each **mode** and N.
  Parts: ``"env"`` (one ``VecSnake`` step, features observations), ``"acting"`` (logits, a
  sampled action and its log-probability for N observations), ``"update"`` (one PPO minibatch
  update on a rollout of N games), ``"iteration"`` (one whole PPO iteration of :data:`NUM_STEPS`
  steps with ``PPOConfig(compile=..., cuda_graphs=...)``). Modes: ``"eager"``, ``"compiled"``
  (``torch.compile``), ``"reduce-overhead"`` (``torch.compile`` replaying CUDA graphs; on a CPU
  the default mode, so not measured twice), ``"CUDA graph (by hand)"`` (``gpu.graphs.CapturedStep``;
  for the iteration ``cuda_graphs=True`` and ``compile=True``). Skipped, with one printed line
  saying why: the CUDA-graph modes on a CPU (:data:`SKIPPED_ON_CPU`), a part Inductor compiles
  without its CUDA graphs, the modes that compile where there is no compiler (:func:`compiles`).
* ``"graphs_compile"``: seconds of each part's first compiled call (the compile) or capture.

:func:`launch_share_table` reads the step records against the launch floor (operators x the
time of one tiny operator): compiling wins where that fixed cost is most of eager's time, and
only there. :data:`H100_BANDWIDTH_GBS` bounds a graph-captured env step from above: launches
gone, a step still moves its bytes per game (``bench.launch``) at no more than the bandwidth.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_ints
from ..core.config import pick
from ..core.device import get_device, machine_of, synchronize
from ..gpu.graphs import CapturedStep, CompilerMissingError, can_measure_compiled, compile_step, compiler_missing
from ..gpu.launches import count_launches
from ..learn.ppo import PPO
from ..learn.settings import ppo_settings
from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number
from ..measure.timing import time_sized
from ..snake.rules import NUM_ACTIONS
from ..snake.vec import VecSnake, step_compile_options

OP_NAME = "graphs_op_time"
LAUNCH_NAME = "graphs_launches"
NAME = "graphs_step"
COMPILE_NAME = "graphs_compile"
PARTS = ("env", "acting", "update", "iteration")
EAGER, COMPILED, REDUCE, CAPTURED = "eager", "compiled", "reduce-overhead", "CUDA graph (by hand)"
MODES = (EAGER, COMPILED, REDUCE, CAPTURED)
SKIPPED_ON_CPU = {REDUCE: "on a CPU, reduce-overhead is the default mode (no CUDA graphs): measured once, as compiled",
                  CAPTURED: "CUDA graphs need a CUDA GPU"}
NUM_STEPS = 16
"""Steps per rollout of the ``"iteration"`` part."""
HIDDEN = 64
SIZES = {"num_steps": NUM_STEPS, "num_minibatches": 1, "update_epochs": 1, "hidden": HIDDEN}
"""The learner's sizes, over the start preset's: one minibatch, one epoch."""


def default_sizes(device: str | torch.device | None = None) -> tuple[int, ...]:
    """Elements of :func:`op_time_by_size`: 1 to 2**24 on a GPU, to 2**20 on a CPU (three sizes in quick mode)."""
    top = 24 if get_device(device, param="device").type == "cuda" else 20
    return pick(full=tuple(4**k for k in range(top // 2 + 1)), quick=(1, 2**10, 2**16))


def default_num_envs(part: str, device: str | torch.device | None = None) -> tuple[int, ...]:
    """N for each part: on a GPU up to 2**22 games for the env; on a CPU 64 and 1,024; 64 in quick mode."""
    cuda = get_device(device, param="device").type == "cuda"
    if not cuda:
        return pick(full=(64, 1024), quick=(64,))
    full = {"env": (256, 4096, 65536, 2**20, 2**22), "acting": (256, 4096, 65536, 2**20),
            "update": (256, 4096, 65536), "iteration": (256, 4096, 65536)}[part]
    return pick(full=full, quick=(256,))


def default_parts() -> tuple[str, ...]:
    """Every part at full size; the env and the update in quick mode."""
    return pick(full=PARTS, quick=("env", "update"))


def op_time_by_size(device: str | torch.device | None = None, *, sizes=None) -> list[Record]:
    """The time of ``a + b`` eager, against the number of elements: records ``"graphs_op_time"``, µs."""
    device = get_device(device, param="device")
    sizes = check_ints("sizes", default_sizes(device) if sizes is None else sizes)
    label, records = machine_of(device), []
    for n in sizes:
        a, b = torch.ones(n, device=device), torch.ones(n, device=device)
        timing = time_sized(lambda a=a, b=b: a + b, pick(full=0.05, quick=0.005), probes=3, repeats=pick(full=5, quick=3),
                            device=device)
        records.append(Record(OP_NAME, "a + b", "time per call", timing.median * 1e6, "µs",
                              {"elements": n, "device": device.type}, timing.iqr * 1e6, label))
    return records


# ---------------------------------------------------------------------------- the parts

def _learner(num_envs: int, device: torch.device, **settings) -> PPO:
    return PPO(dataclasses.replace(ppo_settings(device, envs=num_envs, overrides=SIZES), **settings))


def compiles(part: str, mode: str) -> bool:
    """Whether ``part`` in ``mode`` runs through ``torch.compile`` (the iteration's CUDA graph mode compiles too)."""
    return mode in (COMPILED, REDUCE) or (part == "iteration" and mode == CAPTURED)


class CudaGraphsSkipped(RuntimeError):
    """``reduce-overhead`` compiled without its CUDA graphs: timing it would time the compiled mode under its name."""


def part_call(part: str, mode: str, num_envs: int, device: str | torch.device | None = None):
    """``(call, setup_seconds)``: one call of ``part`` in ``mode`` at N games, compiled or captured already.

    ``setup_seconds`` is the compile (first compiled call) or the capture (warm-up and capture
    calls), None in eager mode. Raises ValueError for a CUDA-graph mode on a CPU,
    :class:`CudaGraphsSkipped` when Inductor compiled ``reduce-overhead`` without CUDA graphs
    (it does so for a function that mutates its inputs, such as the env step), and
    ``CompilerMissingError`` for a mode that compiles where no compiler is (a learner would run eagerly).
    """
    (part,), (mode,) = check_choices("part", (part,), PARTS), check_choices("mode", (mode,), MODES)
    device = get_device(device, param="device")
    if mode in (REDUCE, CAPTURED) and device.type != "cuda":
        raise ValueError(f"mode={mode!r} on device={str(device)!r}: {SKIPPED_ON_CPU[mode]}")
    why = compiler_missing(device.type) if compiles(part, mode) else None
    if why is not None:
        raise CompilerMissingError(why)
    if part == "iteration":
        settings = {EAGER: {}, COMPILED: {"compile": True}, REDUCE: None, CAPTURED: {"compile": True,
                                                                                     "cuda_graphs": True}}[mode]
        if settings is None:
            raise ValueError("mode='reduce-overhead' is not measured for the whole iteration: its update's "
                             "backward and optimizer step break the graph (use the CUDA graph modes)")
        learner = _learner(num_envs, device, **settings)
        return _setup(learner.iterate, (), mode, device, warmups=3 if mode != EAGER else 0)
    if part == "env":
        env = VecSnake(num_envs, device=device, seed=0, check_action_values=False)
        actions = torch.randint(0, NUM_ACTIONS, (num_envs,), generator=torch.Generator().manual_seed(0)).to(device)
        fn, args, options = env.step_tensors, (actions,), step_compile_options(device)
    elif part == "acting":
        learner = _learner(num_envs, device, compile=mode != EAGER, cuda_graphs=False)
        obs = learner.next_obs.clone()

        def fn(obs):
            with torch.no_grad():
                return learner.act(obs)
        args, options = (obs,), None
    else:
        learner = _learner(num_envs, device, compile=mode != EAGER, cuda_graphs=False)
        learner.collect()
        fn, args, options = learner.minibatch_update, (torch.randperm(num_envs * NUM_STEPS, device=device),), None
    if mode == EAGER:
        return (lambda: fn(*args)), None
    if mode in (COMPILED, REDUCE):
        compiled = compile_step(fn, *args, mode="default" if mode == COMPILED else REDUCE,
                                fullgraph=part != "update", device=device, options=options)
        if compiled.cuda_graphs_skipped:
            raise CudaGraphsSkipped(f"{part} at N={num_envs:,}: Inductor skipped the CUDA graphs of reduce-overhead "
                                    f"({'; '.join(compiled.cuda_graphs_skipped)}), so it would run as compiled")
        return (lambda: compiled.fn(*args)), compiled.compile_seconds
    return _setup(CapturedStep(fn, device), args, mode, device, warmups=3)


def _setup(fn, args, mode, device, warmups):
    synchronize(device)
    start = time.perf_counter()
    for _ in range(warmups):
        fn(*args)
    synchronize(device)
    seconds = time.perf_counter() - start
    return (lambda: fn(*args)), (seconds if mode != EAGER else None)


def step_records(device: str | torch.device | None = None, *, parts=None, modes=MODES, num_envs=None,
                 progress: bool = True) -> list[Record]:
    """Time per call of each part, mode and N (see the module docstring); CUDA-graph modes only on CUDA,
    and the modes that compile only where a compiler is (else one printed line says why)."""
    device = get_device(device, param="device")
    parts = check_choices("parts", default_parts() if parts is None else parts, PARTS)
    modes = [m for m in check_choices("modes", modes, MODES) if device.type == "cuda" or m not in SKIPPED_ON_CPU]
    jobs = [(part, mode, n) for part in parts
            for n in (default_num_envs(part, device) if num_envs is None else check_ints("num_envs", num_envs))
            for mode in modes if not (part == "iteration" and mode == REDUCE)]
    compiling = [job for job in jobs if compiles(*job[:2])]
    if compiling and not can_measure_compiled(device, "graphs, the modes that compile"):
        jobs = [job for job in jobs if job not in compiling]
    label, records = machine_of(device), []
    for part, mode, n in tqdm(jobs, desc="graphs", disable=not progress):
        try:
            call, setup = part_call(part, mode, n, device)
        except CudaGraphsSkipped as skipped:
            print(f"{skipped}: not timed.")
            torch._dynamo.reset()
            continue
        timing = time_sized(call, pick(full=0.1, quick=0.02), warmup=1, repeats=pick(full=5, quick=3), device=device)
        params = {"part": part, "num_envs": n, "device": device.type}
        records.append(Record(NAME, mode, "time per call", timing.median * 1e6, "µs", params, timing.iqr * 1e6,
                              label))
        if setup is not None:
            records.append(Record(COMPILE_NAME, mode, "setup time", setup, "s", params, None, label))
        del call
        torch._dynamo.reset()  # every compiled part holds its own guards and code: start afresh
    return records


def launch_records(device: str | torch.device | None = None, *, parts=("env", "acting", "update"),
                   num_envs: int = 256) -> list[Record]:
    """Operators launched per call of each part, eager, at ``num_envs`` games: records ``"graphs_launches"``."""
    device = get_device(device, param="device")
    label = machine_of(device)
    records = []
    for part in check_choices("parts", parts, PARTS[:3]):
        call, _ = part_call(part, EAGER, num_envs, device)
        count = count_launches(call, device, calls=3)
        records.append(Record(LAUNCH_NAME, part, "launches per call", count.per_call, "launches",
                              {"part": part, "num_envs": num_envs, "device": device.type, "counted": count.counted},
                              None, label))
    return records


def measure_graphs(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``graphs`` bench suite (see the module docstring). About 3 minutes on a 2-core CPU at full size."""
    device = get_device(device, param="device")
    return op_time_by_size(device) + launch_records(device) + step_records(device, progress=progress)


# ---------------------------------------------------------------------------- tables and claims

def step_table(records: Sequence[Record]) -> Table:
    """Per machine, part and N: the time per call in each mode, and each mode's speedup over eager."""
    records = [r for r in check_records(records) if r.name == NAME]
    groups: dict[tuple, dict[str, Record]] = {}
    for r in records:
        groups.setdefault((r.machine, r.params["part"], r.params["num_envs"]), {})[r.variant] = r
    rows = []
    order = {p: i for i, p in enumerate(PARTS)}
    for (machine, part, n), by_mode in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]], kv[0][2])):
        eager = by_mode.get(EAGER)
        row = [machine, part, f"{n:,}"]
        for mode in MODES:
            r = by_mode.get(mode)
            row.append(format_number(r.value) if r else "")
            if mode != EAGER:
                row.append(f"{eager.value / r.value:.2f}x" if r and eager else "")
        if part == "env" and by_mode:
            best = min(by_mode.values(), key=lambda r: r.value)
            row.append(format_number(n / best.value * 1e6))
        else:
            row.append("")
        rows.append(row)
    columns = ["machine", "part", "games (N)", "eager (µs)", "compiled (µs)", "vs eager", "reduce-overhead (µs)",
               "vs eager", "CUDA graph by hand (µs)", "vs eager", "env steps/s at the best mode"]
    return Table(columns, rows, [False, False] + [True] * 9)


LEANRL_CLAIMS = {"leanrl-ppo-atari": CAPTURED, "leanrl-ppo-continuous": CAPTURED, "leanrl-compile-alone": COMPILED}
"""LeanRL's published speedups (their H100) and the iteration mode against eager that answers each.

Each is against LeanRL's own eager script, the same code without compile or CUDA graphs, as ours
is against eager: not against CleanRL's original script, whose "overall speed-up" (6.8x for PPO
on Atari) also counts LeanRL's rewrite of the eager code."""
NO_GPU = "no GPU record, from this run or in data/reference/ (the GPU sweep's `bench graphs` measures it)"


def leanrl_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """LeanRL's speedups beside our PPO iteration's on a GPU, at the largest N measured there.

    Their figures are for their scripts on their H100, each against their same script eager;
    ours is a Snake PPO iteration with ``PPOConfig(compile=True[, cuda_graphs=True])`` against
    eager. No GPU record: "not measured".
    """
    every = [r for r in check_records(list(records) + list(reference))
             if r.name == NAME and r.params.get("part") == "iteration" and r.params.get("device") == "cuda"]
    checks = []
    for key, mode in LEANRL_CLAIMS.items():
        pairs = {}
        for r in every:
            pairs.setdefault((r.machine, r.params["num_envs"]), {})[r.variant] = r
        usable = [(k, v) for k, v in pairs.items() if EAGER in v and mode in v]
        if not usable:
            checks.append(ClaimCheck(CLAIMS[key], NO_GPU))
            continue
        (machine, n), found = max(usable, key=lambda kv: kv[0][1])
        ratio, spread = record_ratio(found[EAGER], found[mode])
        checks.append(ClaimCheck(CLAIMS[key], f"iteration, {mode} vs eager, N={n:,}, cuda, {machine}",
                                 judge(CLAIMS[key], ratio, spread)))
    return checks


# ---------------------------------------------------------------------------- reading the results

def _verdict(ratio: float, spread: float) -> str:
    if ratio - spread > 1:
        return "faster"
    if ratio + spread < 1:
        return "slower"
    return "within noise"


def launch_share_table(records: Sequence[Record], launches: Sequence[Record], op_records: Sequence[Record]) -> Table:
    """Per part and N of one machine's step records: eager's time, its launch floor, the floor's share
    of it, and compiled against eager.

    The launch floor is the part's operators (``launches``, :func:`launch_records`) times the time
    of ``a + b`` on the smallest tensor (``op_records``, :func:`op_time_by_size`): the fixed cost
    that fusing operators saves. "compiled is" says whether compiled beat eager beyond both
    timings' spread. Parts without a launch count (the whole iteration) are left out.
    """
    ops = [r for r in check_records(op_records) if r.name == OP_NAME]
    if not ops:
        raise ValueError("op_records holds no graphs_op_time record (from op_time_by_size)")
    op_us = min(ops, key=lambda r: r.params["elements"]).value
    counts = {r.variant: r.value for r in check_records(launches) if r.name == LAUNCH_NAME}
    steps: dict[tuple[str, int], dict[str, Record]] = {}
    for r in check_records(records):
        if r.name == NAME and r.params["part"] in counts:
            steps.setdefault((r.params["part"], r.params["num_envs"]), {})[r.variant] = r
    order = {p: i for i, p in enumerate(PARTS)}
    rows = []
    for (part, n), by_mode in sorted(steps.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        if EAGER not in by_mode or COMPILED not in by_mode:
            continue
        eager, floor = by_mode[EAGER].value, counts[part] * op_us
        ratio, spread = record_ratio(by_mode[EAGER], by_mode[COMPILED])
        rows.append([part, f"{n:,}", format_number(eager), format_number(floor), f"{floor / eager:.0%}",
                     f"{ratio:.2f}x ± {spread:.2f}", _verdict(ratio, spread)])
    columns = ["part", "games (N)", "eager (µs)", "launch floor (µs)", "floor / eager", "compiled vs eager",
               "compiled is"]
    return Table(columns, rows, [False, True, True, True, True, True, False])


H100_BANDWIDTH_GBS = 3350.0
"""The H100 SXM's memory bandwidth on NVIDIA's datasheet (HBM3, 3.35 TB/s): a spec to bound a step
with, not a measurement. Bytes per game over it is the least a step can take on that GPU."""
