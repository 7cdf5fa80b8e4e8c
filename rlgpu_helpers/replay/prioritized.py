"""Prioritized experience replay on the device, without host syncs (introduced in notebook 05).

Proportional prioritization (Schaul et al., 2016): transition ``i`` with priority ``p_i`` is drawn
with probability ``P(i) = p_i ** alpha / sum_j p_j ** alpha`` (``alpha = 0``: uniform), and its
update is scaled by the importance weight ``w_i = (P(i) / min_j P(j)) ** -beta`` (at most 1, and
the same in every batch). Learners pass new priorities (``|TD error| + eps``) back with
``update_priorities``; a new transition gets the largest priority seen, so it is drawn soon.

It draws without leaving the device: ``cumsum`` of ``p ** alpha`` (float64, so a million small
terms still add up), uniform draws below the total, and ``searchsorted``. O(N) per batch where a
sum tree is O(batch log N), but a handful of kernels with no data-dependent sizes, so a GPU never
waits for the host (TorchRL's sum tree lives on the CPU).

Bad priorities (NaN, infinite, zero, negative) would poison every later draw, yet reading them on
the host would make every step wait. So ``update_priorities`` checks metadata on the host and
values on the device (:class:`~rlgpu_helpers.gpu.sync.DeferredCheck`): a bad value freezes the
update, and its ``ValueError`` comes at once on a CPU, from a later call on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.checks import check_number
from ..gpu.sync import DeferredCheck
from .base import ring_slices
from .tensor import TensorReplayBuffer


class PrioritizedReplayBuffer(TensorReplayBuffer):
    """A ring of transitions on ``device`` drawn in proportion to ``priority ** alpha``.

    ``sample`` adds ``"weights"`` (the importance weights, float32) to the batch. ``beta`` may be
    changed between calls (learners anneal it towards 1).
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu", *,
                 alpha: float = 0.6, beta: float = 0.4, num_actions: int | None = None):
        super().__init__(capacity, obs_shape, device, num_actions=num_actions)
        self.alpha = check_number("alpha", alpha, at_least=0)
        self.beta = beta
        self.priorities = torch.zeros(self.capacity, device=self.device)
        self._max_priority = torch.ones((), device=self.device)
        self._index_check = DeferredCheck(self.device, self._bad_index)
        self._priority_check = DeferredCheck(self.device, self._bad_priority)

    @property
    def beta(self) -> float:
        """The importance-weight exponent, in [0, 1] (1: full correction of the sampling bias)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_number("beta", value, at_least=0, at_most=1)

    def row_bytes(self) -> int:
        return super().row_bytes() + 4  # and its float32 priority

    def memory_bytes(self) -> dict[str, int]:
        memory = super().memory_bytes()
        place, = memory
        return {place: memory[place] + self.priorities.nbytes}

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of the transitions at ``indices`` (from ``sample``).

        ``indices``: a 1-d integer tensor on ``device``; ``priorities``: a real tensor of the same
        shape on ``device``, each finite and > 0. Bad values are found on the device; see the
        module docstring for when their error is raised. Nothing is written on bad input.
        """
        self._raise_deferred()
        for name, value in (("indices", indices), ("priorities", priorities)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, not {type(value).__name__}")
            if value.device != self.device:
                raise ValueError(f"{name} is on {value.device}: the priorities live on {self.device}")
        if indices.dim() != 1 or indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
            raise TypeError(f"indices must be a 1-d integer tensor, not {indices.dtype} of shape {tuple(indices.shape)}")
        if priorities.is_complex() or priorities.dtype == torch.bool:
            raise TypeError(f"priorities must be a real tensor, not {priorities.dtype}")
        if priorities.shape != indices.shape:
            raise ValueError(f"priorities has shape {tuple(priorities.shape)}, expected {tuple(indices.shape)} "
                             "(one per index)")
        if indices.numel() == 0:
            return
        priorities = priorities.to(torch.float32)
        bad_index = (indices < 0) | (indices >= self.size)
        bad_priority = ~((priorities > 0) & priorities.isfinite())
        frozen = (self._index_check.record(bad_index, indices)
                  | self._priority_check.record(bad_priority, priorities.view(torch.int32)))
        slots = torch.where(bad_index, 0, indices)
        new = torch.where(frozen, self.priorities[slots], priorities)
        self.priorities[slots] = new
        self._max_priority = torch.maximum(self._max_priority, torch.where(frozen, 0.0, new.max()))
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        self._index_check.raise_if_failed()
        self._priority_check.raise_if_failed()

    @staticmethod
    def _bad_index(index: int, value: int, calls_ago: int) -> str:
        return (f"indices[{index}]={value} must hold a stored transition (0 <= index < len(buffer))"
                f"{_when(calls_ago)}")

    @staticmethod
    def _bad_priority(index: int, bits: int, calls_ago: int) -> str:
        # The device check records the float32 value's bits as an integer: read them back.
        value = np.array(bits, dtype=np.int64).astype(np.int32).view(np.float32).item()
        return f"priorities[{index}]={value!r} must be a finite number > 0{_when(calls_ago)}"

    # -- storage and drawing --------------------------------------------------------------------

    def _store(self, fields: dict, count: int) -> None:
        """New transitions get the largest priority seen so far."""
        for ring, _ in ring_slices(self.pos, count, self.capacity):
            self.priorities[ring].copy_(self._max_priority)
        super()._store(fields, count)

    def _draw(self, batch_size: int, generator: torch.Generator | None) -> tuple[torch.Tensor, dict]:
        """Indices in proportion to ``p ** alpha`` (cumsum + searchsorted), and their weights."""
        scaled = self.priorities[:self.size] ** self.alpha
        cdf = torch.cumsum(scaled, 0, dtype=torch.float64)
        total = cdf[-1]
        targets = torch.rand(batch_size, dtype=torch.float64, device=self.device, generator=generator) * total
        indices = torch.searchsorted(cdf, targets, right=True).clamp_(max=self.size - 1)
        weights = (scaled[indices] / scaled.min()) ** -self.beta  # (P(i) / min_j P(j)) ** -beta
        return indices, {"weights": weights}

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The transitions, their priorities (oldest first) and the largest priority seen."""
        return {**super().state_dict(), "priorities": self._oldest_first(self.priorities),
                "max_priority": float(self._max_priority)}

    def _checked_state(self, state) -> dict:
        """Also checks ``priorities`` and ``max_priority``; a state without them (from a uniform
        buffer) gives every transition the largest priority, as if just added."""
        checked = super()._checked_state(state)
        size = checked["size"]
        max_priority = check_number("state['max_priority']", state.get("max_priority", 1.0), above=0)
        priorities = state.get("priorities", torch.full((size,), max_priority))
        if not isinstance(priorities, torch.Tensor):
            raise TypeError(f"state['priorities'] must be a torch.Tensor, not {type(priorities).__name__}")
        if tuple(priorities.shape) != (size,):
            raise ValueError(f"state['priorities'] has shape {tuple(priorities.shape)}, expected {(size,)}")
        priorities = priorities.to("cpu", torch.float32)
        if not bool(((priorities > 0) & priorities.isfinite()).all()):
            raise ValueError("state['priorities'] must hold only finite numbers > 0")
        return {**checked, "priorities": priorities, "max_priority": max_priority}

    def _put_state(self, checked: dict) -> None:
        super()._put_state(checked)
        self.priorities[:checked["size"]].copy_(checked["priorities"])
        self._max_priority.fill_(checked["max_priority"])


def _when(calls_ago: int) -> str:
    """How long ago the failed call was, when it was not the current one; nothing was written."""
    return f" (in the update_priorities call {calls_ago} call(s) ago; nothing was written)" if calls_ago else ""
