"""Measuring environment throughput: how many Snake steps per second each way of running games gives.

Introduced in notebook 03 (the ``envs`` bench suite: ``python -m rlgpu_helpers bench envs``).

Four ways of running N games, all with random actions and no policy, so only the env is timed:

* ``"SnakeEnv loop"``: one ``SnakeEnv`` stepped by a Python loop (N = 1), resetting it when a
  game ends: the baseline;
* ``"SyncVectorEnv"``: gymnasium's in-process vector of N ``SnakeEnv`` (a Python loop inside);
* ``"AsyncVectorEnv"``: gymnasium's subprocess vector, one process per game, talking over pipes;
* ``"VecSnake features"`` / ``"VecSnake grid"``: one ``VecSnake``, N games as tensors, with either
  observation type.

Every figure is a :class:`~rlgpu_helpers.measure.records.Record` named ``"env_step"``, metric
``"throughput"``, unit ``"steps/s"`` (one step of one game; a vector step of N games counts N),
with params ``{"num_envs", "obs_type", "device"}``. ``device`` says where the games ran: the
gymnasium envs always run on the host CPU, ``VecSnake`` on the device asked for.

How it is timed, and why. A shared machine is noisy in both directions (a neighbour's job slows a
run down; a burst of turbo speeds one up), so each figure comes from several timed runs, each
long enough (about 0.2 s at full size) to span many steps, after warm-up calls. The figure is the
median steps/s over the runs, and its spread the interquartile range, so one disturbed run moves
neither. Actions are drawn up front from a seeded generator and cycled through, so the random
number generator is not what gets timed.

:func:`heavy_env_throughput` runs the experiment of notebook 03 where each game's step is made
artificially expensive (:class:`~rlgpu_helpers.snake.cpu_vector.BusyWaitWrapper`), to find the per-step
cost at which subprocesses start to beat the in-process loop (:func:`async_crossover`).
:func:`best_per_variant` picks, from any records, the number of games at which each variant was
fastest, and :func:`microseconds_per_step` turns a record back into the time of one step.

Two helpers read the records against what else is known:

* :func:`fps_claim_checks` puts each row of the guide's FPS table (:data:`FPS_CLAIMS`, figures
  in :mod:`~rlgpu_helpers.measure.claims`) beside the record that answers it, judged by
  :func:`~rlgpu_helpers.measure.claims.judge` with the record's spread, or says why no record
  does (the GPU rows need a GPU measurement, from this run or from ``data/reference/``);
  :func:`claim_checks_table` shows them.
* :func:`vec_snake_step_memory` measures what one ``VecSnake`` step asks of memory on the CPU:
  the bytes of the observations it returns and the pages it takes fresh from the operating
  system; :func:`step_memory_table` sets them beside the measured steps/s.

Notebook 04 adds the GPU side:

* :func:`default_scaling_num_envs`: N from 1 to the largest the device is given (2**24 on a GPU,
  or as many as fit; an N that runs out of device memory is skipped, and the reason printed);
* :func:`time_per_step_records` turns steps/s into the time of one step of N games, and
  :func:`flat_until` reads up to which N that time stays flat; :func:`same_cost_checks` judges
  the guide's "same computational cost for 1 or 256 environments" on GPU records;
* the cost of each host-device synchronization: :func:`sync_cost_throughput` measures
  :class:`~rlgpu_helpers.snake.naive_tensor.NaiveTensorSnake` with each of its sync points
  switched on alone (records named ``"env_step_syncs"``) beside ``VecSnake`` on the same device,
  :func:`audit_sync_points` counts the synchronizations of each with the sync audit,
  :func:`sync_audit_table` and :func:`sync_cost_table` show them, and
  :func:`measure_sync_costs` is both, as records, for the GPU sweep.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv
from tqdm.auto import tqdm

from ..core.checks import (
    check_choices,
    check_int,
    check_ints,
    check_number,
    check_numbers,
)
from ..core.config import pick
from ..core.device import device_report, get_device, logical_cores, machine_label
from ..gpu.memory import try_to_fit
from ..gpu.sync import SyncRow, audit_syncs
from ..snake import rules
from ..snake.cpu_vector import VECTOR_KINDS, make_cpu_vector_env
from ..snake.env import SnakeEnv
from ..snake.naive_tensor import SYNC_POINTS, NaiveTensorSnake
from ..snake.rules import FIRST_OBS_TYPES, NUM_ACTIONS, OBS_TYPES
from ..snake.vec import VecSnake
from ..measure.claims import APPROX, CLAIMS, Claim, Verdict, judge, record_ratio, speedup_spread
from ..measure.records import Record
from ..measure.table import Table, format_number
from ..measure.timing import time_callable

NAME = "env_step"
HEAVY_NAME = "env_step_heavy"
METRIC = "throughput"
UNIT = "steps/s"
VARIANTS = {
    "loop": "SnakeEnv loop",
    "sync": "SyncVectorEnv",
    "async": "AsyncVectorEnv",
    "features": "VecSnake features",
    "grid": "VecSnake grid",
}
_ACTION_SETS = 16  # pre-drawn action batches, cycled through
_SEED = 0

# A job is (variant, params, make, timed_on): make() builds the env and returns
# (step, steps_per_call, close); timed_on is the device time_callable waits for.
_Job = tuple[str, dict, Callable[[], tuple[Callable[[], object], int, Callable[[], None]]], torch.device]
_CPU = torch.device("cpu")


# ---------------------------------------------------------------------------- sizes and checks

def default_vec_num_envs(device: str | torch.device | None = "cpu") -> tuple[int, ...]:
    """N for ``VecSnake`` on ``device``, in powers of 4; 1, 16, 256 in quick mode.

    At full size: 1 to 65,536 on a CPU; 1 to 16,777,216 (2**24) on a GPU, where the largest that
    do not fit in its memory are skipped when measured (see :func:`vec_snake_throughput`).
    """
    largest = 8 if _device_type(device) == "cpu" else 12
    return pick(full=tuple(4**k for k in range(largest + 1)), quick=(1, 16, 256))


def _device_type(device) -> str:
    """"cpu", "cuda", ... of ``device`` (None: the best available), without needing it to be here:
    sizes depend only on the kind of device."""
    if device is None:
        return get_device().type
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device={device!r} must be a str, a torch.device or None")
    return torch.device(device).type


def default_scaling_num_envs(device: str | torch.device | None = None) -> tuple[int, ...]:
    """N for notebook 04's steps/s against N: 1 to 262,144 on a CPU (a longer run than notebook
    03's, still a few seconds per size), :func:`default_vec_num_envs` on a GPU; small in quick mode."""
    if _device_type(device) == "cpu":
        return pick(full=tuple(4**k for k in range(10)), quick=(1, 16, 256))
    return default_vec_num_envs(device)


