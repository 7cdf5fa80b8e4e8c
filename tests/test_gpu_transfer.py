"""Host-device transfers: well-formed records, the claim wired to the verdict rule, the prefetch
yielding the batches it was given, the timeline drawn from profiler events, and on a CPU each
function saying what it skipped. The CUDA paths are tested in test_gpu_cuda.py."""

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from rlgpu_helpers.bench import transfers
from rlgpu_helpers.bench.transfers import (
    CLAIM_BYTES,
    default_sizes,
    pinned_claim,
    prefetch_time,
    transfer_bandwidth,
)
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.gpu import transfer
from rlgpu_helpers.gpu.transfer import (
    COMPUTE_ONLY,
    H2D,
    PCIE_LANE_GBS,
    PREFETCH,
    SERIAL,
    Interval,
    Link,
    intervals_from_events,
    nominal_link,
    parse_link,
    plot_timeline,
    prefetch_timeline,
    prefetch_to_device,
    read_before_sync,
)
from rlgpu_helpers.measure.claims import (
    CLAIMS,
    HELD,
    NOT_HELD,
    WITHIN_NOISE,
    speedup_spread,
)
from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.measure.timing import Timing

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


# --- GB/s against size --------------------------------------------------------------------------

def test_default_sizes_run_from_1_kib_to_1_gib_in_powers_of_4(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "0")
    sizes = default_sizes()
    assert sizes[0] == 2**10 and sizes[-1] == 2**30 and len(sizes) == 11
    assert all(b == 4 * a for a, b in itertools.pairwise(sizes))
    assert CLAIM_BYTES in sizes


def test_on_a_cpu_only_host_to_host_pageable_copies_are_measured_and_the_rest_is_named(capsys):
    records = transfer_bandwidth("cpu", sizes=(2**10, 2**16), progress=False)
    said = capsys.readouterr().out
    assert "no CUDA" in said and "'pinned', 'pin_memory() then copy', 'non_blocking' were skipped" in said
    assert "host to host" in said
    assert [(r.name, r.variant, r.metric, r.unit, r.params, r.machine) for r in records] == [
        ("transfer", "pageable", "bandwidth", "GB/s", {"bytes": 2**10, "direction": "host to host"}, LABEL),
        ("transfer", "pageable", "bandwidth", "GB/s", {"bytes": 2**16, "direction": "host to host"}, LABEL)]
    assert all(r.value > 0 and math.isfinite(r.value) and r.spread >= 0 for r in records)


def test_asking_only_for_pinned_variants_on_a_cpu_measures_nothing_and_says_so(capsys):
    assert transfer_bandwidth("cpu", sizes=(2**10,), variants=("pinned",), progress=False) == []
    assert "'pinned' was skipped on cpu" in capsys.readouterr().out


def test_bandwidth_is_bytes_over_the_median_time_with_the_iqr_of_the_rates(monkeypatch):
    monkeypatch.setattr(transfers, "time_sized", lambda fn, run_s, **kwargs: Timing((0.5, 1.0, 2.0)))
    record, = transfer_bandwidth("cpu", sizes=(2**20,), progress=False)
    gb = 2**20 / 1e9
    assert record.value == pytest.approx(gb / 1.0)
    assert record.spread == pytest.approx(1.5 * gb - 0.75 * gb)  # rates gb/0.5, gb, gb/2: quartiles 0.75, 1.5


@pytest.mark.parametrize("kwargs, error, message", [
    ({"sizes": (512,)}, ValueError, r"^sizes=\(512,\): sizes\[0\]=512 must be an int in \[1024, 1073741824\]"),
    ({"sizes": (2**31,)}, ValueError, r"^sizes=.*must be an int in \[1024, 1073741824\]"),
    ({"sizes": ()}, ValueError, r"^sizes=\(\) must not be empty"),
    ({"sizes": (1.5e3,)}, TypeError, r"^sizes=.*must be an int, not float"),
    ({"sizes": "1024"}, TypeError, r"^sizes='1024' must be an int"),
    ({"variants": ("fast",)}, ValueError, r"^variants=\('fast',\): 'fast' is not one of"),
    ({"directions": ("up",)}, ValueError, r"^directions=\('up',\): 'up' is not one of"),
    ({"device": "tpu"}, ValueError, r"^device='tpu' is not a device"),
    ({"device": 0}, TypeError, r"^device=0 must be"),
])
def test_transfer_bandwidth_refuses_bad_input_naming_it(kwargs, error, message):
    with pytest.raises(error, match=message):
        transfer_bandwidth(**{"device": "cpu", "progress": False, **kwargs})


# --- the guide's "2-3x faster" ------------------------------------------------------------------

