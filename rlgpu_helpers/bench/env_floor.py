"""How near ``VecSnake``'s step comes to its memory floor, eager, compiled and fused (notebook 04, section 5).

A step must move ``snake.step_bytes`` bytes a game, so the device's bandwidth bounds it at
``bandwidth / bytes`` env steps/s: the floor. :func:`floor_throughput` times the step eager,
compiled (``torch.compile`` with ``snake.vec.step_compile_options``) and, on a GPU, fused
(``snake.vec_fused``'s Triton kernels), features and grid, at the sizes the course's GPU
targets name, and sets each figure against the floor (records ``"env_step"``, variants ending
", compiled" or ", fused", and ``"env_step_floor"``).
:func:`step_op_shares` says where an eager step's time goes: each operator's share of the device's
time (the GPU's kernels, or the CPU's), records ``"env_step_ops"``. :func:`measure_env_floor`, the
``env_floor`` bench suite, runs both; the GPU sweep runs it in its first call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity

from ..core import compat
from ..core.checks import check_choices, check_int, check_ints
from ..core.config import pick
from ..core.device import get_device, machine_of, synchronize
from ..gpu.graphs import compile_step
from ..gpu.launches import quiet_profiler
from ..measure.records import Record
from ..measure.table import Table, format_number
from ..snake.vec import step_compile_options
from ..snake.vec_fused import FusedStep, triton_missing
from .envs import (
    FLOOR_METRIC,
    FLOOR_NAME,
    NAME,
    VARIANTS,
    cycling_steps,
    device_type,
    floor_records,
    run_jobs,
    seeded_vec_snake,
    vec_snake_job,
)

OBS_TYPES = ("features", "grid")
MODES = ("eager", "compiled", "fused")
COMPILED_SUFFIX = ", compiled"
FUSED_SUFFIX = ", fused"
SUFFIXES = {"eager": "", "compiled": COMPILED_SUFFIX, "fused": FUSED_SUFFIX}
OPS_NAME = "env_step_ops"
COMPILE_NAME = "env_step_compile"


def default_floor_num_envs(obs_type: str, device: str | torch.device | None = None) -> int:
    """N for ``obs_type`` on ``device``: the GPU targets' 4,194,304 features and 1,048,576 grid games;
    on a CPU 65,536 and 16,384; 256 in quick mode. ``device`` need not be here: sizes depend on its kind."""
    on_gpu = device_type(device) != "cpu"
    full = {"features": 4_194_304, "grid": 1_048_576} if on_gpu else {"features": 65_536, "grid": 16_384}
    return pick(full=full[obs_type], quick=256)


def _compiled_job(num_envs: int, obs_type: str, device: torch.device, compile_seconds: dict):
    """Make (step, steps per call, close) of the compiled step; its compile's seconds go to ``compile_seconds``."""
    env, actions = seeded_vec_snake(num_envs, obs_type, device)
    compiled = compile_step(env.step_tensors, actions[0], device=device, options=step_compile_options(device))
    compile_seconds[(VARIANTS[obs_type] + COMPILED_SUFFIX, obs_type, num_envs)] = compiled.compile_seconds

    def close():
        env.close()
        torch._dynamo.reset()  # the next env's step compiles afresh, not against these guards

    return cycling_steps(compiled.fn, actions), num_envs, close


def fused_missing(device: torch.device) -> str | None:
    """Why the fused step cannot be timed on ``device`` here, or None: it is a kernel for a GPU (a
    CPU runs it only in Triton's interpreter, which its tests use and which is far too slow to time)."""
    if device.type != "cuda":
        return "the fused step is a Triton kernel for a GPU (on a CPU Triton only interprets it: tested, not timed)"
    return triton_missing(device)


def _fused_job(num_envs: int, obs_type: str, device: torch.device, compile_seconds: dict):
    """Make (step, steps per call, close) of the fused step; its first call (Triton compiles the
    kernels then) goes to ``compile_seconds``."""
    env, actions = seeded_vec_snake(num_envs, obs_type, device)
    fused = FusedStep(env)
    start = time.perf_counter()
    fused(actions[0])
    synchronize(device)
    compile_seconds[(VARIANTS[obs_type] + FUSED_SUFFIX, obs_type, num_envs)] = time.perf_counter() - start
    return cycling_steps(fused, actions), num_envs, env.close


