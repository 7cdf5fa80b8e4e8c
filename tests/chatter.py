"""What a CUDA build of torch prints on a machine without a GPU, for tests that assert a quiet stderr.

PyPI serves old torch releases only as CUDA builds, so ``.ci/versions`` runs the unit tests with one
on a CPU machine; such a build prints a line or two that a CPU build and a GPU machine never print.
"""
import torch

CUDA_BUILD_WITHOUT_GPU = (
    "No CUDA runtime is found",  # torch.utils.cpp_extension, imported by Inductor
    "gpuGetDeviceCount failed",  # Kineto, when the profiler starts
)


def stderr_of_the_code(err: str) -> str:
    """``err`` less the lines a CUDA build prints where no GPU is (unchanged on other builds)."""
    if torch.version.cuda is None or torch.cuda.is_available():
        return err
    lines = err.splitlines(keepends=True)
    return "".join(line for line in lines if not any(chatter in line for chatter in CUDA_BUILD_WITHOUT_GPU))
