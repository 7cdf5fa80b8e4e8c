"""A replay buffer of preallocated tensors (introduced in notebook 05).

The naive DQN (``learn.naive_dqn``) keeps transitions in a deque and builds every batch from a list
of small arrays. ``TensorReplayBuffer`` allocates each field once, writes a batch with at most two
slice copies per field, and samples with one random index tensor: no Python loop over
transitions. Its position and size are Python ints, so it never reads a value back from a GPU;
the only waits are copies between host storage and a GPU (``_copies_wait``).

Where the tensors live is the lesson's main knob: ``device="cuda"`` keeps them on the GPU, next
to the learner (sampling is a gather, no copy); ``storage_device="cpu"`` keeps them in pageable
host memory, each batch copied with a plain ``.to`` that waits, the baseline that
``replay.pinned`` improves on. ``PinnedReplayBuffer``, ``MemmapReplayBuffer`` and
``PrioritizedReplayBuffer`` build on this one.
"""

from __future__ import annotations

import torch

from .base import DTYPES, FIELDS, ReplayBuffer, ring_slices


class TensorReplayBuffer(ReplayBuffer):
    """A ring of ``capacity`` transitions in preallocated tensors on ``storage_device``.

    ``device`` is where samples are delivered, ``storage_device`` (default: ``device``) where
    the tensors live. The fields are attributes (``buffer.obs``, ``buffer.actions``, ...) with
    ``capacity`` rows each; ``pos`` is the slot the next transition goes to.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 storage_device: str | torch.device | None = None, num_actions: int | None = None):
        super().__init__(capacity, obs_shape, device, storage_device, num_actions=num_actions)
        for name in FIELDS:
            setattr(self, name, self._allocate(name))
        self.pos = 0
        self.size = 0

    _copies_wait = True
    """Whether ``add``'s copies into storage finish before it returns (a copy into pageable host memory always does)."""

    def _allocate(self, name: str) -> torch.Tensor:
        """The storage of one field: ``capacity`` rows of zeros on the storage device."""
        return torch.zeros(self.capacity, *self.field_shape(name), dtype=DTYPES[name], device=self.storage_device)

    def memory_bytes(self) -> dict[str, int]:
        place = "host" if self.storage_device.type == "cpu" else "device"
        return {place: sum(getattr(self, name).nbytes for name in FIELDS)}

    def _store(self, fields: dict, count: int) -> None:
        """Rows ``pos .. pos+count`` of the ring: one slice copy per field, two when it wraps.

        ``copy_`` converts dtype and device in one go, so a batch from the GPU lands in host
        storage without an intermediate tensor (and without waiting, where ``_copies_wait`` is False).
        """
        for ring, rows in ring_slices(self.pos, count, self.capacity):
            for name, value in fields.items():
                getattr(self, name)[ring].copy_(value[rows], non_blocking=not self._copies_wait)
        self.pos = (self.pos + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def _gather(self, indices: torch.Tensor) -> dict:
        return {name: getattr(self, name).index_select(0, indices) for name in FIELDS}

    def _rows(self) -> dict:
        return {name: self._oldest_first(getattr(self, name)) for name in FIELDS}

    def _oldest_first(self, column: torch.Tensor) -> torch.Tensor:
        """A copy of the stored rows of ``column``, oldest first (once the ring has wrapped, the
        oldest is at ``pos``)."""
        if self.size < self.capacity:
            return column[:self.size].clone()
        return torch.roll(column, -self.pos, 0)

    def _put_rows(self, fields: dict, size: int) -> None:
        for name, value in fields.items():
            getattr(self, name)[:size].copy_(value)
        self.pos, self.size = size % self.capacity, size
