"""PPO's settings in one place: a preset's tables for the device, then your changes (notebooks 06, 11, 12).

:func:`ppo_settings` is the one builder of every ``PPOConfig`` the course trains with: ``train``
(one process or ``--nproc``), the benchmarks, the tuning, the GPU sweep and the notebooks call it.
A preset is data, a TOML file in ``learn/presets/`` (:func:`preset_names`): a table for every
device, one per device kind (:func:`device_tables`), and a one-line reason per setting. The
evidence for a preset's numbers lives in its notebook and ``data/curves/``, not here.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from ..core.args import check_settings
from ..core.device import get_device
from ..gpu.precision import device_traits
from .ppo import PPOConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

PRESET_FOLDER = Path(__file__).with_name("presets")
"""Where the presets live: ``<name>.toml`` each."""

DEFAULT_PRESET = "start"
"""The preset of a run that names none."""

DERIVED = {"minibatch_rows": "num_minibatches = num_envs * num_steps // minibatch_rows (1 if fewer rows)"}
"""Preset keys that are not ``PPOConfig`` fields, and how each sets one."""

KINDS = {"cpu": ("cpu",), "cpu.without_bf16": ("cpu", "without_bf16"),
         "cuda": ("cuda",), "cuda.below_8_0": ("cuda", "below_8_0")}
"""The device kinds a preset may have a table for, as their paths in the TOML file."""


def preset_names() -> tuple[str, ...]:
    """The presets on file, by name (``train --preset NAME``)."""
    return tuple(sorted(path.stem for path in PRESET_FOLDER.glob("*.toml")))


@functools.cache
def load_preset(name: str) -> dict:
    """The preset ``name`` as parsed from its file: ``all``, the device tables, ``why``."""
    if name not in preset_names():
        raise ValueError(f"preset={name!r} is not a preset; the presets are {list(preset_names())}")
    return tomllib.loads((PRESET_FOLDER / f"{name}.toml").read_text())


def device_tables(device) -> tuple[str, ...]:
    """The device kinds whose tables apply to ``device``, the general one first.

    A CPU without bf16 instructions adds ``cpu.without_bf16``; a CUDA GPU below compute capability
    8.0 (a T4: no native bf16) adds ``cuda.below_8_0``. ``"cuda"`` on a machine without a GPU
    (notebook 12's tables) is taken as a GPU with native bf16.
    """
    device = torch.device(device)
    if device.type == "cuda":
        below = torch.cuda.is_available() and device_traits(device).capability < (8, 0)
        return ("cuda", "cuda.below_8_0") if below else ("cuda",)
    if device.type == "cpu":
        return ("cpu",) if device_traits(device).bf16_native else ("cpu", "cpu.without_bf16")
    return (device.type,)


def _table_values(preset: str, device) -> dict:
    """The preset's tables for ``device`` (or a device kind of :data:`KINDS`) merged, derived keys still in."""
    document = load_preset(preset)
    values = dict(document.get("all", {}))
    if isinstance(device, str) and device in KINDS:
        general = device.split(".")[0]
        kinds = (general,) if general == device else (general, device)
    else:
        kinds = device_tables(device)
    for kind in kinds:
        table = document
        for part in KINDS.get(kind, (kind,)):
            table = table.get(part, {})
        values.update({key: value for key, value in table.items() if not isinstance(value, dict)})
    return values


def _resolve(values: dict) -> dict:
    """``values`` with each derived key replaced by the field it sets, at its place."""
    resolved = {}
    for key, value in values.items():
        if key == "minibatch_rows":
            resolved["num_minibatches"] = _minibatches(values, value)
        else:
            resolved[key] = value
    return resolved


def _minibatches(values: dict, minibatch_rows: int) -> int:
    """How many minibatches of ``minibatch_rows`` a rollout of ``values`` holds: one if it holds fewer rows."""
    defaults = PPOConfig()
    rows = values.get("num_envs", defaults.num_envs) * values.get("num_steps", defaults.num_steps)
    if rows <= minibatch_rows:
        return 1
    if rows % minibatch_rows:
        raise ValueError(f"num_envs * num_steps ({rows:,}) is not a multiple of the preset's minibatch_rows "
                         f"({minibatch_rows:,}): change num_envs, or give num_minibatches in overrides")
    return rows // minibatch_rows


def preset_settings(preset: str, device) -> dict:
    """What the preset sets on ``device``, in its ``[why]`` order.

    ``device``: a device (one this machine need not have: ``"cuda"`` is taken as a GPU with native
    bf16), or a device kind of :data:`KINDS` (``"cuda.below_8_0"``: a T4's settings anywhere).
    """
    values = _resolve(_table_values(preset, device))
    order = [("num_minibatches" if key == "minibatch_rows" else key) for key in load_preset(preset).get("why", {})]
    return {key: values[key] for key in sorted(values, key=lambda k: order.index(k) if k in order else len(order))}


def preset_reasons(preset: str) -> dict:
    """The preset's one-line reason for each setting it makes (``[why]``)."""
    return dict(load_preset(preset).get("why", {}))


def ppo_settings(device=None, preset: str | None = None, *, obs: str | None = None, size: int | None = None,
                 envs: int | None = None, overrides: Mapping | Iterable = ()) -> PPOConfig:
    """The checked ``PPOConfig`` on ``device``: each step below over the ones before it.

    1. ``PPOConfig``'s defaults;
    2. the preset's tables (default :data:`DEFAULT_PRESET`): ``[all]``, then :func:`device_tables`;
    3. ``obs`` (``obs_type``), ``size`` (``height`` and ``width``), ``envs`` (``num_envs``);
    4. ``overrides``: a dict or ``(name, value)`` pairs (``--set``'s, typed), in order;
    5. the :data:`DERIVED` fields, unless ``overrides`` set them: a preset's minibatches keep their rows.

    A name that is no setting or a value of the wrong type is a ValueError or TypeError naming it.
    """
    device = get_device(device, param="device")
    preset = DEFAULT_PRESET if preset is None else preset
    values = _table_values(preset, device)
    check_settings(PPOConfig, {k: v for k, v in values.items() if k not in DERIVED}, f"the preset {preset!r}")
    given = {"obs_type": obs, "height": size, "width": size, "num_envs": envs}
    values.update({key: value for key, value in given.items() if value is not None})
    changes = check_settings(PPOConfig, dict(overrides), "overrides")
    values.update(changes)
    if "num_minibatches" in changes:
        values.pop("minibatch_rows", None)
    values = _resolve(values)
    values["device"] = changes.get("device", str(device))
    return PPOConfig(**values)


def settings_dict(config: PPOConfig, *, without: Iterable[str] = ()) -> dict:
    """``config`` as ``PPOConfig`` keyword arguments, less the fields ``without`` names (``"device"``, say)."""
    return {key: value for key, value in dataclasses.asdict(config).items() if key not in set(without)}
