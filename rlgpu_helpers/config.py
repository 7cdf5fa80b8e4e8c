"""Quick mode and seeding.

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

    Seeding makes a run repeatable on the same machine and library versions; different
    hardware may still round differently.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed!r} must be an int in [0, 2**32)")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
