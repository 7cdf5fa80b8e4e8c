"""``VecSnake``'s state: its layout in tensors, and each game read, written and checked (notebooks 03 and 04).

``VecSnakeState``, a part of ``VecSnake``, keeps every game in tensors updated in place (what CUDA
graphs need), laid out so that a step never branches on a cell and never clears one:

* The grid is stored with a border: ``(H + 2) x (W + 1)`` cells per game, the extra top and bottom
  rows and the extra column (also the left neighbour of the next row's first cell) being walls,
  which hold :data:`WALL_STAMP`.
* ``stamp[n, cell]`` is the time at which game n's head entered ``cell``. With ``clock[n]`` the time
  of the last move and ``length[n]`` the snake's length, a cell is body exactly when
  ``stamp > clock - length``. Moving writes one stamp; growing is ``length += 1``; the tail leaves
  the window by itself. A new game jumps the clock past every old stamp.
* Stamps are int32: each step rebases a few games in turn (``_rebase``), every game within
  ``SWEEP_PERIOD`` steps, so a clock (growing at most 4 a step) stays far below 2**31.
* ``ring[n, t % ring size]`` remembers which cell the head entered at time t: it gives the tail.
* ``row_free[n, r]`` counts the empty cells of each row, for placing food.

``get_state`` / ``set_state`` read and write one game as a ``rules.SnakeState`` (tests and tools);
``state_dict`` / ``load_state_dict`` save and restore every game and the random stream
(checkpoints), a state to load checked against the rules first.
"""

from __future__ import annotations

import torch

from . import rules
from .rules import SnakeState

MASK32 = 0xFFFFFFFF  # the random stream's keys and hashes are 32-bit
WALL_STAMP = 2**31 - 1  # the stamp of the "off the grid" column: always body (stamps are int32)
OLD_WALL_STAMP = 1 << 62  # the wall stamp of int64 states (before issue 38), converted on loading
REBASE_AT = 1 << 30  # a loaded game whose clock is past this is rebased at once
SWEEP_PERIOD = 1 << 24  # every game is rebased at least once in this many steps


