"""The one set of argument checks: TypeError for a wrong type, ValueError for a bad value."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlgpu_helpers.core.checks import (
    check_bool,
    check_choice,
    check_choices,
    check_int,
    check_ints,
    check_number,
    check_numbers,
    check_seed,
)


def test_checks_return_plain_values():
    assert check_int("n", 3) == 3 and check_int("n", 0, minimum=0) == 0
    assert type(check_int("n", np.int64(7))) is int
    assert check_seed("seed", 2**64 - 1) == 2**64 - 1
    assert check_number("gamma", 1, at_least=0, at_most=1) == 1.0  # bounds are inclusive
    assert type(check_number("lr", np.float32(0.5), above=0)) is float
    assert check_bool("flag", False) is False
    assert check_choice("obs_type", "grid", ("features", "grid")) == "grid"
    assert check_ints("sizes", 4) == (4,) and check_ints("sizes", [1, 2]) == (1, 2)
    assert check_numbers("costs", 0.5, at_least=0) == (0.5,)
    assert check_choices("kinds", "sync", ("sync", "async")) == ("sync",)
    assert check_choices("kinds", ["sync", "async"], ("sync", "async")) == ("sync", "async")


@pytest.mark.parametrize("check, value, error, message", [
    (lambda v: check_int("batch_size", v), 0, ValueError, r"^batch_size=0 must be an int >= 1$"),
    (lambda v: check_int("batch_size", v), 2.0, TypeError, r"^batch_size=2.0 must be an int, not float$"),
    (lambda v: check_int("batch_size", v), True, TypeError, r"^batch_size=True must be an int, not bool$"),
    (lambda v: check_int("batch_size", v), "8", TypeError, r"^batch_size='8' must be an int, not str$"),
    (lambda v: check_int("action", v, 0, 2), 3, ValueError, r"^action=3 must be an int in \[0, 2\]$"),
    (lambda v: check_int("delta", v, None, 5), 6, ValueError, r"^delta=6 must be an int <= 5$"),
    (lambda v: check_seed("seed", v), 2**64, ValueError, r"^seed=18446744073709551616 must be a seed in \[0, 2\*\*64\)$"),
    (lambda v: check_seed("seed", v), -1, ValueError, r"^seed=-1 must be a seed"),
    (lambda v: check_seed("seed", v), 1.0, TypeError, r"^seed=1.0 must be an int seed, not float$"),
    (lambda v: check_number("lr", v, above=0), 0.0, ValueError, r"^lr=0.0 must be a finite number > 0$"),
    (lambda v: check_number("lr", v, above=0), math.nan, ValueError, r"^lr=nan must be a finite number > 0$"),
    (lambda v: check_number("lr", v, above=0), "0.1", TypeError, r"^lr='0.1' must be a number, not str$"),
    (lambda v: check_number("lr", v, above=0), True, TypeError, r"^lr=True must be a number, not bool$"),
    (lambda v: check_number("gamma", v, at_least=0, at_most=1), 1.01, ValueError,
     r"^gamma=1.01 must be a finite number >= 0 and <= 1$"),
    (lambda v: check_number("cost", v, at_least=0, below=1), 1.0, ValueError, r"^cost=1.0 must be a finite number >= 0 and < 1$"),
    (lambda v: check_number("x", v), math.inf, ValueError, r"^x=inf must be a finite number$"),
    (lambda v: check_bool("anneal_lr", v), "no", TypeError, r"^anneal_lr='no' must be True or False, not str$"),
    (lambda v: check_bool("anneal_lr", v), 1, TypeError, r"^anneal_lr=1 must be True or False, not int$"),
    (lambda v: check_choice("obs_type", v, ("features", "grid")), "rgb", ValueError,
     r"^obs_type='rgb' must be one of \('features', 'grid'\)$"),
    (lambda v: check_ints("sizes", v), (), ValueError, r"^sizes=\(\) must not be empty$"),
    (lambda v: check_ints("sizes", v), (4, 0), ValueError, r"^sizes=\(4, 0\): sizes\[1\]=0 must be an int >= 1$"),
    (lambda v: check_ints("sizes", v), "4", TypeError, r"^sizes='4' must be an int, or a sequence of them$"),
    (lambda v: check_ints("sizes", v), [1.5], TypeError, r"^sizes=\[1.5\]: sizes\[0\]=1.5 must be an int, not float$"),
    (lambda v: check_numbers("costs", v, at_least=0), (0.0, -1.0), ValueError, r"^costs=\(0.0, -1.0\): costs\[1\]=-1.0"),
    (lambda v: check_choices("kinds", v, ("sync",)), ("sync", "threads"), ValueError,
     r"^kinds=\('sync', 'threads'\): 'threads' is not one of \('sync',\)$"),
    (lambda v: check_choices("kinds", v, ("sync",)), 3, TypeError, r"^kinds=3 must be one of \('sync',\), or a sequence"),
])
def test_checks_name_the_parameter_and_value(check, value, error, message):
    with pytest.raises(error, match=message):
        check(value)


@given(st.integers(min_value=-(2**70), max_value=2**70), st.integers(-100, 100), st.integers(0, 200))
def test_check_int_accepts_exactly_the_integers_in_range(value, minimum, width):
    maximum = minimum + width
    if minimum <= value <= maximum:
        assert check_int("n", value, minimum, maximum) == value
    else:
        with pytest.raises(ValueError, match=f"^n={value} must be an int in"):
            check_int("n", value, minimum, maximum)


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_seeds_are_exactly_the_64_bit_unsigned_ints(value):
    if 0 <= value < 2**64:
        assert check_seed("seed", value) == value
    else:
        with pytest.raises(ValueError):
            check_seed("seed", value)


@given(st.one_of(st.floats(), st.text(max_size=3), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_anything_but_an_int_is_a_type_error(value):
    with pytest.raises(TypeError):
        check_int("n", value, None)


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_check_number_accepts_exactly_the_finite_numbers_in_bounds(value, low, width):
    high = low + width
    if math.isfinite(value) and low <= value <= high:
        assert check_number("x", value, at_least=low, at_most=high) == value
    else:
        with pytest.raises(ValueError, match="^x="):
            check_number("x", value, at_least=low, at_most=high)
