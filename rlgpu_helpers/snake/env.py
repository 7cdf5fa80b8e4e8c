"""``SnakeEnv``: one game of Snake in NumPy, a plain ``gymnasium.Env`` (introduced in notebook 01).

This is the baseline every faster env in the course is compared to: one game, one step per call,
Python in the loop. It follows the rules in ``rules.py`` exactly; the tests check every step
against ``rules.observe`` and the hand-written rules.

The body is a deque (head on the left) and an occupancy grid, so a step costs O(1) Python work;
only placing new food after a meal scans the free cells (in NumPy). The grid observation uses a
second grid that stamps each cell with the step at which the head entered it: a body cell's
remaining lifetime is then ``stamp - (clock - length)``, one NumPy expression per step. The
``"features_reach"`` flood fill runs on bitboards (the grid as one Python int, a bit per cell and
a spare column so that shifts do not wrap): one round of the fill is four shifts and a mask, so
the observation costs about as much as a step of the game, not fifty times as much.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import gymnasium
import numpy as np
from gymnasium import spaces

from ..core.checks import check_seed
from . import rules
from .render import render_state
from .rules import SnakeState

SNAKE_ENV_ID = "rlgpu_helpers/Snake-v0"
RENDER_MODES = ("rgb_array",)


class SnakeEnv(gymnasium.Env):
    """One game of Snake on a ``height x width`` grid (the rules are in ``rules.py``).

    obs_type: ``"features"`` (11 floats), ``"grid"`` (``(3, height, width)``), ``"features_reach"``
        (15 floats) or ``"ego_grid"`` (``(3, S, S)``, ``S = rules.ego_size(height, width)``), see
        ``rules.observe``.
    max_steps_without_food: truncate after this many steps without eating (default ``height * width``).
    render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns a ``uint8`` image).

    ``info`` holds ``score`` (food eaten), ``length`` and ``won``. Stepping after the episode ended
    raises ``RuntimeError``: call ``reset()`` (gymnasium's vector envs do it for you).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 10}

    def __init__(self, height=10, width=10, obs_type="features", max_steps_without_food=None,
                 render_mode=None):
        self.height, self.width = rules.check_grid_size(height, width)
        self.obs_type = rules.check_obs_type(obs_type)
        self.max_steps_without_food = rules.check_max_steps_without_food(
            max_steps_without_food, self.height, self.width)
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = spaces.Box(
            0.0, 1.0, shape=rules.observation_shape(self.obs_type, self.height, self.width),
            dtype=np.float32)
        self.action_space = spaces.Discrete(rules.NUM_ACTIONS)
        # A directly built env carries its spec too, so tools that rebuild envs from the spec
        # (check_env's render and close checks) work without gymnasium.make.
        self.spec = dataclasses.replace(gymnasium.spec(SNAKE_ENV_ID), kwargs={
            "height": self.height, "width": self.width, "obs_type": self.obs_type,
            "max_steps_without_food": self.max_steps_without_food, "render_mode": render_mode})
        self._occupied = np.zeros((self.height, self.width), dtype=bool)
        row_bits = (1 << self.width) - 1
        self._grid_bits = sum(row_bits << (row * (self.width + 1)) for row in range(self.height))
        self._entered_at = np.zeros((self.height, self.width), dtype=np.int64)
        self._load(SnakeState(rules.start_body(self.height, self.width), rules.RIGHT, None))
        self._ended = True  # until the first reset places food

    # -- gymnasium API -------------------------------------------------------------------------

    def reset(self, *, seed=None, options=None):
        """Start a new game: the start body facing right, food on a uniformly random empty cell."""
        if options:
            raise ValueError(f"options: SnakeEnv.reset takes no options, got {options!r}")
        if seed is not None:
            check_seed("seed", seed)  # the seeds VecSnake takes: gymnasium alone would let True and 2**64 in
        super().reset(seed=seed)
        self._load(SnakeState(rules.start_body(self.height, self.width), rules.RIGHT, None))
        self._food = self._random_free_cell()
        self._ended = False
        return self._observation(), self._info(won=False)

    def step(self, action):
        """One move by the rules; returns ``(obs, reward, terminated, truncated, info)``."""
        action = rules.check_action(action)
        if self._ended:
            raise RuntimeError("SnakeEnv.step called after the episode ended; call reset() first")
        direction = rules.turn(self._direction, action)
        d_row, d_col = rules.DIRECTION_DELTAS[direction]
        head_row, head_col = self._body[0]
        head = (head_row + d_row, head_col + d_col)
        if not (0 <= head[0] < self.height and 0 <= head[1] < self.width):
            return self._die()
        eats = head == self._food
        # Without a meal the tail moves away first, so its cell is free to move into.
        if self._occupied[head] and (eats or head != self._body[-1]):
            return self._die()

        if not eats:
            self._occupied[self._body.pop()] = False
        self._clock += 1
        self._body.appendleft(head)
        self._occupied[head] = True
        self._entered_at[head] = self._clock
        self._direction = direction

        won = False
        if eats:
            self._steps_since_food = 0
            self._food = self._random_free_cell()
            won = self._food is None
        else:
            self._steps_since_food += 1
        truncated = not won and self._steps_since_food >= self.max_steps_without_food
        self._ended = won or truncated
        return self._observation(), 1.0 if eats else 0.0, won, truncated, self._info(won)

    def render(self):
        """The current frame as a ``uint8`` image ``(height * px, width * px, 3)``."""
        if self.render_mode != "rgb_array":
            raise RuntimeError(
                f"render() needs render_mode='rgb_array', this env has render_mode={self.render_mode!r}")
        return render_state(self.get_state(), self.height, self.width)

    # -- state for tests and tools ---------------------------------------------------------------

    def get_state(self) -> SnakeState:
        return SnakeState(tuple(self._body), self._direction, self._food, self._steps_since_food)

    def set_state(self, state: SnakeState) -> None:
        """Load a valid ``state`` (validated first; on error the env is unchanged) and resume play."""
        rules.validate_state(state, self.height, self.width, self.max_steps_without_food)
        self._load(state)
        self._ended = False

    # -- internals -------------------------------------------------------------------------------

    def _load(self, state: SnakeState) -> None:
        self._body = deque(state.body)
        self._direction = state.direction
        self._food = state.food
        self._steps_since_food = state.steps_since_food
        self._occupied[:] = False
        self._occupied[tuple(np.array(state.body).T)] = True
        # body[i] is the cell the head entered i steps ago.
        self._clock = len(state.body)
        self._entered_at[:] = 0
        self._entered_at[tuple(np.array(state.body).T)] = self._clock - np.arange(len(state.body))

    def _die(self):
        """Death leaves the state as it was; only the episode ends."""
        self._ended = True
        return self._observation(), -1.0, True, False, self._info(won=False)

    def _random_free_cell(self):
        free = np.flatnonzero(~self._occupied)
        if free.size == 0:
            return None
        row, col = divmod(int(free[self.np_random.integers(free.size)]), self.width)
        return (row, col)

    def _info(self, won: bool) -> dict:
        length = len(self._body)
        return {"score": length - rules.START_LENGTH, "length": length, "won": won}

    def _observation(self) -> np.ndarray:
        if self.obs_type == "grid":
            return self._grid_observation()
        if self.obs_type == "features_reach":
            return self._reach_observation()
        if self.obs_type == "ego_grid":  # the rules' plain construction: this env is the baseline, not the fast path
            return rules.observe(self.get_state(), self.height, self.width, "ego_grid")
        return self._feature_observation()

    def _grid_observation(self) -> np.ndarray:
        length = len(self._body)
        obs = np.zeros((3, self.height, self.width), dtype=np.float32)
        obs[0][self._body[0]] = 1.0
        remaining = self._entered_at - (self._clock - length)
        obs[1] = np.where(self._occupied, remaining / length, 0.0)
        if self._food is not None:
            obs[2][self._food] = 1.0
        return obs

    def _feature_observation(self) -> np.ndarray:
        obs = np.zeros(rules.NUM_FEATURES, dtype=np.float32)
        head_row, head_col = self._body[0]
        tail = self._body[-1]
        for action in range(rules.NUM_ACTIONS):
            d_row, d_col = rules.DIRECTION_DELTAS[rules.turn(self._direction, action)]
            cell = (head_row + d_row, head_col + d_col)
            if not (0 <= cell[0] < self.height and 0 <= cell[1] < self.width) or self._occupied[cell] and cell != tail:
                obs[action] = 1.0
        obs[3 + self._direction] = 1.0
        if self._food is not None:
            food_row, food_col = self._food
            obs[7] = food_row < head_row
            obs[8] = food_col > head_col
            obs[9] = food_row > head_row
            obs[10] = food_col < head_col
        return obs

    def _reach_observation(self) -> np.ndarray:
        """The 15 numbers of ``rules.space_shares`` and friends, the flood fill on bitboards."""
        stride = self.width + 1  # bit of (row, col): row * stride + col; column `width` stays empty
        free = self._grid_bits
        for row, col in list(self._body)[:-1]:
            free &= ~(1 << (row * stride + col))
        blocked = len(self._body) - 1
        features = self._feature_observation()
        shares = np.zeros(rules.NUM_ACTIONS, dtype=np.float32)
        head_row, head_col = self._body[0]
        for action in range(rules.NUM_ACTIONS):
            if features[action]:
                continue  # danger: the move leads nowhere
            d_row, d_col = rules.DIRECTION_DELTAS[rules.turn(self._direction, action)]
            reached = 1 << ((head_row + d_row) * stride + head_col + d_col)
            for _ in range(rules.reach_moves(self.height, self.width)):
                grown = (reached | reached << 1 | reached >> 1 | reached << stride | reached >> stride) & free
                if grown == reached:
                    break
                reached = grown
            shares[action] = reached.bit_count() / (self.height * self.width - blocked)
        return np.concatenate([features, shares, [len(self._body) / (self.height * self.width)]]).astype(np.float32)


if SNAKE_ENV_ID not in gymnasium.registry:
    gymnasium.register(id=SNAKE_ENV_ID, entry_point="rlgpu_helpers.snake.env:SnakeEnv")
