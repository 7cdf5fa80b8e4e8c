"""The two ceilings of a vectorized env's step: launching operations, and moving bytes (notebook 04).

A step of ``VecSnake`` is a fixed list of tensor operations over N games. Its time has two
floors, and the larger one is the ceiling on its throughput:

* **the launch floor**, ``launches per step x the time of one tiny operation``: every operation
  pays a fixed cost however small its tensors (Python, the dispatcher, a GPU's kernel launch).
  It does not depend on N.
* **the memory floor**, ``bytes per game x N / memory bandwidth``: once N is large the tensors no
  longer fit in a cache, and every byte read and written moves at the device's copy bandwidth
  (``bench.ceilings.memory_bandwidth``). It grows in proportion to N.

Below :attr:`Ceilings.crossover` the step is *launch-bound*: more games cost almost nothing (the
flat part of the time-per-step curve). Above it, *bandwidth-bound*: twice the games, twice the
time. Measured: :func:`op_latency`, the time of ``a + b`` on one-element tensors and of
``(a + b).item()`` (a synchronization's round trip); :func:`profile_vec_snake`, ``gpu.launches``'
counts of launches and bytes for ``VecSnake`` steps, the bytes at two N giving the bytes per game;
and :func:`bandwidth_lines`, the copy bandwidth beside another run's of the same machine label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.launches import count_launches, traffic_bytes
from ..measure.records import Record, check_records, select
from ..measure.table import Table, format_number
from ..measure.timing import time_sized
from ..snake.rules import FIRST_OBS_TYPES, OBS_TYPES
from .envs import cycling_steps, seeded_vec_snake

LATENCY_NAME = "op_latency"
TINY_OP = "a + b (one element each)"
ROUND_TRIP = "(a + b).item() (read on the host)"
PROFILE_NAME = "env_step_profile"
LAUNCHES = "launches per step"
BYTES = "bytes per game"
CEILING_NAME = "env_step_ceilings"


# ---------------------------------------------------------------------------- the time of one operation


def op_latency(device: str | torch.device | None = None, *, machine: str | None = None) -> list[Record]:
    """The time of the smallest operation on ``device``, and of the same with a host read.

    Two records ``"op_latency"``, ``"time per call"`` in µs: ``a + b`` on one-element tensors
    (:data:`TINY_OP`) and ``(a + b).item()`` (:data:`ROUND_TRIP`), which waits for the result. Each is
    the fastest of several runs (other programs only slow a run down), the runs' IQR its spread.
    """
    device = get_device(device)
    label = machine if machine is not None else machine_of(device)
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    records = []
    for variant, fn in ((TINY_OP, lambda: a + b), (ROUND_TRIP, lambda: (a + b).item())):
        timing = time_sized(fn, pick(full=0.1, quick=0.005), probes=3, repeats=pick(full=7, quick=3), device=device)
        records.append(Record(LATENCY_NAME, variant, "time per call", timing.min * 1e6, "µs",
                              {"device": device.type}, timing.iqr * 1e6, label))
    return records


# ---------------------------------------------------------------------------- VecSnake's step

@dataclasses.dataclass(frozen=True)
class StepProfile:
    """What one step of ``variant`` asks of a device: launches, and bytes per game.

    ``bytes_per_game`` is the difference in :func:`traffic_bytes` between the two N of
    ``profiled_at`` over the difference in N; ``fixed_bytes`` what is left at N = 0 (lookup
    tables and counters, the same whatever N).
    """

    variant: str
    device: str
    launches_per_step: float
    counted: str
    bytes_per_game: float
    fixed_bytes: float
    profiled_at: tuple[int, int]


def _vec_step(obs_type: str, num_envs: int, device: torch.device):
    env, actions = seeded_vec_snake(num_envs, obs_type, device, action_sets=8)
    return cycling_steps(env.step, actions)


def profile_vec_snake(device: str | torch.device | None = None, *, obs_types=FIRST_OBS_TYPES,
                      num_envs=(1024, 4096), steps: int = 5) -> list[StepProfile]:
    """Launches per step (:func:`count_launches`) and bytes per game (:func:`traffic_bytes`) of
    ``VecSnake`` on ``device``, for each observation type; averaged over ``steps`` steps."""
    device = get_device(device)
    obs_types = check_choices("obs_types", obs_types, OBS_TYPES)
    sizes = check_ints("num_envs", num_envs)
    if len(sizes) != 2 or sizes[0] >= sizes[1]:
        raise ValueError(f"num_envs={num_envs!r} must be two N, the smaller first")
    steps = check_int("steps", steps)
    profiles = []
    for obs_type in obs_types:
        small, large = (_vec_step(obs_type, n, device) for n in sizes)
        for step in (small, large):
            for _ in range(2):
                step()
        launches = count_launches(small, device, calls=steps)
        bytes_small = traffic_bytes(small, calls=steps)
        bytes_large = traffic_bytes(large, calls=steps)
        per_game = (bytes_large - bytes_small) / (sizes[1] - sizes[0])
        fixed = bytes_small - per_game * sizes[0]
        profiles.append(StepProfile(f"VecSnake {obs_type}", device.type, launches.per_call, launches.counted,
                                    per_game, fixed, sizes))
    return profiles


def profile_records(profiles: Sequence[StepProfile], machine: str) -> list[Record]:
    """:func:`profile_vec_snake`'s results as records (``"env_step_profile"``), for reference files."""
    records = []
    for p in profiles:
        params = {"obs_type": p.variant.removeprefix("VecSnake "), "device": p.device}
        records.append(Record(PROFILE_NAME, p.variant, LAUNCHES, p.launches_per_step, "launches",
                              {**params, "counted": p.counted}, None, machine))
        records.append(Record(PROFILE_NAME, p.variant, BYTES, p.bytes_per_game, "B",
                              {**params, "fixed_bytes": round(p.fixed_bytes)}, None, machine))
    return records