def floor_throughput(device: str | torch.device | None = None, *, obs_types=OBS_TYPES, modes=MODES,
                     num_envs=None, progress: bool = True) -> list[Record]:
    """``VecSnake``'s steps/s in each mode and obs type, and each figure's fraction of its floor.

    ``num_envs``: one N for every obs type, default :func:`default_floor_num_envs` for each.
    Records: ``"env_step"`` (variants end ", compiled" or ", fused"), each compile's seconds
    (``"env_step_compile"``), and ``bench.envs.floor_records`` of them all. An N that does not fit
    leaves no record (the reason is printed); a compile without a compiler raises its clear error.
    The fused step is timed on a GPU with Triton; elsewhere one line says why not.
    """
    device = get_device(device)
    obs_types = check_choices("obs_types", obs_types, OBS_TYPES)
    modes = check_choices("modes", modes, MODES)
    why = fused_missing(device) if "fused" in modes else None
    if why is not None:
        print(f"fused step: not measured here: {why}")
        modes = tuple(mode for mode in modes if mode != "fused")
    sizes = ({obs: default_floor_num_envs(obs, device) for obs in obs_types} if num_envs is None
             else dict.fromkeys(obs_types, check_int("num_envs", num_envs)))
    compile_seconds: dict = {}
    jobs = []
    for obs in obs_types:
        n = sizes[obs]
        params = {"num_envs": n, "obs_type": obs, "device": device.type}
        if "eager" in modes:
            jobs.append((VARIANTS[obs], dict(params),
                         lambda n=n, obs=obs: vec_snake_job(n, obs, device), device))
        if "compiled" in modes:
            jobs.append((VARIANTS[obs] + COMPILED_SUFFIX, dict(params),
                         lambda n=n, obs=obs: _compiled_job(n, obs, device, compile_seconds), device))
        if "fused" in modes:
            jobs.append((VARIANTS[obs] + FUSED_SUFFIX, dict(params),
                         lambda n=n, obs=obs: _fused_job(n, obs, device, compile_seconds), device))
    machine = machine_of(device)
    records = run_jobs(jobs, NAME, machine, progress, "env step floor")
    records += [Record(COMPILE_NAME, variant, "compile time", seconds, "s",
                       {"num_envs": n, "obs_type": obs, "device": device.type}, None, machine)
                for (variant, obs, n), seconds in compile_seconds.items()]
    return records + floor_records(records, device)


def step_op_shares(device: str | torch.device | None = None, *, obs_types=OBS_TYPES, num_envs=None,
                   steps: int | None = None, limit: int = 12) -> list[Record]:
    """Where an eager step's time goes: the ``limit`` operators with the most device time (the GPU's
    kernels, attributed to the operator that launched them; on a CPU its own time), by shape.

    ``steps`` eager steps (default 20; 3 in quick mode) are profiled after 3 unprofiled ones. Records
    ``"env_step_ops"``: per operator and shapes its ``"share of step time"`` (%, params: obs type, N,
    calls per step), and per obs type the ``"profiled time per step"`` (µs) those shares divide (on a
    CPU the profiler's own cost included: time the step with :func:`floor_throughput`).
    """
    device = get_device(device)
    obs_types = check_choices("obs_types", obs_types, OBS_TYPES)
    steps = check_int("steps", pick(full=20, quick=3) if steps is None else steps)
    limit = check_int("limit", limit)
    sizes = (check_ints("num_envs", num_envs) if num_envs is not None
             else tuple(default_floor_num_envs(obs, device) for obs in obs_types))
    if len(sizes) != len(obs_types):
        raise ValueError(f"num_envs={num_envs!r} must give one N per obs type ({len(obs_types)})")
    machine, records = machine_of(device), []
    for obs_type, n in zip(obs_types, sizes):
        shares, per_step_us = _profile_steps(n, obs_type, device, steps)
        params = {"num_envs": n, "obs_type": obs_type, "device": device.type}
        records.append(Record(OPS_NAME, VARIANTS[obs_type], "profiled time per step", per_step_us, "µs",
                              dict(params), None, machine))
        for (op, shapes), (share, calls) in sorted(shares.items(), key=lambda kv: -kv[1][0])[:limit]:
            records.append(Record(OPS_NAME, f"{op} {shapes}", "share of step time", share, "%",
                                  {**params, "calls per step": calls}, None, machine))
    return records


