import pytest
import torch

from rlgpu_helpers.bench import ceilings
from rlgpu_helpers.bench.ceilings import (
    linear_throughput,
    matmul_throughput,
    measure_ceilings,
    memory_bandwidth,
)
from rlgpu_helpers.bench.timing import Timing
from rlgpu_helpers.core.device import device_report, machine_label

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


@pytest.fixture
def half_a_second(monkeypatch):
    """Timed runs take 0.5, 1 and 2 s: figures follow from the work formulas and the fastest run."""
    monkeypatch.setattr(ceilings, "time_callable", lambda fn, **kwargs: Timing((0.5, 1.0, 2.0)))


@pytest.fixture
def float32_only(monkeypatch):
    """A CPU without native 16-bit matmuls, whatever this machine has."""
    monkeypatch.setattr(ceilings, "native_half_dtypes", lambda device: ())


def test_matmul_throughput_counts_2n3_flop(half_a_second, float32_only):
    records = matmul_throughput("cpu", sizes=(100, 1000), progress=False)
    assert [(r.name, r.variant, r.metric, r.unit, r.params) for r in records] == [
        ("matmul", "float32", "throughput", "TFLOP/s", {"n": 100}),
        ("matmul", "float32", "throughput", "TFLOP/s", {"n": 1000})]
    work = [2 * 100**3 / 1e12, 2 * 1000**3 / 1e12]
    assert [r.value for r in records] == pytest.approx([w / 0.5 for w in work])
    # rates w/0.5, w/1, w/2: quartiles 0.75 w and 1.5 w
    assert [r.spread for r in records] == pytest.approx([0.75 * w for w in work])
    assert all(r.machine == LABEL for r in records)


def test_memory_bandwidth_counts_read_and_write(half_a_second):
    record, = memory_bandwidth("cpu", sizes_mib=(64,), progress=False)
    assert (record.name, record.variant, record.metric, record.unit, record.params) == (
        "copy", "device copy", "bandwidth", "GB/s", {"MiB": 64})
    assert record.value == pytest.approx(2 * 64 * 2**20 / 1e9 / 0.5)


def test_linear_throughput_counts_the_layer_flop(half_a_second):
    records = linear_throughput("cpu", batch_sizes=(1, 32), width=8, progress=False)
    assert [r.params for r in records] == [{"batch": 1, "width": 8}, {"batch": 32, "width": 8}]
    assert [r.value for r in records] == pytest.approx([2 * 8 * 8 / 1e12 / 0.5, 2 * 32 * 8 * 8 / 1e12 / 0.5])


def test_real_measurements_are_positive(float32_only):
    records = (matmul_throughput("cpu", sizes=(32,), progress=False)
               + memory_bandwidth("cpu", sizes_mib=(1,), progress=False)
               + linear_throughput("cpu", batch_sizes=(4,), width=16, progress=False))
    assert [r.name for r in records] == ["matmul", "copy", "linear"]
    assert all(r.value > 0 and r.spread >= 0 for r in records)


def test_matmul_measures_the_natively_supported_half_types(monkeypatch):
    monkeypatch.setattr(ceilings, "native_half_dtypes", lambda device: (torch.bfloat16,))
    records = matmul_throughput("cpu", sizes=(16,), progress=False)
    assert [r.variant for r in records] == ["float32", "bfloat16"]


def test_ceilings_suite_uses_quick_sizes():
    records = measure_ceilings("cpu", progress=False)
    assert {(r.name, tuple(r.params.items())) for r in records} == {
        ("matmul", (("n", 64),)), ("matmul", (("n", 128),)),
        ("copy", (("MiB", 1),)), ("copy", (("MiB", 8),))}


@pytest.mark.parametrize("call, error, name", [
    (lambda: matmul_throughput("cpu", sizes=(0,)), ValueError, "sizes"),
    (lambda: matmul_throughput("cpu", sizes=()), ValueError, "sizes"),
    (lambda: memory_bandwidth("cpu", sizes_mib=(1.5,)), TypeError, "sizes_mib"),
    (lambda: linear_throughput("cpu", batch_sizes=(True,)), TypeError, "batch_sizes"),
    (lambda: linear_throughput("cpu", width=0), ValueError, "width"),
    (lambda: matmul_throughput("tpu"), ValueError, "name"),
])
def test_bad_input_raises_naming_the_parameter(call, error, name):
    with pytest.raises(error, match=f"^{name}="):
        call()
