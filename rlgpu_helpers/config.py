"""Quick mode, seeding, and the argument checks every helper shares.

Introduced in notebook 00.

Every notebook has two sizes: the full lesson a student runs, and a quick version the test
suite runs in minutes on two CPU cores. The environment variable ``RLGPU_QUICK`` chooses
between them, and :func:`pick` is the one place that reads it: notebooks and helpers write
``pick(full=..., quick=...)`` and never look at the variable themselves.
"""

import math
import numbers
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
    check_seed("seed", seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# -- argument checks: a clear ValueError naming the parameter and its value ---------------------


def check_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer >= ``minimum`` (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an int >= {minimum}")
    return int(value)


def check_seed(name: str, value) -> int:
    """``value`` if it is a valid seed: an int in [0, 2**32), what NumPy and torch both take."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < 2**32:
        raise ValueError(f"{name}={value!r} must be an int in [0, 2**32)")
    return int(value)


def check_number(name: str, value, *, at_least: float | None = None, above: float | None = None,
                 at_most: float | None = None) -> float:
    """``value`` as a float if it is a finite real number within the given bounds."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
          and (at_least is None or value >= at_least) and (above is None or value > above)
          and (at_most is None or value <= at_most))
    if not ok:
        bounds = [f">= {at_least:g}" if at_least is not None else "", f"> {above:g}" if above is not None else "",
                  f"<= {at_most:g}" if at_most is not None else ""]
        wanted = " and ".join(b for b in bounds if b)
        raise ValueError(f"{name}={value!r} must be a finite number{' ' + wanted if wanted else ''}")
    return float(value)
