"""``VecSnake``: N games of Snake as tensors on any torch device (notebooks 03 and 04).

The rules are those of ``rules.py`` and ``SnakeEnv``; only the bookkeeping differs, chosen so
that one step costs a fixed, small number of tensor operations over the N games and never waits
for the device:

* The grid is stored with a border: ``(H + 2) x (W + 1)`` cells per game, the extra top and
  bottom rows and the extra column (which is also the left neighbour of the next row's first
  cell) being walls. A move is then ``head + offset[direction]``, and a wall is just a cell that
  is always occupied: no bounds checks, no clamping.
* ``stamp[n, cell]`` is the time at which game n's head entered ``cell``. With ``clock[n]`` the
  time of the last move and ``length[n]`` the snake's length, a cell is body exactly when
  ``stamp > clock - length``. Moving writes one stamp; growing is ``length += 1`` (the tail's
  stamp stays inside the window); the tail leaves the window by itself. Walls hold a huge stamp.
  A new game jumps the clock past every old stamp, so nothing is ever cleared.
* ``ring[n, t % (H*W)]`` remembers which cell the head entered at time t; it gives the tail.
* ``row_free[n, r]`` counts the empty cells of each row. Food goes on a uniformly random empty
  cell in two small steps: the row from a running sum over H counts, then the cell from a running
  sum over that row's W cells, O(H + W) per game instead of O(H * W).
* Randomness comes from a counter-based hash of (seed, game, step counter) made of integer tensor
  ops: no ``torch.Generator`` (which ``torch.compile(fullgraph=True)`` and CUDA graphs cannot
  take), and the same seed gives the same games on every device.
* Every choice is ``torch.where`` or ``masked_fill_``, every read ``index_select`` and every
  write ``scatter_`` on a flat view (on a CPU, ``index_select`` is faster than ``gather`` and
  ``scatter_`` two to three times faster than ``index_put_``). A game whose state must not change
  (a dead snake, a game that is not restarting) rewrites its own head with the values it already
  has: repeated indices always carry the same value, so the order of the writes cannot matter.
  No ``.item()``, no Python ``if`` on a tensor, no boolean-mask indexing, no ``nonzero``:
  ``step`` never synchronizes with a GPU (the sync audit of ``gpu.sync`` proves it in a test).
* Actions are checked without a sync too (``gpu.sync.DeferredCheck``): a step given an action
  outside 0..2 moves no game at all, and the env stays frozen until the error is raised, which
  happens as soon as the host sees the device's note: at once on a CPU, within a step or two on
  a GPU. So a bad action is never silently turned into a heading. Loops that only make valid
  actions can switch the check off (``check_action_values=False``), which also makes ``step``
  capturable in a CUDA graph.

Finished games restart inside the same step (gymnasium's ``AutoresetMode.SAME_STEP``): the
observation returned for them is the first of the next game, and ``info`` holds the last one
(``"final_obs"``) and the finished game's score, length and outcome (``"episode"``), each with a
``"_final_obs"`` / ``"_episode"`` mask.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core.checks import check_bool, check_int, check_seed
from ..core.device import available_memory, check_fits, get_device, retain_freed_memory
from ..gpu.sync import DeferredCheck
from . import rules
from .rules import SnakeState

_MASK32 = 0xFFFFFFFF
_WALL_STAMP = 1 << 62  # the stamp of the "off the grid" column: always body


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (C. Wellons' "lowbias32", constants from its 2022 revision).

    Works on int64 tensors holding 0..2**32-1. Both multipliers are below 2**31, so every
    product stays below 2**63: exact in int64 on every device, no overflow.
    """
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def _describe_bad_action(index: int, value: int, steps_ago: int) -> str:
    when = "this step" if steps_ago == 0 else f"the step {steps_ago} call(s) before this one"
    return (f"actions[{index}] = {value} is not a valid action (0 straight, 1 right, 2 left): "
            f"{when} was given it, and no game has moved since (the state is as it was)")