def default_gym_num_envs() -> tuple[int, ...]:
    """N for gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv``: 1 to 16; 1 and 4 in quick mode."""
    return pick(full=(1, 2, 4, 8, 16), quick=(1, 4))


def default_step_costs_s() -> tuple[float, ...]:
    """Extra CPU seconds per game step for :func:`heavy_env_throughput`: 1 µs to 10 ms (2 costs in quick mode)."""
    return pick(full=(1e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2), quick=(1e-5, 1e-3))


def default_heavy_num_envs() -> int:
    """Games in the heavy-env experiment: one per logical core (at least 2, at most 8)."""
    cores = logical_cores() or 2
    return min(8, max(2, cores))


def _run_seconds() -> float:
    return pick(full=0.2, quick=0.005)


def _repeats() -> int:
    return pick(full=9, quick=3)


def _label(device) -> str:
    return machine_label(device_report(device))


# ---------------------------------------------------------------------------- env builders

def _snake_loop(obs_type: str):
    """One SnakeEnv in a Python loop, reset when a game ends: what a naive agent's loop does."""
    env = SnakeEnv(obs_type=obs_type)
    env.reset(seed=_SEED)
    actions = np.random.default_rng(_SEED).integers(0, NUM_ACTIONS, size=1024).tolist()
    count = len(actions)
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] = i + 1
        _, _, terminated, truncated, _ = env.step(actions[i % count])
        if terminated or truncated:
            env.reset()

    return step, 1, env.close


def _gym_vector(kind: str, num_envs: int, obs_type: str = "features", step_cost_s: float = 0.0):
    env = make_cpu_vector_env(num_envs, kind=kind, seed=_SEED, step_cost_s=step_cost_s, obs_type=obs_type)
    if kind == "async" and not isinstance(env, AsyncVectorEnv):
        env.close()
        raise _NoSubprocesses()
    env.reset(seed=_SEED)
    actions = list(np.random.default_rng(_SEED).integers(0, NUM_ACTIONS, size=(_ACTION_SETS, num_envs)))
    return _cycling_steps(env, actions), num_envs, env.close


def _vec_snake(num_envs: int, obs_type: str, device: torch.device):
    env = VecSnake(num_envs, obs_type=obs_type, device=device, seed=_SEED, check_action_values=False)
    generator = torch.Generator().manual_seed(_SEED)
    actions = [torch.randint(0, NUM_ACTIONS, (num_envs,), generator=generator).to(device)
               for _ in range(_ACTION_SETS)]
    return _cycling_steps(env, actions), num_envs, env.close


def _cycling_steps(env, actions: list):
    """A callable that steps ``env`` once with the next of the pre-drawn ``actions``."""
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] = i + 1
        env.step(actions[i % len(actions)])

    return step


class _NoSubprocesses(Exception):
    """AsyncVectorEnv fell back to SyncVectorEnv here (make_cpu_vector_env printed why)."""


# ---------------------------------------------------------------------------- timing

def _steps_per_second(step: Callable[[], object], steps_per_call: int,
                      device: torch.device) -> tuple[float, float]:
    """Median steps/s over the timed runs and its interquartile range.

    Three probe calls (after a warm-up call) size each run to about ``_run_seconds()``.
    """
    probe = time_callable(step, warmup=1, repeats=3, device=device).median
    number = max(1, math.ceil(_run_seconds() / max(probe, 1e-9)))
    timing = time_callable(step, warmup=min(number, 10), repeats=_repeats(), number=number, device=device)
    return timing.rate(steps_per_call)


def _measure(make, timed_on: torch.device) -> tuple[float, float]:
    """Build a job's env, time it (:func:`_steps_per_second`) and close it."""
    step, steps_per_call, close = make()
    try:
        return _steps_per_second(step, steps_per_call, timed_on)
    finally:
        close()


def _run_jobs(jobs: Sequence[_Job], name: str, machine: str, progress: bool, desc: str) -> list[Record]:
    """Build, time and close each job's env in turn, with one progress bar across all of them.

    A job that runs out of device memory leaves no record: the reason is printed, and the
    variant's later jobs with as many games or more are skipped (they would not fit either).
    """
    records = []
    no_subprocesses = False
    too_big: dict[str, int] = {}  # variant -> the smallest N that did not fit
    with tqdm(jobs, desc=desc, disable=not progress) as bar:
        for variant, params, make, timed_on in bar:
            n = params["num_envs"]
            bar.set_postfix_str(f"{variant}, N={n:,}", refresh=False)
            if no_subprocesses and variant == VARIANTS["async"]:
                continue
            if variant in too_big and n >= too_big[variant]:
                continue
            try:
                measured, out_of_memory = try_to_fit(lambda: _measure(make, timed_on), timed_on)
            except _NoSubprocesses:
                no_subprocesses = True  # nothing measured: no record rather than a mislabelled one
                continue
            if out_of_memory is not None:
                too_big[variant] = n
                print(f"{variant} at N={n:,} did not fit in {timed_on.type} memory ({out_of_memory}): "
                      "no record, and none at larger N")
                continue
            value, spread = measured
            records.append(Record(name, variant, METRIC, value, UNIT, dict(params), spread, machine))
    return records


def _loop_jobs(obs_type: str) -> list[_Job]:
    params = {"num_envs": 1, "obs_type": obs_type, "device": "cpu"}
    return [(VARIANTS["loop"], params, lambda: _snake_loop(obs_type), _CPU)]


def _gym_jobs(kinds, num_envs, obs_type: str) -> list[_Job]:
    return [(VARIANTS[kind], {"num_envs": n, "obs_type": obs_type, "device": "cpu"},
             lambda kind=kind, n=n: _gym_vector(kind, n, obs_type), _CPU)
            for kind in kinds for n in num_envs]


def _vec_jobs(num_envs, obs_types, device: torch.device) -> list[_Job]:
    return [(VARIANTS[obs], {"num_envs": n, "obs_type": obs, "device": device.type},
             lambda n=n, obs=obs: _vec_snake(n, obs, device), device)
            for obs in obs_types for n in num_envs]


# ---------------------------------------------------------------------------- public API

