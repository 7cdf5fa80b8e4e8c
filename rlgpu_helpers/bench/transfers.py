"""The ``transfers`` bench suite: host-device copies and their overlap with compute (introduced in notebook 05).

``python -m rlgpu_helpers bench transfers`` runs :func:`measure_transfers`, which turns
``gpu.transfer``'s copies and loops into records, so a GPU machine's reference file carries the
lesson to students without a GPU:

* ``"transfer"``: GB/s against size for pageable, pinned, ``pin_memory()`` then copy and
  ``non_blocking``, both ways (:func:`transfer_bandwidth`; :func:`pinned_claim` judges the
  guide's "2-3x faster" at :data:`CLAIM_BYTES`);
* ``"prefetch"``: ms per batch, copy then compute vs prefetch on a side stream (:func:`prefetch_time`);
* ``"non_blocking_read"``: the % of values wrong when a ``non_blocking`` copy to the host is read
  before synchronizing, and after (``gpu.transfer.read_before_sync``);
* ``"host_link"``: the nominal GB/s of the GPU's PCIe link, read from nvidia-smi.

On a CPU only the first two are measured (host-to-host copies, the compute loop alone), and the
suite prints what it skipped. :func:`link_table` sets each machine's fastest copy beside its link.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_ints
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.transfer import (
    D2H,
    DIRECTIONS,
    H2D,
    H2H,
    PAGEABLE,
    PIN_THEN_COPY,
    PINNED,
    VARIANTS,
    EarlyRead,
    Link,
    copy_of,
    no_overlap_reason,
    nominal_link,
    prefetch_loops,
    prefetch_sizes,
    read_before_sync,
)
from ..measure.claims import CLAIMS, ClaimCheck, Verdict, judge, record_ratio
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number
from ..measure.timing import time_callable, time_sized

_MIB = 2**20
EARLY_READ = "non_blocking_read"
LINK = "host_link"


def early_read_records(early: EarlyRead, machine: str) -> list[Record]:
    """:func:`~rlgpu_helpers.gpu.transfer.read_before_sync`'s result as two records, % of values wrong."""
    if not isinstance(early, EarlyRead):
        raise TypeError(f"early={early!r} must be an EarlyRead from read_before_sync()")
    params = {"bytes": early.elements * 4, "attempts": early.attempts}
    return [Record(EARLY_READ, variant, "wrong values", 100 * wrong / early.elements, "% of values", params,
                   None, machine)
            for variant, wrong in (("read before synchronize", early.wrong_before),
                                   ("read after synchronize", early.wrong_after))]


def link_record(link: Link, machine: str) -> Record:
    """:func:`~rlgpu_helpers.gpu.transfer.nominal_link`'s answer as a record (no spread: it is read, not measured)."""
    if not isinstance(link, Link):
        raise TypeError(f"link={link!r} must be a Link from nominal_link()")
    return Record(LINK, "nominal", "bandwidth per direction", link.gbs_per_direction, "GB/s",
                  {"pcie_gen": link.generation, "lanes": link.lanes}, None, machine)