def _profile_steps(num_envs: int, obs_type: str, device: torch.device, steps: int):
    """``({(operator, shapes): (share %, calls per step)}, device µs per step)`` of ``steps`` eager steps."""
    env, actions = seeded_vec_snake(num_envs, obs_type, device)
    step = cycling_steps(env.step, actions)
    for _ in range(3):
        step()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with quiet_profiler(), compat.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    on_device = device.type == "cuda"
    # Host-side operators only: on a GPU each one's self device time is the kernels it launched itself.
    ops = [a for a in prof.key_averages(group_by_input_shape=True)
           if a.device_type == DeviceType.CPU and a.key.startswith("aten::")]
    time_of = (lambda a: a.self_device_time_total) if on_device else (lambda a: a.self_cpu_time_total)
    total = sum(time_of(a) for a in ops)
    if total <= 0:
        raise RuntimeError(f"the profiler recorded no {'GPU' if on_device else 'CPU'} time for the step")
    shares: dict = {}
    for a in ops:
        key = (a.key, _shapes(a.input_shapes))
        share, calls = shares.get(key, (0.0, 0.0))
        shares[key] = (share + 100 * time_of(a) / total, calls + a.count / steps)
    env.close()
    return shares, total / steps


def _shapes(input_shapes) -> str:
    """``[[8650752], [], [196608]]`` as ``8650752, 196608``: the tensors' shapes, scalars left out."""
    return ", ".join("x".join(map(str, shape)) for shape in (input_shapes or []) if shape and
                     all(isinstance(size, int) for size in shape)) or "-"


def floor_table(records) -> Table:
    """Each ``VecSnake`` figure of :func:`floor_throughput`'s records beside its floor: per machine,
    observation, mode and N, the env steps/s, the floor (``bandwidth / bytes``) and the fraction."""
    fractions = {(r.machine, r.variant, r.params.get("num_envs")): r.value for r in records
                 if r.name == FLOOR_NAME and r.metric == FLOOR_METRIC}
    rows = []
    for r in records:
        fraction = fractions.get((r.machine, r.variant, r.params.get("num_envs")))
        if r.name != NAME or fraction is None:
            continue
        mode = next(mode for mode, suffix in reversed(SUFFIXES.items()) if r.variant.endswith(suffix))
        rows.append([r.machine, r.params["obs_type"], mode, f"{r.params['num_envs']:,}", format_number(r.value),
                     format_number(r.value / fraction), f"{fraction:.1%}"])
    return Table(["machine", "observation", "step", "games (N)", "env steps/s", "floor (env steps/s)", "of the floor"],
                 rows, [False, False, False, True, True, True, True])


def op_share_table(records, limit: int = 8) -> Table:
    """The ``limit`` largest operator shares of each eager step in :func:`step_op_shares`' records."""
    limit = check_int("limit", limit)
    rows, counted = [], {}
    for r in records:
        if r.name != OPS_NAME or r.metric != "share of step time":
            continue
        key = (r.machine, r.params["obs_type"])
        counted[key] = counted.get(key, 0) + 1
        if counted[key] <= limit:
            rows.append([r.machine, r.params["obs_type"], f"{r.params['num_envs']:,}", r.variant,
                         f"{r.params['calls per step']:g}", f"{r.value:.1f}"])
    return Table(["machine", "observation", "games (N)", "operator and its tensors' shapes", "calls per step",
                  "share of the step's time (%)"], rows, [False, False, True, False, True, True])


def measure_env_floor(device: str | torch.device | None = None, progress: bool = True,
                      save: Callable[[list[Record]], object] | None = None) -> list[Record]:
    """The ``env_floor`` bench suite at the default sizes (on a GPU the targets' 4,194,304 features and
    1,048,576 grid games), in three parts: :func:`floor_throughput` eager and compiled, then fused,
    then :func:`step_op_shares`. ``save``: called with each part's records as soon as it ends, so
    that a fused kernel or a profile that fails keeps the figures made before it."""
    parts = (lambda: floor_throughput(device, modes=("eager", "compiled"), progress=progress),
             lambda: floor_throughput(device, modes=("fused",), progress=progress),
             lambda: step_op_shares(device))
    records = []
    for part in parts:
        made = part()
        records += made
        if save is not None:
            save(made)
    return records