def snake_loop_throughput(device: str | torch.device | None = "cpu", *, obs_type: str = "features",
                          progress: bool = False) -> list[Record]:
    """Steps/s of one ``SnakeEnv`` stepped by a Python loop: the baseline (one record).

    The game runs on the host CPU whatever ``device`` is; ``device`` only chooses the record's
    machine label, so that records of one run share it.
    """
    device = get_device(device)
    rules.check_obs_type(obs_type)
    return _run_jobs(_loop_jobs(obs_type), NAME, _label(device), progress, "SnakeEnv loop")


def gym_vector_throughput(device: str | torch.device | None = "cpu", *, kinds=VECTOR_KINDS,
                          num_envs=None, obs_type: str = "features", progress: bool = True) -> list[Record]:
    """Steps/s of gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv`` of N ``SnakeEnv`` each.

    ``num_envs`` defaults to :func:`default_gym_num_envs`. Where subprocesses cannot start,
    ``AsyncVectorEnv`` is skipped (no record; the reason is printed). The games run on the host
    CPU; ``device`` only chooses the records' machine label.
    """
    device = get_device(device)
    kinds = check_choices("kinds", kinds, VECTOR_KINDS)
    num_envs = check_ints("num_envs", default_gym_num_envs() if num_envs is None else num_envs)
    rules.check_obs_type(obs_type)
    jobs = _gym_jobs(kinds, num_envs, obs_type)
    return _run_jobs(jobs, NAME, _label(device), progress, "gymnasium vector envs")


def vec_snake_throughput(device: str | torch.device | None = None, *, num_envs=None,
                         obs_types=FIRST_OBS_TYPES, progress: bool = True, machine: str | None = None) -> list[Record]:
    """Steps/s of ``VecSnake`` on ``device`` for each N and observation type.

    ``num_envs`` defaults to :func:`default_vec_num_envs` for ``device`` (1 to 65,536 on a CPU,
    to 16,777,216 on a GPU, at full size). An N that does not fit in the device's memory gives
    no record (the reason is printed), nor does any larger N of that observation type. The env
    runs without the per-step action check (``check_action_values=False``), as a training loop
    that makes valid actions would.

    ``machine`` is the records' machine label (default: the label of ``device``). Notebook 04
    measures the CPU of a GPU machine under the GPU machine's label, so that one run's records
    share it; ``params["device"]`` always says where the games ran.
    """
    device = get_device(device)
    num_envs = check_ints("num_envs", default_vec_num_envs(device) if num_envs is None else num_envs)
    obs_types = check_choices("obs_types", obs_types, OBS_TYPES)
    label = _check_machine(machine) if machine is not None else _label(device)
    return _run_jobs(_vec_jobs(num_envs, obs_types, device), NAME, label, progress, "VecSnake")


def _check_machine(machine) -> str:
    if not isinstance(machine, str) or not machine:
        raise ValueError(f"machine={machine!r} must be a machine label such as 'cpu-amd-epyc-2c'")
    return machine


def measure_env_throughput(device: str | torch.device | None = None, progress: bool = True, *,
                           vec_num_envs=None, gym_num_envs=None) -> list[Record]:
    """The ``envs`` bench suite: every variant of :data:`VARIANTS`, one progress bar.

    ``SnakeEnv`` in a Python loop, ``SyncVectorEnv`` and ``AsyncVectorEnv`` at
    :func:`default_gym_num_envs` (features observations, on the host CPU), and ``VecSnake`` on
    ``device`` at :func:`default_vec_num_envs` with both observation types (on a GPU up to
    16,777,216 games, or as many as fit). About a minute and a half at full size on two CPU
    cores; seconds in quick mode.
    """
    device = get_device(device)
    vec_num_envs = check_ints("vec_num_envs", default_vec_num_envs(device) if vec_num_envs is None else vec_num_envs)
    gym_num_envs = check_ints("gym_num_envs", default_gym_num_envs() if gym_num_envs is None else gym_num_envs)
    jobs = (_loop_jobs("features") + _gym_jobs(VECTOR_KINDS, gym_num_envs, "features")
            + _vec_jobs(vec_num_envs, FIRST_OBS_TYPES, device))
    return _run_jobs(jobs, NAME, _label(device), progress, "envs")


def heavy_env_throughput(step_costs_s=None, *, num_envs: int | None = None, kinds=VECTOR_KINDS,
                         device: str | torch.device | None = "cpu", progress: bool = True) -> list[Record]:
    """Steps/s of ``SyncVectorEnv`` vs ``AsyncVectorEnv`` when every game step costs extra CPU time.

    Each game is wrapped in :class:`~rlgpu_helpers.snake.cpu_vector.BusyWaitWrapper`, which burns
    ``step_cost_s`` seconds of CPU per step, standing in for a heavy simulator. Records are named
    ``"env_step_heavy"`` with params ``{"step_cost_us", "num_envs", "obs_type", "device"}``
    (the cost in microseconds, for plotting). ``step_costs_s`` defaults to
    :func:`default_step_costs_s`, ``num_envs`` to :func:`default_heavy_num_envs` (one game per
    core, so each subprocess can have a core). ``device`` only chooses the machine label.
    """
    device = get_device(device)
    costs = check_numbers("step_costs_s", default_step_costs_s() if step_costs_s is None else step_costs_s,
                          at_least=0, below=1)
    n = check_int("num_envs", default_heavy_num_envs() if num_envs is None else num_envs)
    kinds = check_choices("kinds", kinds, VECTOR_KINDS)
    jobs = [(VARIANTS[kind],
             {"step_cost_us": round(cost * 1e6, 3), "num_envs": n, "obs_type": "features", "device": "cpu"},
             lambda kind=kind, cost=cost: _gym_vector(kind, n, "features", cost), _CPU)
            for cost in costs for kind in kinds]
    return _run_jobs(jobs, HEAVY_NAME, _label(device), progress, "heavy env")


# ---------------------------------------------------------------------------- reading the records

def _check_same_measure(records, name: str) -> list[Record]:
    records = list(records)
    bad = [r for r in records if not isinstance(r, Record)]
    if bad:
        raise TypeError(f"{name} must hold only Record objects, not {bad[0]!r}")
    if not records:
        raise ValueError(f"{name}=[] holds no records")
    measures = sorted({(r.metric, r.unit) for r in records})
    if len(measures) != 1:
        raise ValueError(f"{name} mix metrics/units {measures}: pass records of one metric")
    return records


