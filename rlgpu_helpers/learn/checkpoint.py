"""Checkpoints that survive being killed at any moment (introduced in notebook 11).

Colab disconnects and preempted machines kill training without warning. ``save_checkpoint``
writes with ``atomic_write``: to a temporary file in the same folder, flushed to disk, then
renamed over the old checkpoint. So the file named ``checkpoint.pt`` is always either the
previous complete checkpoint or the new complete one, never half of one; a kill during the
write leaves at most a stray ``*.tmp`` file, which ``load_checkpoint`` never reads.

Every file it writes (checkpoints and agents alike) begins with a SHA-256 checksum of what
follows: a file whose bytes changed since (bit rot, a damaged copy) is refused as corrupt, naming
the file, rather than loaded with different weights. Files saved before checksums still load;
:func:`has_checksum` tells them apart, and the command line says when it could not check one.

A checkpoint is also refused whole rather than half used: the ``check_*`` helpers below test a
saved part against what it would be loaded into (entries, shapes, finite values) without
changing anything, so a learner's ``load_state_dict`` checks everything before it loads anything.
"""

from __future__ import annotations

import hashlib
import io
import math
from pathlib import Path

import torch

from ..core.files import atomic_write
from ..snake.vec import VecSnake

CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(Exception):
    """A checkpoint that cannot be used, with the path and the reason."""


CHECKSUM = b"rlgpu-sha256:"
"""What a checksummed file begins with: then the 64 hex digits of the SHA-256 of the rest, a newline,
and ``torch.save``'s bytes."""
_HEADER = len(CHECKSUM) + 64 + 1


def save_checkpoint(path: str | Path, state: dict) -> Path:
    """Write ``state`` to ``path`` atomically (write a temporary file, fsync, rename), behind its checksum."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return atomic_write(path, CHECKSUM + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


def _file(path: str | Path) -> Path:
    path = Path(path)
    return path / CHECKPOINT_NAME if path.is_dir() else path


def has_checksum(path: str | Path) -> bool:
    """Whether the file at ``path`` carries a checksum (saved by this version of the package or later)."""
    with open(_file(path), "rb") as f:
        return f.read(len(CHECKSUM)) == CHECKSUM


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by ``save_checkpoint``; ``CheckpointError`` says why not.

    A checksummed file whose bytes no longer match their checksum is refused as corrupt.
    """
    path = _file(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    data = path.read_bytes()
    if data.startswith(CHECKSUM):
        digest, data = data[len(CHECKSUM):_HEADER - 1], data[_HEADER:]
        if hashlib.sha256(data).hexdigest().encode() != digest:
            raise CheckpointError(f"{path} is corrupt: its bytes no longer match the SHA-256 checksum saved "
                                  "with them (a damaged disk or copy); restore it from a copy, or train again")
    try:
        # Checkpoints hold tensors, numbers, strings and dicts only: the safe loader suffices.
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for unreadable files
        raise CheckpointError(
            f"{path} is not a checkpoint written by this package: torch.load cannot read it with "
            f"weights_only=True ({type(exc).__name__}); it may be truncated, corrupt or another kind of file"
        ) from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a checkpoint dict")
    return state


# -- checking a saved state against what it is loaded into, before anything changes --------------
# Each check raises TypeError or ValueError naming the entry (``name``), so a learner's
# ``load_state_dict`` can check its whole state first and change nothing when a part is wrong.


def check_entries(name: str, state, entries) -> dict:
    """``state`` if it is a dict holding every one of ``entries``."""
    if not isinstance(state, dict):
        raise TypeError(f"{name} must be a dict, not {type(state).__name__}")
    missing = [entry for entry in entries if entry not in state]
    if missing:
        raise ValueError(f"{name} is missing {missing}")
    return state


def check_finite_tensor(name: str, value, shape=None) -> torch.Tensor:
    """``value`` if it is a tensor (of ``shape``, if given) whose floating values are all finite."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, not {type(value).__name__}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}: "
                         "saved with another width, number of games or observation?")
    if (value.is_floating_point() or value.is_complex()) and bool((~value.isfinite()).any()):
        raise ValueError(f"{name} holds values that are not finite (NaN or inf): the run it came from diverged")
    return value


def check_weights(name: str, saved, module: torch.nn.Module) -> None:
    """Raise unless ``saved`` is a state_dict that ``module`` takes: the same entries and shapes, all finite."""
    expected = module.state_dict()
    if not isinstance(saved, dict):
        raise TypeError(f"{name} must be a dict of tensors, not {type(saved).__name__}")
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{name} does not fit the network its settings describe: missing {missing}, "
                         f"unexpected {unexpected}")
    for key, tensor in expected.items():
        check_finite_tensor(f"{name}[{key!r}]", saved[key], tensor.shape)


def check_optimizer_state(name: str, saved, optimizer: torch.optim.Optimizer) -> None:
    """Raise unless ``saved`` is an ``optimizer.state_dict()`` that fits ``optimizer``'s parameters, all finite."""
    check_entries(name, saved, ("state", "param_groups"))
    groups, state = saved["param_groups"], saved["state"]
    if not isinstance(groups, list) or not isinstance(state, dict):
        raise TypeError(f"{name} must hold a list 'param_groups' and a dict 'state'")
    if len(groups) != len(optimizer.param_groups):
        raise ValueError(f"{name} has {len(groups)} parameter groups, the optimizer {len(optimizer.param_groups)}")
    for i, (group, built) in enumerate(zip(groups, optimizer.param_groups)):
        numbers = [key for key, value in built.items() if isinstance(value, (torch.Tensor, float))]  # lr, eps, ...
        check_entries(f"{name}['param_groups'][{i}]", group, ["params", *numbers])
        if not isinstance(group["params"], list) or len(group["params"]) != len(built["params"]):
            raise ValueError(f"{name}['param_groups'][{i}]['params'] does not list the optimizer's "
                             f"{len(built['params'])} parameters")
        for key in numbers:
            value = group[key]
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = float(value)
            if not isinstance(value, (float, int)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name}['param_groups'][{i}][{key!r}]={group[key]!r} must be a finite number")
        for index, parameter in zip(group["params"], built["params"]):
            entry = state.get(index, {})
            if not isinstance(entry, dict):
                raise TypeError(f"{name}['state'][{index!r}] must be a dict, not {type(entry).__name__}")
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):
                    check_finite_tensor(f"{name}['state'][{index!r}][{key!r}]", value,
                                        parameter.shape if value.dim() else None)


def check_env_state(name: str, saved, env: VecSnake) -> None:
    """Raise unless ``env.load_state_dict(saved)`` would take ``saved``, checked on a CPU copy of ``env``'s settings."""
    probe = VecSnake(env.num_envs, env.height, env.width, obs_type=env.obs_type, device="cpu",
                     max_steps_without_food=env.max_steps_without_food)
    try:
        probe.load_state_dict(saved)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{name}: {error}") from None