def gpu_copy(variant, value, spread=0.0, nbytes=CLAIM_BYTES, direction=H2D, machine="gpu-test"):
    return Record("transfer", variant, "bandwidth", value, "GB/s", {"bytes": nbytes, "direction": direction},
                  spread, machine)


def test_pinned_claim_judges_pinned_over_pageable_with_both_spreads():
    verdict = pinned_claim([gpu_copy("pageable", 10.0, 1.0), gpu_copy("pinned", 25.0, 0.5),
                            gpu_copy("pinned", 99.0, nbytes=2**20), gpu_copy("pinned", 99.0, direction="device to host")])
    assert verdict.claim is CLAIMS["pinned-transfer"]
    assert verdict.measured == pytest.approx(2.5)
    assert verdict.spread == pytest.approx(speedup_spread(2.5, 0.5 / 25, 1.0 / 10))
    assert verdict.outcome == HELD


@pytest.mark.parametrize("pinned, outcome", [(10.2, WITHIN_NOISE), (5.0, NOT_HELD)])
def test_pinned_claim_follows_the_one_verdict_rule(pinned, outcome):
    assert pinned_claim([gpu_copy("pageable", 10.0, 0.5), gpu_copy("pinned", pinned, 0.0)]).outcome == outcome


def test_pinned_claim_at_another_size():
    records = [gpu_copy("pageable", 4.0, nbytes=2**20), gpu_copy("pinned", 12.0, nbytes=2**20)]
    assert pinned_claim(records, nbytes=2**20).measured == pytest.approx(3.0)


def test_pinned_claim_without_a_gpu_measurement_is_not_measured(capsys):
    records = transfer_bandwidth("cpu", sizes=(2**10,), progress=False)
    assert pinned_claim(records) is None
    assert "pinned-transfer: not measured: needs a GPU" in capsys.readouterr().out


def test_pinned_claim_refuses_mixed_machines_and_non_records():
    with pytest.raises(ValueError, match="machines .*pass one machine's records"):
        pinned_claim([gpu_copy("pageable", 10.0), gpu_copy("pinned", 20.0, machine="gpu-other")])
    with pytest.raises(TypeError, match="Record"):
        pinned_claim([{"variant": "pinned"}])
    with pytest.raises(ValueError, match="^nbytes=0 must be an int >= 1"):
        pinned_claim([], nbytes=0)


# --- reading a non_blocking copy too early ------------------------------------------------------

def test_read_before_sync_needs_cuda_and_says_so(capsys):
    assert read_before_sync("cpu") is None
    said = capsys.readouterr().out
    assert "no CUDA" in said and "nothing to read too early" in said


@pytest.mark.parametrize("kwargs, error, message", [
    ({"elements": 0}, ValueError, r"^elements=0 must be an int in \[1, 268435456\]"),
    ({"elements": 2.0}, TypeError, r"^elements=2.0 must be an int"),
    ({"attempts": 0}, ValueError, r"^attempts=0 must be an int >= 1"),
])
def test_read_before_sync_refuses_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        read_before_sync("cpu", **kwargs)


def test_an_early_read_describes_itself():
    early = transfer.EarlyRead(1000, 1, 1000, 0, (0, 0, 0), (1, 2, 3))
    assert str(early) == ("read before synchronizing: 1,000 of 1,000 values wrong (first ones [0, 0, 0]); "
                          "after synchronizing: 0 wrong (first ones [1, 2, 3])")
    assert "happened to find the copy complete" in str(transfer.EarlyRead(10, 10, 0, 0, (1,), (1,)))


# --- prefetch on a side stream ------------------------------------------------------------------

def test_prefetch_yields_every_batch_in_order_on_the_device():
    batches = [torch.full((3, 2), float(i)) for i in range(5)]
    got = list(prefetch_to_device(batches, "cpu"))
    assert len(got) == 5 and all(torch.equal(a, b) and b.device.type == "cpu" for a, b in zip(batches, got))
    assert list(prefetch_to_device([], "cpu")) == []
    with pytest.raises(ValueError, match="^device='gpu' is not a device"):
        list(prefetch_to_device(batches, "gpu"))


def test_prefetch_time_on_a_cpu_times_the_compute_alone_and_says_why(capsys):
    record, = prefetch_time("cpu", rows=8, width=16, batches=3)
    assert "no CUDA" in capsys.readouterr().out
    assert (record.name, record.variant, record.metric, record.unit, record.params) == (
        "prefetch", COMPUTE_ONLY, "time per batch", "ms", {"bytes": 8 * 16 * 4, "batches": 3})
    assert record.value > 0 and record.spread >= 0 and record.machine == LABEL


