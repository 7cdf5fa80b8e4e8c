"""The replay memories of the naive DQN: a deque of tuples, and preallocated NumPy arrays.

Introduced in notebook 01 (``DequeReplay``, the tutorial's memory) and notebook 02
(``ArrayReplay``, the "batches from arrays" tuning). Both hold one transition per env step of a
single game and build a batch of torch tensors on the CPU from a list of positions.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from ..core.checks import check_int


class DequeReplay:
    """The tutorial's memory: a deque of ``(obs, action, reward, next_obs, terminated)`` tuples."""

    def __init__(self, capacity: int):
        self.memory = deque(maxlen=check_int("capacity", capacity))

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, obs, action, reward, next_obs, terminated) -> None:
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


class ArrayReplay:
    """The same memory in preallocated NumPy arrays, written as a ring (oldest overwritten)."""

    def __init__(self, capacity: int, obs_shape):
        self.capacity = capacity = check_int("capacity", capacity)
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated) -> None:
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
