"""Measuring environment throughput: how many Snake steps per second each way of running games gives.

Introduced in notebook 03 (the ``envs`` bench suite: ``python -m rlgpu_helpers bench envs``).

Four ways of running N games, all with random actions and no policy, so only the env is timed:

* ``"SnakeEnv loop"``: one ``SnakeEnv`` stepped by a Python loop (N = 1), resetting it when a
  game ends: the baseline;
* ``"SyncVectorEnv"``: gymnasium's in-process vector of N ``SnakeEnv`` (a Python loop inside);
* ``"AsyncVectorEnv"``: gymnasium's subprocess vector, one process per game, talking over pipes;
* ``"VecSnake features"`` / ``"VecSnake grid"``: one ``VecSnake``, N games as tensors.

Every figure is a :class:`~rlgpu_helpers.measure.records.Record` named ``"env_step"``, metric
``"throughput"``, unit ``"steps/s"`` (a vector step of N games counts N), with params
``{"num_envs", "obs_type", "device"}``: where the games ran (the gymnasium envs on the host CPU).
A shared machine is noisy both ways, so each figure is the median steps/s of several timed runs of
about 0.2 s after warm-up calls, its spread their interquartile range: one disturbed run moves
neither. The actions are drawn up front and cycled through, so no random number generator is timed.

:func:`heavy_env_throughput` makes each game's step artificially expensive, to find the per-step
cost at which subprocesses beat the in-process loop; :func:`vec_snake_step_memory` measures what one
``VecSnake`` step asks of memory on the CPU. ``env_records`` reads the records, ``fps_claims`` sets
them against the guide's FPS table. The suite also records how near each ``VecSnake`` figure comes
to its memory floor (:func:`floor_records`: ``"env_step_floor"``).
"""

from __future__ import annotations

import dataclasses
import mmap
import re
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
from ..core.device import get_device, logical_cores, machine_of
from ..gpu.memory import try_to_fit
from ..measure.records import Record
from ..measure.table import Table, format_number
from ..measure.timing import rate
from ..snake import rules
from ..snake.cpu_vector import VECTOR_KINDS, make_cpu_vector_env
from ..snake.env import SnakeEnv
from ..snake.rules import FIRST_OBS_TYPES, NUM_ACTIONS, OBS_TYPES
from ..snake.step_bytes import step_bytes
from ..snake.vec import VecSnake
from .ceilings import memory_bandwidth


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
FLOOR_NAME = "env_step_floor"
FLOOR_METRIC = "floor fraction"
FLOOR_UNIT = "of floor"
# Peak memory bandwidth (GB/s) of known GPUs: the first pattern found in the lowercased device name.
# H100 SXM and T4: the course's figures (shared/research/gpu_lessons.md); the others: NVIDIA's sheets.
GPU_BANDWIDTH_GBS = (
    (r"\bh100\b.*\bpcie\b", 2000), (r"\bh100\b", 3350), (r"\bh200\b", 4800),
    (r"\ba100\b.*\b40gb\b", 1555), (r"\ba100\b.*\b80gb\b.*\bpcie\b", 1935), (r"\ba100\b", 2039),
    (r"\bt4\b", 320), (r"\bl4\b", 300),
)
ACTION_SETS = 16  # pre-drawn action batches, cycled through
SEED = 0

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
    largest = 8 if device_type(device) == "cpu" else 12
    return pick(full=tuple(4**k for k in range(largest + 1)), quick=(1, 16, 256))


def device_type(device) -> str:
    """"cpu", "cuda", ... of ``device`` (None: the best available), without needing it to be here:
    sizes depend only on the kind of device."""
    if device is None:
        return get_device().type
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device={device!r} must be a str, a torch.device or None")
    return torch.device(device).type


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


# ---------------------------------------------------------------------------- env builders

def _snake_loop(obs_type: str):
    """One SnakeEnv in a Python loop, reset when a game ends: what a naive agent's loop does."""
    env = SnakeEnv(obs_type=obs_type)
    env.reset(seed=SEED)
    actions = np.random.default_rng(SEED).integers(0, NUM_ACTIONS, size=1024).tolist()
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
    env = make_cpu_vector_env(num_envs, kind=kind, seed=SEED, step_cost_s=step_cost_s, obs_type=obs_type)
    if kind == "async" and not isinstance(env, AsyncVectorEnv):
        env.close()
        raise _NoSubprocesses()
    env.reset(seed=SEED)
    actions = list(np.random.default_rng(SEED).integers(0, NUM_ACTIONS, size=(ACTION_SETS, num_envs)))
    return cycling_steps(env.step, actions), num_envs, env.close