def profiles_from_records(records: Sequence[Record]) -> dict[tuple[str, str], StepProfile]:
    """The step profiles stored as records, per ``(machine, variant)`` (both metrics needed)."""
    found: dict[tuple[str, str, str], dict[str, Record]] = {}
    for r in check_records(records):
        if r.name == PROFILE_NAME:
            found.setdefault((r.machine, r.variant, r.params.get("device", "?")), {})[r.metric] = r
    profiles = {}
    for (machine, variant, device), metrics in found.items():
        if LAUNCHES in metrics and BYTES in metrics:
            launches, size = metrics[LAUNCHES], metrics[BYTES]
            profiles[(machine, variant)] = StepProfile(
                variant, device, launches.value, str(launches.params.get("counted", "?")), size.value,
                float(size.params.get("fixed_bytes", 0)), (0, 0))
    return profiles


# ---------------------------------------------------------------------------- the two ceilings

@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The two floors of one env's step time on one machine, from its profile and two measurements.

    ``latency_us``: the time of one tiny operation (:data:`TINY_OP`); ``bandwidth_gbs``: the
    device's copy bandwidth (the largest buffer of ``bench.ceilings.memory_bandwidth``).
    """

    profile: StepProfile
    machine: str
    latency_us: float
    bandwidth_gbs: float

    @property
    def launch_floor_us(self) -> float:
        """Launches per step times the time of one: the least a step can take at any N."""
        return self.profile.launches_per_step * self.latency_us

    def memory_floor_us(self, num_envs: int) -> float:
        """Moving N games' bytes at the copy bandwidth: the least a step of N games can take."""
        return self.profile.bytes_per_game * num_envs / (self.bandwidth_gbs * 1e9) * 1e6

    def bound(self, num_envs: int) -> str:
        """``"launch-bound"`` where the launch floor is the larger, else ``"bandwidth-bound"``."""
        return "launch-bound" if self.launch_floor_us >= self.memory_floor_us(num_envs) else "bandwidth-bound"

    @property
    def crossover(self) -> float:
        """The N at which the two floors are equal."""
        return self.launch_floor_us / self.memory_floor_us(1)


