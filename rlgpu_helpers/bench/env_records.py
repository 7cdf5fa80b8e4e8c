"""Reading env throughput records: the fastest N, each curve in a line, the time of a step (notebooks 03 and 04).

:func:`best_per_variant` picks, from any records, the number of games at which each variant was
fastest; :func:`curve_lines` reads each curve of steps/s against N in one line (notebook 04);
:func:`microseconds_per_step` turns a record back into the time of one step; :func:`async_crossover`
reads the per-step cost from which subprocesses beat the in-process loop in the records of
:func:`~rlgpu_helpers.bench.envs.heavy_env_throughput`; :func:`step_memory_table` sets
:func:`~rlgpu_helpers.bench.envs.vec_snake_step_memory` beside the steps/s measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.checks import check_int
from ..measure.records import Record, check_records, select
from ..measure.table import Table, format_number
from .envs import METRIC, NAME, UNIT, VARIANTS, StepMemory


def env_step_records(records, what: str) -> list[Record]:
    """The env steps/s records among ``records`` (``what`` names them in errors)."""
    return select(check_records(records, what), name=NAME, metric=METRIC, unit=UNIT)


def _check_same_measure(records, name: str) -> list[Record]:
    records = check_records(records, name)
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


def curve_lines(records: Sequence[Record], loop: Record | None = None) -> list[str]:
    """Each curve of env steps/s against N (one machine, device and variant), read in one line:
    its speed with one game, its best and where, and the largest N measured.

    ``loop`` (the ``SnakeEnv loop`` record) sets the best of its own machine's curves beside it;
    its machine's curves come first, the other machines' in name order.
    """
    records = env_step_records(records, "records")
    first = loop.machine if loop is not None else None
    lines = []
    for machine in sorted({r.machine for r in records}, key=lambda m: (m != first, m)):
        for device in sorted({r.params.get("device", "?") for r in records if r.machine == machine}):
            curve = [r for r in records if r.machine == machine and r.params.get("device", "?") == device]
            for best in best_per_variant(curve):
                rates = {r.params["num_envs"]: r.value for r in curve if r.variant == best.variant}
                largest = max(rates)
                versus = f" ({best.value / loop.value:,.3g}x the SnakeEnv loop)" if machine == first else ""
                one = f"{rates[1]:,.0f} steps/s with 1 game" if 1 in rates else "no measurement with 1 game"
                lines.append(f"{machine} · {best.variant} on {device}: {one}; best {best.value:,.0f} at "
                             f"N = {best.params['num_envs']:,}{versus}; {rates[largest]:,.0f} at N = {largest:,}, "
                             "the largest measured")
    return lines

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


def step_memory_table(memory: Sequence[StepMemory], throughput: Sequence[Record] = ()) -> Table:
    """:func:`vec_snake_step_memory` beside the steps/s of the same ``VecSnake`` on the CPU.

    ``throughput``: env throughput records of one machine (others are ignored); a row whose
    N has no CPU record of the matching ``VecSnake`` variant leaves those cells empty.
    """
    memory = list(memory)
    bad = [m for m in memory if not isinstance(m, StepMemory)]
    if bad:
        raise TypeError(f"memory must hold only StepMemory objects, not {bad[0]!r}")
    rates = [r for r in env_step_records(throughput, "throughput") if r.params.get("device") == "cpu"]
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
