"""The replay memories of the naive DQN: a deque of tuples, and preallocated NumPy arrays.

Introduced in notebook 01 (``DequeReplay``, the tutorial's memory) and notebook 02
(``ArrayReplay``, the "batches from arrays" tuning); notebook 05 measures them beside the
tensor buffers.

Each has two ways in. The naive DQN of notebooks 01 and 02 uses the per-transition path, as
tutorials write it: ``append(obs, action, reward, next_obs, terminated)`` stores one transition
of a single game, and ``batch(indices)`` builds a tuple of CPU tensors from a list of positions.
The buffer API of :mod:`~rlgpu_helpers.replay.base` (``add`` a batch of N envs, ``sample``,
``state_dict``) is built on that same storage, so notebook 05 can time the deque against the
tensor buffers with the same calls: ``DequeReplay.add`` loops over the rows and ``sample``
goes through ``batch``, list comprehensions and all. Positions (``indices``) count from the
oldest stored transition for the deque, and are ring slots for the arrays.
"""

from __future__ import annotations

from collections import deque
from sys import getsizeof

import numpy as np
import torch

from .base import DTYPES, FIELDS, ReplayBuffer, ring_slices


class DequeReplay(ReplayBuffer):
    """The tutorial's memory: a deque of ``(obs, action, reward, next_obs, terminated)`` tuples.

    Storage is on the CPU; ``device`` is where ``sample`` delivers batches.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 num_actions: int | None = None):
        super().__init__(capacity, obs_shape, device, storage_device="cpu", num_actions=num_actions)
        self.memory = deque(maxlen=self.capacity)

    def __len__(self) -> int:
        return len(self.memory)

    @property
    def size(self) -> int:
        """Transitions stored: the deque's length."""
        return len(self.memory)

    def append(self, obs, action, reward, next_obs, terminated) -> None:
        """Store one transition of a single game, as it comes (no checks: the naive loop's path)."""
        self.memory.append((obs, action, reward, next_obs, terminated))

    def batch(self, indices) -> tuple[torch.Tensor, ...]:
        """Transitions ``indices`` (oldest first) as tensors: obs, actions, rewards, next_obs, terminated."""
        transitions = [self.memory[i] for i in indices]
        obs, actions, rewards, next_obs, terminated = zip(*transitions)
        return (torch.tensor(np.array(obs), dtype=torch.float32),
                torch.tensor(actions, dtype=torch.int64),
                torch.tensor(rewards, dtype=torch.float32),
                torch.tensor(np.array(next_obs), dtype=torch.float32),
                torch.tensor(terminated, dtype=torch.float32))

    def memory_bytes(self) -> dict[str, int]:
        """Every Python object the deque holds, counted with ``sys.getsizeof`` (arrays with their data)."""
        return {"host": getsizeof(self.memory) + sum(getsizeof(t) + sum(map(getsizeof, t)) for t in self.memory)}

    def _store(self, fields: dict, count: int) -> None:
        """One ``append`` per row, each observation its own array (as a game's steps make them)."""
        obs, next_obs = (fields[name].to("cpu", DTYPES[name]).numpy() for name in ("obs", "next_obs"))
        actions, rewards, terminated = (fields[name].tolist() for name in ("actions", "rewards", "terminated"))
        for i in range(count):
            self.append(obs[i].copy(), int(actions[i]), float(rewards[i]), next_obs[i].copy(), bool(terminated[i]))

    def _gather(self, indices: torch.Tensor) -> dict:
        return dict(zip(FIELDS, self.batch(indices.tolist())))

    def _rows(self) -> dict:
        return dict(zip(FIELDS, self.batch(range(len(self.memory))))) if self.memory else self._empty_rows()

    def _put_rows(self, fields: dict, size: int) -> None:
        self.memory.clear()
        self._store(fields, size)


class ArrayReplay(ReplayBuffer):
    """The same memory in preallocated NumPy arrays, written as a ring (oldest overwritten)."""

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 num_actions: int | None = None):
        super().__init__(capacity, obs_shape, device, storage_device="cpu", num_actions=num_actions)
        capacity, obs_shape = self.capacity, self.obs_shape
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def append(self, obs, action, reward, next_obs, terminated) -> None:
        """Store one transition of a single game (no checks: the naive loop's path)."""
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.next_obs[i] = next_obs
        self.terminated[i] = terminated
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def batch(self, indices) -> tuple[torch.Tensor, ...]:
        """Slots ``indices`` as tensors (the same slots as ``DequeReplay`` until the ring wraps)."""
        return tuple(torch.from_numpy(field[indices]) for field in
                     (self.obs, self.actions, self.rewards, self.next_obs, self.terminated))

    def memory_bytes(self) -> dict[str, int]:
        return {"host": sum(getattr(self, name).nbytes for name in FIELDS)}

    def _store(self, fields: dict, count: int) -> None:
        """One slice assignment per field, two when the ring wraps."""
        for name, value in fields.items():
            column, rows = getattr(self, name), value.to("cpu", DTYPES[name]).numpy()
            for ring, part in ring_slices(self.pos, count, self.capacity):
                column[ring] = rows[part]
        self.pos = (self.pos + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def _gather(self, indices: torch.Tensor) -> dict:
        return dict(zip(FIELDS, self.batch(indices.numpy())))

    def _rows(self) -> dict:
        order = np.arange(self.size) if self.size < self.capacity else np.roll(np.arange(self.capacity), -self.pos)
        return dict(zip(FIELDS, self.batch(order)))

    def _put_rows(self, fields: dict, size: int) -> None:
        for name, value in fields.items():
            getattr(self, name)[:size] = value.numpy()
        self.pos, self.size = size % self.capacity, size
