import pytest
import torch

from rlgpu_helpers.bench import ceilings
from rlgpu_helpers.bench.ceilings import (
    limits_table,
    linear_bytes,
    linear_flop,
    linear_limits,
    linear_throughput,
    matmul_throughput,
    measure_ceilings,
    memory_bandwidth,
    seconds_per_call,
    time_per_call,
)
from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.measure.timing import Timing
from rlgpu_helpers.core.device import device_report, machine_label

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


@pytest.fixture
def half_a_second(monkeypatch):
    """Timed runs take 0.5, 1 and 2 s: figures follow from the work formulas and the fastest run."""
    monkeypatch.setattr(ceilings, "time_sized", lambda fn, run_s, **kwargs: Timing((0.5, 1.0, 2.0)))


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


# --- what limits one linear layer -----------------------------------------------------------

def layer(batch, width, seconds):
    """A linear_throughput record of a forward pass that took ``seconds``."""
    return Record("linear", "float32", "throughput", linear_flop(batch, width) / seconds / 1e12, "TFLOP/s",
                  {"batch": batch, "width": width}, None, LABEL)


def test_linear_work_formulas():
    assert linear_flop(1, 256) == 2 * 256**2 == 131_072
    assert linear_bytes(1, 256) == 4 * (256**2 + 2 * 256) == 264_192
    assert linear_bytes(16, 256, element_bytes=2) == 2 * (256**2 + 2 * 16 * 256)
    with pytest.raises(ValueError, match="^batch=0"):
        linear_flop(0, 256)
    with pytest.raises(TypeError, match="^width=2.5"):
        linear_bytes(1, 2.5)


def test_seconds_per_call_undoes_the_throughput(half_a_second):
    records = linear_throughput("cpu", batch_sizes=(1, 32), width=8, progress=False)
    assert [seconds_per_call(r) for r in records] == pytest.approx([0.5, 0.5])  # the fastest run
    times = time_per_call(records)
    assert [(r.metric, r.unit, r.spread, r.params) for r in times] == [
        ("time per call", "µs", None, {"batch": 1, "width": 8}),
        ("time per call", "µs", None, {"batch": 32, "width": 8})]
    assert [r.value for r in times] == pytest.approx([5e5, 5e5])


def test_seconds_per_call_needs_a_linear_record():
    matmul = Record("matmul", "float32", "throughput", 1.0, "TFLOP/s", {"n": 256}, None, LABEL)
    with pytest.raises(ValueError, match="^record=.*not a linear_throughput record"):
        seconds_per_call(matmul)
    with pytest.raises(TypeError, match="Record"):
        seconds_per_call({"batch": 1})


def test_linear_limits_sets_each_limit_beside_the_measured_time():
    # batch 1: 8 µs measured, 5 µs fixed cost; 264,192 bytes at 100 GB/s = 2.64 µs; 131,072 FLOP at 1 TFLOP/s
    # = 0.131 µs. Batch 4,096: 2,147,483,648 FLOP at 1 TFLOP/s = 2.15 ms, the largest.
    layers = [layer(4096, 256, 3e-3), layer(1, 256, 8e-6)]
    fixed = [layer(1, 1, 5e-6), layer(4096, 1, 6e-6)]
    one, big = linear_limits(layers, fixed, peak=1.0, bandwidth=100.0)
    assert (one.width, one.batch, one.flop, one.bytes) == (256, 1, 131_072, 264_192)
    assert (one.measured, one.fixed, one.memory, one.arithmetic) == pytest.approx((8e-6, 5e-6, 2.64192e-6, 1.31072e-7))
    assert one.largest == "fixed cost"
    assert big.batch == 4096 and big.fixed == pytest.approx(6e-6) and big.largest == "arithmetic"
    slow_memory, _ = linear_limits(layers, fixed, peak=1.0, bandwidth=10.0)  # 26.4 µs to move the bytes
    assert slow_memory.largest == "memory"
    table = limits_table([one, big])
    assert table.columns == ["width", "batch", "FLOP per byte", "measured (µs)", "fixed cost (µs)",
                             "memory alone (µs)", "arithmetic alone (µs)", "largest limit"]
    assert table.rows[0] == ["256", "1", "0.496", "8.00", "5.00", "2.64", "0.131", "fixed cost"]
    assert table.rows[1][1] == "4,096" and table.rows[1][-1] == "arithmetic"


def test_linear_limits_rejects_what_it_cannot_compare():
    with pytest.raises(ValueError, match="fixed has no record at batch=16"):
        linear_limits([layer(16, 256, 1e-5)], [layer(1, 1, 5e-6)], peak=1.0, bandwidth=100.0)
    with pytest.raises(ValueError, match="^peak=0"):
        linear_limits([layer(1, 256, 1e-5)], [layer(1, 1, 5e-6)], peak=0, bandwidth=100.0)
    with pytest.raises(TypeError, match="^bandwidth=None"):
        linear_limits([layer(1, 256, 1e-5)], [layer(1, 1, 5e-6)], peak=1.0, bandwidth=None)