def make_ceilings(profile: StepProfile, *, latency_us: float, bandwidth_gbs: float, machine: str) -> Ceilings:
    """:class:`Ceilings` from a profile and the two measurements (checked to be positive)."""
    if not isinstance(profile, StepProfile):
        raise TypeError(f"profile={profile!r} must be a StepProfile (from profile_vec_snake)")
    return Ceilings(profile, machine, check_number("latency_us", latency_us, above=0),
                    check_number("bandwidth_gbs", bandwidth_gbs, above=0))


def latency_from_records(records: Sequence[Record], machine: str, device: str) -> float | None:
    """The tiny operation's time (µs) of ``machine`` on ``device`` among ``records``, or None."""
    for r in check_records(records):
        if (r.name, r.variant, r.machine, r.params.get("device")) == (LATENCY_NAME, TINY_OP, machine, device):
            return r.value
    return None


def bandwidth_from_records(records: Sequence[Record], machine: str) -> float | None:
    """The copy bandwidth (GB/s) of the largest ``"device copy"`` of ``machine``, or None."""
    copies = [r for r in check_records(records)
              if r.name == "copy" and r.variant == "device copy" and r.machine == machine and "MiB" in r.params]
    return max(copies, key=lambda r: r.params["MiB"]).value if copies else None


def bandwidth_lines(copies: Sequence[Record], stored: Sequence[Record] = ()) -> list[str]:
    """What :func:`~rlgpu_helpers.bench.ceilings.memory_bandwidth` measured, one line per machine,
    each followed by the same copy stored in ``stored`` for that machine label by another run.

    A line gives the largest ``"device copy"`` (the memory ceiling) and the figure at every size, so
    two runs of the same measurement on the same kind of machine can be compared: the code, the
    sizes and what is counted (2 x size / time, the read and the write) are the same.
    """
    copies, stored = check_records(copies, "copies"), check_records(stored, "stored")
    lines = []
    for machine in sorted({r.machine for r in copies}):
        ours = sorted(select(copies, name="copy", variant="device copy", machine=machine), key=lambda r: r.params["MiB"])
        if not ours:
            continue
        largest = ours[-1]
        sizes = ", ".join(f"{r.params['MiB']:,} MiB {format_number(r.value)}" for r in ours)
        lines.append(f"{machine}: {format_number(largest.value)} GB/s copying the largest buffer, "
                     f"{largest.params['MiB']:,} MiB (by buffer size: {sizes} GB/s)")
        for r in select(stored, name="copy", variant="device copy", machine=machine, MiB=largest.params["MiB"]):
            spread = "" if r.spread is None else f" ± {format_number(r.spread)}"
            lines.append(f"    the same copy in data/reference/, another run on {machine} ({r.date}): "
                         f"{format_number(r.value)}{spread} GB/s, {format_number(largest.value / r.value)}x of it here")
    return lines


def reference_ceilings(records: Sequence[Record], variant: str = "VecSnake features") -> list[Ceilings]:
    """:class:`Ceilings` of ``variant`` for every machine whose records hold all three parts: a
    step profile, the tiny operation's time on the profile's device, and a copy bandwidth."""
    records = check_records(records)
    out = []
    for (machine, name), profile in profiles_from_records(records).items():
        if name != variant:
            continue
        latency = latency_from_records(records, machine, profile.device)
        bandwidth = bandwidth_from_records(records, machine)
        if latency and bandwidth:
            out.append(Ceilings(profile, machine, latency, bandwidth))
    return out


def _matching(throughput: Sequence[Record], ceilings: Ceilings) -> list[Record]:
    return sorted(select(throughput, name="env_step", variant=ceilings.profile.variant, machine=ceilings.machine,
                         device=ceilings.profile.device), key=lambda r: r.params["num_envs"])


