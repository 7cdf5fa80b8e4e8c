"""The version workarounds: each does its job on every torch the course supports."""

import warnings

import torch
from torch.profiler import ProfilerActivity

from rlgpu_helpers.core import compat


def test_the_profiler_records_without_a_warning():
    """torch 2.10 and 2.11 warn at the first use of a profiler that does not accumulate events."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with compat.profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.ones(4).sum()
    assert "aten::sum" in {event.key for event in prof.key_averages()}
