"""The bytes one ``VecSnake`` step reads and writes per game: its memory floor (notebook 04).

:func:`step_bytes` counts, from ``vec.py``'s ``step_tensors``, ``_restart`` and ``_place_food`` and
``vec_observe``'s observations, the per-game memory of a *common step* (the game moves on: it
neither eats, dies nor restarts, the case of nearly every step), with each element size read
from the live env's tensors. The counting rule:

* a per-game tensor counts once for reading if any pass reads it and once for writing if any
  writes it (a pass's output read by the next pass is a temporary, not counted: a fused step keeps
  it in registers); tables shared by all games (``_turned``, ``_features``, ...) stay in cache and
  count nothing;
* a tensor a pass streams whole counts its per-game bytes; a few elements at data-dependent places
  (the stamps at and ahead of the head, the ring's tail and head slots) are *scattered*: each
  counts its own bytes in ``touched`` and a 32-byte sector (what a GPU's memory moves at least)
  in ``sectors``; scattered elements of a tensor streamed whole are inside it and count nothing;
* returned tensors count as written: the observation and ``final_obs``, reward, the flags, and
  ``info``'s score, episode length, ``won`` and ``done``; the actions (int64) count as read.

Counted for ``"features"`` and ``"grid"`` (the bench's types).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from . import rules

SECTOR = 32  # bytes a GPU's memory reads or writes at least


@dataclasses.dataclass(frozen=True)
class StepBytes:
    """Bytes per game of one step: ``touched`` (each byte once) and ``sectors`` (scattered
    elements rounded up to 32-byte sectors); ``parts``: ``(tensor, "read"/"write", touched,
    sectors)`` for each tensor counted."""

    obs_type: str
    touched: int
    sectors: int
    parts: tuple[tuple[str, str, int, int], ...]


class _Traffic:
    """Per-game reads and writes, each tensor once per direction (streamed whole or scattered)."""

    def __init__(self):
        self.whole: dict[tuple[str, str], int] = {}
        self.scattered: dict[tuple[str, str], list[int]] = {}

    def stream(self, name: str, way: str, nbytes: int):
        self.whole[(name, way)] = nbytes

    def scatter(self, name: str, way: str, element: int, count: int = 1):
        self.scattered.setdefault((name, way), []).extend([element] * count)

    def parts(self) -> list[tuple[str, str, int, int]]:
        parts = [(name, way, n, n) for (name, way), n in self.whole.items()]
        for (name, way), elements in self.scattered.items():
            if (name, way) not in self.whole:
                parts.append((name, way, sum(elements), sum(SECTOR * math.ceil(e / SECTOR) for e in elements)))
        return parts


def step_bytes(env, *, action_bytes: int = 8) -> StepBytes:
    """Bytes per game that one common step of ``env`` (a ``VecSnake``) reads and writes.

    See the module docstring for the rule. Element sizes come from ``env``'s tensors (``_stamp``,
    ``_clock``, ``_ring``, ...), so a narrower dtype shows at once; ``action_bytes``: the element
    size of the actions passed to ``step`` (int64 by default, what ``torch.randint`` gives).
    """
    obs_type = env.obs_type
    if obs_type not in ("features", "grid"):
        raise ValueError(f"obs_type={obs_type!r}: step_bytes counts 'features' and 'grid' steps only")

    def size(name: str) -> int:
        return getattr(env, name).element_size()

    H, W = env.height, env.width
    t = _Traffic()
    t.stream("actions", "read", action_bytes)
    # Per-game numbers every step reads and rewrites (add_, masked_fill_, where(out=...)).
    for name in ("_clock", "_length", "_head", "_direction", "_food", "_steps_since_food", "_episode_steps"):
        t.stream(name, "read", size(name))
        t.stream(name, "write", size(name))
    # Each game's offsets into the flat views, and its random key (_place_food draws for every game).
    for name in ("_stamp_at", "_ring_at", "_row_free_at", "_first_row", "_env_keys"):
        t.stream(name, "read", size(name))
    # Row counts: index_add_ at two rows, then where(done, start, row_free) and cumsum over all H.
    t.stream("_row_free", "read", H * size("_row_free"))
    t.stream("_row_free", "write", H * size("_row_free"))
    t.stream("_start_row_free", "read", H * size("_start_row_free"))
    # The stamp at the new head (is it body?), the tail's ring slot; _restart writes the head's
    # stamp and ring slot (three times the same element for a game that goes on).
    t.scatter("_stamp", "read", size("_stamp"))
    t.scatter("_ring", "read", size("_ring"))
    t.scatter("_stamp", "write", size("_stamp"))
    t.scatter("_ring", "write", size("_ring"))
    # Returned: reward (float32), terminated, truncated, done (info's masks), won; score, length.
    t.stream("reward", "write", torch.float32.itemsize)
    for name in ("terminated", "truncated", "done", "won"):
        t.stream(name, "write", torch.bool.itemsize)
    t.stream("score", "write", size("_length"))
    t.stream("episode length", "write", size("_episode_steps"))
    cells = math.prod(rules.observation_shape(obs_type, H, W))
    if obs_type == "features":
        t.scatter("_stamp", "read", size("_stamp"), 3)  # _danger_code: the 3 cells ahead
        obs = cells * env._features.element_size()  # one row of the table each
        t.stream("final_obs", "write", obs)
        t.stream("obs", "write", obs)
    else:
        t.stream("_stamp", "read", env._rows * env._pitch * size("_stamp"))  # _observe_grid: every cell
        t.stream("_grid_obs_at", "read", size("_grid_obs_at"))
        obs = cells * env._start_grid.element_size()
        # Both observations from the stamps once: _next_grid's read of final_obs is a temporary's
        # (the fused step, ``vec_fused.fused_grid_observe``, writes both without it).
        t.stream("final_obs", "write", obs)
        t.stream("obs", "write", obs)
    parts = tuple(t.parts())
    return StepBytes(obs_type, sum(p[2] for p in parts), sum(p[3] for p in parts), parts)
