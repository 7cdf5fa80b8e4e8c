"""Which device to run on, what the machine is, and waiting for the device.

Introduced in notebook 00.

Notebooks never call ``.cuda()``: they ask :func:`get_device` for the best device available, so
the same notebook runs on a laptop CPU, a Mac and a Colab GPU. :func:`device_report` describes
the machine so every benchmark result can say where it was measured, and :func:`synchronize`
waits for queued GPU work, because GPU calls return before the work is done. :func:`check_fits`
refuses a size that cannot fit in :func:`available_memory` before anything is allocated.
"""

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import psutil
import torch

_DEVICE_TYPES = ("cpu", "cuda", "mps")
_GIB = 2**30


def get_device(name: str | torch.device | None = None, param: str = "name") -> torch.device:
    """Return a ``torch.device``; ``None`` picks the best available: CUDA, else MPS, else CPU.

    ``name`` may be ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a ``torch.device``. Asking
    for a device this machine lacks raises an error instead of quietly falling back to the CPU.
    An accelerator comes back with its index (``"cuda"`` gives ``cuda:0``), as tensors report it.
    Errors name the value as ``param`` (the caller's own parameter name, e.g. ``"device"``).
    """
    if name is None:
        if torch.cuda.is_available():
            return get_device("cuda")
        if torch.backends.mps.is_available():
            return get_device("mps")
        return torch.device("cpu")
    if not isinstance(name, (str, torch.device)):
        raise TypeError(f"{param}={name!r} must be a str, a torch.device or None")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in _DEVICE_TYPES:
        raise ValueError(f"{param}={name!r} is not a device: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise RuntimeError(
                f"{param}={name!r} asks for CUDA, but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, {build}); "
                "use get_device() to take the best device this machine has"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"{param}={name!r}: this machine has {count} CUDA device(s), 0 to {count - 1}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"{param}={name!r} asks for MPS, but torch.backends.mps.is_available() is False")
    # Tensors report an indexed device ("cuda:0"), and torch.device("cuda") != "cuda:0": name
    # the index, so that comparing a tensor's device with this one works.
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "mps" and device.index is None:
        device = torch.device("mps", 0)
    return device


def synchronize(device: str | torch.device | None = None) -> None:
    """Wait until all work queued on ``device`` has finished (a no-op on the CPU).

    GPU kernels run asynchronously: without this, a timer measures only how long it took to
    *queue* the work.
    """
    device = get_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def available_memory(device: str | torch.device | None = None) -> int:
    """Bytes that new tensors on ``device`` can take now: on CUDA the free memory plus the caching
    allocator's idle blocks, elsewhere the host RAM the OS can give without swapping (psutil)."""
    device = get_device(device, param="device")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return int(psutil.virtual_memory().available)


def check_fits(name: str, value, needed: int, available: int, where: str) -> None:
    """Refuse, before allocating, a ``value`` of ``name`` that needs more bytes than ``where`` has.

    An allocator's own failure comes late, as a traceback deep inside (or, for a CPU, as swapping
    and the OS killing the process); this says which setting asked for how much.
    """
    if needed > available:
        raise ValueError(f"{name}={value!r} needs {needed:,} bytes ({needed / _GIB:,.1f} GiB) of {where}, "
                         f"but {available:,} bytes ({available / _GIB:,.1f} GiB) are available")


def native_half_dtypes(device: str | torch.device | None = None) -> tuple[torch.dtype, ...]:
    """The 16-bit float types ``device`` multiplies in hardware (CPUs without support emulate them, slowly)."""
    device = get_device(device)
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        return (torch.bfloat16, torch.float16) if bf16 else (torch.float16,)
    if device.type == "mps":
        return (torch.float16,)
    dtypes = []
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        dtypes.append(torch.bfloat16)
    if torch.cpu._is_amx_fp16_supported():
        dtypes.append(torch.float16)
    return tuple(dtypes)


_MALLOC_TUNED = False


def retain_freed_memory() -> bool:
    """Stop glibc from handing freed memory back to the OS after every large free (CPU only).

    A tensor env on the CPU allocates and frees megabytes per step; glibc returns the freed top of its
    heap to the OS, and the next step pays a page fault per 4 KiB it takes back. This raises glibc's
    trim threshold (1 GiB) and mmap threshold (32 MiB, its maximum) once per process with ``mallopt``,
    so freed memory is reused. ``VecSnake`` calls it for CPU envs; it does nothing without glibc.
    Returns whether the setting is in effect.
    """
    global _MALLOC_TUNED
    if not _MALLOC_TUNED and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6")
            M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h
            _MALLOC_TUNED = bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)) and bool(
                libc.mallopt(M_MMAP_THRESHOLD, 1 << 25))
        except (OSError, AttributeError):  # not glibc (musl, ...): leave the allocator alone
            _MALLOC_TUNED = False
    return _MALLOC_TUNED


