"""Run Python code as on a laptop without a C++ compiler: a fresh process whose PATH is an empty folder.

Inductor finds g++, cc or clang on the PATH (or in ``CXX``), so none is found there and
``compiler_missing("cpu")`` says why. The process imports this checkout's package, and sees no GPU
(a GPU's Triton would still compile, through a C compiler it could not find either).
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_without_a_compiler(code: str, tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -c code`` with no compiler on the PATH, its output captured as text."""
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in ("CXX", "CC")}
    env.update(PATH=str(bare), CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=tmp_path)