def ceiling_records(throughput: Sequence[Record], ceilings: Ceilings) -> list[Record]:
    """The measured time per step of ``ceilings``' env at each N beside its memory floor, as records.

    ``throughput``: ``env_step`` records (other machines, variants and devices are ignored). Returns
    records ``"env_step_ceilings"``, ``"time per step"`` in µs: variant "measured: <env>" and "memory
    floor: <bytes> B/game at <GB/s> GB/s", one per N. The launch floor does not depend on N: draw it
    as a line (:attr:`Ceilings.launch_floor_us`).
    """
    if not isinstance(ceilings, Ceilings):
        raise TypeError(f"ceilings={ceilings!r} must be Ceilings (from make_ceilings)")
    c = ceilings
    memory = (f"memory floor: {format_number(c.profile.bytes_per_game)} B/game at "
              f"{format_number(c.bandwidth_gbs)} GB/s")
    records = []
    for r in _matching(throughput, c):
        n = r.params["num_envs"]
        time_us = n / r.value * 1e6
        spread = None if r.spread is None else time_us * r.spread / r.value
        params = {"num_envs": n, "device": c.profile.device}
        records.append(Record(CEILING_NAME, f"measured: {c.profile.variant}", "time per step", time_us, "µs",
                              params, spread, c.machine, r.date))
        records.append(Record(CEILING_NAME, memory, "time per step", c.memory_floor_us(n), "µs", params, None,
                              c.machine, r.date))
    return records


def launch_floor_label(ceilings: Ceilings) -> str:
    """The launch floor's legend: "launch floor: 138 launches × 1.02 µs"."""
    return (f"launch floor: {format_number(ceilings.profile.launches_per_step)} launches × "
            f"{format_number(ceilings.latency_us)} µs ({ceilings.machine})")


def ceilings_table(throughput: Sequence[Record], ceilings: Ceilings) -> Table:
    """Per N: the measured time of a step beside both floors, which floor is larger, and how far
    the measurement is above it."""
    if not isinstance(ceilings, Ceilings):
        raise TypeError(f"ceilings={ceilings!r} must be Ceilings (from make_ceilings)")
    c = ceilings
    rows = []
    for r in _matching(throughput, c):
        n = r.params["num_envs"]
        measured = n / r.value * 1e6
        memory = c.memory_floor_us(n)
        floor = max(c.launch_floor_us, memory)
        rows.append([f"{n:,}", format_number(measured), format_number(c.launch_floor_us), format_number(memory),
                     c.bound(n), format_number(measured / floor)])
    columns = ["games (N)", "measured (µs per step)", "launch floor (µs)", "memory floor (µs)",
               "larger floor", "measured / larger floor"]
    return Table(columns, rows, [True, True, True, True, False, True])


# ---------------------------------------------------------------------------- for the GPU sweep

def ceilings_lines(throughput: Sequence[Record], ceilings: Sequence[Ceilings]) -> list[str]:
    """One line per :class:`Ceilings`: its launch floor, where the floors cross, from which measured N
    the step is bandwidth-bound, and how far above the larger floor the measured times lie."""
    lines = []
    for c in ceilings:
        measured = {r.params["num_envs"]: r.value for r in ceiling_records(throughput, c)
                    if r.variant.startswith("measured")}
        ratio = [t / max(c.launch_floor_us, c.memory_floor_us(n)) for n, t in measured.items()]
        bound = [n for n in measured if c.bound(n) == "bandwidth-bound"]
        where = f"bandwidth-bound from N = {min(bound):,} on" if bound else "launch-bound at every N measured"
        above = (f"measured {min(ratio):.1f}x to {max(ratio):.1f}x the larger floor" if ratio
                 else "no time per step measured")
        lines.append(f"{c.machine} · {c.profile.variant} on {c.profile.device}: launch floor "
                     f"{c.launch_floor_us:,.0f} µs; the floors cross at N ≈ {c.crossover:,.0f}; {where}; {above}")
    return lines


def measure_launch(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """Notebook 04's two ceilings on ``device``, as records for ``data/reference/``:
    :func:`op_latency` and :func:`profile_vec_snake` (both observation types). The copy
    bandwidth comes from the ``ceilings`` suite, the steps/s from the ``envs`` suite."""
    device = get_device(device)
    label = machine_of(device)
    parts = [lambda: op_latency(device, machine=label),
             lambda: profile_records(profile_vec_snake(device), label)]
    records = []
    for part in tqdm(parts, desc="launch and traffic", disable=not progress):
        records += part()
    return records
