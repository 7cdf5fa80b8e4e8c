"""Quick mode and seeding: the two settings every notebook starts with.

Introduced in notebook 00.

Every notebook has two sizes: the full lesson a student runs, and a quick version the test
suite runs in minutes on two CPU cores. The environment variable ``RLGPU_QUICK`` chooses
between them, and :func:`pick` is the one place that reads it: notebooks and helpers write
``pick(full=..., quick=...)`` and never look at the variable themselves.
"""

import os
import random

import numpy as np
import torch

from .checks import check_seed

QUICK_ENV_VAR = "RLGPU_QUICK"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def is_quick() -> bool:
    """Whether quick mode is on: ``RLGPU_QUICK`` is 1/true/yes/on (0/false/no/off/empty/unset: off)."""
    raw = os.environ.get(QUICK_ENV_VAR, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"environment variable {QUICK_ENV_VAR}={raw!r} is not understood: "
        "use 1/true/yes/on for quick mode, or 0/false/no/off (or leave it unset) for full size"
    )


def pick(full, quick):
    """Return ``quick`` in quick mode and ``full`` otherwise: the one helper that decides sizes."""
    return quick if is_quick() else full


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every GPU).

    ``seed`` is an int in ``[0, 2**64)``. NumPy's global generator takes 32-bit seeds, so a
    larger seed reaches it as its two 32-bit halves: every seed gives its own stream, and a seed
    below ``2**32`` the same stream as ``np.random.seed(seed)``. Seeding makes a run repeatable
    on the same machine and library versions; different hardware may still round differently.
    """
    seed = check_seed("seed", seed)
    random.seed(seed)
    np.random.seed(seed if seed < 2**32 else [seed & 0xFFFFFFFF, seed >> 32])
    torch.manual_seed(seed)
