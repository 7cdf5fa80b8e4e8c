"""Workarounds for the torch versions the course supports, each with the version that makes it unnecessary.

First needed by the profiling of notebook 04 (the sync audit) and notebook 06. The oldest
supported versions are the lower bounds in ``pyproject.toml``; ``.ci/versions`` runs the unit
tests on them. A one-line workaround stays in the module that owns its concept and says so there
(TF32: ``gpu.precision``).
"""

from __future__ import annotations

from torch.profiler import profile as torch_profile


def profile(**kwargs):
    """``torch.profiler.profile(**kwargs)``, without the warning torch 2.10 and 2.11 print at its first use.

    They warn "Profiler clears events at the end of each cycle" unless events accumulate across
    cycles (``acc_events=True``). Every profile in this package records one cycle, where accumulating
    changes nothing. Unnecessary once the floor is past 2.11.
    """
    return torch_profile(acc_events=True, **kwargs)
