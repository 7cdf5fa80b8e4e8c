"""The one API every replay buffer shares, and its checks, written once (introduced in notebook 05).

Every buffer stores transitions ``(obs, action, reward, next_obs, terminated)`` and answers the
same calls, so a learner or a benchmark can swap one for another (:func:`make_buffer`, by name):

- ``add(obs, actions, rewards, next_obs, terminated)``: a batch, one row per env; when full, the
  oldest are overwritten;
- ``sample(batch_size, generator=None)``: the five fields on ``device``, drawn uniformly with
  replacement, and ``"indices"`` (for ``gather`` and ``update_priorities``);
- ``gather(indices)``, ``transitions()``, ``len(buffer)``, ``memory_bytes()``, and ``close()``
  (the memmap buffer's files; a no-op elsewhere, so any buffer closes the same way);
- ``state_dict()`` / ``load_state_dict(state)``: the transitions, oldest first, and their count,
  the same for every kind, so any buffer loads any other's state (a memmap buffer in a named
  folder refers to its files instead).

``device`` is where samples are delivered; ``storage_device``, where the storage lives (the host
for deque, arrays, pinned and memmap). Indices are drawn there, so a ``generator`` lives there.

Bad input is refused before anything is written, naming the parameter and the value:
``TypeError`` for a wrong type, ``ValueError`` for a wrong value, and a capacity that cannot fit
before anything is allocated. ``add`` and ``load_state_dict`` accept the same transitions, so
every state a buffer holds loads again. ``add`` must not wait: it checks values where they are,
on a GPU with ``gpu.sync.DeferredCheck``, whose error comes from a later call (``state_dict`` at
the latest); the buffer then refuses to be sampled or saved until a state is loaded.
"""

from __future__ import annotations

import functools

import torch

from ..core.checks import check_int, check_ints
from ..core.device import available_memory, check_fits, get_device, synchronize
from ..gpu.sync import DeferredCheck

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
"""What a transition holds, in the order ``add`` takes it."""
DTYPES = {"obs": torch.float32, "actions": torch.int64, "rewards": torch.float32,
          "next_obs": torch.float32, "terminated": torch.float32}
"""How each field is stored and delivered. ``terminated``, not "done": a game cut off by the step
limit still bootstraps from ``next_obs``, its real last observation."""
_BAD = ("obs that are not finite", "next_obs that are not finite", "a reward that is not finite",
        "terminated that is not 0 or 1", "action {}")
"""What a row of ``add`` can get wrong, bit by bit of the code its value check records."""


def ring_slices(pos: int, count: int, capacity: int) -> list[tuple[slice, slice]]:
    """Where ``count`` new rows go in a ring of ``capacity`` slots whose next free slot is
    ``pos``: pairs of (ring slots, batch rows), two pairs when the ring wraps."""
    first = min(count, capacity - pos)  # rows that fit before the end of the ring
    pieces = [(slice(pos, pos + first), slice(0, first))]
    if count > first:
        pieces.append((slice(0, count - first), slice(first, count)))
    return pieces


def _describe_bad_row(num_actions: int | None, index: int, value: int, calls_ago: int) -> str:
    """The error of ``add``'s value check: which row, and what is wrong with it (``_BAD``). ``calls_ago``
    counts the adds since the bad one, which a GPU's check reports from a later call."""
    code, action = value & 0xFF, value >> 8
    allowed = ">= 0" if num_actions is None else f"in [0, {num_actions - 1}]"
    what = [text.format(f"{action} (must be {allowed})") for bit, text in enumerate(_BAD) if code >> bit & 1]
    when = "the latest add" if calls_ago == 0 else f"the add {calls_ago} call(s) before the latest one"
    return f"row {index} of {when} holds {' and '.join(what)}"