def best_per_variant(records: Sequence[Record], x: str = "num_envs") -> list[Record]:
    """For each (machine, benchmark, variant), the record with the highest value.

    With env throughput records this is the number of games (``record.params[x]``) at which each
    variant ran fastest. Every record must carry the parameter ``x``; ties go to the smaller
    ``x``. The result keeps the order in which the groups first appear.
    """
    records = _check_same_measure(records, "records")
    if not isinstance(x, str) or not x:
        raise ValueError(f"x={x!r} must be the name of a parameter, such as 'num_envs'")
    best: dict[tuple, Record] = {}
    for record in records:
        if x not in record.params:
            raise ValueError(f"x={x!r}: record {record.name}/{record.variant} on {record.machine} "
                             f"has params {record.params}, without {x!r}")
        key = (record.machine, record.name, record.variant)
        held = best.get(key)
        if held is None or (record.value, -record.params[x]) > (held.value, -held.params[x]):
            best[key] = record
    return list(best.values())


def async_crossover(records: Sequence[Record]) -> float | None:
    """The smallest per-step cost (µs) from which ``AsyncVectorEnv`` beats ``SyncVectorEnv``.

    Reads the records of :func:`heavy_env_throughput` (one machine): the first measured
    ``step_cost_us`` at which the async figure exceeds the sync one and stays above it at every
    larger cost. None when async never wins, or where only one kind was measured.
    """
    records = _check_same_measure(records, "records")
    machines = sorted({r.machine for r in records})
    if len(machines) != 1:
        raise ValueError(f"records come from machines {machines}: pass one machine's records")
    by_kind: dict[str, dict[float, float]] = {}
    for record in records:
        if "step_cost_us" not in record.params:
            raise ValueError(f"records: {record.name}/{record.variant} has params {record.params}, "
                             "without 'step_cost_us' (not from heavy_env_throughput)")
        by_kind.setdefault(record.variant, {})[record.params["step_cost_us"]] = record.value
    sync, asynchronous = by_kind.get(VARIANTS["sync"]), by_kind.get(VARIANTS["async"])
    if not sync or not asynchronous:
        return None
    costs = sorted(set(sync) & set(asynchronous))
    crossover = None
    for cost in reversed(costs):
        if asynchronous[cost] > sync[cost]:
            crossover = cost
        else:
            break
    return crossover


def microseconds_per_step(records: Sequence[Record], variant: str, num_envs: int = 1) -> float:
    """Microseconds one ``step`` call of ``num_envs`` games took: ``num_envs / (steps/s) * 1e6``.

    Reads the one steps/s record of ``variant`` at ``num_envs`` in ``records`` (one run's
    records: one machine, one observation type per variant). Raises ValueError when there is
    none, or more than one.
    """
    records = _check_same_measure(records, "records")
    num_envs = check_int("num_envs", num_envs)
    matches = [r for r in records if r.variant == variant and r.params.get("num_envs") == num_envs]
    if not matches:
        measured = sorted({(r.variant, r.params.get("num_envs")) for r in records}, key=str)
        raise ValueError(f"no record of variant={variant!r} at num_envs={num_envs}; records hold {measured}")
    if len(matches) > 1:
        raise ValueError(f"{len(matches)} records of variant={variant!r} at num_envs={num_envs} "
                         f"(machines {sorted({r.machine for r in matches})}): pass one run's records")
    record, = matches
    if record.unit != UNIT or record.value <= 0:
        raise ValueError(f"record {record.variant} at N={num_envs} is {record.value} {record.unit}: "
                         f"a time per step needs a positive figure in {UNIT}")
    return num_envs / record.value * 1e6


# ---------------------------------------------------------------------------- the guide's FPS table

FPS_CLAIMS = ("single-env-fps", "cpu-16-envs-fps", "gpu-64-envs-fps", "gpu-256-envs-fps", "vectorized-speedup")
"""The claims of the guide's FPS table (keys of :data:`~rlgpu_helpers.measure.claims.CLAIMS`)
that env throughput records answer."""

SPEEDUP_NUM_ENVS = 256
"""N at which the "vectorized on a GPU vs one CPU env" speedup is judged: the guide's table ends
with 256 GPU envs, and its speedup range contains that row over its single env."""

NOT_MEASURED = "not measured"
NO_GPU_RECORD = ("no GPU record, from this run or in data/reference/ "
                 "(notebook 04 measures VecSnake on a GPU)")


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
    """One claim of the guide's FPS table beside the measurement that answers it.

    ``answered_by`` names that measurement (variant, N, device, machine). ``verdict`` is
    :func:`~rlgpu_helpers.measure.claims.judge`'s; None where no record answers the claim, and then
    ``answered_by`` says why.
    """

    claim: Claim
    answered_by: str
    verdict: Verdict | None = None

    @property
    def outcome(self) -> str:
        """The verdict's outcome, or :data:`NOT_MEASURED`."""
        return self.verdict.outcome if self.verdict is not None else NOT_MEASURED


def _env_step_records(records, name: str) -> list[Record]:
    records = list(records)
    bad = [r for r in records if not isinstance(r, Record)]
    if bad:
        raise TypeError(f"{name} must hold only Record objects, not {bad[0]!r}")
    return [r for r in records if r.name == NAME and r.metric == METRIC and r.unit == UNIT]


def _spread(record: Record) -> float:
    return record.spread if record.spread is not None else 0.0


def _describe(record: Record) -> str:
    return f"{record.variant}, N={record.params['num_envs']:,}, {record.params.get('device', '?')}, {record.machine}"


def _at(records: list[Record], variant: str, num_envs: int, device: str | None = None) -> list[Record]:
    return [r for r in records if r.variant == variant and r.params.get("num_envs") == num_envs
            and (device is None or r.params.get("device") == device)]


def _gpu_per_machine(records: list[Record], num_envs: int) -> dict[str, Record]:
    """The first ``VecSnake features`` record on a GPU at ``num_envs``, per machine, in order."""
    found: dict[str, Record] = {}
    for record in _at(records, VARIANTS["features"], num_envs, device="cuda"):
        found.setdefault(record.machine, record)
    return found


