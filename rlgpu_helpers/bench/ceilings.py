"""The two ceilings of a device: how fast it multiplies, and how fast it moves memory.

Introduced in notebook 00.

No training step runs faster than its device allows. Large matrix multiplies (big batches, wide
layers) are limited by arithmetic, measured here in FLOP/s (floating-point operations per
second; an n x n matmul does 2n³). Small multiplies and element-wise work (activations,
optimizer updates, a vectorized environment's step) are limited by memory bandwidth, in GB/s,
or by the fixed cost of starting each operation. Knowing both ceilings tells you how far from
the limit a workload is.

For one linear layer (the shape of an RL network), :func:`linear_limits` sets the measured time
of a call beside what each limit alone would cost: the fixed cost of a call (measured with a
layer 1 wide), moving its bytes at the memory ceiling, and its FLOP at the arithmetic ceiling.
"""

import dataclasses

import torch
from tqdm.auto import tqdm

from ..core.checks import check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of, native_half_dtypes
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number
from ..measure.timing import time_sized

_MIB = 2**20


def _rate(fn, work: float, device: torch.device) -> tuple[float, float]:
    """``work`` per second in the fastest run of ``fn()``, and the IQR of the runs' rates.

    A ceiling is the most the device can do, and whatever else runs on the machine can only slow
    a run down, so the fastest run estimates it best. Each run repeats ``fn()`` long enough to be
    timed well.
    """
    timing = time_sized(fn, pick(full=0.2, quick=0.01), warmup=0, repeats=pick(full=5, quick=3), device=device)
    return work / timing.min, timing.rate(work)[1]


def _measure(name: str, metric: str, unit: str, jobs: list, device: torch.device,
             progress: bool) -> list[Record]:
    """Time each ``(variant, params, make)`` job; ``make()`` allocates and returns ``(fn, work)``."""
    machine = machine_of(device)
    records = []
    for variant, params, make in tqdm(jobs, desc=name, disable=not progress):
        fn, work = make()
        value, spread = _rate(fn, work, device)
        records.append(Record(name, variant, metric, value, unit, params, spread, machine))
        del fn  # free this job's tensors before the next job allocates its own
    return records


def matmul_throughput(device: str | torch.device | None = None, *, sizes=None,
                      progress: bool = True) -> list[Record]:
    """TFLOP/s of square n x n matmuls, for float32 and each 16-bit type the device runs natively.

    ``sizes`` defaults to a few n up to 4096 (8192 on a GPU), smaller in quick mode. float32
    uses PyTorch's default precision (no TF32 on NVIDIA GPUs).
    """
    device = get_device(device)
    largest = (4096,) if device.type == "cpu" else (4096, 8192)
    if sizes is None:
        sizes = pick(full=(256, 512, 1024, 2048, *largest), quick=(64, 128))
    sizes = check_ints("sizes", sizes)

    def make(n, dtype):
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        return (lambda: torch.mm(a, b, out=out)), 2 * n**3 / 1e12

    jobs = [(str(dtype).removeprefix("torch."), {"n": n}, lambda n=n, dtype=dtype: make(n, dtype))
            for dtype in (torch.float32, *native_half_dtypes(device)) for n in sizes]
    return _measure("matmul", "throughput", "TFLOP/s", jobs, device, progress)


def memory_bandwidth(device: str | torch.device | None = None, *, sizes_mib=None,
                     progress: bool = True) -> list[Record]:
    """GB/s of copying a buffer of each size (MiB): on the device, and to/from pinned host memory on a GPU.

    A copy on the device reads and writes every byte, so it counts 2 x size / time; a transfer
    between host and GPU counts size / time. Small buffers fit in caches and look faster than
    main memory: the largest size shows the memory ceiling.
    """
    device = get_device(device)
    if sizes_mib is None:
        sizes_mib = pick(full=(1, 4, 16, 64, 256, 1024), quick=(1, 8))
    sizes_mib = check_ints("sizes_mib", sizes_mib)

    def make(size, variant):
        count = size * _MIB // 4
        if variant == "device copy":
            source, target = torch.empty(count, device=device), torch.empty(count, device=device)
            return (lambda: target.copy_(source)), 2 * size * _MIB / 1e9
        host = torch.empty(count, pin_memory=True)
        on_device = torch.empty(count, device=device)
        source, target = (host, on_device) if variant == "host to device (pinned)" else (on_device, host)
        return (lambda: target.copy_(source, non_blocking=True)), size * _MIB / 1e9

    variants = ["device copy"]
    if device.type == "cuda":  # pinned host memory needs CUDA; on a CPU-only machine it raises
        variants += ["host to device (pinned)", "device to host (pinned)"]
    jobs = [(variant, {"MiB": size}, lambda size=size, variant=variant: make(size, variant))
            for variant in variants for size in sizes_mib]
    return _measure("copy", "bandwidth", "GB/s", jobs, device, progress)