class VecSnakeState:
    """Every game's state as tensors, its layout and access to it (a part of ``VecSnake``)."""

    def _allocate_state(self):
        """Every piece of state is a tensor updated in place (what CUDA graphs need)."""
        N, H, dev = self.num_envs, self.height, self.device
        i64 = dict(dtype=torch.int64, device=dev)
        i32 = dict(dtype=torch.int32, device=dev)
        small = dict(dtype=self._small, device=dev)
        # Flat, and written only by ``index_copy_`` / ``index_add_`` on the tensor itself: then
        # ``torch.compile`` writes them in place (through a view, or with ``scatter_``, Inductor
        # copies the whole tensor twice a step). ``_shaped(name)`` gives one row per game.
        self._stamp = torch.full((N * self._rows * self._pitch,), WALL_STAMP, **i32)
        self._stamp.view(N, self._rows, self._pitch)[:, 1 : H + 1, : self.width] = 0
        self._ring = torch.zeros(N * self._ring_size, **small)
        self._row_free = torch.zeros(N * H, **small)
        # Offsets of each game's block in the flat tensors (index_select, index_copy_, index_add_).
        game = torch.arange(N, **small)
        self._stamp_at = game * (self._rows * self._pitch)
        self._ring_at = game * self._ring_size
        self._row_free_at = game * H
        self._first_row = game * self._rows  # index of each game's top wall row
        self._grid_obs_at = torch.arange(N, device=dev) * (3 * self._cells)  # of each grid observation
        self._ego_obs_at = torch.arange(N, device=dev) * (3 * self._ego_size**2)  # of each ego_grid observation
        self._clock = torch.zeros(N, **i64)  # int64 as before, but kept below 2**31 (``_rebase``)
        # The rebase sweep: ``_sweep_games`` games a step, in turn (see ``_rebase``).
        self._sweep_games = 1 + N // SWEEP_PERIOD
        self._sweep = torch.zeros((), **i64)
        self._sweep_range = torch.arange(self._sweep_games, **i64)
        inside = torch.arange(1, H + 1, device=dev)[:, None] * self._pitch + torch.arange(self.width, device=dev)
        self._inside_cells = inside.view(-1)  # (H * W,) int64: the grid's cells in the bordered layout
        self._length = torch.zeros(N, **small)
        self._head = torch.zeros(N, **small)
        self._direction = torch.zeros(N, **small)
        self._food = torch.zeros(N, **small)
        self._steps_since_food = torch.zeros(N, **small)  # < max_steps_without_food <= rules.MAX_STEPS_LIMIT
        self._episode_steps = torch.zeros(N, **i64)  # up to (H * W - 2) * max_steps_without_food
        self._counter = torch.zeros((), **i64)
        self._env_keys = torch.zeros(N, **i64)  # the hash works in int64

    def _rebase(self, games: torch.Tensor, frozen: torch.Tensor | None = None) -> None:
        """Shift the times of ``games`` (int64 indices, distinct) down, keeping every rule the same.

        The shift is ``clock - length`` rounded down to a multiple of the ring's size (so ring
        slots stay put); stamps below it, all of empty cells, become 0, which stays <= the new
        ``clock - length``: what is body, tail or empty, and every lifetime, is unchanged.
        ``frozen`` (a 0-d bool) set to True shifts nothing (a frozen step changes no tensor).
        """
        clock = self._clock.index_select(0, games)
        shift = (clock - self._length.index_select(0, games).to(clock.dtype)) & -self._ring_size
        if frozen is not None:
            shift.masked_fill_(frozen, 0)
        self._clock.index_copy_(0, games, clock - shift)
        at = (self._stamp_at.index_select(0, games).to(torch.int64)[:, None] + self._inside_cells).view(-1)
        moved = (self._stamp.index_select(0, at).view(len(games), -1) - shift[:, None]).clamp_(min=0)
        self._stamp.index_copy_(0, at, moved.view(-1).to(self._stamp.dtype))

    def _sweep_rebase(self, frozen: torch.Tensor | None = None) -> None:
        """Rebase the next ``_sweep_games`` games in turn (a few small operations, no host sync)."""
        games = (self._sweep * self._sweep_games + self._sweep_range) % self.num_envs
        self._sweep.add_(1 if frozen is None else ~frozen)
        self._rebase(games, frozen)

    def get_state(self, index: int) -> SnakeState:
        """The state of game ``index`` as a ``SnakeState`` (copies a few numbers to the host)."""
        index = self._check_index(index)
        clock, length = int(self._clock[index]), int(self._length[index])
        ring = self._shaped("ring")[index].tolist()
        body = tuple(self._unpadded(ring[(clock - k) & self._ring_mask]) for k in range(length))
        return SnakeState(
            body=body,
            direction=int(self._direction[index]),
            food=self._unpadded(int(self._food[index])),
            steps_since_food=int(self._steps_since_food[index]),
        )

    def _unpadded(self, cell: int) -> tuple[int, int]:
        return cell // self._pitch - 1, cell % self._pitch

    def set_state(self, index: int, state: SnakeState) -> None:
        """Make game ``index`` continue from ``state``; other games are untouched.

        ``state`` is checked first (``rules.validate_state``); an invalid one raises and leaves
        the env as it was. A finished game (board full, no food) cannot be set.
        """
        index = self._check_index(index)
        rules.validate_state(state, self.height, self.width, self.max_steps_without_food)
        if state.food is None:
            raise ValueError("state.food is None: a won game has ended and cannot be continued")
        length = len(state.body)
        self._rebase(torch.tensor([index], device=self.device))  # so repeated calls cannot overflow
        clock = int(self._clock[index]) + length  # past every old stamp of this game
        cells = torch.tensor([self._padded(r, c) for r, c in state.body], device=self.device)
        times = torch.arange(clock, clock - length, -1, device=self.device, dtype=self._stamp.dtype)
        self._stamp.view(self.num_envs, -1)[index, cells] = times
        self._shaped("ring")[index, times & self._ring_mask] = cells.to(self._small)
        row_free = torch.full((self.height,), self.width, dtype=self._small)
        for r, _ in state.body:
            row_free[r] -= 1
        self._shaped("row_free")[index] = row_free.to(self.device)
        self._clock[index] = clock
        self._length[index] = length
        self._head[index] = self._padded(*state.body[0])
        self._direction[index] = state.direction
        self._food[index] = self._padded(*state.food)
        self._steps_since_food[index] = state.steps_since_food
        self._episode_steps[index] = 0

    _STATE = ("stamp", "ring", "row_free", "clock", "length", "head", "direction", "food",
              "steps_since_food", "episode_steps", "counter", "env_keys")

    def _shaped(self, name: str) -> torch.Tensor:
        """State tensor ``name`` as a view with one row per game (the flat ones reshaped)."""
        shapes = {"stamp": (self.num_envs, self._rows, self._pitch), "ring": (self.num_envs, self._ring_size),
                  "row_free": (self.num_envs, self.height)}
        tensor = getattr(self, f"_{name}")
        return tensor.view(shapes[name]) if name in shapes else tensor

    def state_dict(self) -> dict:
        """Every game's full state and the random stream, for checkpoints (tensors, copied)."""
        return {name: self._shaped(name).clone() for name in self._STATE}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly from ``state_dict()`` of an env with the same settings.

        ``state`` is checked first, every game against the rules (a body of adjacent cells on
        the grid whose stamps and ring agree, food on an empty cell, counters in range); a bad
        one raises ``ValueError`` naming the field, the game and the value, and leaves the env
        as it was. An int64 state of an older version (wall stamp ``1 << 62``, any clock) is
        converted: int32 stamps, clocks past ``REBASE_AT`` rebased.
        """
        self._check_state(state)
        state = dict(state)  # an int64 state (older checkpoints): new wall stamps, far clocks rebased
        clock, stamp = state["clock"].to("cpu", torch.int64), state["stamp"].to("cpu", torch.int64)
        far = clock > REBASE_AT
        shift = torch.where(far, (clock - state["length"].to("cpu", torch.int64)) & -self._ring_size, 0)
        inside = torch.zeros(stamp[0].numel(), dtype=torch.bool)
        inside[self._inside_cells.cpu()] = True
        stamp = stamp.view(self.num_envs, -1)
        stamp = torch.where(inside, (stamp - shift[:, None]).clamp(min=0), WALL_STAMP)
        state["stamp"], state["clock"] = stamp.view(self._shaped("stamp").shape), clock - shift
        for name in self._STATE:
            self._shaped(name).copy_(state[name])
        self._seeded = True

    def _check_state(self, state) -> None:
        """Raise naming what is wrong if ``state`` is not a valid ``state_dict()`` of this env."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from VecSnake.state_dict(), not {type(state).__name__}")
        missing = [name for name in self._STATE if name not in state]
        if missing:
            raise ValueError(f"state is missing {missing}: not a VecSnake state_dict")
        for name in self._STATE:
            mine, theirs = self._shaped(name), state[name]
            # Any integer dtype: the values are checked below (older states counted episode steps in int32).
            if (not isinstance(theirs, torch.Tensor) or theirs.shape != mine.shape or theirs.is_floating_point()
                    or theirs.is_complex() or theirs.dtype == torch.bool):
                got = (f"{tuple(theirs.shape)} {theirs.dtype}" if isinstance(theirs, torch.Tensor)
                       else type(theirs).__name__)
                raise ValueError(f"state[{name!r}] is {got}, expected {tuple(mine.shape)} {mine.dtype}: "
                                 "was it saved from an env with another num_envs or grid size?")
        # Checked on the CPU, where a game's bad value can be named without a device round trip each.
        s = {name: state[name].detach().to("cpu", torch.int64) for name in self._STATE}
        H, W, cells, mask = self.height, self.width, self._cells, self._ring_mask
        row_of = self._row_of.cpu().long()
        inside = torch.zeros(self._rows * self._pitch, dtype=torch.bool)
        inside.view(self._rows, self._pitch)[1 : H + 1, :W] = True

        def fail(name, bad, values, why):
            """Raise for the first game where ``bad`` holds, naming the value (same shape as ``bad``)."""
            if bool(bad.any()):
                first = int(bad.reshape(-1).to(torch.uint8).argmax())
                game, at = divmod(first, bad[0].numel()) if bad.dim() > 1 else (first, None)
                value = values.reshape(-1)[first].item()
                where = f"game {game}" if at is None else f"game {game}, index {at}"
                raise ValueError(f"state[{name!r}] of {where} is {value}: {why}")

        def on_grid(cells_):
            valid = (cells_ >= 0) & (cells_ < inside.numel())
            return valid & inside[cells_.clamp(0, inside.numel() - 1)]

        clock, length = s["clock"], s["length"]
        if s["counter"].item() < 0:
            raise ValueError(f"state['counter'] is {s['counter'].item()}: must be >= 0")
        fail("env_keys", (s["env_keys"] < 0) | (s["env_keys"] > MASK32), s["env_keys"], "must be in [0, 2**32)")
        fail("length", (length < rules.START_LENGTH) | (length > cells), length, f"must be in [3, {cells}]")
        fail("clock", clock < length, clock, "must be at least the snake's length")
        fail("direction", (s["direction"] < 0) | (s["direction"] > 3), s["direction"], "must be in [0, 3]")
        steps = s["steps_since_food"]
        fail("steps_since_food", (steps < 0) | (steps >= self.max_steps_without_food), steps,
             f"must be in [0, {self.max_steps_without_food - 1}]")
        fail("episode_steps", s["episode_steps"] < steps, s["episode_steps"], "must be >= steps_since_food")
        fail("head", ~on_grid(s["head"]), s["head"], "must be a cell of the grid")
        fail("food", ~on_grid(s["food"]), s["food"], "must be a cell of the grid")
        stamp = s["stamp"].view(self.num_envs, -1)
        wall = (stamp == WALL_STAMP) | (stamp == OLD_WALL_STAMP)
        fail("stamp", ~wall & ~inside, stamp, "walls must keep their wall stamp")
        fail("stamp", inside & ((stamp < 0) | (stamp > clock[:, None])), stamp, "must be in [0, clock] on the grid")
        # The body: the cells the head entered at times clock, clock - 1, ... (length of them).
        k = torch.arange(int(length.max()))
        in_body = k < length[:, None]
        times = clock[:, None] - k
        body = s["ring"].gather(1, times & mask)
        fail("ring", in_body & ~on_grid(body), body, "the body's cells (index: age) must be on the grid")
        body = torch.where(in_body, body, s["head"][:, None])
        stamped = stamp.gather(1, body)
        fail("stamp", in_body & (stamped != times), stamped, "must match the ring's body cells (index: age)")
        fail("head", body[:, 0] != s["head"], s["head"], "must be the ring's newest cell")
        step = (body[:, :-1] - body[:, 1:]).abs()
        fail("ring", in_body[:, 1:] & (step != 1) & (step != self._pitch), body[:, 1:],
             "each body cell (index: age - 1) must be next to the one before")
        offset = self._offset.cpu().long()[s["direction"].clamp(0, 3)]
        fail("direction", body[:, 0] - body[:, 1] != offset, s["direction"], "must point from the neck to the head")
        window = inside & (stamp > (clock - length)[:, None])
        fail("stamp", window.sum(1) != length, window.sum(1),
             "counts of cells stamped inside the body's window must equal the length")
        fail("food", window.gather(1, s["food"][:, None]).squeeze(1), s["food"], "must not be on the body")
        rows_of_body = torch.where(in_body, row_of[body], H)  # H: a row past the grid, dropped below
        counts = torch.zeros(self.num_envs, H + 1, dtype=torch.int64).scatter_add_(1, rows_of_body, torch.ones_like(body))
        fail("row_free", s["row_free"] != W - counts[:, :H], s["row_free"],
             "must count the empty cells of each row (index: row)")
