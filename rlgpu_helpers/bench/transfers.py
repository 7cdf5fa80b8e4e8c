"""The ``transfers`` bench suite: host-device copies and their overlap with compute (introduced in notebook 05).

``python -m rlgpu_helpers bench transfers`` runs :func:`measure_transfers`, which gathers what
:mod:`rlgpu_helpers.gpu.transfer` measures into records, so that a GPU machine's reference file
carries the lesson to students without a GPU:

* ``"transfer"``: GB/s against size for pageable, pinned, ``pin_memory()`` then copy and
  ``non_blocking``, in both directions (:func:`~rlgpu_helpers.gpu.transfer.transfer_bandwidth`);
* ``"prefetch"``: ms per batch, copy then compute vs prefetch on a side stream
  (:func:`~rlgpu_helpers.gpu.transfer.prefetch_time`);
* ``"non_blocking_read"``: the % of values wrong when a ``non_blocking`` copy to the host is
  read before synchronizing, and after (:func:`~rlgpu_helpers.gpu.transfer.read_before_sync`);
* ``"host_link"``: the nominal GB/s per direction of the GPU's PCIe link, as nvidia-smi
  reports it (read, not measured: :func:`~rlgpu_helpers.gpu.transfer.nominal_link`).

On a CPU only the first two can be measured (copies between host buffers, the compute loop
alone); the suite prints what it skipped. :func:`link_table` sets each machine's fastest
measured copy beside its nominal link.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.device import get_device, machine_of
from ..gpu.transfer import (
    CLAIM_BYTES,
    D2H,
    H2D,
    NAME,
    EarlyRead,
    Link,
    nominal_link,
    pinned_claim,
    prefetch_time,
    read_before_sync,
    transfer_bandwidth,
)
from ..measure.claims import CLAIMS, ClaimCheck
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number

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
