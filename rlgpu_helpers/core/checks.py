"""The one set of argument checks every helper uses (introduced in notebook 00).

Bad input gets an exception that names the parameter and the value it was given, and nothing is
clamped or ignored. One rule decides which exception:

* ``TypeError`` when the value has the wrong type: a str where an int belongs, a float for a
  count, ``True`` for a number (bools are not numbers here, although Python lets them be);
* ``ValueError`` when the type is right but the value is not allowed: a negative count, NaN, a
  seed of ``2**64``, an observation type that does not exist.

Each check returns the value in its plain Python form (``int``, ``float``, a tuple), so callers
store what was checked and nothing else.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

SEED_LIMIT = 2**64
"""Seeds are ints in ``[0, 2**64)``: what torch takes, and what a 64-bit hash can tell apart."""


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(name: str, value, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer in ``[minimum, maximum]`` (None: unbounded)."""
    if not _is_int(value):
        raise TypeError(f"{name}={value!r} must be an int, not {type(value).__name__}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if maximum is None:
            raise ValueError(f"{name}={value!r} must be an int >= {minimum}")
        if minimum is None:
            raise ValueError(f"{name}={value!r} must be an int <= {maximum}")
        raise ValueError(f"{name}={value!r} must be an int in [{minimum}, {maximum}]")
    return int(value)


def check_seed(name: str, value) -> int:
    """``value`` if it is a seed: an int in ``[0, 2**64)``.

    Larger or negative seeds are refused rather than folded into range, because folding would
    make two different seeds give the same games.
    """
    if not _is_int(value):
        raise TypeError(f"{name}={value!r} must be an int seed, not {type(value).__name__}")
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{name}={value!r} must be a seed in [0, 2**64)")
    return int(value)


def check_number(name: str, value, *, at_least: float | None = None, above: float | None = None,
                 at_most: float | None = None, below: float | None = None) -> float:
    """``value`` as a float if it is a finite real number within the given bounds."""
    if not _is_real(value):
        raise TypeError(f"{name}={value!r} must be a number, not {type(value).__name__}")
    ok = (math.isfinite(value) and (at_least is None or value >= at_least) and (above is None or value > above)
          and (at_most is None or value <= at_most) and (below is None or value < below))
    if not ok:
        bounds = [f">= {at_least:g}" if at_least is not None else "", f"> {above:g}" if above is not None else "",
                  f"<= {at_most:g}" if at_most is not None else "", f"< {below:g}" if below is not None else ""]
        wanted = " and ".join(b for b in bounds if b)
        raise ValueError(f"{name}={value!r} must be a finite number{' ' + wanted if wanted else ''}")
    return float(value)


def check_bool(name: str, value) -> bool:
    """``value`` if it is ``True`` or ``False`` (not a truthy string or number)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be True or False, not {type(value).__name__}")
    return value


def check_choice(name: str, value, choices: Sequence) -> object:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} must be one of {tuple(choices)}")
    return value


def _as_tuple(name: str, values, is_scalar, what: str) -> tuple:
    """A lone scalar as a 1-tuple, a non-empty sequence as a tuple; anything else raises."""
    if is_scalar(values):
        return (values,)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name}={values!r} must be {what}, or a sequence of them")
    if not values:
        raise ValueError(f"{name}={values!r} must not be empty")
    return tuple(values)


def check_ints(name: str, values, minimum: int | None = 1) -> tuple[int, ...]:
    """An int or a non-empty sequence of ints, each >= ``minimum``, as a tuple."""
    values_tuple = _as_tuple(name, values, _is_int, "an int")
    try:
        return tuple(check_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(values_tuple))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{name}={values!r}: {error}") from None


def check_numbers(name: str, values, **bounds) -> tuple[float, ...]:
    """A number or a non-empty sequence of numbers, each within ``bounds`` (see :func:`check_number`)."""
    values_tuple = _as_tuple(name, values, _is_real, "a number")
    try:
        return tuple(check_number(f"{name}[{i}]", v, **bounds) for i, v in enumerate(values_tuple))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{name}={values!r}: {error}") from None


def check_choices(name: str, values, choices: Sequence) -> tuple:
    """One of ``choices``, or a non-empty sequence of them, as a tuple."""
    values_tuple = _as_tuple(name, values, lambda value: isinstance(value, str), f"one of {tuple(choices)}")
    for value in values_tuple:
        if value not in choices:
            raise ValueError(f"{name}={values!r}: {value!r} is not one of {tuple(choices)}")
    return values_tuple