def measure_transfers(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``transfers`` bench suite (see the module docstring). About 2 minutes on an H100 at full size."""
    device = get_device(device, param="device")
    machine = machine_of(device)
    records = transfer_bandwidth(device, progress=progress) + prefetch_time(device)
    early = read_before_sync(device)
    if early is not None:
        records += early_read_records(early, machine)
    link = nominal_link(device)
    if link is not None:
        records.append(link_record(link, machine))
    return records


def transfer_claim_checks(records: Sequence[Record], reference: Sequence[Record] = ()) -> list[ClaimCheck]:
    """The guide's "pinned memory: 2-3x faster transfer to GPU", judged on every machine that
    copied to a GPU (``records`` first, then ``reference``), by
    :func:`~rlgpu_helpers.gpu.transfer.pinned_claim`; a check without a verdict if none did."""
    everything = check_records(list(records) + list(reference))
    machines = dict.fromkeys(r.machine for r in everything if r.name == NAME and r.params.get("direction") == H2D)
    claim = CLAIMS["pinned-transfer"]
    checks = []
    for machine in machines:
        verdict = pinned_claim([r for r in everything if r.machine == machine])
        where = f"pinned over pageable, host to device, {CLAIM_BYTES // 2**20} MiB, {machine}"
        checks.append(ClaimCheck(claim, where, verdict) if verdict else ClaimCheck(claim, f"{machine}: {NOT_BOTH}"))
    if not machines:
        checks.append(ClaimCheck(claim, NO_GPU_COPY))
    return checks


NOT_BOTH = "no pinned and pageable host-to-device copies of the claim's size"
NO_GPU_COPY = ("no GPU record, from this run or in data/reference/: a CPU has no host-to-device "
               "copy (the GPU sweep's `bench transfers` measures it)")


def link_table(records: Sequence[Record]) -> Table:
    """Per machine with a ``"host_link"`` record: its nominal GB/s and the fastest copy measured each way.

    The fastest copy is the highest ``"transfer"`` GB/s of any variant and size in that
    direction, shown with its share of the nominal figure. Machines without a link record (a
    CPU) are left out.
    """
    records = check_records(records)
    columns = ["machine", "link", "nominal (GB/s per direction)"]
    for direction in (H2D, D2H):
        columns += [f"fastest {direction} (GB/s)", "of nominal"]
    rows = []
    for link in (r for r in records if r.name == LINK):
        row = [link.machine, f"PCIe gen {link.params['pcie_gen']} x{link.params['lanes']}", format_number(link.value)]
        for direction in (H2D, D2H):
            copies = [r.value for r in records if r.machine == link.machine and r.name == NAME
                      and r.params.get("direction") == direction]
            best = max(copies, default=None)
            row += ["", ""] if best is None else [format_number(best), f"{100 * best / link.value:.0f}%"]
        rows.append(row)
    return Table(columns, rows, [False, False, True, True, True, True, True])


NAME = "transfer"


MIN_BYTES, MAX_BYTES = 2**10, 2**30


CLAIM_BYTES = 64 * 2**20
"""Size at which :func:`pinned_claim` judges the guide: 64 MiB, large enough that the fixed cost
of a copy is negligible (the link's speed shows), and a replay batch of images can be that big."""


def default_sizes() -> tuple[int, ...]:
    """Bytes per copy: 1 KiB to 1 GiB in powers of 4; 1 KiB, 64 KiB and 1 MiB in quick mode."""
    return pick(full=tuple(MIN_BYTES * 4**k for k in range(11)), quick=(2**10, 2**16, 2**20))


def _check_sizes(sizes) -> tuple[int, ...]:
    sizes = check_ints("sizes", sizes)
    for index, size in enumerate(sizes):
        if not MIN_BYTES <= size <= MAX_BYTES:
            raise ValueError(f"sizes={sizes!r}: sizes[{index}]={size} must be an int in "
                             f"[{MIN_BYTES}, {MAX_BYTES}] (1 KiB to 1 GiB)")
    return sizes


def transfer_bandwidth(device: str | torch.device | None = None, *, sizes=None, variants=VARIANTS,
                       directions=DIRECTIONS, progress: bool = True) -> list[Record]:
    """GB/s of copying ``sizes`` bytes between host and ``device``, for each variant and direction.

    Variants (:data:`VARIANTS`), each into a buffer allocated beforehand: ``"pageable"`` (an ordinary
    host tensor), ``"pinned"`` (the host waits for each copy), ``"pin_memory() then copy"`` (pinning
    counted; host to device only) and ``"non_blocking"`` (pinned; one synchronization per timed run).
    GB/s is 10⁹ bytes per second, the median of the timed runs with their IQR as the spread.
    ``sizes`` defaults to :func:`default_sizes`. Records: ``"transfer"``, ``"bandwidth"`` in GB/s,
    params ``{"bytes", "direction"}``. Without CUDA only pageable copies are measured (on a CPU,
    ``"host to host"``: the host's own memory, not a transfer), and what was skipped is printed.
    """
    device = get_device(device, param="device")
    sizes = _check_sizes(default_sizes() if sizes is None else sizes)
    variants = check_choices("variants", variants, VARIANTS)
    directions = check_choices("directions", directions, DIRECTIONS)
    cuda = device.type == "cuda"
    if not cuda:
        skipped = [variant for variant in variants if variant != PAGEABLE]
        if skipped:
            print(f"no CUDA: pinned memory needs a CUDA GPU, so {', '.join(map(repr, skipped))} "
                  f"{'was' if len(skipped) == 1 else 'were'} skipped on {device.type}.")
        variants = (PAGEABLE,) if PAGEABLE in variants else ()
        if device.type == "cpu" and variants:
            print("On a CPU there is no link to cross: measured copies between two host buffers of pageable "
                  "memory instead (direction 'host to host'), a baseline of the host's memory.")
            directions = (H2H,)
    jobs = [(size, variant, direction) for size in sizes for direction in directions for variant in variants
            if not (variant == PIN_THEN_COPY and direction == D2H)]
    machine = machine_of(device)
    records, buffers = [], None
    for size, variant, direction in tqdm(jobs, desc="transfers", disable=not progress):
        if buffers is None or buffers[0].numel() != size:
            buffers = None  # free the last size's buffers before allocating the next ones
            buffers = (torch.ones(size, dtype=torch.uint8),
                       torch.ones(size, dtype=torch.uint8, pin_memory=True) if cuda else None,
                       torch.zeros(size, dtype=torch.uint8, device=device))
        copy = copy_of(variant, direction, *buffers)
        timing = time_sized(copy, pick(full=0.05, quick=0.002), warmup=0, repeats=pick(full=5, quick=3), device=device)
        value, spread = timing.rate(size / 1e9)
        records.append(Record(NAME, variant, "bandwidth", value, "GB/s", {"bytes": size, "direction": direction},
                              spread, machine))
    return records


def pinned_claim(records: Sequence[Record], nbytes: int = CLAIM_BYTES) -> Verdict | None:
    """The guide's "pinned memory: 2-3x faster transfer to GPU", judged on one machine's records.

    The speedup is the ``"pinned"`` over the ``"pageable"`` host-to-device GB/s at ``nbytes``
    (both blocking copies, so only the memory differs), its spread from both records' relative
    spreads. Returns the :class:`~rlgpu_helpers.measure.claims.Verdict`, or None (and prints why)
    when the records hold no such pair: a CPU measures no host-to-device copy at all.
    """
    records = check_records(records)
    nbytes = check_int("nbytes", nbytes)
    machines = sorted({record.machine for record in records})
    if len(machines) > 1:
        raise ValueError(f"records come from machines {machines}: pass one machine's records")
    found = {record.variant: record for record in records
             if record.name == NAME and record.params == {"bytes": nbytes, "direction": H2D}}
    if PINNED not in found or PAGEABLE not in found:
        print(f"pinned-transfer: not measured: needs a GPU (no pinned and pageable host-to-device copy "
              f"of {nbytes / _MIB:g} MiB in these records)")
        return None
    return judge(CLAIMS["pinned-transfer"], *record_ratio(found[PINNED], found[PAGEABLE]))


def prefetch_time(device: str | torch.device | None = None, *, rows: int | None = None,
                  width: int | None = None, batches: int | None = None) -> list[Record]:
    """Milliseconds per batch, copying each batch then computing on it vs prefetching on a side stream.

    Each batch is ``rows x width`` float32 (``gpu.transfer.prefetch_sizes``), ``batches`` of them per
    timed run. Records: ``"prefetch"``, ``"time per batch"`` in ms, params ``{"bytes", "batches"}``,
    the median run with its IQR. On a CPU: one record, the compute loop alone.
    """
    device = get_device(device, param="device")
    rows, width, batches = prefetch_sizes(device, rows, width, batches)
    if device.type != "cuda":
        print(f"{no_overlap_reason(device)}; timed the same loop without streams.")
    machine = machine_of(device)
    params = {"bytes": rows * width * 4, "batches": batches}
    records = []
    for variant, loop in prefetch_loops(device, rows, width, batches).items():
        timing = time_callable(loop, warmup=1, repeats=pick(full=5, quick=3), device=device)
        records.append(Record("prefetch", variant, "time per batch", timing.median / batches * 1e3, "ms",
                              params, timing.iqr / batches * 1e3, machine))
    return records
