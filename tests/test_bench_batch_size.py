"""The ``batch_size`` bench suite (notebook 06): sweep, largest batch, utilization, verdicts."""

import os
import platform

import pytest

from rlgpu_helpers.bench.batch_size import (
    NETWORKS,
    PHASES,
    UpdateStep,
    allocator_experiment,
    allocator_table,
    batch_claim_checks,
    batch_sweep,
    max_batch_search,
    max_batch_table,
    memory_per_sample,
    phase_peaks,
    phase_table,
    plot_sweep,
    predicted_max_batch,
    saturation_batch,
    sweep_table,
    training_utilization,
)
from rlgpu_helpers.measure.records import Record


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def rate(batch, value, machine="m", device="cuda", variant=NETWORKS["mlp"]):
    return Record("batch_update", variant, "throughput", value, "samples/s",
                  {"batch_size": batch, "device": device}, 0.0, machine)


def test_the_update_step_trains_the_network():
    step = UpdateStep("mlp", "cpu")
    before = [p.detach().clone() for p in step.model.parameters()]
    step(8)
    assert any((p - b).abs().max() > 0 for p, b in zip(step.model.parameters(), before))
    with pytest.raises(ValueError, match="network='big'"):
        UpdateStep("big", "cpu")


def test_the_sweep_measures_throughput_and_peak_memory_that_grows_with_the_batch():
    records = batch_sweep("cpu", networks=("mlp",), batch_sizes=(64, 512, 4096), progress=False, machine="m")
    peaks = [r.value for r in records if r.metric == "peak memory"]
    assert [r.params["batch_size"] for r in records if r.metric == "throughput"] == [64, 512, 4096]
    assert peaks == sorted(peaks) and peaks[-1] > 4 * peaks[0]
    _, per_sample = memory_per_sample(records, NETWORKS["mlp"])
    # at least the input (11 floats) and two 64-wide activations per sample
    assert per_sample > 11 * 4 + 2 * 64 * 4
    assert "peak memory (MiB)" in sweep_table(records).columns
    fig = plot_sweep(records, "throughput", this_machine="m")
    assert fig.axes[0].get_xlabel() == "batch size (samples)" and "samples/s" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="batch_sizes"):
        batch_sweep("cpu", batch_sizes=(0,), progress=False)


def test_the_budgeted_search_agrees_with_the_sweeps_prediction():
    sweep = batch_sweep("cpu", networks=("mlp",), batch_sizes=(256, 1024, 2048, 4096), progress=False, machine="m")
    records = max_batch_search("cpu", sweep, networks=("mlp",), budget_bytes=4 * 2**20, progress=False,
                               machine="m")
    found = {r.metric: r.value for r in records}
    assert found["with margin"] == int(found["largest fit"] * 0.9)
    assert found["largest fit"] == pytest.approx(found["predicted"], rel=0.10)
    row, = max_batch_table(records).rows
    assert row[2] == "budget 4 MiB" and row[7] == "yes"


def test_on_a_gpu_the_prediction_is_from_what_the_allocator_reserved():
    """An H200's MLP: its tensors hold 1,592 B per sample at the peak, the caching allocator reserves about 1,848
    (a block freed and split for a smaller tensor cannot hold the next large one). Predicted from the tensors, the
    limit was 93.7 million samples; 83.9 million fit."""
    def peak(metric, batch, per_sample):
        return Record("batch_update", NETWORKS["mlp"], metric, (30 * 2**20 + per_sample * batch) / 2**20, "MiB",
                      {"batch_size": batch, "device": "cuda"}, None, "gpu")

    batches = (2**22, 2**23, 2**24)
    sweep = [peak("peak memory", b, 1592) for b in batches] + [peak("peak reserved", b, 1848) for b in batches]
    available = 149 * 10**9
    assert predicted_max_batch(sweep, NETWORKS["mlp"], available) == pytest.approx((available - 30 * 2**20) / 1848)
    tensors_only = [r for r in sweep if r.metric == "peak memory"]  # a CPU's sweep
    assert predicted_max_batch(tensors_only, NETWORKS["mlp"], available) == pytest.approx(
        (available - 30 * 2**20) / 1592)
    assert predicted_max_batch(sweep[:1], NETWORKS["mlp"], available) is None
    with pytest.raises(ValueError, match="available_bytes=0"):
        predicted_max_batch(sweep, NETWORKS["mlp"], 0)
    with pytest.raises(ValueError, match="metric='peak'"):
        memory_per_sample(sweep, NETWORKS["mlp"], metric="peak")


