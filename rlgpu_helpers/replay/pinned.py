"""A host-memory replay buffer that prefetches the next batch to the GPU (introduced in notebook 05).

A buffer in pageable host memory pays twice for every batch on a GPU: the gather on the CPU, then
a copy staged through a bounce buffer that the host waits for. ``PinnedReplayBuffer`` removes the
wait and hides the copy:

- its storage is pinned, so transitions from a GPU env arrive by DMA: ``add`` is one
  ``copy_(..., non_blocking=True)`` per field and a CUDA event, no synchronization;
- the host waits on that event only when it next reads or overwrites the storage (``sample``,
  ``state_dict``, ``load_state_dict``): one ``cudaEventSynchronize`` per step, where a
  GPU-resident ``TensorReplayBuffer`` has none;
- ``sample`` gathers the *next* batch into a fresh pinned tensor and copies it on a side stream,
  then returns the batch prefetched by the previous call; the learner's stream waits for the copy
  on the GPU (``wait_stream``), and ``record_stream`` keeps its memory from reuse too early.

So batch k+1 is copied while the learner computes on batch k. The cost: a batch was drawn one call
earlier, and a new ``batch_size`` (or ``load_state_dict``) draws afresh. Without CUDA, storage
and batches are ordinary memory, by the same code, and each transfer is a no-op.
``memory_bytes`` reports what the buffer asked for (the pinned allocator rounds up).
"""

from __future__ import annotations

import torch

from ..core.device import available_memory
from .base import DTYPES, FIELDS
from .tensor import TensorReplayBuffer


class PinnedReplayBuffer(TensorReplayBuffer):
    """A ring of transitions in pinned host memory; each ``sample`` prefetches the next batch to ``device``."""

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 num_actions: int | None = None):
        super().__init__(capacity, obs_shape, device, storage_device="cpu", num_actions=num_actions)
        self._stream = torch.cuda.Stream(self.device) if self.pinned else None
        self._written = torch.cuda.Event() if self.pinned else None  # recorded after add's copies
        self._next: dict | None = None

    @property
    def _copies_wait(self) -> bool:
        return not self.pinned

    @property
    def pinned(self) -> bool:
        """Whether storage and batches are pinned: when samples go to a CUDA device."""
        return self.device.type == "cuda"

    def _allocate(self, name: str) -> torch.Tensor:
        return torch.zeros(self.capacity, *self.field_shape(name), dtype=DTYPES[name], pin_memory=self.pinned)

    def _room(self) -> tuple[int, str]:
        return available_memory("cpu"), "pinned host memory" if self.pinned else "host memory"

    def memory_bytes(self) -> dict[str, int]:
        return {"pinned" if self.pinned else "host": sum(getattr(self, name).nbytes for name in FIELDS)}

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict:
        """The batch prefetched by the previous call (drawn now if there is none of this size);
        starts prefetching the next one. See the module docstring."""
        batch_size = self._check_sample(batch_size, generator)
        self._raise_if_invalid()
        if self._next is None or self._next["indices"].shape[0] != batch_size:
            self._next = self._prefetch(batch_size, generator)
        batch, self._next = self._receive(self._next), self._prefetch(batch_size, generator)
        return batch

    def _store(self, fields: dict, count: int) -> None:
        super()._store(fields, count)
        if self._written is not None:
            self._written.record()

    def _storage_written(self) -> None:
        """Wait until ``add``'s copies have landed: the host is about to read or overwrite the storage."""
        if self._written is not None:
            self._written.synchronize()

    def _gather(self, indices: torch.Tensor) -> dict:
        self._storage_written()
        return super()._gather(indices)

    def _rows(self) -> dict:
        self._storage_written()
        return super()._rows()

    def _put_rows(self, fields: dict, size: int) -> None:
        self._storage_written()
        super()._put_rows(fields, size)

    def _prefetch(self, batch_size: int, generator: torch.Generator | None) -> dict:
        """Draw and gather a batch into pinned memory, and start copying it on the side stream."""
        indices, _ = self._draw(batch_size, generator)
        self._storage_written()
        staged = {name: torch.index_select(getattr(self, name), 0, indices, out=self._staging(name, batch_size))
                  for name in FIELDS}
        staged["indices"] = torch.empty(batch_size, dtype=torch.int64, pin_memory=self.pinned).copy_(indices)
        if self._stream is None:
            return staged
        with torch.cuda.stream(self._stream):
            return {name: value.to(self.device, non_blocking=True) for name, value in staged.items()}

    def _staging(self, name: str, rows: int) -> torch.Tensor:
        """A fresh host tensor for ``rows`` rows of a field (pinned when batches go to a GPU).

        The caching host allocator does not hand a pinned block out again until the copies
        that read it have finished, so a fresh one each call is safe without waiting.
        """
        return torch.empty(rows, *self.field_shape(name), dtype=DTYPES[name], pin_memory=self.pinned)

    def _receive(self, batch: dict) -> dict:
        """Make the current stream wait for the batch's copy, and mark the batch as used there."""
        if self._stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self._stream)
            for value in batch.values():
                value.record_stream(current)
        return batch

    def _put_state(self, checked: dict) -> None:
        super()._put_state(checked)
        self._next = None
