"""The two ceilings of a device: how fast it multiplies, and how fast it moves memory.

Introduced in notebook 00.

No training step runs faster than its device allows. Large matrix multiplies (big batches, wide
layers) are limited by arithmetic, measured here in FLOP/s (floating-point operations per
second; an n x n matmul does 2n³). Small multiplies and element-wise work (activations,
optimizer updates, a vectorized environment's step) are limited by memory bandwidth, in GB/s,
or by the fixed cost of starting each operation. Knowing both ceilings tells you how far from
the limit a workload is.
"""

import math

import torch
from tqdm.auto import tqdm

from ..core.checks import check_int, check_ints
from ..core.config import pick
from ..core.device import device_report, get_device, machine_label, native_half_dtypes
from .records import Record
from .timing import time_callable

_MIB = 2**20


def _rate(fn, work: float, device: torch.device) -> tuple[float, float]:
    """``work`` per second in the fastest run of ``fn()``, and the IQR of the runs' rates.

    A ceiling is the most the device can do, and whatever else runs on the machine can only slow
    a run down, so the fastest run estimates it best. Each run repeats ``fn()`` long enough to be
    timed well.
    """
    probe = time_callable(fn, warmup=1, repeats=1, device=device).median
    number = max(1, math.ceil(pick(full=0.2, quick=0.01) / max(probe, 1e-9)))
    timing = time_callable(fn, warmup=0, repeats=pick(full=5, quick=3), number=number, device=device)
    return work / timing.min, timing.rate(work)[1]


def _measure(name: str, metric: str, unit: str, jobs: list, device: torch.device,
             progress: bool) -> list[Record]:
    """Time each ``(variant, params, make)`` job; ``make()`` allocates and returns ``(fn, work)``."""
    machine = machine_label(device_report(device))
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
        return forward, 2 * batch * width * width / 1e12

    jobs = [("float32", {"batch": batch, "width": width}, lambda batch=batch: make(batch))
            for batch in batch_sizes]
    return _measure("linear", "throughput", "TFLOP/s", jobs, device, progress)


def measure_ceilings(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """Both ceilings: matmul throughput and memory bandwidth (the ``ceilings`` bench suite)."""
    return matmul_throughput(device, progress=progress) + memory_bandwidth(device, progress=progress)