def _command_output(args: list[str]) -> str | None:
    """First line a command prints, or None when the command is missing or fails."""
    if shutil.which(args[0]) is None:
        return None
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        model = _command_output(["sysctl", "-n", "machdep.cpu.brand_string"])
        if model:
            return model
    return platform.processor() or platform.machine() or "unknown CPU"


def logical_cores() -> int | None:
    """Logical cores this process may use (a container may allow fewer than the host has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / _GIB, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / _GIB, 1)
    except (AttributeError, ValueError, OSError):
        return None


def _nvidia_driver() -> str | None:
    version = _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if version:
        return version
    with warnings.catch_warnings():  # the deprecated `pynvml` package warns on import
        warnings.simplefilter("ignore")
        try:
            import pynvml
        except ImportError:
            return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else version


def device_report(device: str | torch.device | None = None) -> dict:
    """Describe the machine and ``device`` (default: the best available) as a JSON-ready dict.

    Keys: device, gpu, gpu_memory_gib, driver, cuda, cpu, logical_cores, torch_threads,
    ram_gib, torch, numpy, python, os. GPU fields are None when ``device`` is not a GPU.
    """
    device = get_device(device)
    gpu = gpu_memory = driver = None
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        gpu, gpu_memory = properties.name, round(properties.total_memory / _GIB, 1)
        driver = _nvidia_driver()
    elif device.type == "mps":
        gpu = f"{_cpu_model()} GPU"
    return {
        "device": str(device),
        "gpu": gpu,
        "gpu_memory_gib": gpu_memory,
        "driver": driver,
        "cuda": torch.version.cuda,
        "cpu": _cpu_model(),
        "logical_cores": logical_cores(),
        "torch_threads": torch.get_num_threads(),
        "ram_gib": _ram_gib(),
        "torch": str(torch.__version__),  # a str subclass otherwise, which safe loaders refuse
        "numpy": np.__version__,
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def machine_label(report: dict) -> str:
    """A short file-name-safe name for the measured device, e.g. ``cpu-amd-epyc-7b13-2c``.

    GPUs are named by model (``gpu-nvidia-h100-80gb-hbm3``); CPUs by model and logical cores.
    """
    if not isinstance(report, dict) or not {"gpu", "cpu", "logical_cores"} <= report.keys():
        raise ValueError(f"report={report!r} is not a dict from device_report()")
    if report["gpu"]:
        return f"gpu-{_slug(report['gpu'])}"
    return f"cpu-{_slug(report['cpu'])}-{report['logical_cores']}c"


def machine_of(device: str | torch.device | None = None, machine: str | None = None) -> str:
    """The label records of ``device`` carry: ``machine`` where a caller names it, else
    :func:`machine_label` of this machine's :func:`device_report`."""
    return machine if machine is not None else machine_label(device_report(device))


def describe_device(device: str | torch.device | None = None) -> str:
    """One line for a notebook: which device runs the lesson, and how to get a GPU if there is none."""
    device = get_device(device)
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        return f"Using {device}: {properties.name} ({properties.total_memory / _GIB:.0f} GiB)"
    if device.type == "mps":
        return f"Using mps: the {_cpu_model()} GPU"
    best = get_device()
    if best.type != "cpu":
        return f"Using the CPU ({_cpu_model()}) although {best} is available"
    return "No GPU: Runtime > Change runtime type > GPU in Colab; continuing on CPU"
