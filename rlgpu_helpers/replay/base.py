"""The one API every replay buffer shares, and its checks, written once (introduced in notebook 05).

Every buffer in ``replay/`` stores transitions ``(obs, action, reward, next_obs, terminated)``
and answers the same calls, so a learner or a benchmark can swap one for another:

- ``add(obs, actions, rewards, next_obs, terminated)``: a batch of transitions, one row per
  env (first dimension N, tensors on any device); when full, the oldest are overwritten;
- ``sample(batch_size, generator=None)``: a dict of tensors on the learner's ``device``: the
  five fields, plus ``"indices"`` (where each row was stored, for :meth:`ReplayBuffer.gather`
  and ``update_priorities``), drawn uniformly with replacement;
- ``gather(indices)``: the transitions stored at ``indices``, as ``sample`` returns them;
- ``state_dict()`` / ``load_state_dict(state)``: the stored transitions, oldest first, and
  their count. The state does not depend on the kind of buffer, so any buffer can load the
  state of any other (of the same observation shape, with room for it);
- ``len(buffer)``: transitions stored; ``memory_bytes()``: the bytes the storage takes, by place;
- ``close()``: release what the storage holds outside Python's memory (the memmap buffer's files);
  a no-op for the others, so a caller closes any buffer the same way.

:func:`make_buffer` builds any of them by a short name (:data:`KINDS`), which is how
``DQNConfig(buffer=...)`` and the ``replay`` bench suite choose one.

Two devices: ``device`` is where samples are delivered (the learner's device); the storage
lives on ``storage_device``, which for the host-storage buffers (deque, arrays, pinned,
memmap, and ``TensorReplayBuffer(storage_device="cpu")``) is the CPU even when the learner
is on a GPU. Indices are drawn on the storage device, so a ``generator`` must live there.

Bad input is refused before anything is written, with an error that names the parameter and
the value: ``TypeError`` for a wrong type (a list where a tensor belongs, float actions),
``ValueError`` for a wrong value (a shape, a size out of range, a generator on another device).
The checks of ``add`` and ``sample`` read shapes and dtypes only, never a tensor's values, so
they cost no host-device synchronization; ``load_state_dict`` and ``gather`` also check values
(finite observations, indices in range), which waits for the device once: they are not meant
for a hot loop.
"""

from __future__ import annotations

import torch

from ..core.checks import check_int, check_ints
from ..core.device import get_device

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
"""What a transition holds, in the order ``add`` takes it."""
DTYPES = {"obs": torch.float32, "actions": torch.int64, "rewards": torch.float32,
          "next_obs": torch.float32, "terminated": torch.float32}
"""How each field is stored and delivered. ``terminated`` is stored rather than "done": a game
cut off by the step limit (truncated) still bootstraps from ``next_obs``, its real last
observation."""


def ring_slices(pos: int, count: int, capacity: int) -> list[tuple[slice, slice]]:
    """Where ``count`` new rows go in a ring of ``capacity`` slots whose next free slot is
    ``pos``: pairs of (ring slots, batch rows), two pairs when the ring wraps."""
    first = min(count, capacity - pos)  # rows that fit before the end of the ring
    pieces = [(slice(pos, pos + first), slice(0, first))]
    if count > first:
        pieces.append((slice(0, count - first), slice(first, count)))
    return pieces


