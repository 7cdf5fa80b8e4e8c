"""``VecSnake``'s observations, read from its stamps with no host sync (notebooks 03 and 04).

``VecSnakeObservations``, a part of ``VecSnake``, makes every observation type of ``rules`` for the
N games at once, equal to what ``rules.observe`` gives each game:

* ``"features"``: one row lookup per game in :func:`feature_table`, every possible observation
  indexed by heading, where the food is and the danger bits;
* ``"grid"``: the body's remaining lifetimes from the stamps, head and food scattered in; after a
  step only the food moves, and the restarted games show :func:`start_grid`;
* ``"ego_grid"``: each window cell reads one board cell, chosen by the head and the heading;
* ``"features_reach"``: the features, the share of the free cells each move reaches (a
  :func:`flood_fill` over the bordered grid, whose walls stop it) and the length.
"""

from __future__ import annotations

import torch

from . import rules
from .rules import SnakeState


def start_grid(height: int, width: int) -> torch.Tensor:
    """The grid observation of a new game before its food is placed (the rules' start body)."""
    body = rules.start_body(height, width)
    return torch.from_numpy(rules.observe(SnakeState(body, rules.RIGHT, None), height, width, "grid"))


def feature_table() -> torch.Tensor:
    """Every possible "features" observation, one row per (heading, food code, danger code).

    Food code: ``(sign(food_row - head_row) + 1) * 3 + sign(food_col - head_col) + 1``, or 9 for
    no food; danger code: ``danger_straight + 2 * danger_right + 4 * danger_left``. A step then
    builds all N observations with one row lookup.
    """
    rows = []
    for heading in range(4):
        for food_code in range(10):
            for danger_code in range(8):
                row = [float((danger_code >> k) & 1) for k in range(3)]
                row += [float(heading == d) for d in range(4)]
                if food_code == 9:
                    row += [0.0] * 4
                else:
                    d_row, d_col = food_code // 3 - 1, food_code % 3 - 1
                    row += [float(d_row < 0), float(d_col > 0), float(d_row > 0), float(d_col < 0)]
                rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def flood_fill(reach: torch.Tensor, free: torch.Tensor, rounds: int, pitch: int) -> torch.Tensor:
    """Grow ``reach`` over the ``free`` cells for ``rounds`` rounds, one cell in the 4 directions each.

    Both are uint8 0/1 masks over flattened bordered grids of row pitch ``pitch`` (``free``
    broadcasts against ``reach``): a neighbour is a shift by 1 or by ``pitch``, and the walls,
    never free, stop the fill at the borders. Returns a new tensor.
    """
    for _ in range(rounds):
        grown = reach.clone()
        grown[..., 1:].bitwise_or_(reach[..., :-1])
        grown[..., :-1].bitwise_or_(reach[..., 1:])
        grown[..., pitch:].bitwise_or_(reach[..., :-pitch])
        grown[..., :-pitch].bitwise_or_(reach[..., pitch:])
        reach = grown.bitwise_and_(free)
    return reach.clone() if rounds == 0 else reach