def fps_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """Each row of the guide's FPS table (:data:`FPS_CLAIMS`) beside the record that answers it.

    ``records`` are this run's ``env_step`` records, ``reference`` any others (such as
    :func:`~rlgpu_helpers.measure.records.load_reference`); other benchmarks are ignored.

    * "single-env-fps": the ``SnakeEnv`` loop of ``records`` (features observation);
    * "cpu-16-envs-fps": the faster of ``SyncVectorEnv`` and ``AsyncVectorEnv`` at N = 16 in
      ``records``;
    * "gpu-64-envs-fps", "gpu-256-envs-fps": ``VecSnake`` (features) with device ``cuda`` at
      N = 64 and 256, one check per GPU machine in ``records`` then ``reference``. A CPU
      ``VecSnake`` never answers a GPU claim;
    * "vectorized-speedup": that GPU figure at :data:`SPEEDUP_NUM_ENVS` over the ``SnakeEnv``
      loop of the same machine, its spread from both records' relative spreads.

    Each measurement is judged with its spread (a record without one counts as exact). A claim
    no record answers gets a check without a verdict, saying what is missing.
    """
    mine, others = _env_step_records(records, "records"), _env_step_records(reference, "reference")
    everything = mine + others
    checks = []

    claim = CLAIMS["single-env-fps"]
    loops = _at(mine, VARIANTS["loop"], 1)
    loops.sort(key=lambda r: r.params.get("obs_type") != "features")
    if loops:
        checks.append(ClaimCheck(claim, _describe(loops[0]), judge(claim, loops[0].value, _spread(loops[0]))))
    else:
        checks.append(ClaimCheck(claim, "no SnakeEnv loop record in this run"))

    claim = CLAIMS["cpu-16-envs-fps"]
    gym = _at(mine, VARIANTS["sync"], 16) + _at(mine, VARIANTS["async"], 16)
    if gym:
        best = max(gym, key=lambda r: r.value)
        others_at_16 = sorted({r.variant for r in gym} - {best.variant})
        which = (f" (faster than {', '.join(others_at_16)} there)" if others_at_16
                 else " (the only gymnasium vector env measured there)")
        checks.append(ClaimCheck(claim, _describe(best) + which, judge(claim, best.value, _spread(best))))
    else:
        checks.append(ClaimCheck(claim, "no SyncVectorEnv or AsyncVectorEnv record at N=16 in this run"))

    any_gpu = any(r.params.get("device") == "cuda" for r in everything)
    for key, n in (("gpu-64-envs-fps", 64), ("gpu-256-envs-fps", 256)):
        claim = CLAIMS[key]
        found = _gpu_per_machine(everything, n)
        for record in found.values():
            checks.append(ClaimCheck(claim, _describe(record), judge(claim, record.value, _spread(record))))
        if not found:
            checks.append(ClaimCheck(claim, NO_GPU_RECORD if not any_gpu
                                     else f"no VecSnake features record on a GPU at N={n}"))

    claim = CLAIMS["vectorized-speedup"]
    found = _gpu_per_machine(everything, SPEEDUP_NUM_ENVS)
    for machine, vec in found.items():
        loop = next((r for r in _at(everything, VARIANTS["loop"], 1) if r.machine == machine), None)
        if loop is None:
            checks.append(ClaimCheck(claim, f"no SnakeEnv loop record from {machine} to compare its GPU with"))
            continue
        checks.append(ClaimCheck(claim, f"{_describe(vec)} over {loop.variant} on its CPU",
                                 judge(claim, *record_ratio(vec, loop))))
    if not found:
        checks.append(ClaimCheck(claim, NO_GPU_RECORD if not any_gpu
                                 else f"no VecSnake features record on a GPU at N={SPEEDUP_NUM_ENVS}"))
    return checks


def claim_checks_table(checks: Sequence[ClaimCheck],
                       answered_by: str = "answered here by (variant, N, device, machine)") -> Table:
    """One row per check: the guide's words and figure, what answers it, the measurement, the verdict.

    ``answered_by`` heads the column that names the measurement.

    The measurement is the median ± its spread (the IQR; for a speedup, both records' relative
    spreads added in quadrature), in the claim's unit.
    """
    checks = list(checks)
    bad = [c for c in checks if not isinstance(c, ClaimCheck)]
    if bad:
        raise TypeError(f"checks must hold only ClaimCheck objects, not {bad[0]!r}")
    rows = []
    for check in checks:
        verdict = check.verdict
        shown = (f"{format_number(verdict.measured)} ± {format_number(verdict.spread)} {check.claim.unit}"
                 if verdict is not None else "none")
        rows.append([check.claim.quote, check.claim.figure, check.answered_by, shown, check.outcome])
    columns = ["claim (guide's words)", "claimed", answered_by, "measured (median ± spread)", "verdict"]
    return Table(columns, rows, [False, True, False, True, False])


# ---------------------------------------------------------------------------- memory of a step

@dataclasses.dataclass(frozen=True)
class StepMemory:
    """What one ``VecSnake`` step of ``num_envs`` games asked of memory, on the CPU.

    ``observation_bytes``: the bytes of one game's observation (float32). ``returned_bytes``:
    the bytes of the observation tensors one step returns, the observation and
    ``info["final_obs"]`` (each ``(N, *observation shape)``), all written during the step.
    ``page_faults``: the minor page faults the process took per step
    (median over the measured steps), each a page of ``page_size`` bytes that the operating
    system had to map, and fill with zeros, because the allocator asked it for fresh memory;
    None where the operating system does not count them.
    """

    num_envs: int
    obs_type: str
    observation_bytes: int
    returned_bytes: int
    page_faults: float | None
    page_size: int

    @property
    def bytes_per_game(self) -> float:
        """Observation bytes returned per game and step (:attr:`returned_bytes` / N)."""
        return self.returned_bytes / self.num_envs

    @property
    def fresh_bytes(self) -> float | None:
        """Bytes of fresh pages per step (``page_faults * page_size``), or None."""
        return None if self.page_faults is None else self.page_faults * self.page_size

    def bytes_per_second(self, steps_per_second: float) -> float:
        """Observation bytes written per second at a throughput of ``steps_per_second`` game steps."""
        return self.bytes_per_game * check_number("steps_per_second", steps_per_second, at_least=0)