class ReplayBuffer:
    """The shared API and checks; a subclass supplies the storage (see the module docstring).

    Subclasses keep ``size`` (transitions stored) and implement ``_store(fields, count)``
    (write ``count`` checked rows, oldest overwritten first), ``_gather(indices)`` (rows at
    ``indices`` on the storage device), ``_rows()`` (every stored row, oldest first),
    ``_put_rows(fields, size)`` (replace the contents with ``size`` rows, oldest first) and
    ``memory_bytes()``.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu",
                 storage_device: str | torch.device | None = None):
        self.capacity = check_int("capacity", capacity)
        self.obs_shape = check_ints("obs_shape", obs_shape)
        self.device = get_device(device, param="device")
        self.storage_device = (self.device if storage_device is None
                               else get_device(storage_device, param="storage_device"))

    def field_shape(self, name: str) -> tuple[int, ...]:
        """The shape of one row of field ``name``."""
        return self.obs_shape if name in ("obs", "next_obs") else ()

    def __len__(self) -> int:
        return self.size

    # -- the API ------------------------------------------------------------------------------

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Append a batch of transitions (first dimension: one row per env), oldest overwritten."""
        fields = self._checked(dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs,
                                    terminated=terminated))
        count = fields["obs"].shape[0]
        if count > self.capacity:
            raise ValueError(f"obs has {count} rows: a batch of {count} transitions does not fit "
                             f"in capacity {self.capacity}")
        self._store(fields, count)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict:
        """``batch_size`` transitions drawn uniformly with replacement, on ``device``.

        Returns the five fields and ``"indices"``. ``batch_size`` is an int >= 1 (it may exceed
        what is stored: draws are with replacement); ``generator``, if given, must live on
        ``storage_device``.
        """
        batch_size = self._check_sample(batch_size, generator)
        indices, extra = self._draw(batch_size, generator)
        return self._deliver({**self._gather(indices), "indices": indices, **extra})

    def gather(self, indices: torch.Tensor) -> dict:
        """The transitions stored at ``indices`` (as ``sample`` returned them), on ``device``.

        Checks that every index is stored, which reads the indices on the host: a test and
        debugging tool, not a hot path.
        """
        if not isinstance(indices, torch.Tensor):
            raise TypeError(f"indices must be a torch.Tensor, not {type(indices).__name__}")
        if indices.dim() != 1 or indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
            raise TypeError(f"indices must be a 1-d integer tensor, not {indices.dtype} of shape {tuple(indices.shape)}")
        indices = indices.to(self.storage_device, torch.int64)
        outside = (indices < 0) | (indices >= self.size)
        if bool(outside.any()):
            first = int(outside.to(torch.uint8).argmax())
            raise ValueError(f"indices[{first}]={int(indices[first])} must be in [0, {self.size - 1}]: "
                             f"the buffer holds {self.size} transitions")
        return self._deliver(self._gather(indices))

    def state_dict(self) -> dict:
        """The stored transitions (copies), oldest first, and their count ``size``."""
        return {**self._rows(), "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        """Replace the contents with those of ``state_dict()`` of any buffer of the same obs shape.

        Checked first: a bad state raises naming the entry and the value, and the buffer stays
        as it was.
        """
        self._put_state(self._checked_state(state))

    # -- checks shared by every buffer ---------------------------------------------------------

    def _checked(self, fields: dict, rows: int | None = None, label: str = "{}") -> dict:
        """The fields, checked: tensors of the expected shapes (``rows`` rows, default: as
        many as ``obs`` has) and of dtypes that convert to the stored ones. ``label`` formats
        each field's name in messages (``"state[{!r}]"`` for a state dict).
        """
        for name, value in fields.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{label.format(name)} must be a torch.Tensor, not {type(value).__name__}")
        obs = fields["obs"]
        rows = (obs.shape[0] if obs.dim() else 0) if rows is None else rows
        for name, value in fields.items():
            want = (rows, *self.field_shape(name))
            if tuple(value.shape) != want:
                raise ValueError(f"{label.format(name)} has shape {tuple(value.shape)}, expected {want}")
            if value.is_complex():
                raise TypeError(f"{label.format(name)} must be a real tensor, not {value.dtype}")
            if name == "actions" and (value.is_floating_point() or value.dtype == torch.bool):
                raise TypeError(f"{label.format(name)} must be an integer tensor, not {value.dtype}")
        return fields

    def _check_sample(self, batch_size, generator) -> int:
        batch_size = check_int("batch_size", batch_size, 1)
        if generator is not None:
            if not isinstance(generator, torch.Generator):
                raise TypeError(f"generator={generator!r} must be a torch.Generator, not {type(generator).__name__}")
            if generator.device != self.storage_device:
                raise ValueError(f"generator is on {generator.device}: this buffer draws its indices on "
                                 f"its storage device, {self.storage_device}")
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return batch_size

    def _checked_state(self, state) -> dict:
        """``state`` checked and converted to the stored dtypes (on the CPU), or an error."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from a replay buffer's state_dict(), not {type(state).__name__}")
        missing = [name for name in (*FIELDS, "size") if name not in state]
        if missing:
            raise ValueError(f"state is missing {missing}: not a replay buffer's state_dict")
        size = check_int("state['size']", state["size"], 0, self.capacity)
        fields = self._checked({name: state[name] for name in FIELDS}, rows=size, label="state[{!r}]")
        fields = {name: value.to("cpu", DTYPES[name]) for name, value in fields.items()}
        for name in ("obs", "rewards", "next_obs"):
            if not bool(fields[name].isfinite().all()):
                raise ValueError(f"state[{name!r}] holds values that are not finite")
        if not bool(((fields["terminated"] == 0) | (fields["terminated"] == 1)).all()):
            raise ValueError("state['terminated'] must hold only 0 and 1")
        return {"fields": fields, "size": size}

    def _put_state(self, checked: dict) -> None:
        self._put_rows(checked["fields"], checked["size"])

    # -- drawing and delivering -----------------------------------------------------------------

    def _draw(self, batch_size: int, generator: torch.Generator | None) -> tuple[torch.Tensor, dict]:
        """Indices drawn uniformly on the storage device, and nothing extra to deliver."""
        indices = torch.randint(self.size, (batch_size,), device=self.storage_device, generator=generator)
        return indices, {}

    def _deliver(self, batch: dict) -> dict:
        """The batch on ``device``: a plain ``.to``, which from pageable host memory to a GPU
        waits for the copy (the baseline that pinned memory and GPU storage improve on)."""
        return {name: value.to(self.device) for name, value in batch.items()}

    def _empty_rows(self) -> dict:
        return {name: torch.zeros(0, *self.field_shape(name), dtype=DTYPES[name]) for name in FIELDS}

    # -- storage (the subclass's part) ----------------------------------------------------------

    def _store(self, fields: dict, count: int) -> None:
        raise NotImplementedError

    def _gather(self, indices: torch.Tensor) -> dict:
        raise NotImplementedError

    def _rows(self) -> dict:
        raise NotImplementedError

    def _put_rows(self, fields: dict, size: int) -> None:
        raise NotImplementedError

    def memory_bytes(self) -> dict[str, int]:
        """Bytes the storage takes, by place: some of ``"host"``, ``"pinned"``, ``"device"``, ``"files"``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the storage's outside resources; nothing to do for a buffer in memory."""