def test_saturation_is_where_samples_per_second_stop_growing():
    records = [rate(64, 100), rate(128, 190), rate(256, 300), rate(512, 310), rate(1024, 305)]
    assert saturation_batch(records, NETWORKS["mlp"]) == 256
    assert saturation_batch(records, NETWORKS["mlp"], tolerance=0.0) == 512
    assert saturation_batch(records, "nothing") is None


def test_gpu_statements_are_judged_only_on_gpu_records():
    cpu = [rate(64, 100, device="cpu"), rate(1024, 300, device="cpu")]
    checks = batch_claim_checks(cpu)
    assert {c.outcome for c in checks} == {"not measured"}
    gpu = [rate(64, 100, "gpu-nvidia-a100-sxm4-40gb"), rate(1024, 900, "gpu-nvidia-a100-sxm4-40gb"),
           rate(2048, 950, "gpu-nvidia-a100-sxm4-40gb"),
           Record("utilization", "PPO training", "mean utilization", 20.0, "%",
                  {"device": "cuda", "source": "nvml", "num_envs": 8192}, 5.0, "gpu-nvidia-a100-sxm4-40gb")]
    outcomes = {c.claim.key: c.outcome for c in batch_claim_checks(cpu, gpu)}
    assert outcomes["batch-a100"] == "held"  # stops growing at 1,024
    assert outcomes["batch-rtx-4090"] == "not measured"
    assert outcomes["larger-batches-utilize"] == "held"
    assert outcomes["utilization-70-90"] == "did not hold"


def test_training_utilization_records_the_monitors_mean(capfd):
    interval = 0.25
    samples, source, record = training_utilization("cpu", seconds=1.0, interval=interval, num_envs=32, num_steps=8,
                                                   machine="m")
    assert len(samples) >= 2 and "psutil" in source
    assert record.params == {"device": "cpu", "source": "psutil", "num_envs": 32}
    # psutil counts CPU time in clock ticks: a sample over `interval` s may read one tick per core
    # too many, so a busy process can read a little over 100%
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0 <= record.value <= 100 * (1 + tick / interval) and record.unit == "%"
    with pytest.raises(ValueError, match="seconds"):
        training_utilization("cpu", seconds=0)


def test_the_cnn_s_peak_memory_never_falls_as_the_batch_grows():
    # review of notebook 06: the CPU peak fell from batch 16 to 64, because the profiler missed the
    # free of the gradients the warm-up runs had left (fixed in gpu.memory.peak_memory)
    records = batch_sweep("cpu", networks=("cnn",), batch_sizes=(16, 32, 64, 128, 256), progress=False, machine="m")
    peaks = [r.value for r in records if r.metric == "peak memory"]
    assert peaks == sorted(peaks) and peaks[-1] > 3 * peaks[0]


def test_a_step_s_peak_is_the_larger_of_its_phases_not_their_sum():
    records = phase_peaks("cnn", (16, 256), "cpu", machine="m")
    peak = {(r.params["batch_size"], r.metric): r.value for r in records}
    assert set(PHASES) == {metric for _, metric in peak}
    for batch in (16, 256):
        parts = peak[batch, "forward and backward"], peak[batch, "clip and Adam step"]
        assert peak[batch, "whole step"] == pytest.approx(max(parts), rel=0.01)
    # Adam's temporaries are the size of the parameters, whatever the batch; activations grow with it
    assert peak[16, "clip and Adam step"] == peak[256, "clip and Adam step"]
    assert peak[256, "forward"] == pytest.approx(16 * peak[16, "forward"], rel=0.1)
    rows = phase_table(records).rows
    assert [row[-1] for row in rows] == ["clip and Adam step", "forward and backward"]


def test_the_allocator_experiment_counts_page_faults_in_both_settings():
    records = allocator_experiment("mlp", (64,), repeats=1, machine="m")
    variants = {r.variant for r in records}
    assert "glibc default" in variants
    if platform.libc_ver()[0] == "glibc":
        assert variants == {"glibc default", "glibc keeping freed memory"}
    assert all(r.value >= 0 and r.params == {"batch_size": 64, "device": "cpu", "network": "mlp"} for r in records)
    assert {r.metric for r in records} <= {"throughput", "page faults"}
    assert len(allocator_table(records).rows) == len(variants)
    with pytest.raises(ValueError, match="network='big'"):
        allocator_experiment("big")
