"""``VecSnake``: N games of Snake as tensors on any torch device (notebooks 03 and 04).

The rules are those of ``rules.py`` and ``SnakeEnv``; the bookkeeping makes one step a fixed, small
number of tensor operations over the N games that never waits for the device:

* The state (``vec_state``) is a bordered grid of stamps, so a move is ``head + offset[direction]``,
  a wall a cell always occupied, and nothing is ever cleared; food goes on a uniformly random empty
  cell in O(H + W) per game, the row from a running sum over the rows' counts of empty cells, then
  the cell from a running sum over that row. The observations are read from it (``vec_observe``).
* Randomness is a counter-based hash of (seed, game, step counter) in integer tensor ops: no
  ``torch.Generator`` (which ``torch.compile(fullgraph=True)`` and CUDA graphs cannot take), and the
  same seed gives the same games on every device.
* Every choice is ``torch.where`` or ``masked_fill_``, every read ``index_select``, a write of the
  state ``index_copy_``/``index_add_`` on the flat tensor itself (compiled, written in place: see
  ``step_compile_options``). A game whose state must not change rewrites its own values, so the
  order of repeated writes cannot matter. No ``.item()``, no Python ``if`` on a tensor, no
  boolean-mask indexing: ``step`` never synchronizes with a GPU (``gpu.sync``'s audit, in a test).
* Actions are checked on the device (``gpu.sync.DeferredCheck``): a step given an action outside
  0..2 moves no game, and raises as soon as the host sees the note (at once on a CPU, within a step
  or two on a GPU). ``check_action_values=False`` switches it off, and makes ``step`` capturable.

Finished games restart inside the same step (gymnasium's ``AutoresetMode.SAME_STEP``): ``info`` holds
their last observation (``"final_obs"``) and their score, length and outcome (``"episode"``), each
with a ``"_final_obs"`` / ``"_episode"`` mask.
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
from .vec_observe import VecSnakeObservations, feature_table, start_grid
from .vec_state import MASK32, VecSnakeState


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (C. Wellons' "lowbias32", constants from its 2022 revision).

    Works on int64 tensors holding 0..2**32-1. Both multipliers are below 2**31, so every
    product stays below 2**63: exact in int64 on every device, no overflow.
    """
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & MASK32
    return x ^ (x >> 15)


def _describe_bad_action(index: int, value: int, steps_ago: int) -> str:
    when = "this step" if steps_ago == 0 else f"the step {steps_ago} call(s) before this one"
    return (f"actions[{index}] = {value} is not a valid action (0 straight, 1 right, 2 left): "
            f"{when} was given it, and no game has moved since (the state is as it was)")


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


def step_compile_options(device: str | torch.device) -> dict:
    """Inductor's options for compiling ``VecSnake.step_tensors`` on ``device`` (``torch.compile(options=...)``).

    ``reorder_for_locality=False`` keeps the ring's tail read before the ring's write, which lets
    Inductor write the ring in place (moved after it, the write copies the whole ring twice a step).
    On a CPU, ``cpp.simdlen=1``: the step is scattered loads and stores, which Inductor's vectorized
    C++ emulates lane by lane, several times slower than its scalar loops (notebook 04 measures it).
    """
    options = {"reorder_for_locality": False}
    if get_device(device, param="device").type == "cpu":
        options["cpp.simdlen"] = 1
    return options


def bytes_per_game(height: int, width: int, obs_type: str) -> int:
    """About the memory one game of ``VecSnake`` takes: its state, and one step's observations and
    largest temporaries (for an error that says how much ``num_envs`` needs, before allocating)."""
    cells = (height + 2) * (width + 1)  # the bordered grid
    ring = 1 << (height * width - 1).bit_length()
    state = cells * 4 + ring * 4 + height * 4 * 2 + 84  # int32 stamps, ring, row counts; per-game numbers
    obs = 4 * int(np.prod(rules.observation_shape(obs_type, height, width)))
    window = rules.ego_size(height, width) ** 2
    temporaries = {"grid": cells * 12, "features_reach": cells * 10, "ego_grid": window * 40}.get(obs_type, 64)
    return state + 2 * obs + temporaries