def seeded_vec_snake(num_envs: int, obs_type: str, device: torch.device,
                     action_sets: int = ACTION_SETS) -> tuple[VecSnake, list[torch.Tensor]]:
    """A seeded ``VecSnake`` without the per-step action check (as a training loop that makes valid
    actions runs it), and ``action_sets`` batches of random actions drawn up front for it."""
    env = VecSnake(num_envs, obs_type=obs_type, device=device, seed=SEED, check_action_values=False)
    generator = torch.Generator().manual_seed(SEED)
    actions = [torch.randint(0, NUM_ACTIONS, (num_envs,), generator=generator).to(device)
               for _ in range(action_sets)]
    return env, actions


def vec_snake_job(num_envs: int, obs_type: str, device: torch.device):
    """A job's make() for ``VecSnake``: (a step with the next pre-drawn actions, N, close)."""
    env, actions = seeded_vec_snake(num_envs, obs_type, device)
    return cycling_steps(env.step, actions), num_envs, env.close


def cycling_steps(step, actions: list):
    """A callable that calls ``step`` (an env's ``step``, or a compiled or fused one) once with the
    next of the pre-drawn ``actions``."""
    state = {"i": 0}

    def next_step():
        i = state["i"]
        state["i"] = i + 1
        step(actions[i % len(actions)])

    return next_step


class _NoSubprocesses(Exception):
    """AsyncVectorEnv fell back to SyncVectorEnv here (make_cpu_vector_env printed why)."""


# ---------------------------------------------------------------------------- timing

def _steps_per_second(step: Callable[[], object], steps_per_call: int,
                      device: torch.device) -> tuple[float, float]:
    """Median steps/s over the timed runs and its interquartile range.

    Three probe calls (after a warm-up call) size each run to about ``_run_seconds()``.
    """
    return rate(step, steps_per_call, _run_seconds(), probes=3, repeats=_repeats(), device=device)


def _measure(make, timed_on: torch.device) -> tuple[float, float]:
    """Build a job's env, time it (:func:`_steps_per_second`) and close it."""
    step, steps_per_call, close = make()
    try:
        return _steps_per_second(step, steps_per_call, timed_on)
    finally:
        close()


def run_jobs(jobs: Sequence[_Job], name: str, machine: str, progress: bool, desc: str) -> list[Record]:
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
                measured, out_of_memory = try_to_fit(lambda make=make, timed_on=timed_on: _measure(make, timed_on), timed_on)
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
             lambda n=n, obs=obs: vec_snake_job(n, obs, device), device)
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
    return run_jobs(_loop_jobs(obs_type), NAME, machine_of(device), progress, "SnakeEnv loop")


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
    return run_jobs(jobs, NAME, machine_of(device), progress, "gymnasium vector envs")


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
    label = check_machine(machine) if machine is not None else machine_of(device)
    return run_jobs(_vec_jobs(num_envs, obs_types, device), NAME, label, progress, "VecSnake")


def check_machine(machine) -> str:
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
    records = run_jobs(jobs, NAME, machine_of(device), progress, "envs")
    return records + floor_records(records, device)


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
    return run_jobs(jobs, HEAVY_NAME, machine_of(device), progress, "heavy env")


# ---------------------------------------------------------------------------- the memory floor

def table_bandwidth_gbs(gpu_name: str) -> float | None:
    """The peak memory bandwidth (GB/s) of a GPU named ``gpu_name`` in :data:`GPU_BANDWIDTH_GBS`, or None."""
    name = gpu_name.lower()
    return next((float(gbs) for pattern, gbs in GPU_BANDWIDTH_GBS if re.search(pattern, name)), None)


def device_bandwidth(device: str | torch.device | None = None) -> tuple[float, float | None, str]:
    """``(GB/s, spread, source)``: a known GPU's peak (:data:`GPU_BANDWIDTH_GBS`, no spread), else
    the copy bandwidth of the largest buffer of ``bench.ceilings.memory_bandwidth``: a CPU's, or
    an unlisted GPU's."""
    device = get_device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_properties(device).name
        peak = table_bandwidth_gbs(name)
        if peak is not None:
            return peak, None, f"peak of {name}"
    copies = [r for r in memory_bandwidth(device, sizes_mib=(pick(full=256, quick=32),), progress=False)
              if r.variant == "device copy"]
    return copies[-1].value, copies[-1].spread, "measured copy"


