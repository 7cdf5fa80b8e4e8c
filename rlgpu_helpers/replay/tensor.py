"""A replay buffer of preallocated tensors on one device (introduced in notebook 05).

The naive DQN of notebook 01 keeps transitions in a Python deque and builds every batch from a
list of small arrays. ``TensorReplayBuffer`` allocates each field once, as one big tensor on the
device the learner uses, writes a whole batch of transitions with one indexed copy, and samples
a batch with one random index tensor: no Python loop over transitions, no host-device copies.
Its write position and size are plain Python ints, so adding and sampling never wait for a GPU.
Bad input is refused before anything is written, so a failed ``add`` or ``load_state_dict``
leaves the buffer as it was.
"""

from __future__ import annotations

import torch

from ..core.checks import check_int, check_ints
from ..core.device import get_device


class TensorReplayBuffer:
    """A ring of ``capacity`` transitions ``(obs, action, reward, next_obs, terminated)``.

    When full, new transitions overwrite the oldest. ``terminated`` is stored rather than
    "done": a game cut off by the step limit (truncated) still bootstraps from ``next_obs``,
    which for such a game is its real last observation.
    """

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu"):
        self.capacity = check_int("capacity", capacity)
        self.device = get_device(device, param="device")
        self.obs_shape = check_ints("obs_shape", tuple(obs_shape))
        self.obs = torch.zeros(capacity, *self.obs_shape, device=self.device)
        self.next_obs = torch.zeros(capacity, *self.obs_shape, device=self.device)
        self.actions = torch.zeros(capacity, dtype=torch.int64, device=self.device)
        self.rewards = torch.zeros(capacity, device=self.device)
        self.terminated = torch.zeros(capacity, device=self.device)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Append a batch of transitions (first dimension: batch), wrapping around when full.

        Every field is checked before anything is written.
        """
        fields = self._checked(dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs,
                                    terminated=terminated))
        batch = fields["obs"].shape[0]
        if batch > self.capacity:
            raise ValueError(f"obs has {batch} rows: a batch of {batch} transitions does not fit "
                             f"in capacity {self.capacity}")
        slots = (self.pos + torch.arange(batch, device=self.device)) % self.capacity
        for name, value in fields.items():
            getattr(self, name).index_copy_(0, slots, value)
        self.pos = (self.pos + batch) % self.capacity
        self.size = min(self.size + batch, self.capacity)

    def _checked(self, fields: dict, rows: int | None = None) -> dict:
        """The fields on the buffer's device in its dtypes, or an error naming the bad one."""
        for name, value in fields.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, not {type(value).__name__}")
        batch = fields["obs"].shape[0] if fields["obs"].dim() else 0
        rows = batch if rows is None else rows
        for name, value in fields.items():
            mine = getattr(self, name)
            want = (rows, *mine.shape[1:])
            if tuple(value.shape) != want:
                raise ValueError(f"{name} has shape {tuple(value.shape)}, expected {want}")
            if name == "actions" and (value.is_floating_point() or value.dtype == torch.bool):
                raise TypeError(f"actions must be an integer tensor, not {value.dtype}")
        return {name: value.to(self.device, getattr(self, name).dtype) for name, value in fields.items()}

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict:
        """``batch_size`` transitions drawn uniformly (with replacement) from those stored.

        ``generator``, if given, must live on the buffer's device (as ``torch.randint`` needs).
        """
        check_int("batch_size", batch_size)
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), device=self.device, generator=generator)
        return {name: getattr(self, name)[idx] for name in self.FIELDS}

    def state_dict(self) -> dict:
        """The stored transitions (copies), the write position and the size."""
        return {**{name: getattr(self, name)[: self.size].clone() for name in self.FIELDS},
                "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` of a buffer with the same capacity and observation shape.

        Checked first: a bad state raises naming the field and the value, and the buffer stays
        as it was.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from TensorReplayBuffer.state_dict(), not {type(state).__name__}")
        missing = [name for name in (*self.FIELDS, "pos", "size") if name not in state]
        if missing:
            raise ValueError(f"state is missing {missing}: not a TensorReplayBuffer state_dict")
        size = check_int("state['size']", state["size"], 0, self.capacity)
        pos = check_int("state['pos']", state["pos"], 0, self.capacity - 1)
        if size < self.capacity and pos != size:
            raise ValueError(f"state['pos']={pos} must equal state['size']={size} until the buffer is full")
        fields = self._checked({name: state[name] for name in self.FIELDS}, rows=size)
        for name in ("obs", "rewards", "next_obs"):
            if not bool(fields[name].isfinite().all()):
                raise ValueError(f"state[{name!r}] holds values that are not finite")
        if not bool(((fields["terminated"] == 0) | (fields["terminated"] == 1)).all()):
            raise ValueError("state['terminated'] must hold only 0 and 1")
        for name, value in fields.items():
            getattr(self, name)[:size] = value
        self.pos, self.size = pos, size
