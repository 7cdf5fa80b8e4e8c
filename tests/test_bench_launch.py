"""The two ceilings of a step (notebook 04): launches counted by the profiler, bytes by the dispatcher."""

import os
import sys

import pytest
import torch

from rlgpu_helpers.bench.launch import (
    ROUND_TRIP,
    TINY_OP,
    Ceilings,
    StepProfile,
    bandwidth_lines,
    ceiling_records,
    ceilings_lines,
    ceilings_table,
    launch_floor_label,
    make_ceilings,
    measure_launch,
    op_latency,
    profile_records,
    profile_vec_snake,
    profiles_from_records,
    reference_ceilings,
)
from rlgpu_helpers.gpu.launches import (
    CPU_COUNTED,
    LaunchCount,
    count_launches,
    quiet_profiler,
    traffic_bytes,
)
from rlgpu_helpers.measure.records import Record


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_op_latency_times_a_tiny_op_and_the_same_read_on_the_host():
    tiny, trip = op_latency("cpu", machine="here")
    assert (tiny.name, tiny.variant, tiny.unit, tiny.machine) == ("op_latency", TINY_OP, "µs", "here")
    assert trip.variant == ROUND_TRIP and tiny.params == {"device": "cpu"}
    assert 0 < tiny.value < 1_000 and 0 < trip.value < 1_000 and tiny.spread >= 0


def test_launches_are_the_operators_that_run_a_kernel():
    x, y = torch.ones(8), torch.ones(8)
    assert count_launches(lambda: (x + y) * y, "cpu") == LaunchCount(2.0, CPU_COUNTED)
    assert count_launches(lambda: x.view(2, 4).unsqueeze(0), "cpu").per_call == 0
    assert count_launches(lambda: torch.empty(5), "cpu").per_call == 0
    assert count_launches(lambda: torch.where(x > 0, x, y), "cpu", calls=3).per_call == 2
    with pytest.raises(TypeError, match="not callable"):
        count_launches(5, "cpu")


def test_traffic_counts_inputs_and_outputs_and_only_the_elements_an_index_touches():
    x, y = torch.ones(1000), torch.ones(1000)
    assert traffic_bytes(lambda: x + y) == 3 * 4000
    assert traffic_bytes(lambda: x.add_(y)) == 3 * 4000  # x is read and written
    assert traffic_bytes(lambda: x.view(10, 100)) == 0
    index = torch.arange(10)
    # 10 int64 indices in, 10 floats out, and only those 10 of the source read
    assert traffic_bytes(lambda: x.index_select(0, index)) == 80 + 40 + 40
    # 10 indices and 10 values read, 10 elements of the target written
    assert traffic_bytes(lambda: x.scatter_(0, index, y[:10])) == 80 + 40 + 40
    assert traffic_bytes(lambda: x.copy_(y)) == 8000
    assert traffic_bytes(lambda: [x + y, x + y], calls=2) == 2 * 3 * 4000


def test_profile_of_vec_snake_grows_with_the_observation():
    features, grid = profile_vec_snake("cpu", num_envs=(64, 256), steps=2)
    assert (features.variant, grid.variant) == ("VecSnake features", "VecSnake grid")
    assert features.counted == CPU_COUNTED and 20 < features.launches_per_step < 1_000
    # a grid observation alone is 1,200 bytes per game, written twice in a step
    assert 100 < features.bytes_per_game < grid.bytes_per_game and grid.bytes_per_game > 2 * 1200
    assert features.profiled_at == (64, 256)
    with pytest.raises(ValueError, match="two N, the smaller first"):
        profile_vec_snake("cpu", num_envs=(256, 64))


PROFILE = StepProfile("VecSnake features", "cpu", 100.0, CPU_COUNTED, 1_000.0, 50.0, (1024, 4096))


def test_the_two_floors_and_where_they_cross():
    c = make_ceilings(PROFILE, latency_us=2.0, bandwidth_gbs=100.0, machine="m")
    assert c.launch_floor_us == 200.0
    assert c.memory_floor_us(1000) == pytest.approx(10.0)  # 1 MB at 100 GB/s
    assert c.crossover == pytest.approx(20_000)
    assert c.bound(1000) == "launch-bound" and c.bound(100_000) == "bandwidth-bound"
    assert launch_floor_label(c) == "launch floor: 100 launches × 2.00 µs (m)"
    with pytest.raises(ValueError, match="bandwidth_gbs=0"):
        make_ceilings(PROFILE, latency_us=2.0, bandwidth_gbs=0, machine="m")
    with pytest.raises(TypeError, match="must be a StepProfile"):
        make_ceilings("profile", latency_us=2.0, bandwidth_gbs=1.0, machine="m")


def throughput(n, rate, machine="m", device="cpu", variant="VecSnake features"):
    return Record("env_step", variant, "throughput", rate, "steps/s",
                  {"num_envs": n, "obs_type": "features", "device": device}, rate / 10, machine)