def floor_fraction_records(throughput: Sequence[Record], bandwidth_gbs: float, bytes_per_game: dict,
                           source: str = "given") -> list[Record]:
    """Each ``VecSnake`` steps/s record over its memory floor, ``bandwidth / bytes per game``.

    ``bytes_per_game``: obs type -> bytes one game's step touches, or a pair (touched, in 32-byte
    sectors) (``snake.step_bytes``); other variants and obs types are skipped. Returns records
    ``"env_step_floor"``: one ``"bandwidth"``, then per obs type its ``"bytes touched"`` (and
    ``"bytes in sectors"``), then per figure its ``"floor fraction"`` (the figure's params; its
    spread scaled alike). The floor uses the bytes touched, the larger of the two bounds.
    """
    bandwidth_gbs = check_number("bandwidth_gbs", bandwidth_gbs, above=0)
    counts = {k: v if isinstance(v, tuple) else (v, None) for k, v in bytes_per_game.items()}
    rates = [r for r in throughput if r.name == NAME and r.metric == METRIC and r.unit == UNIT
             and r.variant.startswith("VecSnake") and r.params.get("obs_type") in counts]
    if not rates:
        return []
    machine, device = rates[0].machine, ",".join(sorted({str(r.params.get("device", "?")) for r in rates}))
    out = [Record(FLOOR_NAME, "memory bandwidth", "bandwidth", bandwidth_gbs, "GB/s",
                  {"device": device, "source": source}, None, machine)]
    for obs_type in dict.fromkeys(r.params["obs_type"] for r in rates):
        touched, sectors = counts[obs_type]
        params = {"obs_type": obs_type, "device": device}
        out.append(Record(FLOOR_NAME, f"VecSnake {obs_type}", "bytes touched", touched, "B/game", params, None, machine))
        if sectors is not None:
            out.append(Record(FLOOR_NAME, f"VecSnake {obs_type}", "bytes in sectors", sectors, "B/game",
                              dict(params), None, machine))
    for r in rates:
        floor = bandwidth_gbs * 1e9 / check_number("bytes per game", counts[r.params["obs_type"]][0], above=0)
        spread = None if r.spread is None else r.spread / floor
        out.append(Record(FLOOR_NAME, r.variant, FLOOR_METRIC, r.value / floor, FLOOR_UNIT, dict(r.params),
                          spread, r.machine, r.date))
    return out


def floor_records(throughput: Sequence[Record], device: str | torch.device | None = None) -> list[Record]:
    """:func:`floor_fraction_records` for ``throughput`` measured on ``device``: its bandwidth
    (:func:`device_bandwidth`) and the bytes of a 10 x 10 ``VecSnake`` step of each obs type."""
    device = get_device(device)
    obs_types = sorted({r.params.get("obs_type") for r in throughput if r.variant.startswith("VecSnake")}
                       & {"features", "grid"})
    if not obs_types:
        return []
    counts = {}
    for obs_type in obs_types:
        counted = step_bytes(VecSnake(1, obs_type=obs_type, device=device, seed=SEED))
        counts[obs_type] = (counted.touched, counted.sectors)
    bandwidth, spread, source = device_bandwidth(device)
    records = floor_fraction_records(throughput, bandwidth, counts, source)
    if records and spread is not None:
        records[0].spread = spread
    return records


def step_floor_table(step_times: Sequence[Record], bandwidth_gbs: dict, bytes_per_game: int) -> Table:
    """The env step's times per call (``bench.graphs``, part ``"env"``) as env steps/s beside its floor.

    ``bandwidth_gbs``: machine -> GB/s; ``bytes_per_game``: what one step must move (``snake.step_bytes``).
    Each row: the machine, the mode, N, env steps/s, the floor ``bandwidth / bytes`` and the fraction of it.
    """
    bytes_per_game = check_number("bytes_per_game", bytes_per_game, above=0)
    rows = []
    for r in step_times:
        if r.params.get("part") != "env" or r.unit != "µs" or r.machine not in bandwidth_gbs:
            continue
        n = r.params["num_envs"]
        steps = n / (r.value * 1e-6)
        floor = bandwidth_gbs[r.machine] * 1e9 / bytes_per_game
        rows.append([r.machine, r.variant, f"{n:,}", format_number(steps), format_number(floor), f"{steps / floor:.1%}"])
    return Table(["machine", "step", "games (N)", "env steps/s", "floor (env steps/s)", "of the floor"], rows,
                 [False, False, True, True, True, True])


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
        env = VecSnake(n, obs_type=obs_type, device=_CPU, seed=SEED, check_action_values=False)
        try:
            generator = torch.Generator().manual_seed(SEED)
            actions = [torch.randint(0, NUM_ACTIONS, (n,), generator=generator) for _ in range(ACTION_SETS)]
            env.reset(seed=SEED)
            env.step(actions[0])
            obs, _, _, _, info = env.step(actions[1])
            observation_bytes = obs[0].nbytes
            returned_bytes = obs.nbytes + info["final_obs"].nbytes
            del obs, info
            faults = []
            for i in range(steps):
                before = _minor_page_faults()
                env.step(actions[(i + 2) % ACTION_SETS])
                after = _minor_page_faults()
                if before is not None and after is not None:
                    faults.append(after - before)
        finally:
            env.close()
        page_faults = float(statistics.median(faults)) if faults else None
        results.append(StepMemory(n, obs_type, observation_bytes, returned_bytes, page_faults, _page_size()))
    return results
