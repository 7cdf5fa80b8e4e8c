"""Reading the command line: argparse types that name the bad value, and ``--set NAME=VALUE`` (notebook 00).

Shared by every subcommand of ``python -m rlgpu_helpers`` (``cli.py``), the ones ``torchrun``
starts included. A value argparse cannot take is reported as a usage error (exit 2) that names
the option and the value, before any work starts.
"""

from __future__ import annotations

import argparse
import dataclasses

from .checks import check_seed
from .device import get_device


class UsageError(Exception):
    """Arguments that parse but do not make sense together: reported like an argparse error (exit 2)."""


def positive(kind):
    """An argparse type: a ``kind`` (int or float) above zero."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value
    return parse


def seed_argument(text: str) -> int:
    """An argparse type: a seed in [0, 2**64)."""
    try:
        return check_seed("--seed", int(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error) if "seed" in str(error) else
                                         f"expected an int seed, got {text!r}") from None


def device_argument(text: str):
    """An argparse type: a device this machine has (``cpu``, ``cuda``, ``cuda:N``, ``mps``)."""
    try:
        return get_device(text)
    except (ValueError, RuntimeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def setting(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE``, as ``(name, value text)``."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set takes NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def typed_settings(config_class, pairs, what: str) -> dict:
    """Turn ``--set name=value`` pairs into the field types of the dataclass ``config_class``.

    ``what`` names the config in errors (``ppo``, ``dqn``). An unknown name, or a value that is not
    of its field's type, is a :class:`UsageError`.
    """
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    settings = {}
    for name, text in pairs:
        if name not in fields:
            raise UsageError(f"--set {name}: {what} has no setting {name!r}; it has {sorted(fields)}")
        kind = type(fields[name].default) if fields[name].default is not None else float  # None: an optional float
        try:
            if kind is bool:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                settings[name] = text.lower() in ("true", "1")
            else:
                settings[name] = kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except ValueError:
            raise UsageError(f"--set {name}={text!r}: expected a {kind.__name__}") from None
    return settings
