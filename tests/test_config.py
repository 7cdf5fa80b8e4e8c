import random

import numpy as np
import pytest
import torch

from rlgpu_helpers.config import check_int, check_number, check_seed, is_quick, pick, seed_everything


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


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True, "7", None])
def test_seed_everything_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match=f"seed={seed!r}"):
        seed_everything(seed)


def test_checks_return_good_values():
    assert check_int("n", 3) == 3 and check_int("n", 0, minimum=0) == 0
    assert check_seed("seed", 2**32 - 1) == 2**32 - 1
    assert check_number("gamma", 1, at_least=0, at_most=1) == 1.0  # bounds are inclusive
    assert check_number("lr", 1e-9, above=0) == 1e-9


@pytest.mark.parametrize("check, value, message", [
    (lambda v: check_int("batch_size", v), 0, "batch_size=0 must be an int >= 1"),
    (lambda v: check_int("batch_size", v), 2.0, "batch_size=2.0 must be an int >= 1"),
    (lambda v: check_int("batch_size", v), True, "batch_size=True must be an int >= 1"),
    (lambda v: check_seed("seed", v), 2**32, r"seed=4294967296 must be an int in \[0, 2\*\*32\)"),
    (lambda v: check_number("lr", v, above=0), 0.0, "lr=0.0 must be a finite number > 0"),
    (lambda v: check_number("lr", v, above=0), float("nan"), "lr=nan must be a finite number > 0"),
    (lambda v: check_number("lr", v, above=0), "0.1", "lr='0.1' must be a finite number > 0"),
    (lambda v: check_number("gamma", v, at_least=0, at_most=1), 1.01, "gamma=1.01 must be a finite number >= 0 and <= 1"),
    (lambda v: check_number("x", v), float("inf"), "x=inf must be a finite number$"),
])
def test_checks_name_the_parameter_and_value(check, value, message):
    with pytest.raises(ValueError, match=message):
        check(value)
