"""A host-memory replay buffer that prefetches the next batch to the GPU (introduced in notebook 05).

A buffer in ordinary (pageable) host memory pays twice for every batch on a GPU: the gather on
the CPU, then a copy that the CPU must stage through a pinned bounce buffer and wait for
(``.to(device)`` synchronizes). ``PinnedReplayBuffer`` removes the wait and hides the copy:

- its storage is allocated in pinned (page-locked) host memory, so transitions that come from
  a GPU env are written into it directly by DMA, without staging. ``add`` does not wait for
  them: each field is one ``copy_(..., non_blocking=True)`` into the pinned ring (no blocking
  copy, no synchronization; ``tests/test_fake_cuda.py`` checks it), and it records a CUDA event
  after the copies;
- the host waits on that event (``Event.synchronize``) only when it next reads or overwrites the
  storage: the gather of ``sample``, ``state_dict``, ``load_state_dict``. So the one wait of a
  learner that adds then samples is in ``sample``: it lasts until the GPU has finished the work
  queued before the ``add`` (the env step that made the transitions) and the copies. On a GPU
  the sync audit's profiler count shows it as one ``cudaEventSynchronize`` (the notebook's
  ``buffer_sync_table`` prints that count); a CPU has no event to wait on. A GPU-resident
  buffer (``TensorReplayBuffer`` on the GPU) has no such wait;
- ``sample`` gathers the *next* batch on the CPU into a fresh pinned tensor and starts copying it
  to the GPU with ``non_blocking=True`` on a side CUDA stream, then returns the batch prefetched
  in the same way during the previous call. The learner's stream waits for the copy with
  ``wait_stream`` (a wait on the GPU, not on the host), and ``record_stream`` tells the caching
  allocator that the learner's stream uses the batch, so its memory is not reused too early.

So the copy of batch k+1 runs while the learner computes on batch k. The cost: a returned batch
was drawn one call earlier, so transitions added since appear from the next batch on; and a
change of ``batch_size`` (or ``load_state_dict``) drops the prefetched batch and draws afresh.
A ``generator`` given to ``sample`` draws the batch after the one returned.

Pinned memory needs CUDA. When ``device`` is not a CUDA device (a CPU-only machine), storage
and batches are ordinary memory and there is no side stream: ``sample`` still returns the batch
prepared during the previous call, by the same code, and each transfer is a no-op. Pinned
allocations are rounded up to a power of two by PyTorch's caching host allocator, and pinned
memory cannot be swapped out: ``memory_bytes`` reports what the buffer asked for.
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