class ReplayBuffer:
    """The shared API and checks; a subclass supplies the storage (see the module docstring).

    Subclasses keep ``size`` (transitions stored) and implement ``_store(fields, count)``
    (write ``count`` checked rows, oldest overwritten first), ``_gather(indices)`` (rows at
    ``indices`` on the storage device), ``_rows()`` (every stored row, oldest first),
    ``_put_rows(fields, size)`` (replace the contents with ``size`` rows, oldest first) and
    ``memory_bytes()``.
    """

    def __init__(self, capacity: int, obs_shape, device: str | torch.device = "cpu",
                 storage_device: str | torch.device | None = None, *, num_actions: int | None = None):
        self.capacity = check_int("capacity", capacity)
        self.obs_shape = check_ints("obs_shape", obs_shape)
        self.device = get_device(device, param="device")
        self.storage_device = (self.device if storage_device is None
                               else get_device(storage_device, param="storage_device"))
        self.num_actions = None if num_actions is None else check_int("num_actions", num_actions)
        available, where = self._room()
        check_fits("capacity", self.capacity, self.capacity * self.row_bytes(), available, where)
        self._value_checks: dict[torch.device, DeferredCheck] = {}
        self._make_value_checks()
        self._invalid: str | None = None  # why the buffer holds a bad transition, once known

    def row_bytes(self) -> int:
        """Bytes one stored transition takes (the deque's Python objects take more)."""
        return sum(DTYPES[name].itemsize * int(torch.Size(self.field_shape(name)).numel()) for name in FIELDS)

    def _room(self) -> tuple[int, str]:
        """Bytes the storage can take, and where it lives (for the capacity's error)."""
        return available_memory(self.storage_device), f"{self.storage_device} memory"

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
        self._raise_if_invalid()
        if count:
            self._check_values(fields)
        self._store(fields, count)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict:
        """``batch_size`` transitions drawn uniformly with replacement, on ``device``.

        Returns the five fields and ``"indices"``. ``batch_size`` is an int >= 1 (it may exceed
        what is stored: draws are with replacement); ``generator``, if given, must live on
        ``storage_device``.
        """
        batch_size = self._check_sample(batch_size, generator)
        self._raise_if_invalid()
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
        self._raise_if_invalid()
        indices = indices.to(self.storage_device, torch.int64)
        outside = (indices < 0) | (indices >= self.size)
        if bool(outside.any()):
            first = int(outside.to(torch.uint8).argmax())
            raise ValueError(f"indices[{first}]={int(indices[first])} must be in [0, {self.size - 1}]: "
                             f"the buffer holds {self.size} transitions")
        return self._deliver(self._gather(indices))

    def transitions(self) -> dict:
        """The stored transitions (copies, in RAM), oldest first, one tensor per field; after the value checks
        of every ``add``, so a checkpoint made from them always loads."""
        self._settle_checks()
        return self._rows()

    def state_dict(self) -> dict:
        """The :meth:`transitions` and their count ``size`` (a memmap buffer in a folder you named
        refers to its files instead)."""
        return {**self.transitions(), "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        """Replace the contents with ``state_dict()`` of any buffer of the same obs shape; a bad state raises
        naming the entry and the value, and the buffer stays as it was."""
        self._put_state(self._checked_state(state))
        self._invalid = None  # a bad transition, stored or on its way to be noted, has been replaced
        self._make_value_checks()

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

    def _check_values(self, fields: dict) -> None:
        """Check every row's values on the device that holds them, without waiting for it.

        One code per row, a bit per thing wrong (:data:`_BAD`), the action in the higher bits so
        that the error can name it. Transitions in host memory are checked at once (the note is
        on the host), so nothing bad is written; on a GPU the note arrives later.
        """
        device = fields["obs"].device
        if device not in self._value_checks:  # transitions from neither of the buffer's devices
            self._value_checks[device] = self._value_check(device)
        rows = fields["obs"].shape[0]
        wrong = [~fields[name].to(torch.float32).isfinite().view(rows, -1).all(1) for name in ("obs", "next_obs")]
        wrong.append(~fields["rewards"].to(torch.float32).isfinite())
        terminated = fields["terminated"]
        wrong.append((terminated != 0) & (terminated != 1))
        actions = fields["actions"].to(torch.int64)
        wrong.append((actions < 0) if self.num_actions is None else (actions < 0) | (actions >= self.num_actions))
        code = sum(bad.to(torch.int64) << bit for bit, bad in enumerate(wrong))
        self._value_checks[device].record(code != 0, code + (actions.clamp(-2**40, 2**40) << 8))
        if device.type != "cuda":  # the note is on the host now: raise before anything is written
            self._value_checks[device].raise_if_failed()

    def _make_value_checks(self) -> None:
        """The checks of transitions from the learner's and the storage's device, made up front:
        making one allocates (pinned host memory on a GPU), which has no place in ``add``."""
        devices = dict.fromkeys((self.device, self.storage_device))
        self._value_checks = {device: self._value_check(device) for device in devices}

    def _value_check(self, device: torch.device) -> DeferredCheck:
        # A function of num_actions, not a bound method: a cycle through the buffer would keep a
        # dropped memmap buffer (and the lock on its folder) alive until the garbage collector runs.
        return DeferredCheck(device, functools.partial(_describe_bad_row, self.num_actions))

    def _settle_checks(self) -> None:
        """Wait for the value checks of every ``add`` to reach the host, and raise if one failed."""
        for device in self._value_checks:
            synchronize(device)
        self._raise_if_invalid()

    def _raise_if_invalid(self) -> None:
        """Raise if an earlier ``add`` stored a bad transition (once the GPU's note has reached the host)."""
        for check in self._value_checks.values():
            try:
                check.raise_if_failed()
            except ValueError as error:
                self._invalid = str(error)
                raise
        if self._invalid is not None:
            raise ValueError(f"this buffer holds a bad transition ({self._invalid}): load a state into it "
                             "or make a new one")

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
        if "memmap" in state:
            raise ValueError(f"state refers to the files of the memmap buffer in {state['memmap']!r}: only a "
                             "MemmapReplayBuffer on that folder can load it")
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
        actions = fields["actions"]
        bad = (actions < 0) if self.num_actions is None else (actions < 0) | (actions >= self.num_actions)
        if bool(bad.any()):
            first = int(bad.to(torch.uint8).argmax())
            allowed = ">= 0" if self.num_actions is None else f"in [0, {self.num_actions - 1}]"
            raise ValueError(f"state['actions'][{first}]={int(actions[first])} must be {allowed}")
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
