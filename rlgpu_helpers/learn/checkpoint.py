"""Checkpoints that survive being killed at any moment (introduced in notebook 11).

Colab disconnects and preempted machines kill training without warning. ``save_checkpoint``
writes with ``atomic_write``: to a temporary file in the same folder, flushed to disk, then
renamed over the old checkpoint. So the file named ``checkpoint.pt`` is always either the
previous complete checkpoint or the new complete one, never half of one; a kill during the
write leaves at most a stray ``*.tmp`` file, which ``load_checkpoint`` never reads.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.files import atomic_write

CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(Exception):
    """A checkpoint that cannot be used, with the path and the reason."""


def save_checkpoint(path: str | Path, state: dict) -> Path:
    """Write ``state`` to ``path`` atomically (write a temporary file, fsync, rename)."""
    return atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by ``save_checkpoint``; ``CheckpointError`` says why not."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        # Checkpoints hold tensors, numbers, strings and dicts only: the safe loader suffices.
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for unreadable files
        raise CheckpointError(
            f"{path} is not a checkpoint written by this package: torch.load cannot read it with "
            f"weights_only=True ({type(exc).__name__}); it may be truncated, corrupt or another kind of file"
        ) from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a checkpoint dict")
    return state
