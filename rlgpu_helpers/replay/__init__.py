"""Replay buffers, from the tutorial's deque to GPU-resident and prioritized, all with one API.

- this package: ``KINDS`` and ``make_buffer``, a buffer by name (05);
- ``base``: ``ReplayBuffer``, the API every buffer shares, and its checks (05);
- ``naive``: ``DequeReplay`` and ``ArrayReplay``, the naive DQN's memories (01, 02; measured in 05);
- ``tensor``: ``TensorReplayBuffer``, preallocated tensors on the GPU or in host memory (05);
- ``pinned``: ``PinnedReplayBuffer``, pinned host memory, next batch prefetched on a side stream (05);
- ``memmap``: ``MemmapReplayBuffer``, memory-mapped files: larger than RAM, kept across restarts (05);
- ``prioritized``: ``PrioritizedReplayBuffer``, proportional prioritization without host syncs (05).
"""

from __future__ import annotations

import torch

from ..core.checks import check_choice
from .base import ReplayBuffer
from .memmap import MemmapReplayBuffer
from .naive import ArrayReplay, DequeReplay
from .pinned import PinnedReplayBuffer
from .prioritized import PrioritizedReplayBuffer
from .tensor import TensorReplayBuffer

KINDS = {
    "tensor": "TensorReplayBuffer on the learner's device (GPU-resident on a GPU)",
    "host": "TensorReplayBuffer in pageable host memory, each batch copied to the learner's device",
    "pinned": "PinnedReplayBuffer: pinned host memory, the next batch prefetched on a side stream",
    "memmap": "MemmapReplayBuffer: memory-mapped files (a temporary folder unless path= is given)",
    "prioritized": "PrioritizedReplayBuffer: proportional prioritization on the learner's device",
    "deque": "DequeReplay: the tutorial's deque of tuples (the baseline)",
    "arrays": "ArrayReplay: preallocated NumPy arrays",
}
"""Buffer names for :func:`make_buffer`, and what each one is."""


def make_buffer(kind: str, capacity: int, obs_shape, device: str | torch.device = "cpu",
                **options) -> ReplayBuffer:
    """A new buffer of ``kind`` (one of :data:`KINDS`) delivering samples to ``device``.

    ``options`` go to the buffer's constructor: ``num_actions`` for any (then ``add`` and
    ``load_state_dict`` refuse actions outside ``0..num_actions-1``), ``alpha`` and ``beta`` for
    ``"prioritized"``, ``path`` for ``"memmap"``.
    """
    check_choice("kind", kind, tuple(KINDS))
    if kind == "host":
        return TensorReplayBuffer(capacity, obs_shape, device, storage_device="cpu", **options)
    builders = {"tensor": TensorReplayBuffer, "pinned": PinnedReplayBuffer, "memmap": MemmapReplayBuffer,
                "prioritized": PrioritizedReplayBuffer, "deque": DequeReplay, "arrays": ArrayReplay}
    return builders[kind](capacity, obs_shape, device, **options)