def _start_grid(height: int, width: int) -> torch.Tensor:
    """The grid observation of a new game before its food is placed (the rules' start body)."""
    body = rules.start_body(height, width)
    return torch.from_numpy(rules.observe(SnakeState(body, rules.RIGHT, None), height, width, "grid"))


def _feature_table() -> torch.Tensor:
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


@torch.library.custom_op("rlgpu_helpers::flood_fill", mutates_args=())
def _opaque_flood_fill(reach: torch.Tensor, free: torch.Tensor, rounds: int, pitch: int) -> torch.Tensor:
    """``flood_fill`` as an operator ``torch.compile`` calls but does not look into (see ``_space_shares``)."""
    return flood_fill(reach, free, rounds, pitch)


@_opaque_flood_fill.register_fake
def _(reach, free, rounds, pitch):
    return torch.empty_like(reach)


def check_action_tensor(actions, num_envs: int, device: torch.device) -> None:
    """Refuse actions that are not an integer tensor of shape ``(num_envs,)`` on ``device``.

    Reads only the tensor's type, shape, dtype and device (never its values), so it costs no
    host-device synchronization; the values are checked on the device (``gpu.sync.DeferredCheck``).
    """
    if not isinstance(actions, torch.Tensor):
        raise TypeError(f"actions must be a torch.Tensor on {device}, got {type(actions).__name__}")
    if actions.shape != (num_envs,):
        raise ValueError(f"actions must have shape ({num_envs},), got {tuple(actions.shape)}")
    if actions.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"actions must be an integer tensor, got dtype {actions.dtype}")
    if actions.device != device:
        raise ValueError(f"actions must be on {device}, got {actions.device}")


def bytes_per_game(height: int, width: int, obs_type: str) -> int:
    """About the memory one game of ``VecSnake`` takes: its state, and one step's observations and
    largest temporaries (for an error that says how much ``num_envs`` needs, before allocating)."""
    cells = (height + 2) * (width + 1)  # the bordered grid
    ring = 1 << (height * width - 1).bit_length()
    state = cells * 8 + ring * 8 + height * 8 * 2 + 16 * 8  # stamps, ring, row counts, per-game numbers
    obs = 4 * int(np.prod(rules.observation_shape(obs_type, height, width)))
    window = rules.ego_size(height, width) ** 2
    temporaries = {"grid": cells * 12, "features_reach": cells * 10, "ego_grid": window * 40}.get(obs_type, 64)
    return state + 2 * obs + temporaries