def _minor_page_faults() -> int | None:
    """Minor page faults of this process so far; None where ``resource`` is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _page_size() -> int:
    import mmap
    return mmap.PAGESIZE


def vec_snake_step_memory(num_envs=None, *, obs_type: str = "grid", steps: int | None = None,
                          progress: bool = False) -> list[StepMemory]:
    """Measure, for each N, what one step of a CPU ``VecSnake`` asks of memory (:class:`StepMemory`).

    For each N (default :func:`default_vec_num_envs`): a seeded env, two warm-up steps (the
    allocator settles), the bytes of the observations one step returns, then the page faults of
    each of ``steps`` steps (default 5, 2 in quick mode) and their median. Page faults counted
    while another thread of the process works count too; the median resists a few.
    """
    num_envs = check_ints("num_envs", default_vec_num_envs() if num_envs is None else num_envs)
    rules.check_obs_type(obs_type)
    steps = check_int("steps", pick(full=5, quick=2) if steps is None else steps)
    results = []
    for n in tqdm(num_envs, desc=f"VecSnake {obs_type} memory", disable=not progress):
        env = VecSnake(n, obs_type=obs_type, device=_CPU, seed=_SEED, check_action_values=False)
        try:
            generator = torch.Generator().manual_seed(_SEED)
            actions = [torch.randint(0, NUM_ACTIONS, (n,), generator=generator) for _ in range(_ACTION_SETS)]
            env.reset(seed=_SEED)
            env.step(actions[0])
            obs, _, _, _, info = env.step(actions[1])
            observation_bytes = obs[0].nbytes
            returned_bytes = obs.nbytes + info["final_obs"].nbytes
            del obs, info
            faults = []
            for i in range(steps):
                before = _minor_page_faults()
                env.step(actions[(i + 2) % _ACTION_SETS])
                after = _minor_page_faults()
                if before is not None and after is not None:
                    faults.append(after - before)
        finally:
            env.close()
        page_faults = float(statistics.median(faults)) if faults else None
        results.append(StepMemory(n, obs_type, observation_bytes, returned_bytes, page_faults, _page_size()))
    return results


def step_memory_table(memory: Sequence[StepMemory], throughput: Sequence[Record] = ()) -> Table:
    """:func:`vec_snake_step_memory` beside the steps/s of the same ``VecSnake`` on the CPU.

    ``throughput``: env throughput records of one machine (others are ignored); a row whose
    N has no CPU record of the matching ``VecSnake`` variant leaves those cells empty.
    """
    memory = list(memory)
    bad = [m for m in memory if not isinstance(m, StepMemory)]
    if bad:
        raise TypeError(f"memory must hold only StepMemory objects, not {bad[0]!r}")
    rates = [r for r in _env_step_records(throughput, "throughput") if r.params.get("device") == "cpu"]
    machines = sorted({r.machine for r in rates})
    if len(machines) > 1:
        raise ValueError(f"throughput comes from machines {machines}: pass one machine's records")
    by_key = {(r.variant, r.params.get("num_envs")): r for r in rates}
    columns = ["games (N)", "one observation (B/game)", "observations returned (MB/step)",
               "fresh pages from the OS (MB/step)", "throughput (steps/s)", "observations written (GB/s)"]
    rows = []
    for m in memory:
        record = by_key.get((VARIANTS[m.obs_type], m.num_envs))
        fresh = "n/a" if m.fresh_bytes is None else format_number(m.fresh_bytes / 1e6)
        rows.append([f"{m.num_envs:,}", f"{m.observation_bytes:,}", format_number(m.returned_bytes / 1e6),
                     fresh, format_number(record.value) if record else "",
                     format_number(m.bytes_per_second(record.value) / 1e9) if record else ""])
    return Table(columns, rows, [True] * len(columns))


# ---------------------------------------------------------------------------- time per step (notebook 04)

TIME_METRIC = "time per step"
TIME_UNIT = "µs"


def time_per_step_records(records: Sequence[Record]) -> list[Record]:
    """``env_step`` throughput records turned into the time of one ``step`` call of N games, in µs.

    ``N / (steps/s)``; the spread is carried over as a relative spread (the IQR of the rate over
    the rate). Records of other benchmarks are left out.
    """
    out = []
    for record in _env_step_records(records, "records"):
        n = record.params.get("num_envs")
        if not isinstance(n, int) or record.value <= 0:
            raise ValueError(f"record {record.variant} has num_envs={n!r} and {record.value} {record.unit}: "
                             "a time per step needs an int N and a positive rate")
        value = n / record.value * 1e6
        spread = None if record.spread is None else value * record.spread / record.value
        out.append(dataclasses.replace(record, metric=TIME_METRIC, unit=TIME_UNIT, value=value, spread=spread))
    return out


def flat_until(records: Sequence[Record], variant: str, *, device: str | None = None,
               tolerance: float = APPROX) -> tuple[int, int] | None:
    """Up to which N one step costs about as much as a step of one game: ``(N, largest N measured)``.

    Reads the ``env_step`` records of ``variant`` (one machine; ``device`` picks
    ``params["device"]`` where the records hold several) and returns the largest N such that the
    time of a step at every N up to it stays within ``1 + tolerance`` times the time at N = 1
    (``tolerance`` defaults to the claims' "about": 25%). None without a record at N = 1.
    """
    tolerance = check_number("tolerance", tolerance, at_least=0)
    chosen = [r for r in _env_step_records(records, "records")
              if r.variant == variant and (device is None or r.params.get("device") == device)]
    machines = sorted({r.machine for r in chosen})
    if len(machines) > 1:
        raise ValueError(f"records of {variant!r} come from machines {machines}: pass one machine's records")
    times = {r.params["num_envs"]: r.params["num_envs"] / r.value for r in chosen}
    if 1 not in times:
        return None
    flat = 1
    for n in sorted(times):
        if times[n] > times[1] * (1 + tolerance):
            break
        flat = n
    return flat, max(times)


SAME_COST_NUM_ENVS = (1, 256)
"""The two N of the guide's "same computational cost for 1 or 256 environments"."""


def same_cost_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """The guide's "same computational cost for 1 or 256 environments", judged on each GPU.

    The measurement is the time of one ``VecSnake`` (features) step of 256 games over that of
    one game, on a GPU (params ``device == "cuda"``), one check per machine in ``records`` then
    ``reference``; its spread comes from both records' relative spreads. A CPU never answers
    it (the claim is about GPU parallelism); without a GPU record the check says so.
    """
    claim = CLAIMS["same-cost-1-vs-256"]
    everything = _env_step_records(records, "records") + _env_step_records(reference, "reference")
    one, many = SAME_COST_NUM_ENVS
    singles, batches = _gpu_per_machine(everything, one), _gpu_per_machine(everything, many)
    checks = []
    for machine, batch in batches.items():
        single = singles.get(machine)
        if single is None:
            checks.append(ClaimCheck(claim, f"no VecSnake features record from {machine} at N={one}"))
            continue
        ratio = (many / batch.value) / (one / single.value)
        spread = speedup_spread(ratio, _spread(batch) / batch.value, _spread(single) / single.value)
        checks.append(ClaimCheck(claim, f"time of a step at N={many} over N={one}, VecSnake features, "
                                        f"cuda, {machine}", judge(claim, ratio, spread)))
    if not batches:
        any_gpu = any(r.params.get("device") == "cuda" for r in everything)
        checks.append(ClaimCheck(claim, NO_GPU_RECORD if not any_gpu
                                 else f"no VecSnake features record on a GPU at N={many}"))
    return checks


# ---------------------------------------------------------------------------- the cost of each sync point

SYNC_NAME = "env_step_syncs"
SYNC_COUNT_NAME = "env_step_sync_count"
SYNC_CONFIGS = {
    "VecSnake": None,
    "no syncs": (),
    **{point: (point,) for point in SYNC_POINTS},
    "all four": SYNC_POINTS,
}
"""What :func:`sync_cost_throughput` measures: ``VecSnake``, and ``NaiveTensorSnake`` with no sync
point, each one alone, and all four (a typical tutorial env). Values: its ``syncs=`` (None: VecSnake)."""


def sync_variant(config: str) -> str:
    """The record variant of a :data:`SYNC_CONFIGS` key: "VecSnake", "NaiveTensorSnake + if_any", ..."""
    check_choices("config", config, tuple(SYNC_CONFIGS))
    if config == "VecSnake":
        return "VecSnake"
    if config in SYNC_POINTS:
        return f"NaiveTensorSnake + {config}"
    return f"NaiveTensorSnake, {config}"


def default_sync_num_envs(device: str | torch.device | None = None) -> tuple[int, ...]:
    """N for :func:`sync_cost_throughput`: 16, 1,024 and 65,536 games (and 1,048,576 on a GPU); 16 in quick mode."""
    extra = () if _device_type(device) == "cpu" else (1_048_576,)
    return pick(full=(16, 1024, 65_536, *extra), quick=(16,))


def _sync_env(config: str, num_envs: int, obs_type: str, device: torch.device):
    syncs = SYNC_CONFIGS[config]
    if syncs is None:
        env = VecSnake(num_envs, obs_type=obs_type, device=device, seed=_SEED, check_action_values=False)
    else:
        env = NaiveTensorSnake(num_envs, obs_type=obs_type, device=device, seed=_SEED, syncs=syncs,
                               check_action_values=False)
    generator = torch.Generator().manual_seed(_SEED)
    actions = [torch.randint(0, NUM_ACTIONS, (num_envs,), generator=generator).to(device)
               for _ in range(_ACTION_SETS)]
    return env, actions


def _sync_job(config: str, num_envs: int, obs_type: str, device: torch.device):
    env, actions = _sync_env(config, num_envs, obs_type, device)
    return _cycling_steps(env, actions), num_envs, env.close


def sync_cost_throughput(device: str | torch.device | None = None, *, num_envs=None, configs=tuple(SYNC_CONFIGS),
                         obs_type: str = "features", progress: bool = True,
                         machine: str | None = None) -> list[Record]:
    """Steps/s of ``VecSnake`` and of ``NaiveTensorSnake`` with each sync point alone, on ``device``.

    ``configs`` are keys of :data:`SYNC_CONFIGS` (default: all), ``num_envs`` defaults to
    :func:`default_sync_num_envs`. Records are named ``"env_step_syncs"``, metric
    ``"throughput"`` in steps/s, variant from :func:`sync_variant`, params ``{"num_envs",
    "obs_type", "device"}``; ``machine`` labels them as in :func:`vec_snake_throughput`. Every env
    runs without its action check, so the only synchronizations are the switched ones.
    """
    device = get_device(device)
    num_envs = check_ints("num_envs", default_sync_num_envs(device) if num_envs is None else num_envs)
    configs = check_choices("configs", configs, tuple(SYNC_CONFIGS))
    rules.check_obs_type(obs_type)
    label = _check_machine(machine) if machine is not None else _label(device)
    jobs = [(sync_variant(config), {"num_envs": n, "obs_type": obs_type, "device": device.type},
             lambda config=config, n=n: _sync_job(config, n, obs_type, device), device)
            for n in num_envs for config in configs]
    return _run_jobs(jobs, SYNC_NAME, label, progress, "sync points")


@dataclasses.dataclass(frozen=True)
class SyncAudit:
    """The sync audit of ``steps`` steps of one configuration (a :data:`SYNC_CONFIGS` key) at N games.

    ``rows`` are :func:`~rlgpu_helpers.gpu.sync.audit_syncs`' rows (operator, count over all the
    steps, where); ``method`` is its method ("rules" on a CPU, "cuda" on a GPU).
    """

    config: str
    num_envs: int
    steps: int
    method: str
    rows: tuple[SyncRow, ...]
    device: str = "cpu"

    @property
    def per_step(self) -> float:
        """Synchronizations per step, all operators together."""
        return sum(row.count for row in self.rows) / self.steps


def audit_sync_points(num_envs=256, *, device: str | torch.device | None = "cpu", configs=tuple(SYNC_CONFIGS),
                      steps: int = 20, obs_type: str = "features", method: str | None = None) -> list[SyncAudit]:
    """Run the sync audit over ``steps`` steps of each configuration at each N in ``num_envs``.

    Each env is seeded and stepped 3 times first (outside the audit), then audited over
    ``steps`` steps with pre-drawn actions. On a CPU (the CPU rules of the audit) the counts
    are the same on every machine; on a GPU the audit asks the CUDA runtime (``method`` as in
    :func:`~rlgpu_helpers.gpu.sync.audit_syncs`). How many synchronizations a step makes can
    depend on its games: an ``if`` on ``done.any()`` skips the reset when no game ended.
    """
    device = get_device(device)
    num_envs = check_ints("num_envs", num_envs)
    configs = check_choices("configs", configs, tuple(SYNC_CONFIGS))
    steps = check_int("steps", steps)
    rules.check_obs_type(obs_type)
    audits = []
    for n in num_envs:
        for config in configs:
            env, actions = _sync_env(config, n, obs_type, device)
            for a in actions[:3]:
                env.step(a)
            timed = [actions[(3 + i) % _ACTION_SETS] for i in range(steps)]

            def run(env=env, timed=timed):
                for a in timed:
                    env.step(a)

            report = audit_syncs(run, device, method=method, warmup=0)
            audits.append(SyncAudit(config, n, steps, report.method, tuple(report.rows), device.type))
            env.close()
    return audits


def _per_step(count: float, steps: int) -> str:
    value = count / steps
    return f"{value:g}" if value == round(value, 2) else format_number(value)


def sync_audit_table(audits: Sequence[SyncAudit]) -> Table:
    """One row per operator that synchronized, per configuration and N: how many per step, and where.

    A configuration that made none gets one row saying so.
    """
    audits = list(audits)
    bad = [a for a in audits if not isinstance(a, SyncAudit)]
    if bad:
        raise TypeError(f"audits must hold only SyncAudit objects, not {bad[0]!r}")
    rows = []
    for audit in audits:
        switched = "VecSnake (not NaiveTensorSnake)" if audit.config == "VecSnake" else audit.config
        if not audit.rows:
            rows.append([switched, f"{audit.num_envs:,}", "none", "0", ""])
        for row in audit.rows:
            rows.append([switched, f"{audit.num_envs:,}", row.operator, _per_step(row.count, audit.steps),
                         row.where])
    columns = ["sync points switched on", "games (N)", "operator that synchronizes", "syncs per step", "where"]
    return Table(columns, rows, [False, True, False, True, False])


@dataclasses.dataclass(frozen=True)
class SyncCost:
    """One configuration's step beside the sync-free ``NaiveTensorSnake`` at the same N and device.

    Times in µs per step of N games; ``extra_us`` is this step's time minus the sync-free one's,
    ``spread_us`` the two spreads added in quadrature; ``syncs_per_step`` from an audit at the
    same N (None without one).
    """

    config: str
    num_envs: int
    device: str
    machine: str
    steps_per_second: float
    time_us: float
    extra_us: float | None
    spread_us: float | None
    syncs_per_step: float | None

    @property
    def beyond_noise(self) -> bool | None:
        """Whether the change in time is larger than its spread (None for the reference rows)."""
        if self.extra_us is None:
            return None
        return abs(self.extra_us) > (self.spread_us or 0.0)

    @property
    def per_sync_us(self) -> float | None:
        """The change in time per synchronization, where the step makes some."""
        if self.extra_us is None or not self.syncs_per_step:
            return None
        return self.extra_us / self.syncs_per_step


def sync_costs(records: Sequence[Record], audits: Sequence[SyncAudit] = ()) -> list[SyncCost]:
    """Each ``env_step_syncs`` record beside the sync-free ``NaiveTensorSnake`` of its machine, device and N.

    Syncs per step come from ``audits`` made on the record's device type at the same N, or from
    ``"env_step_sync_count"`` records of the same machine among ``records`` (what
    :func:`measure_sync_costs` stores); the sync-free configurations make none by design.
    """
    records = [r for r in list(records) if isinstance(r, Record)]
    bad = [a for a in audits if not isinstance(a, SyncAudit)]
    if bad:
        raise TypeError(f"audits must hold only SyncAudit objects, not {bad[0]!r}")
    by_variant = {sync_variant(config): config for config in SYNC_CONFIGS}
    counts = {(None, a.device, a.config, a.num_envs): a.per_step for a in audits}
    counts.update({(r.machine, r.params.get("device"), by_variant.get(r.variant), r.params.get("num_envs")): r.value
                   for r in records if r.name == SYNC_COUNT_NAME})
    records = [r for r in records if r.name == SYNC_NAME]
    base = {(r.machine, r.params.get("device"), r.params.get("num_envs")): r
            for r in records if r.variant == sync_variant("no syncs")}
    costs = []
    for r in records:
        config = by_variant.get(r.variant)
        if config is None:
            raise ValueError(f"record variant {r.variant!r} is not one of sync_cost_throughput's")
        n = r.params["num_envs"]
        time_us = n / r.value * 1e6
        reference = base.get((r.machine, r.params.get("device"), n))
        extra = spread = None
        if reference is not None and config not in ("no syncs", "VecSnake"):
            base_us = n / reference.value * 1e6
            extra = time_us - base_us
            spread = math.hypot(time_us * _spread(r) / r.value, base_us * _spread(reference) / reference.value)
        device = r.params.get("device")
        syncs = counts.get((r.machine, device, config, n), counts.get((None, device, config, n)))
        costs.append(SyncCost(config, n, r.params.get("device", "?"), r.machine, r.value, time_us, extra, spread,
                              0.0 if config in ("no syncs", "VecSnake") and syncs is None else syncs))
    return costs


def sync_cost_table(records: Sequence[Record], audits: Sequence[SyncAudit] = ()) -> Table:
    """:func:`sync_costs` as a table: per N, each configuration's steps/s, time per step, syncs per
    step (from ``audits`` at the same N), and its time beside the sync-free ``NaiveTensorSnake``.

    The last column divides a slowdown by the syncs per step; it is left empty where the step was
    not slower beyond the spread (no cost to share out, or a step that did less work)."""
    rows = []
    for c in sync_costs(records, audits):
        change = "(reference)" if c.config == "no syncs" else ""
        per_sync = ""
        if c.extra_us is not None:
            change = f"{c.extra_us:+,.1f} ± {format_number(c.spread_us)}"
            if c.per_sync_us is not None and c.beyond_noise and c.extra_us > 0:
                per_sync = f"{c.per_sync_us:,.1f}"
        syncs = "" if c.syncs_per_step is None else _per_step(c.syncs_per_step, 1)
        rows.append([c.machine, c.device, f"{c.num_envs:,}", sync_variant(c.config), syncs,
                     format_number(c.steps_per_second), format_number(c.time_us), change, per_sync])
    columns = ["machine", "device", "games (N)", "variant", "syncs per step", "throughput (steps/s)",
               "time per step (µs)", "vs no syncs (µs per step)", "vs no syncs, per sync (µs)"]
    return Table(columns, rows, [False, False, True, False, True, True, True, True, True])



def measure_sync_costs(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """Notebook 04's sync costs on ``device``, for the GPU sweep: :func:`sync_cost_throughput` at
    :func:`default_sync_num_envs`, and the audit's count of synchronizations per step of each
    configuration at each of those N (records ``"env_step_sync_count"``, unit "syncs/step")."""
    device = get_device(device)
    records = sync_cost_throughput(device, progress=progress)
    label = _label(device)
    measured = sorted({r.params["num_envs"] for r in records})
    for audit in audit_sync_points(measured, device=device, steps=pick(full=20, quick=3)):
        records.append(Record(SYNC_COUNT_NAME, sync_variant(audit.config), "syncs per step", audit.per_step,
                              "syncs/step", {"num_envs": audit.num_envs, "obs_type": "features",
                                             "device": device.type, "method": audit.method}, None, label))
    return records