class VecSnake(VecSnakeObservations, VecSnakeState, VectorEnv):
    """``num_envs`` games of Snake stepped together as tensors on ``device``.

    ``num_envs`` N is refused, naming the bytes needed and available, where N games cannot fit in
    the device's memory (``bytes_per_game``). ``height``, ``width``: 4..64 each. ``obs_type``:
    ``"features"`` (N, 11), ``"grid"`` (N, 3, H, W), ``"features_reach"`` (N, 15) or ``"ego_grid"``
    (N, 3, S, S), float32 (see ``rules``). ``max_steps_without_food``: the truncation limit, default
    ``height * width``. ``seed`` seeds the food; ``check_action_values``: see the module docstring.

    ``step(actions)`` takes an integer tensor of shape (N,) on ``device`` and returns ``(obs, reward,
    terminated, truncated, info)``: float32 rewards, bool flags, every tensor on ``device``.
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
        # of int64, so more of each operation's data stays in cache. Times (stamps)
        # are int32 (the clock int64), kept small by a rebase (``_rebase``). Flat indices grow
        # with N; past 2**31 they switch to int64.
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
        self._features = feature_table().to(self.device)
        self._danger_weights = torch.tensor([1, 2, 4], dtype=torch.uint8, device=self.device)
        start = [self._padded(r, c) for r, c in rules.start_body(H, W)]
        self._start_cells = torch.tensor(start, **small)  # head first
        self._start_age = torch.arange(rules.START_LENGTH, device=self.device)  # head 0 ... tail 2
        self._start_head = start[0]
        self._start_grid = start_grid(H, W).to(self.device)
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

    def _padded(self, row: int, col: int) -> int:
        return (row + 1) * self._pitch + col

    # ------------------------------------------------------------------ randomness

    def _seed(self, seed: int | None):
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        seed = check_seed("seed", seed)
        halves = _hash32(torch.tensor([seed & MASK32, (seed >> 32) & MASK32]))
        base = int(_hash32(halves[:1] ^ _hash32(halves[1:] + 1)).item())
        index = torch.arange(self.num_envs, dtype=torch.int64)
        keys = _hash32(_hash32((index * 0x9E3779B9) & MASK32) ^ base)
        self._env_keys.copy_(keys)
        self._counter.zero_()

    def _random_below(self, n: torch.Tensor, advance: torch.Tensor | None = None) -> torch.Tensor:
        """One integer uniform in 0..n-1 per game (n >= 1), fresh on every call.

        32 random bits times n, shifted down 32 bits (Lemire's multiply-shift): exact integer
        arithmetic, n <= 4096 keeps the product below 2**45, the bias is at most n / 2**32.
        ``advance`` (a 0-d bool) set to False leaves the random stream where it was (a frozen step).
        """
        self._counter.add_(1 if advance is None else advance)
        bits = _hash32(self._env_keys ^ _hash32(self._counter & MASK32))
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
        self._sweep_rebase(frozen)  # keeps int32 times small; changes nothing a rule sees
        direction = self._turned.index_select(0, self._direction * rules.NUM_ACTIONS + actions)
        new_head = self._head + self._offset.index_select(0, direction)
        ate = new_head == self._food
        stamp_there = self._stamp.index_select(0, self._stamp_at + new_head)
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
        tail = self._ring.index_select(0, self._ring_at + tail_slot)

        # Move the living; a dead game keeps its state. The new head's stamp and ring slot are
        # written by _restart, together with the start cells of restarting games.
        self._clock.add_(alive)
        self._length.add_(ate)  # eating implies alive: food is never on the body
        torch.where(alive, new_head, self._head, out=self._head)
        torch.where(alive, direction, self._direction, out=self._direction)
        # Empty cells per row: the head's row loses one, the row the tail left gains one.
        entered, left = -alive.to(self._small), (alive & ~ate).to(self._small)
        self._row_free.index_add_(0, self._row_free_at + self._row_of.index_select(0, self._head), entered)
        self._row_free.index_add_(0, self._row_free_at + self._row_of.index_select(0, tail), left)
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
            old_food = self._grid_food_at()
            final_obs = self._observe_grid(old_food, no_food=won)
        elif self.obs_type == "ego_grid":
            old_food = self._ego_food_at()
            final_obs = self._observe_ego_grid(old_food, no_food=won)
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
        row_free = self._shaped("row_free")
        torch.where(done[:, None], self._start_row_free, row_free, out=row_free)
        at = done[:, None]
        cells = torch.where(at, self._start_cells, self._head[:, None])  # (N, 3)
        times = self._clock[:, None] - torch.where(at, self._start_age, 0)
        at = (cells + self._stamp_at[:, None]).view(-1).to(torch.int64)
        self._stamp.index_copy_(0, at, times.view(-1).to(torch.int32))
        slots = (times & self._ring_mask).add_(self._ring_at[:, None])
        self._ring.index_copy_(0, slots.view(-1), cells.view(-1))

    def _place_food(self, need: torch.Tensor, advance: torch.Tensor | None = None):
        """Put food on a uniformly random empty cell of every game flagged in ``need``."""
        # The r-th empty cell, counting row by row, with r uniform in 0..free-1. First its row:
        # the number of rows whose running count of empty cells is <= r.
        r = self._random_below(self._cells - self._length, advance).to(self._small)
        row_free = self._shaped("row_free")
        before = row_free.cumsum(1, dtype=self._small)  # empty cells in rows 0..i
        row = (before <= r[:, None]).to(torch.uint8).sum(1, dtype=torch.uint8)  # H <= 64 fits
        row = row.to(self._small).clamp_(max=self.height - 1)  # clamp: games that need no food
        at = self._row_free_at + row
        k = r - before.view(-1).index_select(0, at) + self._row_free.index_select(0, at)
        # Then the k-th empty cell of that row. Games that need no food read one shared wall
        # row instead of their own (cheap: it stays in cache); their result is discarded.
        which = torch.where(need, self._first_row + 1 + row, 0)
        cells = self._stamp.view(-1, self._pitch).index_select(0, which)  # (N, W + 1)
        empty = cells <= (self._clock - self._length).to(torch.int32)[:, None]  # the wall column is never empty
        running = empty.to(torch.uint8).cumsum(1, dtype=torch.uint8)  # W <= 64 fits
        # The number of cells whose running count is <= k: a binary search in each game's row.
        col = torch.searchsorted(running, k.to(torch.uint8)[:, None], right=True, out_int32=True)
        col = col.view(-1).to(self._small).clamp_(max=self.width - 1)
        torch.where(need, ((row + 1) * self._pitch + col).to(self._small), self._food, out=self._food)

    def _check_index(self, index) -> int:
        return check_int("index", index, 0, self.num_envs - 1)

    def __repr__(self) -> str:
        return (
            f"VecSnake(num_envs={self.num_envs}, height={self.height}, width={self.width}, "
            f"obs_type={self.obs_type!r}, device={str(self.device)!r})"
        )
