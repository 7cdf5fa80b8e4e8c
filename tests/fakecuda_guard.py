"""The CUDA device guard that fake CUDA needs in a CPU build of torch (``tests/fakecuda.py``).

A CPU build of torch has no CUDA device guard, and indexing, ``copy_`` and friends open one. A few
lines of C++ register c10's ``FakeGuardImpl`` for CUDA (:func:`build_guard`, compiled with g++ once
per torch build), and :func:`load_guard` loads them. The registration cannot be undone, so each dry
run belongs in a process of its own.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

import torch

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_TORCH_INCLUDE = Path(_TORCH_DIR) / "include"


GUARD_SOURCE = """#include <c10/core/impl/FakeGuardImpl.h>
namespace { C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>); }
"""
"""Registers c10's fake device guard for CUDA: devices, streams and events that exist in name only."""


def guard_unavailable() -> str | None:
    """Why the fake CUDA device guard cannot be built here, or None if it can."""
    if torch.cuda.is_available():
        return "real CUDA is available: the GPU tests (-m gpu) run the CUDA paths for real"
    if torch.version.cuda is not None:
        return (f"this torch is a CUDA build (CUDA {torch.version.cuda}) and no GPU is here: fake tensors on "
                "'cuda' would call its CUDA runtime (a convolution asks it for a backend); the dry runs need "
                "a CPU-only torch")
    if shutil.which("g++") is None:
        return "g++ is missing: the fake CUDA device guard is compiled at test time"
    header = _TORCH_INCLUDE / "c10/core/impl/FakeGuardImpl.h"
    if not header.is_file():
        return f"torch's C++ headers are missing ({header} does not exist)"
    return None


def build_guard(folder: Path) -> Path:
    """Compile :data:`GUARD_SOURCE` into a shared library in ``folder``; returns its path.

    The file name is keyed by the torch build and its C++ ABI, so a folder can be shared
    between runs and environments; an existing library is reused. About a second with g++.
    """
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    key = f"{torch.__version__} {torch.version.git_version} abi{abi} {GUARD_SOURCE}"
    stem = f"fakeguard-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    library = Path(folder) / f"{stem}.so"
    if library.exists():
        return library
    source = Path(folder) / f"{stem}.cpp"
    source.write_text(GUARD_SOURCE)
    partial = Path(folder) / f"{stem}.so.partial"
    torch_lib = Path(_TORCH_DIR) / "lib"
    command = ["g++", "-O1", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               f"-I{_TORCH_INCLUDE}", str(source), f"-L{torch_lib}", "-lc10", f"-Wl,-rpath,{torch_lib}",
               "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the fake CUDA device guard failed:\n{' '.join(command)}\n{done.stderr}")
    partial.replace(library)  # whole or absent, for a concurrent run
    return library


def load_guard(library: Path) -> None:
    """Load the library from :func:`build_guard`: from now on this process has a CUDA device guard."""
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