def test_prefetch_time_refuses_bad_sizes():
    with pytest.raises(ValueError, match="^rows=0 must be an int >= 1"):
        prefetch_time("cpu", rows=0)
    with pytest.raises(TypeError, match="^batches='2' must be an int"):
        prefetch_time("cpu", batches="2")


def test_prefetch_timeline_needs_cuda_and_says_so(capsys):
    assert prefetch_timeline("cpu") is None
    assert "no GPU timeline" in capsys.readouterr().out
    with pytest.raises(TypeError, match="^trace_path=3 must be a str, a Path or None"):
        prefetch_timeline("cpu", trace_path=3)


def event(name, device_type, start, end, stream=0):
    return SimpleNamespace(name=name, device_type=device_type, device_resource_id=stream,
                           time_range=SimpleNamespace(start=start, end=end))


def test_intervals_from_profiler_events_go_to_their_loop_and_stream():
    events = [
        event(SERIAL, DeviceType.CPU, 1000, 2000), event(PREFETCH, DeviceType.CPU, 3000, 3800),
        event(SERIAL, DeviceType.CUDA, 1010, 1990, stream=7),  # the annotation's GPU copy: skipped
        event("Memcpy HtoD (Pinned -> Device)", DeviceType.CUDA, 1100, 1500, stream=7),
        event("volta_sgemm_128x64_nn", DeviceType.CUDA, 1500, 1900, stream=7),
        event("Memcpy HtoD (Pinned -> Device)", DeviceType.CUDA, 3100, 3500, stream=13),
        event("volta_sgemm_128x64_nn", DeviceType.CUDA, 3200, 3600, stream=7),
        event("aten::mm", DeviceType.CPU, 3050, 3060),
        event("Memset (Device)", DeviceType.CUDA, 5000, 5100),  # outside both loops
    ]
    assert intervals_from_events(events, [SERIAL, PREFETCH]) == [
        Interval(SERIAL, 7, "copy", "Memcpy HtoD (Pinned -> Device)", 0.1, 0.5),
        Interval(SERIAL, 7, "kernel", "volta_sgemm_128x64_nn", 0.5, 0.9),
        Interval(PREFETCH, 13, "copy", "Memcpy HtoD (Pinned -> Device)", 0.1, 0.5),
        Interval(PREFETCH, 7, "kernel", "volta_sgemm_128x64_nn", 0.2, 0.6),
    ]


def test_plot_timeline_draws_one_panel_per_loop_and_a_row_per_stream():
    intervals = [Interval(SERIAL, 7, "copy", "Memcpy", 0.0, 1.0), Interval(SERIAL, 7, "kernel", "mm", 1.0, 2.0),
                 Interval(PREFETCH, 13, "copy", "Memcpy", 0.0, 1.0), Interval(PREFETCH, 7, "kernel", "mm", 0.5, 1.5)]
    fig = plot_timeline(intervals)
    first, second = fig.axes
    assert first.get_title() == f"{SERIAL}: GPU work ends at 2.00 ms"
    assert [t.get_text() for t in second.get_yticklabels()] == ["stream 7", "stream 13"]
    assert second.get_xlabel() == "time since the loop started (ms)" and first.get_ylabel() == "CUDA stream"
    assert "GPU timeline" in fig.get_suptitle()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["copy", "kernel"]
    with pytest.raises(ValueError, match="^intervals=\\[\\] holds nothing"):
        plot_timeline([])
    with pytest.raises(TypeError, match="Interval"):
        plot_timeline([(0, 1)])


# --- the nominal link ---------------------------------------------------------------------------

def test_a_link_carries_its_lanes_times_the_generation_rate():
    assert parse_link("5, 16") == Link(5, 16)
    assert parse_link(" 3,16 ").gbs_per_direction == pytest.approx(15.76)
    assert Link(5, 16).gbs_per_direction == pytest.approx(63.0, abs=0.01)
    assert str(Link(4, 8)) == "PCIe gen 4 x8: 15.8 GB/s per direction (nominal)"
    assert sorted(PCIE_LANE_GBS) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("call, error, message", [
    (lambda: parse_link("[N/A], [N/A]"), ValueError, r"^text='\[N/A\], \[N/A\]' must be '<generation>, <lanes>'"),
    (lambda: parse_link(None), TypeError, r"^text=None must be a str"),
    (lambda: Link(9, 16), ValueError, r"^generation=9 must be a PCIe generation"),
    (lambda: Link(4, 0), ValueError, r"^lanes=0 must be an int >= 1"),
])
def test_links_refuse_what_is_not_one(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_nominal_link_needs_cuda_and_says_so(capsys):
    assert nominal_link("cpu") is None
    assert "no CUDA" in capsys.readouterr().out
