import random

import numpy as np
import pytest
import torch

from rlgpu_helpers.core.config import is_quick, pick, seed_everything


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " On "])
def test_quick_mode_on(monkeypatch, value):
    monkeypatch.setenv("RLGPU_QUICK", value)
    assert is_quick() is True
    assert pick(full=1000, quick=10) == 10


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_quick_mode_off(monkeypatch, value):
    monkeypatch.setenv("RLGPU_QUICK", value)
    assert is_quick() is False
    assert pick(full=1000, quick=10) == 1000


def test_quick_mode_off_when_unset(monkeypatch):
    monkeypatch.delenv("RLGPU_QUICK", raising=False)
    assert is_quick() is False


@pytest.mark.parametrize("value", ["2", "maybe", "quick"])
def test_quick_mode_rejects_other_values(monkeypatch, value):
    monkeypatch.setenv("RLGPU_QUICK", value)
    with pytest.raises(ValueError, match=f"RLGPU_QUICK='{value}'"):
        is_quick()
    with pytest.raises(ValueError, match="RLGPU_QUICK"):
        pick(full=1, quick=2)


def draws():
    return random.random(), np.random.rand(), torch.rand(3).tolist()


def test_seed_everything_repeats_python_numpy_and_torch():
    seed_everything(123)
    first = draws()
    seed_everything(123)
    assert draws() == first
    seed_everything(124)
    assert draws() != first


@pytest.mark.parametrize("seed, error", [
    (-1, ValueError), (2**64, ValueError), (1.5, TypeError), (True, TypeError), ("7", TypeError), (None, TypeError),
])
def test_seed_everything_rejects_bad_seeds(seed, error):
    with pytest.raises(error, match=f"seed={seed!r}"):
        seed_everything(seed)


def test_seeds_beyond_32_bits_give_their_own_streams():
    """Seeds differing only above bit 32 must not alias (NumPy's global seed takes 32-bit words)."""
    seed_everything(5)
    first = draws()
    seed_everything(5 + 2**32)
    assert draws() != first
    seed_everything(2**64 - 1)  # the largest seed is accepted