def linear_throughput(device: str | torch.device | None = None, *, batch_sizes=None, width: int = 256,
                      progress: bool = True) -> list[Record]:
    """TFLOP/s of one float32 ``width x width`` linear layer's forward pass at each batch size.

    This is the shape of an RL network: a small batch of observations through a narrow layer.
    It shows how far below the matmul ceiling small batches stay, and how big batches approach it.
    """
    device = get_device(device)
    width = check_int("width", width)
    if batch_sizes is None:
        batch_sizes = pick(full=(1, 4, 16, 64, 256, 1024, 4096, 16384), quick=(1, 16, 256))
    batch_sizes = check_ints("batch_sizes", batch_sizes)
    layer = torch.nn.Linear(width, width, device=device)

    def make(batch):
        x = torch.randn(batch, width, device=device)

        def forward():
            with torch.inference_mode():
                layer(x)
        return forward, linear_flop(batch, width) / 1e12

    jobs = [("float32", {"batch": batch, "width": width}, lambda batch=batch: make(batch))
            for batch in batch_sizes]
    return _measure("linear", "throughput", "TFLOP/s", jobs, device, progress)


def linear_flop(batch: int, width: int) -> int:
    """FLOP of one ``width x width`` linear layer's forward pass on ``batch`` rows: 2 B w²."""
    return 2 * check_int("batch", batch) * check_int("width", width) ** 2


def linear_bytes(batch: int, width: int, element_bytes: int = 4) -> int:
    """Bytes that pass: the weights once, the inputs and the outputs (float32 by default).

    ``element_bytes * (w² + 2 B w)``; the bias (w elements) is left out, as it is tiny.
    """
    batch, width = check_int("batch", batch), check_int("width", width)
    return check_int("element_bytes", element_bytes) * (width**2 + 2 * batch * width)


def seconds_per_call(record: Record) -> float:
    """The time one forward pass took, from a :func:`linear_throughput` record: FLOP / rate."""
    record, = check_records([record])
    batch, width = record.params.get("batch"), record.params.get("width")
    if record.name != "linear" or record.unit != "TFLOP/s" or batch is None or width is None:
        raise ValueError(f"record={record!r} is not a linear_throughput record (TFLOP/s with a batch and a width)")
    if record.value <= 0:
        raise ValueError(f"record={record!r} has a rate of {record.value}: no time per call follows")
    return linear_flop(batch, width) / (record.value * 1e12)


def time_per_call(records) -> list[Record]:
    """:func:`linear_throughput` records turned into microseconds per forward pass (no spread)."""
    return [dataclasses.replace(record, metric="time per call", unit="µs", spread=None,
                                value=seconds_per_call(record) * 1e6)
            for record in check_records(records)]


@dataclasses.dataclass(frozen=True)
class LayerLimits:
    """One forward pass of a linear layer: its measured time beside what each limit alone costs.

    Times are in seconds. ``fixed`` is the measured time of a 1-wide layer at the same batch
    size: almost no arithmetic and no bytes, so nearly all of it is the fixed cost of a call.
    ``memory`` is the time to move :func:`linear_bytes` at the memory ceiling, ``arithmetic``
    the time of :func:`linear_flop` at the arithmetic ceiling.
    """

    width: int
    batch: int
    flop: int
    bytes: int
    measured: float
    fixed: float
    memory: float
    arithmetic: float

    @property
    def largest(self) -> str:
        """Which of the three limits takes longest: "fixed cost", "memory" or "arithmetic"."""
        costs = {"fixed cost": self.fixed, "memory": self.memory, "arithmetic": self.arithmetic}
        return max(costs, key=costs.get)


def linear_limits(layers, fixed, *, peak: float, bandwidth: float) -> list[LayerLimits]:
    """Each record of ``layers`` beside the three limits on its time, sorted by width and batch.

    ``layers`` and ``fixed`` come from :func:`linear_throughput`; ``fixed`` (a layer 1 wide)
    must cover every batch size of ``layers``. ``peak`` is the arithmetic ceiling in TFLOP/s
    (a float32 matmul), ``bandwidth`` the memory ceiling in GB/s (the largest copy).
    """
    peak, bandwidth = check_number("peak", peak, above=0), check_number("bandwidth", bandwidth, above=0)
    floor = {record.params["batch"]: seconds_per_call(record) for record in check_records(fixed)}
    rows = []
    for record in check_records(layers):
        measured = seconds_per_call(record)
        batch, width = record.params["batch"], record.params["width"]
        if batch not in floor:
            raise ValueError(f"fixed has no record at batch={batch} (it has {sorted(floor)})")
        flop, size = linear_flop(batch, width), linear_bytes(batch, width)
        rows.append(LayerLimits(width, batch, flop, size, measured, floor[batch],
                                size / (bandwidth * 1e9), flop / (peak * 1e12)))
    return sorted(rows, key=lambda row: (row.width, row.batch))


def limits_table(limits) -> Table:
    """:func:`linear_limits` as a table, times in µs per call."""
    columns = ["width", "batch", "FLOP per byte", "measured (µs)", "fixed cost (µs)",
               "memory alone (µs)", "arithmetic alone (µs)", "largest limit"]
    rows = [[str(row.width), f"{row.batch:,}", format_number(row.flop / row.bytes),
             *(format_number(seconds * 1e6) for seconds in (row.measured, row.fixed, row.memory, row.arithmetic)),
             row.largest] for row in limits]
    return Table(columns, rows, [True] * 7 + [False])


def measure_ceilings(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """Both ceilings: matmul throughput and memory bandwidth (the ``ceilings`` bench suite)."""
    return matmul_throughput(device, progress=progress) + memory_bandwidth(device, progress=progress)