def _restarted(final_obs: torch.Tensor, start: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """``final_obs`` with each game flagged in ``done`` showing ``start`` instead: ``torch.where``
    written as a ``lerp`` with weights 0 and 1, which returns exactly its start or its end. The same
    one pass on a GPU; on a CPU vectorized, where ``where`` is not (notebook 04's step: about 3x faster)."""
    weight = done.to(final_obs.dtype).view(-1, *([1] * (final_obs.dim() - 1)))
    return torch.lerp(final_obs, start, weight)


def _move_food(rows: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> None:
    """In each game's flattened observation (a row of ``rows``), clear the food cell ``old`` and
    set ``new``: one ``scatter_`` of two cells a game, each 1.0 where it is the new cell (so where
    the food did not move both writes are 1.0, and their order does not matter). Compiled, it is
    written in place on torch 2.11 and 2.13; two ``index_fill_`` made 2.11 copy the observation first."""
    at = torch.stack([old, new], 1)
    rows.scatter_(1, at, (at == new[:, None]).to(rows.dtype))


def _put_food(flat: torch.Tensor, at: torch.Tensor, no_food: torch.Tensor | None) -> None:
    """Write each game's food cell ``at`` in the flattened observations ``flat``: 1.0, or 0.0 where
    ``no_food`` (a won game). ``index_fill_`` / ``index_copy_``: compiled, written in place."""
    if no_food is None:
        flat.index_fill_(0, at, 1.0)
    else:
        flat.index_copy_(0, at, (~no_food).to(flat.dtype))


@torch.library.custom_op("rlgpu_helpers::flood_fill", mutates_args=())
def _opaque_flood_fill(reach: torch.Tensor, free: torch.Tensor, rounds: int, pitch: int) -> torch.Tensor:
    """``flood_fill`` as an operator ``torch.compile`` calls but does not look into (see ``_space_shares``)."""
    return flood_fill(reach, free, rounds, pitch)


@_opaque_flood_fill.register_fake
def _(reach, free, rounds, pitch):
    return torch.empty_like(reach)


class VecSnakeObservations:
    """The observations of ``VecSnake``'s games, built from its state and tables (a part of ``VecSnake``)."""

    def observe(self) -> torch.Tensor:
        """The current observation of every game (what the last ``step``/``reset`` returned)."""
        return self._observe()

    def _build_ego_tables(self):
        """``[direction, window cell]`` -> the row and column change from the head to the board
        cell an ``"ego_grid"`` observation shows there (the inverse of ``rules.ego_cell``).

        A window cell ``k`` rows above the centre is ``k`` steps ahead, ``k`` columns right of it
        ``k`` steps to the snake's right: board change = ``ahead * k_up + right * k_right``.
        """
        size = rules.ego_size(self.height, self.width)
        k = torch.arange(size) - size // 2
        up, right = (-k)[:, None].expand(size, size), k[None, :].expand(size, size)
        d_row, d_col = [], []
        for direction in range(4):
            ahead, side = rules.DIRECTION_DELTAS[direction], rules.DIRECTION_DELTAS[(direction + 1) % 4]
            d_row.append((up * ahead[0] + right * side[0]).reshape(-1))
            d_col.append((up * ahead[1] + right * side[1]).reshape(-1))
        self._ego_size = size
        self._ego_d_row = torch.stack(d_row).to(dtype=self._small, device=self.device)  # (4, size * size)
        self._ego_d_col = torch.stack(d_col).to(dtype=self._small, device=self.device)
        # [direction] -> (ahead row, ahead col, right row, right col): places one cell (the food) in the window.
        frame = [rules.DIRECTION_DELTAS[d] + rules.DIRECTION_DELTAS[(d + 1) % 4] for d in range(4)]
        self._ego_frame = torch.tensor(frame, dtype=self._small, device=self.device)
        start = SnakeState(rules.start_body(self.height, self.width), rules.RIGHT, None)
        self._start_ego = torch.from_numpy(rules.observe(start, self.height, self.width, "ego_grid")).to(self.device)

    def _observe(self) -> torch.Tensor:
        """The observation of every game."""
        if self.obs_type == "grid":
            return self._observe_grid(self._grid_food_at())
        if self.obs_type == "ego_grid":
            return self._observe_ego_grid(self._ego_food_at())
        features = self._observe_features(self._danger_code())
        return self._with_space(features, self._space_shares()) if self.obs_type == "features_reach" else features

    def _space_shares(self) -> torch.Tensor:
        """``rules.space_shares`` of every game, (N, 3): a flood fill of ``rules.reach_moves`` rounds.

        Free cells are those whose stamp is at most the tail's (walls hold a huge stamp), but the
        head (within a step its stamp is written later, by ``_restart``). The fill
        starts on the cell ahead after each move (nothing, where that cell is blocked) and grows
        one cell in the 4 directions per round: in the bordered layout that is a shift of the
        flattened grid by 1 or by a row, and a wall stops it, so no bounds are checked.
        """
        N, P = self.num_envs, self._pitch
        stamps = self._stamp.view(N, -1)
        free = (stamps <= (self._clock - self._length + 1).to(torch.int32)[:, None]).to(torch.uint8)
        free.scatter_(1, self._head[:, None].to(torch.int64), 0)  # in a step, the new head has no stamp yet
        free = free[:, None, :]  # (N, 1, C)
        ahead = self._head[:, None] + self._ahead.index_select(0, self._direction)  # (N, 3) cells
        reach = torch.zeros(N, rules.NUM_ACTIONS, stamps.shape[1], dtype=torch.uint8, device=self.device)
        reach.scatter_(2, ahead[:, :, None].to(torch.int64), 1).bitwise_and_(free)
        # Fused into the compiled step, Inductor's CPU code for these rounds took 84 ms a step of 512
        # games against eager's 1.3 (2-core EPYC, torch 2.13): compiled on a CPU, the fill is an
        # operator the compiler leaves alone. On a GPU the compiler gets it (the GPU sweep measures).
        opaque = torch.compiler.is_compiling() and self.device.type == "cpu"
        fill = _opaque_flood_fill if opaque else flood_fill
        reach = fill(reach, free, rules.reach_moves(self.height, self.width), P)
        reached = reach.sum(2, dtype=torch.int32).to(torch.float32)
        return reached / (self._cells - self._length + 1).to(torch.float32)[:, None]

    def _with_space(self, features: torch.Tensor, space: torch.Tensor) -> torch.Tensor:
        """A ``"features_reach"`` observation: the features, the space of each move, the length."""
        length = (self._length.to(torch.float32) / self._cells)[:, None]
        return torch.cat([features, space, length], 1)

    def _danger_code(self) -> torch.Tensor:
        """Danger straight/right/left as bits 0/1/2: a wall, or a body cell other than the tail.

        The tail's stamp is clock - length + 1, so "body but not tail" is stamp > that.
        """
        head_at = self._stamp_at + self._head  # flat index of each head
        ahead = head_at[:, None] + self._ahead.index_select(0, self._direction)  # (N, 3)
        stamps = self._stamp.index_select(0, ahead.view(-1))
        danger = stamps.view(-1, 3) > (self._clock - self._length + 1)[:, None]
        return (danger.to(torch.uint8) * self._danger_weights).sum(1, dtype=self._small)

    def _observe_features(self, danger_code: torch.Tensor, no_food: torch.Tensor | None = None):
        """One row lookup per game in the table of every possible features observation."""
        # Where the food is: the signs of its row and column offsets from the head (3 x 3), or
        # "no food" (code 9).
        d_row = torch.sign(self._row_of.index_select(0, self._food) - self._row_of.index_select(0, self._head))
        d_col = torch.sign(self._col_of.index_select(0, self._food) - self._col_of.index_select(0, self._head))
        food_code = (d_row + 1) * 3 + (d_col + 1)
        if no_food is not None:
            food_code = food_code.masked_fill_(no_food, 9)
        return self._features.index_select(0, (self._direction * 10 + food_code) * 8 + danger_code)

    def _observe_grid(self, food_at: torch.Tensor, no_food: torch.Tensor | None = None):
        """``rules``' ``"grid"``, with each game's food cell ``food_at`` from ``_grid_food_at`` (the
        step needs it again to move the food: computed once, eagerly a few launches fewer)."""
        N, H, W, cells = self.num_envs, self.height, self.width, self._cells
        # Body: remaining lifetime stamp - (clock - length), 1..length, over length; 0 elsewhere.
        # Computed over each game's whole contiguous block (walls included, then dropped): on
        # a CPU, broadcasting over the strided inside view is several times slower. Subtract in
        # int32 (walls stay below 2**31), then work in float32; division, not a reciprocal multiply,
        # so the values are the correctly rounded (length - i) / length of the rules.
        life = (self._stamp.view(N, -1) - (self._clock - self._length).to(torch.int32)[:, None]).to(torch.float32)
        life.clamp_(min=0.0).div_(self._length.to(torch.float32)[:, None])
        # The body channel between two channels of zeros, in one op: compiled, three slice assignments
        # into an empty tensor were three passes, the first into a temporary. A cat, not a pad: then
        # torch 2.11's Inductor writes head and food in place, where after a pad it copied it first.
        body = life.view(N, self._rows, self._pitch)[:, None, 1 : H + 1, :W]
        # A fresh 0-d zero, not one kept on the env: compiled, it is a constant in the cat's loop; a kept
        # one is an input loaded every step (on a CPU, torch 2.13: a step 4-13% slower).
        zeros = torch.zeros((), device=self.device).expand(N, 1, H, W)
        obs = torch.cat([zeros, body, zeros], 1)
        # Head and food: one 1.0 each, written through a flat view.
        flat = obs.view(-1)
        at = self._grid_obs_at
        head = self._row_of.index_select(0, self._head) * W + self._col_of.index_select(0, self._head)
        # index_fill_ / index_copy_, not scatter_: compiled, Inductor writes them in place into the
        # cat (a scatter_ into it copies the whole observation first; into the lerp of _restarted,
        # _move_food's does not), and eagerly they are no slower.
        flat.index_fill_(0, at + head, 1.0)
        flat.index_fill_(0, at + cells + head, 1.0)  # the head's own stamp may not be written yet
        _put_food(flat, at + food_at, no_food)
        return obs

    def _observe_ego_grid(self, food_at: torch.Tensor, no_food: torch.Tensor | None = None):
        """``rules``' ``"ego_grid"``: each window cell reads one board cell, chosen by the head and
        heading; the food's cell ``food_at`` comes from ``_ego_food_at``, as in ``_observe_grid``.

        The window cell's board row and column are the head's plus ``_ego_d_row`` / ``_ego_d_col``
        of the heading; cells off the board read a wall (index 0 of the bordered grid) and are
        masked. One ``index_select`` of the stamps gives the body's remaining lifetimes.
        """
        N, H, W, S = self.num_envs, self.height, self.width, self._ego_size
        rows = self._row_of.index_select(0, self._head)[:, None] + self._ego_d_row.index_select(0, self._direction)
        cols = self._col_of.index_select(0, self._head)[:, None] + self._ego_d_col.index_select(0, self._direction)
        off_board = (rows < 0) | (rows >= H) | (cols < 0) | (cols >= W)  # (N, S * S)
        cells = torch.where(off_board, 0, (rows + 1) * self._pitch + cols).add_(self._stamp_at[:, None])
        stamps = self._stamp.index_select(0, cells.view(-1)).view(N, -1)
        # As in _observe_grid: remaining lifetime over length, in int32 then float32, divided.
        life = (stamps - (self._clock - self._length).to(torch.int32)[:, None]).to(torch.float32)
        life.clamp_(min=0.0).div_(self._length.to(torch.float32)[:, None]).masked_fill_(off_board, 0.0)
        life[:, (S // 2) * S + S // 2] = 1.0  # the head: its stamp may not be written yet in a step
        # The three channels in one op, as in _observe_grid (compiled, slice assignments made temporaries).
        no_food_yet = torch.zeros((), device=self.device).expand(N, S * S)
        obs = torch.stack([life, no_food_yet, off_board.to(torch.float32)], 1)
        _put_food(obs.view(-1), self._ego_obs_at + food_at, no_food)
        return obs.view(N, 3, S, S)

    def _ego_food_at(self) -> torch.Tensor:
        """Where each game's food is in its flattened ego_grid observation (the food channel), int64."""
        S = self._ego_size
        d_row = self._row_of.index_select(0, self._food) - self._row_of.index_select(0, self._head)
        d_col = self._col_of.index_select(0, self._food) - self._col_of.index_select(0, self._head)
        frame = self._ego_frame.index_select(0, self._direction)
        ahead = d_row * frame[:, 0] + d_col * frame[:, 1]
        right = d_row * frame[:, 2] + d_col * frame[:, 3]
        return (S * S + (S // 2 - ahead) * S + (S // 2 + right)).to(torch.int64)

    def _next_ego_grid(self, final_obs: torch.Tensor, done: torch.Tensor, old_food: torch.Tensor) -> torch.Tensor:
        """The ego_grid observation after restarts and new food, patched from ``final_obs`` as ``_next_grid`` does.

        A game that goes on keeps its head and heading, so its window shows what ``final_obs``
        shows but the food; a restarted game shows the start window.
        """
        obs = _restarted(final_obs, self._start_ego, done)
        _move_food(obs.view(self.num_envs, -1), old_food, self._ego_food_at())
        return obs

    def _grid_food_at(self) -> torch.Tensor:
        """Where each game's food is in its flattened grid observation (the food channel), int64."""
        row, col = self._row_of.index_select(0, self._food), self._col_of.index_select(0, self._food)
        return (2 * self._cells + row * self.width + col).to(torch.int64)

    def _next_grid(self, final_obs: torch.Tensor, done: torch.Tensor, old_food: torch.Tensor) -> torch.Tensor:
        """The grid observation after restarts and new food, patched from ``final_obs``.

        A game that goes on has the same head and body as in its last observation (the head's
        stamp, written since, gives the 1.0 ``final_obs`` already shows); a restarted game has
        the start grid. Only the food moves: cleared where it was, set where it is now.
        """
        obs = _restarted(final_obs, self._start_grid, done)
        _move_food(obs.view(self.num_envs, -1), old_food, self._grid_food_at())
        return obs
