"""A replay buffer of preallocated tensors (introduced in notebook 05).

The naive DQN of notebook 01 keeps transitions in a Python deque and builds every batch from a
list of small arrays. ``TensorReplayBuffer`` allocates each field once, as one big tensor,
writes a whole batch of transitions with at most two slice copies per field (the ring may wrap
once), and samples a batch with one random index tensor: no Python loop over transitions.
Its write position and size are plain Python ints, so adding and sampling never read a value
back from a GPU; the only waits are the copies between host storage and a GPU (``_copies_wait``).

Where the tensors live is the lesson's main knob:

- ``TensorReplayBuffer(capacity, obs_shape, device="cuda")``: on the GPU, next to the learner
  (GPU-resident: sampling is a gather on the GPU, no copy at all);
- ``TensorReplayBuffer(..., device="cuda", storage_device="cpu")``: in ordinary (pageable) host
  memory, each batch gathered on the CPU and copied to the GPU with a plain ``.to``, which waits
  for the copy: the baseline that :mod:`~rlgpu_helpers.replay.pinned` improves on;
- on a machine without a GPU both are the same buffer in host memory.

``PinnedReplayBuffer``, ``MemmapReplayBuffer`` and ``PrioritizedReplayBuffer`` build on this one
and change where the tensors come from or how indices are drawn.
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
