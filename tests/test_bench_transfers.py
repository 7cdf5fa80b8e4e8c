"""The `bench transfers` suite: what it measures on a CPU, what it says it skipped, and the records
it turns the GPU-only results into."""

import pytest

from rlgpu_helpers.bench.transfers import (
    early_read_records,
    link_record,
    link_table,
    measure_transfers,
)
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.gpu.transfer import COMPUTE_ONLY, EarlyRead, Link
from rlgpu_helpers.measure.records import Record

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_on_a_cpu_the_suite_measures_host_copies_and_the_compute_loop_and_names_what_it_skipped(capsys):
    records = measure_transfers("cpu", progress=False)
    said = capsys.readouterr().out
    for skipped in ("'pinned', 'pin_memory() then copy', 'non_blocking' were skipped",
                    "no copy to overlap", "nothing to read too early", "no host-GPU link"):
        assert skipped in said
    assert {(r.name, r.variant, r.params.get("direction")) for r in records} == {
        ("transfer", "pageable", "host to host"), ("prefetch", COMPUTE_ONLY, None)}
    assert sorted(r.params["bytes"] for r in records if r.name == "transfer") == [2**10, 2**16, 2**20]
    assert all(r.machine == LABEL and r.value > 0 for r in records)


def test_an_early_read_becomes_the_percentage_of_wrong_values():
    before, after = early_read_records(EarlyRead(2000, 3, 500, 0, (0,), (1,)), "gpu-test")
    assert (before.name, before.variant, before.metric, before.unit, before.value, before.spread) == (
        "non_blocking_read", "read before synchronize", "wrong values", "% of values", 25.0, None)
    assert (after.variant, after.value, after.params) == ("read after synchronize", 0.0, {"bytes": 8000, "attempts": 3})
    with pytest.raises(TypeError, match="^early=None must be an EarlyRead"):
        early_read_records(None, "gpu-test")


def test_link_table_sets_the_fastest_copy_beside_the_nominal_link():
    link = link_record(Link(5, 16), "gpu-test")
    assert (link.name, link.variant, link.unit, link.params, link.spread) == (
        "host_link", "nominal", "GB/s", {"pcie_gen": 5, "lanes": 16}, None)
    copies = [Record("transfer", variant, "bandwidth", value, "GB/s", {"bytes": 2**26, "direction": direction},
                     0.1, machine)
              for variant, value, direction, machine in [
                  ("pageable", 20.0, "host to device", "gpu-test"), ("pinned", 50.4, "host to device", "gpu-test"),
                  ("pinned", 60.0, "host to device", "gpu-other"), ("pageable", 9.0, "host to host", "gpu-test")]]
    table = link_table([link, *copies])
    assert table.columns == ["machine", "link", "nominal (GB/s per direction)", "fastest host to device (GB/s)",
                             "of nominal", "fastest device to host (GB/s)", "of nominal"]
    assert table.rows == [["gpu-test", "PCIe gen 5 x16", "63.0", "50.4", "80%", "", ""]]
    assert link_table(copies).rows == []  # no link record: a CPU
    with pytest.raises(TypeError, match="^link=.*must be a Link"):
        link_record((5, 16), "gpu-test")


def test_the_pinned_transfer_claim_is_judged_per_gpu_machine_or_said_missing():
    from rlgpu_helpers.bench.transfers import CLAIM_BYTES, transfer_claim_checks
    from rlgpu_helpers.measure.claims import claim_checks_table

    none, = transfer_claim_checks([])
    assert none.verdict is None and "no GPU record" in none.answered_by
    copies = [Record("transfer", variant, "bandwidth", value, "GB/s", {"bytes": CLAIM_BYTES, "direction": "host to device"},
                     value / 50, "gpu-x") for variant, value in (("pageable", 10.0), ("pinned", 25.0))]
    check, = transfer_claim_checks([], copies)
    assert check.verdict.measured == pytest.approx(2.5) and check.outcome == "held" and "gpu-x" in check.answered_by
    assert "held" in str(claim_checks_table([check]))
