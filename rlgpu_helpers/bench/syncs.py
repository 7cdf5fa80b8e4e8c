"""VecSnake's time per step against N on a GPU, and what each sync point costs (introduced in notebook 04).

- ``default_scaling_num_envs``, ``time_per_step_records``, ``flat_until``, ``flat_lines``,
  ``same_cost_checks``: the flat stretch of time per step, where more games cost nothing;
- ``sync_cost_throughput``, ``audit_sync_points``, ``sync_costs``, ``sync_cost_lines``: the env's
  step with each sync point put back, its steps/s, and the syncs the audit counts;
- ``read_cost_throughput``, ``read_cost_table``: the sync-free step with k host reads after it,
  the cost of k synchronizations against none on the device at hand.

It builds on ``bench.envs`` (the env builders), ``bench.env_records`` and ``bench.fps_claims``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from ..core.checks import check_choices, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.sync import SyncRow, audit_syncs
from ..measure.claims import APPROX, CLAIMS, ClaimCheck, judge, speedup_spread
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number
from ..snake import rules
from ..snake.naive_tensor import SYNC_POINTS, NaiveTensorSnake
from ..snake.rules import NUM_ACTIONS
from ..snake.vec import VecSnake
from .env_records import env_step_records
from .envs import (
    ACTION_SETS,
    SEED,
    check_machine,
    cycling_steps,
    default_vec_num_envs,
    device_type,
    run_jobs,
)
from .fps_claims import NO_GPU_RECORD, gpu_per_machine, spread_or_zero


def default_scaling_num_envs(device: str | torch.device | None = None) -> tuple[int, ...]:
    """N for notebook 04's steps/s against N: 1 to 262,144 on a CPU (a few seconds per size),
    :func:`default_vec_num_envs` on a GPU; small in quick mode."""
    if device_type(device) == "cpu":
        return pick(full=tuple(4**k for k in range(10)), quick=(1, 16, 256))
    return default_vec_num_envs(device)


TIME_METRIC = "time per step"


TIME_UNIT = "µs"


def time_per_step_records(records: Sequence[Record]) -> list[Record]:
    """``env_step`` throughput records turned into the time of one ``step`` call of N games, in µs.

    ``N / (steps/s)``; the spread is carried over as a relative spread (the IQR of the rate over
    the rate). Records of other benchmarks are left out.
    """
    out = []
    for record in env_step_records(records, "records"):
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
    chosen = [r for r in env_step_records(records, "records")
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


def flat_lines(records: Sequence[Record]) -> list[str]:
    """For each machine, ``VecSnake`` variant and device of ``records``: the time of a step at N = 1,
    the N up to which :func:`flat_until` finds it flat, and the time at the largest N measured."""
    records = env_step_records(records, "records")
    lines = []
    for machine in sorted({r.machine for r in records}):
        mine = [r for r in records if r.machine == machine]
        for variant in ("VecSnake features", "VecSnake grid"):
            for device in sorted({r.params["device"] for r in mine if r.variant == variant}):
                found = flat_until(mine, variant, device=device)
                if found is None:
                    lines.append(f"{machine} · {variant} on {device}: no measurement at N = 1")
                    continue
                times = {r.params["num_envs"]: r.value for r in time_per_step_records(mine)
                         if r.variant == variant and r.params["device"] == device}
                flat, largest = found
                lines.append(f"{machine} · {variant} on {device}: {times[1]:,.0f} µs per step at N = 1; within "
                             f"{APPROX:.0%} of it up to N = {flat:,}; {times[largest]:,.0f} µs at N = {largest:,} "
                             f"({format_number(times[largest] / times[1])}x)")
    return lines


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
    everything = env_step_records(records, "records") + env_step_records(reference, "reference")
    one, many = SAME_COST_NUM_ENVS
    singles, batches = gpu_per_machine(everything, one), gpu_per_machine(everything, many)
    checks = []
    for machine, batch in batches.items():
        single = singles.get(machine)
        if single is None:
            checks.append(ClaimCheck(claim, f"no VecSnake features record from {machine} at N={one}"))
            continue
        ratio = (many / batch.value) / (one / single.value)
        spread = speedup_spread(ratio, spread_or_zero(batch) / batch.value, spread_or_zero(single) / single.value)
        checks.append(ClaimCheck(claim, f"time of a step at N={many} over N={one}, VecSnake features, "
                                        f"cuda, {machine}", judge(claim, ratio, spread)))
    if not batches:
        any_gpu = any(r.params.get("device") == "cuda" for r in everything)
        checks.append(ClaimCheck(claim, NO_GPU_RECORD if not any_gpu
                                 else f"no VecSnake features record on a GPU at N={many}"))
    return checks


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
    extra = () if device_type(device) == "cpu" else (1_048_576,)
    return pick(full=(16, 1024, 65_536, *extra), quick=(16,))


def _sync_env(config: str, num_envs: int, obs_type: str, device: torch.device):
    syncs = SYNC_CONFIGS[config]
    if syncs is None:
        env = VecSnake(num_envs, obs_type=obs_type, device=device, seed=SEED, check_action_values=False)
    else:
        env = NaiveTensorSnake(num_envs, obs_type=obs_type, device=device, seed=SEED, syncs=syncs,
                               check_action_values=False)
    generator = torch.Generator().manual_seed(SEED)
    actions = [torch.randint(0, NUM_ACTIONS, (num_envs,), generator=generator).to(device)
               for _ in range(ACTION_SETS)]
    return env, actions


def _sync_job(config: str, num_envs: int, obs_type: str, device: torch.device):
    env, actions = _sync_env(config, num_envs, obs_type, device)
    return cycling_steps(env.step, actions), num_envs, env.close


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
    label = check_machine(machine) if machine is not None else machine_of(device)
    jobs = [(sync_variant(config), {"num_envs": n, "obs_type": obs_type, "device": device.type},
             lambda config=config, n=n: _sync_job(config, n, obs_type, device), device)
            for n in num_envs for config in configs]
    return run_jobs(jobs, SYNC_NAME, label, progress, "sync points")


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
            timed = [actions[(3 + i) % ACTION_SETS] for i in range(steps)]

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
            spread = math.hypot(time_us * spread_or_zero(r) / r.value, base_us * spread_or_zero(reference) / reference.value)
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


def sync_cost_lines(records: Sequence[Record], audits: Sequence[SyncAudit] = (),
                    scaling: Sequence[Record] = ()) -> list[str]:
    """:func:`sync_costs` summed up per machine and device: how many steps with sync points on were
    slower than the sync-free one beyond their spread, faster, or within it, and the three slowest
    (relative to the sync-free step). Then each ``VecSnake`` step of ``records`` beside the same
    step in ``scaling`` (section 2's ``VecSnake features`` records at the same device and N): two
    measurements of the same thing, whose difference shows how busy the machine was."""
    costs = [c for c in sync_costs(records, audits) if c.extra_us is not None]
    lines = []
    for machine, device in sorted({(c.machine, c.device) for c in costs}):
        mine = [c for c in costs if (c.machine, c.device) == (machine, device)]
        slower = [c for c in mine if c.beyond_noise and c.extra_us > 0]
        faster = [c for c in mine if c.beyond_noise and c.extra_us < 0]
        lines.append(f"{machine} on {device}: of {len(mine)} steps with sync points on (configuration x N), "
                     f"{len(slower)} were slower than the sync-free step beyond their spread, {len(faster)} faster, "
                     f"{len(mine) - len(slower) - len(faster)} within it")
        for c in sorted(slower, key=lambda c: -c.extra_us / (c.time_us - c.extra_us))[:3]:
            per_sync = f", {c.per_sync_us:,.1f} µs per synchronization" if c.per_sync_us else ""
            lines.append(f"    {c.config} at N = {c.num_envs:,}: +{c.extra_us:,.1f} µs per step "
                         f"({c.extra_us / (c.time_us - c.extra_us):.0%} of the sync-free step){per_sync}")
        if not slower:
            lines.append("    no step with sync points on was slower than the sync-free step beyond the spread")
    scaled = {(r.machine, r.params.get("device"), r.params.get("num_envs")): r.value
              for r in env_step_records(scaling, "scaling") if r.variant == "VecSnake features"}
    for r in records:
        key = (r.machine, r.params.get("device"), r.params.get("num_envs"))
        if r.name == SYNC_NAME and r.variant == "VecSnake" and key in scaled:
            lines.append(f"The same VecSnake step on {key[1]} at N = {key[2]:,}, measured twice: "
                         f"{scaled[key]:,.0f} steps/s in section 2, {r.value:,.0f} here "
                         f"({format_number(r.value / scaled[key])}x)")
    return lines


READ_NAME = "env_step_reads"


READS = (0, 1, 2, 4, 8)
"""How many values :func:`read_cost_throughput` reads on the host after each step."""


def default_read_num_envs() -> tuple[int, ...]:
    """N for :func:`read_cost_throughput`: 16 and 65,536 games (16 in quick mode)."""
    return pick(full=(16, 65_536), quick=(16,))


def _read_job(reads: int, num_envs: int, device: torch.device):
    env, actions = _sync_env("VecSnake", num_envs, "features", device)
    state = {"i": 0}

    def step():
        _, reward, *_ = env.step(actions[state["i"] % ACTION_SETS])
        state["i"] += 1
        for _ in range(reads):
            reward.sum().item()  # a synchronization on a GPU: wait for the step, copy one number back

    return step, num_envs, env.close


def read_cost_throughput(device: str | torch.device | None = None, *, reads=READS, num_envs=None,
                         progress: bool = True, machine: str | None = None) -> list[Record]:
    """Steps/s of the sync-free ``VecSnake`` step followed by k host reads (``reward.sum().item()``).

    The cost of k synchronizations per step against none, on ``device``: the first read waits for
    the step's queued kernels, each further one for one small reduction and its copy to the host.
    Records are named ``"env_step_reads"``, variant ``"VecSnake + k reads"``, params
    ``{"num_envs", "reads", "device"}``; ``num_envs`` defaults to :func:`default_read_num_envs`.
    """
    device = get_device(device)
    num_envs = check_ints("num_envs", default_read_num_envs() if num_envs is None else num_envs)
    reads = check_ints("reads", reads, minimum=0)
    label = check_machine(machine) if machine is not None else machine_of(device)
    jobs = [(f"VecSnake + {k} reads", {"num_envs": n, "reads": k, "device": device.type},
             lambda k=k, n=n: _read_job(k, n, device), device) for n in num_envs for k in reads]
    return run_jobs(jobs, READ_NAME, label, progress, "host reads")


def read_cost_table(records: Sequence[Record]) -> Table:
    """:func:`read_cost_throughput` records as a table: per machine, device and N, the time of a
    step with k reads, its change against the same step with none (spreads added in quadrature),
    and that change per read."""
    records = [r for r in check_records(records) if r.name == READ_NAME]
    base = {(r.machine, r.params["device"], r.params["num_envs"]): r for r in records if r.params["reads"] == 0}
    rows = []
    for r in sorted(records, key=lambda r: (r.machine, r.params["device"], r.params["num_envs"], r.params["reads"])):
        n, k = r.params["num_envs"], r.params["reads"]
        time_us = n / r.value * 1e6
        zero = base.get((r.machine, r.params["device"], n))
        change = per_read = ""
        if zero is None:
            change = "no step without reads measured"
        elif k == 0:
            change = "(reference)"
        else:
            zero_us = n / zero.value * 1e6
            spread = math.hypot(time_us * spread_or_zero(r) / r.value, zero_us * spread_or_zero(zero) / zero.value)
            change = f"{time_us / zero_us:.2f}x ({time_us - zero_us:+,.1f} ± {format_number(spread)} µs)"
            per_read = f"{(time_us - zero_us) / k:+,.2f}" if abs(time_us - zero_us) > spread else ""
        rows.append([r.machine, r.params["device"], f"{n:,}", str(k), format_number(time_us), change, per_read])
    columns = ["machine", "device", "games (N)", "reads per step", "time per step (µs)", "vs no reads",
               "per read (µs)"]
    return Table(columns, rows, [False, False, True, True, True, True, True])


def measure_sync_costs(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """Notebook 04's sync costs on ``device``, for the GPU sweep: :func:`sync_cost_throughput` at
    :func:`default_sync_num_envs`, :func:`read_cost_throughput` (k host reads per step), and the
    audit's count of synchronizations per step of each configuration at each of the first's N
    (records ``"env_step_sync_count"``, unit "syncs/step")."""
    device = get_device(device)
    records = sync_cost_throughput(device, progress=progress)
    reads = read_cost_throughput(device, progress=progress)
    label = machine_of(device)
    measured = sorted({r.params["num_envs"] for r in records})
    for audit in audit_sync_points(measured, device=device, steps=pick(full=20, quick=3)):
        records.append(Record(SYNC_COUNT_NAME, sync_variant(audit.config), "syncs per step", audit.per_step,
                              "syncs/step", {"num_envs": audit.num_envs, "obs_type": "features",
                                             "device": device.type, "method": audit.method}, None, label))
    return records + reads
