"""Reading the command line: argparse types that name the bad value, and ``--set NAME=VALUE``.

The command line of notebooks 11 and 12 (``python -m rlgpu_helpers train``, ``cli.py``), for every
subcommand, the ones ``torchrun`` starts included. A value argparse cannot take is a usage error
(exit 2) naming the option and the value, before any work starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
from pathlib import Path

from .checks import check_seed
from .device import get_device


class UsageError(Exception):
    """Arguments that parse but do not make sense together: reported like an argparse error (exit 2)."""


def positive(kind):
    """An argparse type: a finite ``kind`` (int or float) above zero."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite {kind.__name__}, got {text!r}")
        return value
    return parse


def _writable_place(path: Path, text: str) -> None:
    """ArgumentTypeError unless the folder that would hold ``path`` can be made and written in: it is
    made now (an empty folder, if the command then fails) and a temporary file tried in it."""
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {ancestor} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {path.parent} cannot hold a file "
                                         f"({error.strerror or error})") from None


def output_file(text: str) -> Path:
    """An argparse type: a file the command writes at its end, checked now so no work is lost to a bad path."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name")
    _writable_place(path, text)
    return path


def output_folder(text: str) -> Path:
    """An argparse type: a folder the command writes into (made if missing), checked now."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    _writable_place(path / "x", text)
    return path


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


def endpoint_argument(text: str) -> str:
    """An argparse type: ``HOST:PORT``, where the machines of a multi-node run meet (``train --rdzv-endpoint``)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port in [1, 65535], got {text!r}")
    return text


def setting(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE``, as ``(name, value text)``."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set takes NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _whole_number(text: str) -> int:
    """``"4096"`` or ``"4e3"`` as an int; ValueError for ``"2.9e0"`` (never truncated) or ``"inf"``."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():  # also False for inf and nan
            raise ValueError(text) from None
        return int(value)


def _field_kind(field: dataclasses.Field) -> type:
    """The type a config field's values have: its default's (a default of None: an optional float)."""
    return type(field.default) if field.default is not None else float


def check_settings(config_class, settings, what: str) -> dict:
    """Settings given as values (a stored record, a dict) checked as :func:`typed_settings` checks ``--set``.

    Every name must be a field of the dataclass ``config_class`` and every value of its field's
    type (an int for an int, never a bool or 2.9; an int or a float for a float). ``what`` names
    the settings in errors; a bad one is a ``ValueError`` or ``TypeError`` naming the key. The
    values themselves are the config's to check.
    """
    if not isinstance(settings, dict):
        raise TypeError(f"{what} must be a dict of settings, not {type(settings).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    unknown = sorted(set(settings) - set(fields), key=str)
    if unknown:
        raise ValueError(f"{what}: unknown settings {unknown}; known: {sorted(fields)}")
    for name, value in settings.items():
        kind, optional = _field_kind(fields[name]), fields[name].default is None
        allowed = (int, float) if kind is float else (kind,)
        if not (isinstance(value, allowed) and (kind is bool or not isinstance(value, bool))
                or optional and value is None):
            raise TypeError(f"{what}: {name}={value!r} must be {'an' if kind is int else 'a'} {kind.__name__}, "
                            f"not {type(value).__name__}")
    return dict(settings)


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
        kind = _field_kind(fields[name])
        try:
            if kind is bool:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                settings[name] = text.lower() in ("true", "1")
            elif kind is int:
                settings[name] = _whole_number(text)
            elif name == "device":  # a device this machine has, checked like --device
                settings[name] = str(device_argument(text))
            else:
                settings[name] = kind(text)
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"--set {name}={text!r}: {error}") from None
        except ValueError:
            raise UsageError(f"--set {name}={text!r}: expected a {kind.__name__}") from None
    return settings