def test_ceiling_records_and_table_set_the_measurement_beside_both_floors():
    c = make_ceilings(PROFILE, latency_us=2.0, bandwidth_gbs=100.0, machine="m")
    measured = [throughput(100_000, 100_000 / 0.004), throughput(1, 2_000),
                throughput(1, 9.0, machine="other"), throughput(1, 9.0, device="cuda"),
                throughput(1, 9.0, variant="VecSnake grid")]
    records = ceiling_records(measured, c)
    assert [(r.variant.split(":")[0], r.params["num_envs"]) for r in records] == [
        ("measured", 1), ("memory floor", 1), ("measured", 100_000), ("memory floor", 100_000)]
    assert records[0].value == pytest.approx(500.0) and records[0].spread == pytest.approx(50.0)
    assert records[3].value == pytest.approx(1_000.0) and records[3].unit == "µs"
    assert "1,000 B/game at 100 GB/s" in records[1].variant
    text = str(ceilings_table(measured, c))
    assert "launch-bound" in text and "bandwidth-bound" in text and "measured / larger floor" in text
    assert "2.50" in text and "4.00" in text  # 500 µs over 200; 4,000 µs over 1,000
    far = str(ceilings_table([throughput(1, 10.0)], c))  # 100,000 µs over 200, written out in full
    assert "500" in far and "e+" not in far


def test_profiles_and_ceilings_round_trip_through_records():
    records = profile_records([PROFILE], "gpu-x")
    assert {r.metric for r in records} == {"launches per step", "bytes per game"}
    profile, = profiles_from_records(records).values()
    assert (profile.launches_per_step, profile.bytes_per_game, profile.fixed_bytes) == (100.0, 1_000.0, 50.0)
    latency = Record("op_latency", TINY_OP, "time per call", 5.0, "µs", {"device": "cpu"}, 0.1, "gpu-x")
    copies = [Record("copy", "device copy", "bandwidth", value, "GB/s", {"MiB": mib}, 1.0, "gpu-x")
              for mib, value in ((1, 900.0), (1024, 400.0))]
    assert reference_ceilings(records + [latency]) == []  # no bandwidth: nothing to draw
    c, = reference_ceilings(records + [latency] + copies)
    assert c == Ceilings(profile, "gpu-x", 5.0, 400.0)  # the largest copy is main memory


def test_quiet_profiler_drops_kinetos_progress_and_gpu_probe_lines_and_keeps_the_rest(capsys):
    with quiet_profiler():
        os.write(2, b"USDT:2026-11-23 22:07:27 31884:31884 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"ERROR:2026-11-29 04:37:59 6140:6140 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35\n")
        os.write(2, b"a real problem\n")
        os.write(2, b"ERROR:2026-11-29 04:37:59 6140:6140 Other.cpp:7] something else failed\n")
        print("to stdout")
    captured = capsys.readouterr()
    assert "profiler_start" not in captured.err and "gpuGetDeviceCount" not in captured.err
    assert "a real problem" in captured.err and "something else failed" in captured.err
    assert "to stdout" in captured.out
    assert sys.stderr is not None


def test_measure_launch_gives_records_for_the_reference_file():
    records = measure_launch("cpu", progress=False)
    assert {r.name for r in records} == {"op_latency", "env_step_profile"}
    assert len(profiles_from_records(records)) == 2


def copy_record(mib, value, machine="cpu-here", date="2026-01-02", spread=None):
    return Record("copy", "device copy", "bandwidth", value, "GB/s", {"MiB": mib}, spread, machine, date)


def test_bandwidth_lines_show_the_largest_copy_and_the_same_copy_from_another_run():
    copies = [copy_record(1, 150.0), copy_record(1024, 60.0)]
    stored = [copy_record(1024, 120.0, date="2025-12-01", spread=1.5), copy_record(1, 999.0),
              copy_record(1024, 5.0, machine="elsewhere")]
    first, second = bandwidth_lines(copies, stored)
    assert first == "cpu-here: 60.0 GB/s copying the largest buffer, 1,024 MiB (by buffer size: 1 MiB 150, 1,024 MiB 60.0 GB/s)"
    assert "(2025-12-01): 120 ± 1.50 GB/s, 0.500x of it here" in second
    assert bandwidth_lines(copies) == [first]
    with pytest.raises(TypeError, match="stored must hold only Record"):
        bandwidth_lines(copies, [1.0])


def test_ceilings_lines_say_where_the_floors_cross_and_how_far_above_the_measurement_is():
    c = make_ceilings(PROFILE, latency_us=2.0, bandwidth_gbs=100.0, machine="m")
    measured = [throughput(100_000, 100_000 / 0.004), throughput(1, 2_000)]
    line, = ceilings_lines(measured, [c])
    # 100 launches x 2 µs = 200 µs; 1,000 B per game at 100 GB/s = 0.01 µs per game: they cross at 20,000
    assert line.endswith("launch floor 200 µs; the floors cross at N ≈ 20,000; bandwidth-bound from N = 100,000 on; "
                         "measured 2.5x to 4.0x the larger floor"), line
    empty, = ceilings_lines([], [c])
    assert empty.endswith("launch-bound at every N measured; no time per step measured")
