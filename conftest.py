"""Test-suite wiring, for the unit tests and the notebooks alike.

Quick mode shrinks every size so the whole suite runs in minutes. It is set here, in the
process environment, so the Jupyter kernels nbval starts inherit it too. An explicit
`RLGPU_QUICK=0 pytest` runs the notebooks at full size instead.

Tests marked `@pytest.mark.gpu` need CUDA: without it they are skipped, with the reason shown.
"""

import os

import pytest
from hypothesis import settings

os.environ.setdefault("RLGPU_QUICK", "1")

# Property tests check behaviour, not time (timing is the benches'): on CI's shared 2-core machines
# one example of a 0.16 ms test once took 349 ms and failed hypothesis's default 200 ms deadline.
settings.register_profile("course", deadline=None)
settings.load_profile("course")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