class VecSnake(VectorEnv):
    """``num_envs`` games of Snake stepped together as tensors on ``device``.

    Args:
        num_envs: number of games N; refused, naming the bytes needed and available, where N games
            cannot fit in the device's memory (``bytes_per_game``), before anything is allocated.
        height, width: grid size, each 4..64.
        obs_type: ``"features"`` (N, 11), ``"grid"`` (N, 3, H, W), ``"features_reach"`` (N, 15) or
            ``"ego_grid"`` (N, 3, S, S), ``S = rules.ego_size(H, W)``, float32, see ``rules``.
        max_steps_without_food: truncation limit, default ``height * width``, at most
            ``rules.MAX_STEPS_LIMIT`` (the steps since food are counted in int32).
        device: any torch device; every tensor in and out lives there.
        seed: seed of the food placement; ``reset(seed=...)`` re-seeds.
        check_action_values: check that every action is 0, 1 or 2, without a host sync: a step
            with a bad action moves no game, and its ``ValueError`` comes from that ``step``
            call on a CPU, from one of the next calls on a GPU (see the module docstring).

    ``step(actions)`` takes an int64 (or int32) tensor of shape (N,) on ``device`` and returns
    ``(obs, reward, terminated, truncated, info)``: float32 rewards, bool flags, tensors on
    ``device``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int,
        height: int = 10,
        width: int = 10,
        obs_type: str = "features",
        max_steps_without_food: int | None = None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        check_action_values: bool = True,
    ):
        num_envs = check_int("num_envs", num_envs)
        self.height, self.width = rules.check_grid_size(height, width)
        self.obs_type = rules.check_obs_type(obs_type)
        self.max_steps_without_food = rules.check_max_steps_without_food(
            max_steps_without_food, self.height, self.width
        )
        self.num_envs = int(num_envs)
        self.device = get_device(device, param="device")
        check_fits("num_envs", self.num_envs, self.num_envs * bytes_per_game(self.height, self.width, self.obs_type),
                   available_memory(self.device), f"{self.device} memory")
        if self.device.type == "cpu":
            retain_freed_memory()  # see its docstring: avoids a page fault storm every step
        self.check_action_values = check_bool("check_action_values", check_action_values)
        self._bad_actions = DeferredCheck(self.device, _describe_bad_action)
        self.render_mode = None

        obs_shape = rules.observation_shape(self.obs_type, self.height, self.width)
        self.single_observation_space = spaces.Box(0.0, 1.0, obs_shape, dtype=np.float32)
        self.single_action_space = spaces.Discrete(rules.NUM_ACTIONS)

        self._build_tables()
        self._allocate_state()
        self.reset(seed=seed)

    # The batched spaces hold arrays of N times the single shape; build them only if asked.
    @property
    def observation_space(self) -> spaces.Space:
        if getattr(self, "_observation_space", None) is None:
            self._observation_space = batch_space(self.single_observation_space, self.num_envs)
        return self._observation_space

    @property
    def action_space(self) -> spaces.Space:
        if getattr(self, "_action_space", None) is None:
            self._action_space = batch_space(self.single_action_space, self.num_envs)
        return self._action_space

    # ------------------------------------------------------------------ set-up

    def _build_tables(self):
        """The bordered layout and small lookup tables, so a step looks up instead of branching."""
        H, W = self.height, self.width
        P = W + 1  # row pitch: W cells and one wall
        self._pitch, self._rows, self._cells = P, H + 2, H * W
        # Small integers (cells, rows, headings, counts, flat indices) are int32: half the bytes
        # of int64, so more of each operation's data stays in cache. Only times (stamps and the
        # clock) need int64. Flat indices grow with N; past 2**31 they switch to int64.
        self._small = torch.int32 if self.num_envs * (H + 2) * P * 3 < 2**31 else torch.int64
        small = dict(dtype=self._small, device=self.device)
        padded = torch.arange((H + 2) * P)
        self._row_of = (padded // P - 1).to(**small)  # [padded cell] -> row (-1 / H on the border)
        self._col_of = (padded % P).to(**small)
        # Offsets of one step up, right, down, left in the bordered layout.
        offsets = torch.tensor([dr * P + dc for dr, dc in rules.DIRECTION_DELTAS])
        self._offset = offsets.to(**small)
        turned = torch.tensor([[rules.turn(d, a) for a in range(rules.NUM_ACTIONS)] for d in range(4)])
        self._turned = turned.reshape(-1).to(**small)  # [direction * 3 + action] -> direction
        self._ahead = offsets[turned].to(**small)  # [direction] -> offsets straight / right / left
        self._features = _feature_table().to(self.device)
        self._danger_weights = torch.tensor([1, 2, 4], dtype=torch.uint8, device=self.device)
        start = [self._padded(r, c) for r, c in rules.start_body(H, W)]
        self._start_cells = torch.tensor(start, **small)  # head first
        self._start_age = torch.arange(rules.START_LENGTH, device=self.device)  # head 0 ... tail 2
        self._start_head = start[0]
        self._start_grid = _start_grid(H, W).to(self.device)
        self._build_ego_tables()
        start_state = SnakeState(rules.start_body(H, W), rules.RIGHT, None)
        self._start_space = torch.from_numpy(rules.space_shares(start_state, H, W)).to(self.device)
        start_free = torch.full((H,), W)
        for r, _ in rules.start_body(H, W):
            start_free[r] -= 1
        # One copy per game: on a CPU, torch.where over contiguous inputs is much faster than
        # broadcasting one row to all N games.
        self._start_row_free = start_free.to(**small).expand(self.num_envs, H).contiguous()
        # The ring's length is a power of two >= H * W, so a time's slot is ``time & mask``
        # (a modulo costs several times more).
        self._ring_size = 1 << (H * W - 1).bit_length()
        self._ring_mask = self._ring_size - 1

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

    def _padded(self, row: int, col: int) -> int:
        return (row + 1) * self._pitch + col

    def _allocate_state(self):
        """Every piece of state is a tensor updated in place (what CUDA graphs need)."""
        N, H, dev = self.num_envs, self.height, self.device
        i64 = dict(dtype=torch.int64, device=dev)
        small = dict(dtype=self._small, device=dev)
        self._stamp = torch.full((N, self._rows, self._pitch), _WALL_STAMP, **i64)
        self._stamp[:, 1 : H + 1, : self.width] = 0
        self._ring = torch.zeros(N, self._ring_size, **small)
        self._row_free = torch.zeros(N, H, **small)
        # Offsets of each game's block in the flat views used by index_select / scatter_.
        game = torch.arange(N, **small)
        self._stamp_at = game * (self._rows * self._pitch)
        self._ring_at = game * self._ring_size
        self._row_free_at = game * H
        self._first_row = game * self._rows  # index of each game's top wall row
        self._grid_obs_at = torch.arange(N, device=dev) * (3 * self._cells)  # of each grid observation
        self._ego_obs_at = torch.arange(N, device=dev) * (3 * self._ego_size**2)  # of each ego_grid observation
        self._clock = torch.zeros(N, **i64)
        self._length = torch.zeros(N, **small)
        self._head = torch.zeros(N, **small)
        self._direction = torch.zeros(N, **small)
        self._food = torch.zeros(N, **small)
        self._steps_since_food = torch.zeros(N, **small)  # < max_steps_without_food <= rules.MAX_STEPS_LIMIT
        self._episode_steps = torch.zeros(N, **i64)  # up to (H * W - 2) * max_steps_without_food
        self._counter = torch.zeros((), **i64)
        self._env_keys = torch.zeros(N, **i64)  # the hash works in int64

    # ------------------------------------------------------------------ randomness

    def _seed(self, seed: int | None):
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        seed = check_seed("seed", seed)
        halves = _hash32(torch.tensor([seed & _MASK32, (seed >> 32) & _MASK32]))
        base = int(_hash32(halves[:1] ^ _hash32(halves[1:] + 1)).item())
        index = torch.arange(self.num_envs, dtype=torch.int64)
        keys = _hash32(_hash32((index * 0x9E3779B9) & _MASK32) ^ base)
        self._env_keys.copy_(keys)
        self._counter.zero_()

    def _random_below(self, n: torch.Tensor, advance: torch.Tensor | None = None) -> torch.Tensor:
        """One integer uniform in 0..n-1 per game (n >= 1), fresh on every call.

        32 random bits times n, shifted down 32 bits (Lemire's multiply-shift): exact integer
        arithmetic, n <= 4096 keeps the product below 2**45, the bias is at most n / 2**32.
        ``advance`` (a 0-d bool) set to False leaves the random stream where it was (a frozen step).
        """
        self._counter.add_(1 if advance is None else advance)
        bits = _hash32(self._env_keys ^ _hash32(self._counter & _MASK32))
        return (bits * n) >> 32

    # ------------------------------------------------------------------ API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start every game afresh; ``seed`` re-seeds the food placement."""
        if options:
            raise ValueError(f"options={options!r}: VecSnake.reset takes no options")
        self._bad_actions.raise_if_failed()
        if seed is not None or not hasattr(self, "_seeded"):
            self._seed(seed)
            self._seeded = True
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._restart(everyone)
        self._place_food(everyone)
        return self._observe(), {}

    def step(self, actions: torch.Tensor):
        """Advance every game one step; see the class docstring for what comes back."""
        check_action_tensor(actions, self.num_envs, self.device)
        if not self.check_action_values:
            return self.step_tensors(actions)
        self._bad_actions.raise_if_failed()  # an earlier step's bad action, once the host has the note
        safe = actions.clamp(0, rules.NUM_ACTIONS - 1)
        frozen = self._bad_actions.record(safe != actions, actions)
        outputs = self.step_tensors(safe, frozen)
        self._bad_actions.raise_if_failed()  # this step's, where the host has the note at once (a CPU)
        return outputs

    def step_tensors(self, actions: torch.Tensor, frozen: torch.Tensor | None = None):
        """The step itself: no host synchronization. ``frozen`` (a 0-d bool) stops every game."""
        stamps, ring, row_free = self._stamp.view(-1), self._ring.view(-1), self._row_free.view(-1)
        direction = self._turned.index_select(0, self._direction * rules.NUM_ACTIONS + actions)
        new_head = self._head + self._offset.index_select(0, direction)
        ate = new_head == self._food
        stamp_there = stamps.index_select(0, self._stamp_at + new_head)
        # After the move, body is stamp > clock + 1 - new length: the tail's cell is free unless
        # the snake eats (then the tail stays). Walls are always body.
        dead = stamp_there > self._clock + 1 - (self._length + ate)
        if frozen is not None:  # a frozen step: nobody eats, dies or moves
            moves = ~frozen
            ate &= moves
            dead &= moves
            alive = moves & ~dead
        else:
            alive = ~dead
        tail_slot = (self._clock - self._length + 1) & self._ring_mask
        tail = ring.index_select(0, self._ring_at + tail_slot)

        # Move the living; a dead game keeps its state. The new head's stamp and ring slot are
        # written by _restart, together with the start cells of restarting games.
        self._clock.add_(alive)
        self._length.add_(ate)  # eating implies alive: food is never on the body
        torch.where(alive, new_head, self._head, out=self._head)
        torch.where(alive, direction, self._direction, out=self._direction)
        # Empty cells per row: the head's row loses one, the row the tail left gains one.
        entered, left = -alive.to(self._small), (alive & ~ate).to(self._small)
        row_free.index_add_(0, self._row_free_at + self._row_of.index_select(0, self._head), entered)
        row_free.index_add_(0, self._row_free_at + self._row_of.index_select(0, tail), left)
        self._steps_since_food.add_(alive).masked_fill_(ate, 0)
        self._episode_steps.add_(1 if frozen is None else moves)

        won = ate & (self._length == self._cells)
        terminated = dead | won
        truncated = (self._steps_since_food >= self.max_steps_without_food) & ~terminated
        reward = ate.to(torch.float32) - dead.to(torch.float32)
        done = terminated | truncated
        # The last observation of every game, before restarts and new food. The danger bits
        # carry over to the next observation: new food changes none, and a restarted snake
        # sees none (the start position is clear on every grid size).
        if self.obs_type == "grid":
            final_obs = self._observe_grid(no_food=won)
            old_food = self._grid_food_at()
        elif self.obs_type == "ego_grid":
            final_obs = self._observe_ego_grid(no_food=won)
            old_food = self._ego_food_at()
        else:
            danger = self._danger_code()
            final_obs = self._observe_features(danger, no_food=won)
            if self.obs_type == "features_reach":  # food and restarts leave the space of the others as it is
                space = self._space_shares()
                final_obs = self._with_space(final_obs, space)
        info = {
            "final_obs": final_obs,
            "_final_obs": done,
            "episode": {
                "score": self._length - rules.START_LENGTH,
                "length": self._episode_steps.clone(),
                "won": won,
            },
            "_episode": done,
        }
        self._restart(done)
        self._place_food(done | (ate & ~won), None if frozen is None else moves)
        if self.obs_type == "grid":
            obs = self._next_grid(final_obs, done, old_food)
        elif self.obs_type == "ego_grid":
            obs = self._next_ego_grid(final_obs, done, old_food)
        else:
            obs = self._observe_features(danger.masked_fill_(done, 0))
            if self.obs_type == "features_reach":
                obs = self._with_space(obs, torch.where(done[:, None], self._start_space, space))
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ internals

    def _restart(self, done: torch.Tensor):
        """Put the games flagged in ``done`` back at the start (food is placed separately).

        Also commits every game's head to the grid: restarting games write their 3 start cells,
        the others write their head (moved this step, or unchanged if dead) three times. A
        restarting game skips its last move's write: the clock jump hides that cell anyway.
        """
        # Jump the clock by 3: every old stamp (<= old clock) falls out of the window
        # (new clock - 3, new clock] of the new 3-cell snake, so nothing needs clearing.
        self._clock.add_(done, alpha=rules.START_LENGTH)
        self._length.masked_fill_(done, rules.START_LENGTH)
        self._head.masked_fill_(done, self._start_head)
        self._direction.masked_fill_(done, rules.RIGHT)
        self._steps_since_food.masked_fill_(done, 0)
        self._episode_steps.masked_fill_(done, 0)
        torch.where(done[:, None], self._start_row_free, self._row_free, out=self._row_free)
        at = done[:, None]
        cells = torch.where(at, self._start_cells, self._head[:, None])  # (N, 3)
        times = self._clock[:, None] - torch.where(at, self._start_age, 0)
        at = (cells + self._stamp_at[:, None]).view(-1).to(torch.int64)
        self._stamp.view(-1).scatter_(0, at, times.view(-1))
        slots = (times & self._ring_mask).add_(self._ring_at[:, None])
        self._ring.view(-1).scatter_(0, slots.view(-1), cells.view(-1))

    def _place_food(self, need: torch.Tensor, advance: torch.Tensor | None = None):
        """Put food on a uniformly random empty cell of every game flagged in ``need``."""
        # The r-th empty cell, counting row by row, with r uniform in 0..free-1. First its row:
        # the number of rows whose running count of empty cells is <= r.
        r = self._random_below(self._cells - self._length, advance).to(self._small)
        before = self._row_free.cumsum(1, dtype=self._small)  # empty cells in rows 0..i
        row = (before <= r[:, None]).to(torch.uint8).sum(1, dtype=torch.uint8)  # H <= 64 fits
        row = row.to(self._small).clamp_(max=self.height - 1)  # clamp: games that need no food
        at = self._row_free_at + row
        k = r - before.view(-1).index_select(0, at) + self._row_free.view(-1).index_select(0, at)
        # Then the k-th empty cell of that row. Games that need no food read one shared wall
        # row instead of their own (cheap: it stays in cache); their result is discarded.
        which = torch.where(need, self._first_row + 1 + row, 0)
        cells = self._stamp.view(-1, self._pitch).index_select(0, which)  # (N, W + 1)
        empty = cells <= (self._clock - self._length)[:, None]  # the wall column is never empty
        running = empty.to(torch.uint8).cumsum(1, dtype=torch.uint8)  # W <= 64 fits
        # The number of cells whose running count is <= k: a binary search in each game's row.
        col = torch.searchsorted(running, k.to(torch.uint8)[:, None], right=True, out_int32=True)
        col = col.view(-1).to(self._small).clamp_(max=self.width - 1)
        torch.where(need, ((row + 1) * self._pitch + col).to(self._small), self._food, out=self._food)

    def _observe(self) -> torch.Tensor:
        """The observation of every game."""
        if self.obs_type == "grid":
            return self._observe_grid()
        if self.obs_type == "ego_grid":
            return self._observe_ego_grid()
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
        free = (stamps <= (self._clock - self._length + 1)[:, None]).to(torch.uint8)
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
        stamps = self._stamp.view(-1).index_select(0, ahead.view(-1))
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

    def _observe_grid(self, no_food: torch.Tensor | None = None):
        N, H, W, cells = self.num_envs, self.height, self.width, self._cells
        obs = torch.empty(N, 3, H, W, dtype=torch.float32, device=self.device)
        # Body: remaining lifetime stamp - (clock - length), 1..length, over length; 0 elsewhere.
        # Computed over each game's whole contiguous block (walls included, then dropped): on
        # a CPU, broadcasting over the strided inside view is several times slower. Subtract in
        # int64 (stamps are large), then work in float32; division, not a reciprocal multiply,
        # so the values are the correctly rounded (length - i) / length of the rules.
        life = (self._stamp.view(N, -1) - (self._clock - self._length)[:, None]).to(torch.float32)
        life.clamp_(min=0.0).div_(self._length.to(torch.float32)[:, None])
        obs[:, 1] = life.view(N, self._rows, self._pitch)[:, 1 : H + 1, :W]
        # Head and food: one 1.0 each, written through a flat view.
        obs[:, 0] = 0.0
        obs[:, 2] = 0.0
        flat = obs.view(-1)
        at = self._grid_obs_at
        head = self._row_of.index_select(0, self._head) * W + self._col_of.index_select(0, self._head)
        food = self._row_of.index_select(0, self._food) * W + self._col_of.index_select(0, self._food)
        flat.scatter_(0, at + head, 1.0)
        flat.scatter_(0, at + cells + head, 1.0)  # the head's own stamp may not be written yet
        if no_food is None:
            flat.scatter_(0, at + 2 * cells + food, 1.0)
        else:
            flat.scatter_(0, at + 2 * cells + food, (~no_food).to(torch.float32))
        return obs

    def _observe_ego_grid(self, no_food: torch.Tensor | None = None):
        """``rules``' ``"ego_grid"``: each window cell reads one board cell, chosen by the head and heading.

        The window cell's board row and column are the head's plus ``_ego_d_row`` / ``_ego_d_col``
        of the heading; cells off the board read a wall (index 0 of the bordered grid) and are
        masked. One ``index_select`` of the stamps gives the body's remaining lifetimes.
        """
        N, H, W, S = self.num_envs, self.height, self.width, self._ego_size
        rows = self._row_of.index_select(0, self._head)[:, None] + self._ego_d_row.index_select(0, self._direction)
        cols = self._col_of.index_select(0, self._head)[:, None] + self._ego_d_col.index_select(0, self._direction)
        off_board = (rows < 0) | (rows >= H) | (cols < 0) | (cols >= W)  # (N, S * S)
        cells = torch.where(off_board, 0, (rows + 1) * self._pitch + cols).add_(self._stamp_at[:, None])
        stamps = self._stamp.view(-1).index_select(0, cells.view(-1)).view(N, -1)
        obs = torch.empty(N, 3, S * S, dtype=torch.float32, device=self.device)
        # As in _observe_grid: remaining lifetime over length, in int64 then float32, divided.
        life = (stamps - (self._clock - self._length)[:, None]).to(torch.float32)
        obs[:, 0] = life.clamp_(min=0.0).div_(self._length.to(torch.float32)[:, None]).masked_fill_(off_board, 0.0)
        obs[:, 0, (S // 2) * S + S // 2] = 1.0  # the head: its stamp may not be written yet in a step
        obs[:, 1] = 0.0
        obs[:, 2] = off_board
        food = 1.0 if no_food is None else (~no_food).to(torch.float32)
        obs.view(-1).scatter_(0, self._ego_food_at(), food)
        return obs.view(N, 3, S, S)

    def _ego_food_at(self) -> torch.Tensor:
        """Where each game's food is in the flattened ego_grid observations (the food channel)."""
        S = self._ego_size
        d_row = self._row_of.index_select(0, self._food) - self._row_of.index_select(0, self._head)
        d_col = self._col_of.index_select(0, self._food) - self._col_of.index_select(0, self._head)
        frame = self._ego_frame.index_select(0, self._direction)
        ahead = d_row * frame[:, 0] + d_col * frame[:, 1]
        right = d_row * frame[:, 2] + d_col * frame[:, 3]
        return self._ego_obs_at + S * S + (S // 2 - ahead) * S + (S // 2 + right)

    def _next_ego_grid(self, final_obs: torch.Tensor, done: torch.Tensor, old_food: torch.Tensor) -> torch.Tensor:
        """The ego_grid observation after restarts and new food, patched from ``final_obs`` as ``_next_grid`` does.

        A game that goes on keeps its head and heading, so its window shows what ``final_obs``
        shows but the food; a restarted game shows the start window.
        """
        obs = torch.where(done[:, None, None, None], self._start_ego, final_obs)
        flat = obs.view(-1)
        flat.scatter_(0, old_food, 0.0)
        flat.scatter_(0, self._ego_food_at(), 1.0)
        return obs

    def _grid_food_at(self) -> torch.Tensor:
        """Where each game's food is in the flattened grid observations (the food channel)."""
        row, col = self._row_of.index_select(0, self._food), self._col_of.index_select(0, self._food)
        return self._grid_obs_at + 2 * self._cells + row * self.width + col

    def _next_grid(self, final_obs: torch.Tensor, done: torch.Tensor, old_food: torch.Tensor) -> torch.Tensor:
        """The grid observation after restarts and new food, patched from ``final_obs``.

        A game that goes on has the same head and body as in its last observation (the head's
        stamp, written since, gives the 1.0 ``final_obs`` already shows); a restarted game has
        the start grid. Only the food moves: cleared where it was, set where it is now.
        """
        obs = torch.where(done[:, None, None, None], self._start_grid, final_obs)
        flat = obs.view(-1)
        flat.scatter_(0, old_food, 0.0)
        flat.scatter_(0, self._grid_food_at(), 1.0)
        return obs

    # ------------------------------------------------------------------ state for tests and tools

    def get_state(self, index: int) -> SnakeState:
        """The state of game ``index`` as a ``SnakeState`` (copies a few numbers to the host)."""
        index = self._check_index(index)
        clock, length = int(self._clock[index]), int(self._length[index])
        ring = self._ring[index].tolist()
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
        clock = int(self._clock[index]) + length  # past every old stamp of this game
        cells = torch.tensor([self._padded(r, c) for r, c in state.body], device=self.device)
        times = torch.arange(clock, clock - length, -1, device=self.device)
        self._stamp[index].view(-1)[cells] = times
        self._ring[index, times & self._ring_mask] = cells.to(self._small)
        row_free = torch.full((self.height,), self.width, dtype=self._small)
        for r, _ in state.body:
            row_free[r] -= 1
        self._row_free[index] = row_free.to(self.device)
        self._clock[index] = clock
        self._length[index] = length
        self._head[index] = self._padded(*state.body[0])
        self._direction[index] = state.direction
        self._food[index] = self._padded(*state.food)
        self._steps_since_food[index] = state.steps_since_food
        self._episode_steps[index] = 0

    _STATE = ("stamp", "ring", "row_free", "clock", "length", "head", "direction", "food",
              "steps_since_food", "episode_steps", "counter", "env_keys")

    def state_dict(self) -> dict:
        """Every game's full state and the random stream, for checkpoints (tensors, copied)."""
        return {name: getattr(self, f"_{name}").clone() for name in self._STATE}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly from ``state_dict()`` of an env with the same settings.

        ``state`` is checked first, every game against the rules (a body of adjacent cells on
        the grid whose stamps and ring agree, food on an empty cell, counters in range); a bad
        one raises ``ValueError`` naming the field, the game and the value, and leaves the env
        as it was.
        """
        self._check_state(state)
        for name in self._STATE:
            getattr(self, f"_{name}").copy_(state[name])
        self._seeded = True

    def _check_state(self, state) -> None:
        """Raise naming what is wrong if ``state`` is not a valid ``state_dict()`` of this env."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from VecSnake.state_dict(), not {type(state).__name__}")
        missing = [name for name in self._STATE if name not in state]
        if missing:
            raise ValueError(f"state is missing {missing}: not a VecSnake state_dict")
        for name in self._STATE:
            mine, theirs = getattr(self, f"_{name}"), state[name]
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
        fail("env_keys", (s["env_keys"] < 0) | (s["env_keys"] > _MASK32), s["env_keys"], "must be in [0, 2**32)")
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
        fail("stamp", (stamp != _WALL_STAMP) & ~inside, stamp, "walls must keep their wall stamp")
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

    def observe(self) -> torch.Tensor:
        """The current observation of every game (what the last ``step``/``reset`` returned)."""
        return self._observe()

    def _check_index(self, index) -> int:
        return check_int("index", index, 0, self.num_envs - 1)

    def __repr__(self) -> str:
        return (
            f"VecSnake(num_envs={self.num_envs}, height={self.height}, width={self.width}, "
            f"obs_type={self.obs_type!r}, device={str(self.device)!r})"
        )
