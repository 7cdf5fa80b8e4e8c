"""The guide's FPS table against env throughput records (notebooks 03 and 04).

:func:`fps_claim_checks` puts each row of the table (:data:`FPS_CLAIMS`, figures in
:mod:`~rlgpu_helpers.measure.claims`) beside the record that answers it, judged by
:func:`~rlgpu_helpers.measure.claims.judge` with the record's spread, or says why no record does
(the GPU rows need a GPU measurement, from this run or from ``data/reference/``);
:func:`~rlgpu_helpers.measure.claims.claim_checks_table` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..measure.claims import CLAIMS, ClaimCheck, judge, record_ratio
from ..measure.records import Record, select
from .env_records import env_step_records
from .envs import VARIANTS


FPS_CLAIMS = ("single-env-fps", "cpu-16-envs-fps", "gpu-64-envs-fps", "gpu-256-envs-fps", "vectorized-speedup")
"""The claims of the guide's FPS table (keys of :data:`~rlgpu_helpers.measure.claims.CLAIMS`)
that env throughput records answer."""

SPEEDUP_NUM_ENVS = 256
"""N at which the "vectorized on a GPU vs one CPU env" speedup is judged: the guide's table ends
with 256 GPU envs, and its speedup range contains that row over its single env."""

NO_GPU_RECORD = ("no GPU record, from this run or in data/reference/ "
                 "(notebook 04 measures VecSnake on a GPU)")


def spread_or_zero(record: Record) -> float:
    return record.spread if record.spread is not None else 0.0


def _describe(record: Record) -> str:
    return f"{record.variant}, N={record.params['num_envs']:,}, {record.params.get('device', '?')}, {record.machine}"


def _at(records: list[Record], variant: str, num_envs: int, device: str | None = None) -> list[Record]:
    return select(records, variant=variant, num_envs=num_envs, **({} if device is None else {"device": device}))


def gpu_per_machine(records: list[Record], num_envs: int) -> dict[str, Record]:
    """The first ``VecSnake features`` record on a GPU at ``num_envs``, per machine, in order."""
    found: dict[str, Record] = {}
    for record in _at(records, VARIANTS["features"], num_envs, device="cuda"):
        found.setdefault(record.machine, record)
    return found


def fps_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """Each row of the guide's FPS table (:data:`FPS_CLAIMS`) beside the record that answers it.

    ``records`` are this run's ``env_step`` records, ``reference`` any others (such as
    :func:`~rlgpu_helpers.measure.records.load_reference`). "single-env-fps" is answered by the
    ``SnakeEnv`` loop of ``records``, "cpu-16-envs-fps" by its faster gymnasium vector at N = 16,
    the GPU rows by ``VecSnake`` features on ``cuda`` at N = 64 and 256 (one check per GPU machine
    of ``records`` then ``reference``; a CPU ``VecSnake`` never answers them), and
    "vectorized-speedup" by that GPU figure at :data:`SPEEDUP_NUM_ENVS` over the ``SnakeEnv`` loop
    of the same machine. Each is judged with its spread (none counts as exact); a claim no record
    answers gets a check without a verdict, saying what is missing.
    """
    mine, others = env_step_records(records, "records"), env_step_records(reference, "reference")
    everything = mine + others
    checks = []

    claim = CLAIMS["single-env-fps"]
    loops = _at(mine, VARIANTS["loop"], 1)
    loops.sort(key=lambda r: r.params.get("obs_type") != "features")
    if loops:
        checks.append(ClaimCheck(claim, _describe(loops[0]), judge(claim, loops[0].value, spread_or_zero(loops[0]))))
    else:
        checks.append(ClaimCheck(claim, "no SnakeEnv loop record in this run"))

    claim = CLAIMS["cpu-16-envs-fps"]
    gym = _at(mine, VARIANTS["sync"], 16) + _at(mine, VARIANTS["async"], 16)
    if gym:
        best = max(gym, key=lambda r: r.value)
        others_at_16 = sorted({r.variant for r in gym} - {best.variant})
        which = (f" (faster than {', '.join(others_at_16)} there)" if others_at_16
                 else " (the only gymnasium vector env measured there)")
        checks.append(ClaimCheck(claim, _describe(best) + which, judge(claim, best.value, spread_or_zero(best))))
    else:
        checks.append(ClaimCheck(claim, "no SyncVectorEnv or AsyncVectorEnv record at N=16 in this run"))

    any_gpu = any(r.params.get("device") == "cuda" for r in everything)
    for key, n in (("gpu-64-envs-fps", 64), ("gpu-256-envs-fps", 256)):
        claim = CLAIMS[key]
        found = gpu_per_machine(everything, n)
        for record in found.values():
            checks.append(ClaimCheck(claim, _describe(record), judge(claim, record.value, spread_or_zero(record))))
        if not found:
            checks.append(ClaimCheck(claim, NO_GPU_RECORD if not any_gpu
                                     else f"no VecSnake features record on a GPU at N={n}"))

    claim = CLAIMS["vectorized-speedup"]
    found = gpu_per_machine(everything, SPEEDUP_NUM_ENVS)
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
