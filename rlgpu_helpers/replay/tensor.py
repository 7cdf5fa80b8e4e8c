"""A replay buffer of preallocated tensors on one device (introduced in notebook 05).

The naive DQN of notebook 01 keeps transitions in a Python deque and builds every batch from a
list of small arrays. ``TensorReplayBuffer`` allocates each field once, as one big tensor on the
device the learner uses, writes a whole batch of transitions with one indexed copy, and samples
a batch with one random index tensor: no Python loop over transitions, no host-device copies.
Its write position and size are plain Python ints, so adding and sampling never wait for a GPU.
"""

from __future__ import annotations

import torch

from ..core.checks import check_int
from ..core.device import get_device


class TensorReplayBuffer:
    """A ring of ``capacity`` transitions ``(obs, action, reward, next_obs, terminated)``.

    When full, new transitions overwrite the oldest. ``terminated`` is stored rather than
    "done": a game cut off by the step limit (truncated) still bootstraps from ``next_obs``,
    which for such a game is its real last observation.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu"):
        self.capacity = check_int("capacity", capacity)
        self.device = get_device(device, param="device")
        shape = tuple(obs_shape)
        self.obs = torch.zeros(capacity, *shape, device=self.device)
        self.next_obs = torch.zeros(capacity, *shape, device=self.device)
        self.actions = torch.zeros(capacity, dtype=torch.int64, device=self.device)
        self.rewards = torch.zeros(capacity, device=self.device)
        self.terminated = torch.zeros(capacity, device=self.device)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Append a batch of transitions (first dimension: batch), wrapping around when full."""
        batch = obs.shape[0]
        if batch > self.capacity:
            raise ValueError(f"a batch of {batch} transitions does not fit in capacity {self.capacity}")
        for name, value in (("actions", actions), ("rewards", rewards), ("next_obs", next_obs),
                            ("terminated", terminated)):
            if value.shape[0] != batch:
                raise ValueError(f"{name} has {value.shape[0]} rows, obs has {batch}")
        slots = (self.pos + torch.arange(batch, device=self.device)) % self.capacity
        self.obs.index_copy_(0, slots, obs.to(self.device, self.obs.dtype))
        self.next_obs.index_copy_(0, slots, next_obs.to(self.device, self.next_obs.dtype))
        self.actions.index_copy_(0, slots, actions.to(self.device, torch.int64))
        self.rewards.index_copy_(0, slots, rewards.to(self.device, torch.float32))
        self.terminated.index_copy_(0, slots, terminated.to(self.device, torch.float32))
        self.pos = (self.pos + batch) % self.capacity
        self.size = min(self.size + batch, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict:
        """``batch_size`` transitions drawn uniformly (with replacement) from those stored.

        ``generator``, if given, must live on the buffer's device (as ``torch.randint`` needs).
        """
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        check_int("batch_size", batch_size)
        idx = torch.randint(self.size, (batch_size,), device=self.device, generator=generator)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "terminated": self.terminated[idx],
        }

    def state_dict(self) -> dict:
        return {"obs": self.obs[: self.size].clone(), "next_obs": self.next_obs[: self.size].clone(),
                "actions": self.actions[: self.size].clone(), "rewards": self.rewards[: self.size].clone(),
                "terminated": self.terminated[: self.size].clone(), "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"the saved buffer holds {size} transitions, more than capacity {self.capacity}")
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:size] = state[name].to(self.device)
        self.pos, self.size = int(state["pos"]), size
