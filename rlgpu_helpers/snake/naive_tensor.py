"""``NaiveTensorSnake``: the bad example of notebook 04, a tensor Snake written the common way.

**Do not use this env to train.** It exists to be measured. It plays by the rules of ``SnakeEnv``
and ``VecSnake`` (the tests run it in lockstep with ``SnakeEnv``) with N games in tensors on any
device, but it is written as tutorials write tensor envs, and four habits make the host wait for
the GPU on every step (a *host-device synchronization*, see ``gpu.sync``):

``"mask_reset"``
    ``life[done] = start_life``: a boolean mask needs its count of ``True`` on the host (``nonzero``).
``"if_any"``
    ``if done.any(): reset(...)``: Python needs the value to choose a branch.
``"nonzero_food"``
    ``need.nonzero()`` and ``torch.multinomial`` to place food: a length that depends on the data.
``"item_logging"``
    ``.item()`` on the step's reward and finished games, for logging: each copies and waits.

Each habit is a switch (``syncs=``), so notebook 04 can turn one on at a time and measure it;
switched off, the same job is done without a sync (:data:`SYNC_FREE_CODE`). With every switch off
a step makes no synchronization, like ``VecSnake``, yet is still slower at large N: its state is a
board of ``H x W`` remaining lifetimes per game (the head holds the snake's length, the tail 1),
decremented and scanned every step, where ``VecSnake`` touches a few cells. Actions are checked
without a sync (``gpu.sync.DeferredCheck``), so the only syncs are the four switched ones. The same
seed gives the same games on one device, but not across devices nor ``nonzero_food`` settings.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core.checks import check_bool, check_choice, check_choices, check_int, check_seed
from ..core.device import available_memory, check_fits, get_device
from ..gpu.sync import DeferredCheck
from . import rules
from .rules import SnakeState
from .vec import bytes_per_game, check_action_tensor

SYNC_POINTS = ("mask_reset", "if_any", "nonzero_food", "item_logging")
"""The four switches of :class:`NaiveTensorSnake`, each a habit that synchronizes on a GPU."""

SYNC_POINT_CODE = {
    "mask_reset": "life[done] = start_life; head[done] = start_head",
    "if_any": "if done.any(): ...; if need_food.any(): ...",
    "nonzero_food": "games = need.nonzero(); torch.multinomial(free[games], 1)",
    "item_logging": "total_reward += reward.sum().item(); finished += done.sum().item()",
}
"""What each switch turns on, as the code a tutorial would write."""

SYNC_FREE_CODE = {
    "mask_reset": "torch.where(done, start_life, life); masked_fill_(done, ...)",
    "if_any": "reset and place food in every step, keeping what needs no change",
    "nonzero_food": "argmax(where(free, torch.rand(N, H * W), -1))",
    "item_logging": "total_reward += reward.sum() (a device tensor, read when asked)",
}
"""The same job done without a synchronization (the switch off)."""


def check_syncs(syncs) -> tuple[str, ...]:
    """The switches in ``syncs`` (a name, a sequence of names, or empty), in SYNC_POINTS order."""
    if isinstance(syncs, (list, tuple)) and len(syncs) == 0:
        return ()
    chosen = check_choices("syncs", syncs, SYNC_POINTS)
    return tuple(point for point in SYNC_POINTS if point in chosen)


def _describe_bad_action(index: int, value: int, steps_ago: int) -> str:
    when = "this step" if steps_ago == 0 else f"the step {steps_ago} call(s) before this one"
    return (f"actions[{index}] = {value} is not a valid action (0 straight, 1 right, 2 left): "
            f"{when} was given it, and no game has moved since")


class NaiveTensorSnake(VectorEnv):
    """``num_envs`` games of Snake as tensors, written the common way: the bad example of notebook 04.

    Args:
        num_envs, height, width, obs_type, max_steps_without_food, device, seed,
            check_action_values: as for ``VecSnake``.
        syncs: which of the synchronizing habits (:data:`SYNC_POINTS`) to use; all by default (a
            typical tutorial env), ``()`` for none.

    ``step(actions)`` returns ``(obs, reward, terminated, truncated, info)`` as ``VecSnake.step`` does.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int, height: int = 10, width: int = 10, obs_type: str = "features",
                 max_steps_without_food: int | None = None, device: str | torch.device = "cpu",
                 seed: int | None = None, syncs=SYNC_POINTS, check_action_values: bool = True):
        self.num_envs = check_int("num_envs", num_envs)
        self.height, self.width = rules.check_grid_size(height, width)
        self.obs_type = check_choice("obs_type", obs_type, rules.FIRST_OBS_TYPES)  # the lesson's two
        self.max_steps_without_food = rules.check_max_steps_without_food(
            max_steps_without_food, self.height, self.width)
        self.device = get_device(device, param="device")
        # Its state is smaller than VecSnake's, its step's temporaries (whole-grid masks) larger: about the same.
        check_fits("num_envs", self.num_envs,
                   self.num_envs * bytes_per_game(self.height, self.width, self.obs_type),
                   available_memory(self.device), f"{self.device} memory")
        self.syncs = check_syncs(syncs)
        self.check_action_values = check_bool("check_action_values", check_action_values)
        self._bad_actions = DeferredCheck(self.device, _describe_bad_action)
        self.render_mode = None
        obs_shape = rules.observation_shape(self.obs_type, self.height, self.width)
        self.single_observation_space = spaces.Box(0.0, 1.0, obs_shape, dtype=np.float32)
        self.single_action_space = spaces.Discrete(rules.NUM_ACTIONS)

        N, H, W, dev = self.num_envs, self.height, self.width, self.device
        i64 = dict(dtype=torch.int64, device=dev)
        self._turns = torch.tensor(rules.ACTION_TURNS, **i64)
        self._deltas = torch.tensor(rules.DIRECTION_DELTAS, **i64)  # [direction] -> (d_row, d_col)
        self._headings = torch.arange(4, **i64)
        self._rows = torch.arange(H, **i64)
        self._cols = torch.arange(W, **i64)
        start = rules.start_body(H, W)
        self._start_life = torch.zeros(H, W, dtype=torch.int32, device=dev)
        for k, (r, c) in enumerate(start):
            self._start_life[r, c] = rules.START_LENGTH - k
        self._start_head = torch.tensor(start[0], **i64)
        self._life = torch.zeros(N, H, W, dtype=torch.int32, device=dev)
        self._head = torch.zeros(N, 2, **i64)
        self._direction = torch.zeros(N, **i64)
        self._length = torch.zeros(N, **i64)
        self._food = torch.zeros(N, 2, **i64)
        self._steps_since_food = torch.zeros(N, **i64)
        self._episode_steps = torch.zeros(N, **i64)
        self._generator = torch.Generator(device=dev)
        self._reward_on_device = torch.zeros((), dtype=torch.float32, device=dev)
        self._finished_on_device = torch.zeros((), **i64)
        self.total_reward, self.finished = 0.0, 0  # the host counters of "item_logging"
        self.reset(seed=seed)

    @property
    def observation_space(self) -> spaces.Space:
        return batch_space(self.single_observation_space, self.num_envs)

    @property
    def action_space(self) -> spaces.Space:
        return batch_space(self.single_action_space, self.num_envs)

    # ------------------------------------------------------------------ API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start every game afresh; ``seed`` re-seeds the food placement."""
        if options:
            raise ValueError(f"options={options!r}: NaiveTensorSnake.reset takes no options")
        self._bad_actions.raise_if_failed()
        if seed is None and not hasattr(self, "_seeded"):
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        if seed is not None:
            self._generator.manual_seed(check_seed("seed", seed))
            self._seeded = True
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._reset_games(everyone)
        self._place_food(everyone)
        return self._observe(), {}

    def step(self, actions: torch.Tensor):
        """Advance every game one step; returns what ``VecSnake.step`` returns."""
        check_action_tensor(actions, self.num_envs, self.device)
        frozen = None
        if self.check_action_values:
            self._bad_actions.raise_if_failed()
            safe = actions.clamp(0, rules.NUM_ACTIONS - 1)
            frozen = self._bad_actions.record(safe != actions, actions)
            actions = safe
        outputs = self._step(actions.long(), frozen)
        if self.check_action_values:
            self._bad_actions.raise_if_failed()
        return outputs

    def stats(self) -> dict:
        """Total reward and finished games since construction (reads the device counters)."""
        if "item_logging" in self.syncs:
            return {"total_reward": self.total_reward, "finished": self.finished}
        return {"total_reward": float(self._reward_on_device), "finished": int(self._finished_on_device)}

    def observe(self) -> torch.Tensor:
        """The current observation of every game."""
        return self._observe()

    # ------------------------------------------------------------------ the step

    def _step(self, actions: torch.Tensor, frozen: torch.Tensor | None):
        N, H, W = self.num_envs, self.height, self.width
        direction = (self._direction + self._turns[actions]) % 4
        new_head = self._head + self._deltas[direction]
        row, col = new_head[:, 0], new_head[:, 1]
        outside = (row < 0) | (row >= H) | (col < 0) | (col >= W)
        ate = (new_head == self._food).all(1) & ~outside
        cell = row.clamp(0, H - 1) * W + col.clamp(0, W - 1)
        life_there = self._life.view(N, -1).gather(1, cell[:, None]).squeeze(1)
        # Without a meal the tail (life 1) leaves first, so only life > 1 blocks; with one, any body.
        dead = outside | torch.where(ate, life_there > 0, life_there > 1)
        if frozen is not None:  # a bad action anywhere: nobody moves, eats or dies
            moves = ~frozen
            ate, dead = ate & moves, dead & moves
            alive = moves & ~dead
        else:
            alive = ~dead

        shrink = (alive & ~ate)[:, None, None]
        self._life = torch.where(shrink, (self._life - 1).clamp(min=0), self._life)
        self._length += ate
        written = torch.where(alive, self._length, life_there.long()).to(torch.int32)
        self._life.view(N, -1).scatter_(1, cell[:, None], written[:, None])
        self._head = torch.where(alive[:, None], new_head, self._head)
        self._direction = torch.where(alive, direction, self._direction)
        self._steps_since_food = torch.where(ate, 0, self._steps_since_food + alive)
        self._episode_steps += 1 if frozen is None else moves.long()

        won = ate & (self._length == H * W)
        terminated = dead | won
        truncated = (self._steps_since_food >= self.max_steps_without_food) & ~terminated
        reward = ate.float() - dead.float()
        done = terminated | truncated
        final_obs = self._observe(no_food=won)
        info = {
            "final_obs": final_obs,
            "_final_obs": done,
            "episode": {"score": self._length - rules.START_LENGTH, "length": self._episode_steps.clone(),
                        "won": won},
            "_episode": done,
        }
        if "item_logging" in self.syncs:
            self.total_reward += reward.sum().item()
            self.finished += int(done.sum().item())
        else:
            self._reward_on_device += reward.sum()
            self._finished_on_device += done.sum()

        need_food = done | (ate & ~won)
        if "if_any" in self.syncs:
            if done.any():
                self._reset_games(done)
            if need_food.any():
                self._place_food(need_food)
        else:
            self._reset_games(done)
            self._place_food(need_food)
        return self._observe(), reward, terminated, truncated, info

    def _reset_games(self, done: torch.Tensor) -> None:
        """Put the games flagged in ``done`` back at the start (food is placed separately)."""
        if "mask_reset" in self.syncs:
            self._life[done] = self._start_life
            self._head[done] = self._start_head
            self._direction[done] = rules.RIGHT
            self._length[done] = rules.START_LENGTH
            self._steps_since_food[done] = 0
            self._episode_steps[done] = 0
        else:
            self._life = torch.where(done[:, None, None], self._start_life, self._life)
            self._head = torch.where(done[:, None], self._start_head, self._head)
            self._direction.masked_fill_(done, rules.RIGHT)
            self._length.masked_fill_(done, rules.START_LENGTH)
            self._steps_since_food.masked_fill_(done, 0)
            self._episode_steps.masked_fill_(done, 0)

    def _place_food(self, need: torch.Tensor) -> None:
        """Food on a uniformly random free cell of every game flagged in ``need``."""
        N, W = self.num_envs, self.width
        if "nonzero_food" in self.syncs:
            games = need.nonzero().squeeze(1)
            free = (self._life[games] == 0).flatten(1).float()
            cells = torch.multinomial(free, 1, generator=self._generator).squeeze(1)
            self._food[games] = torch.stack([cells // W, cells % W], 1)
        else:
            free = (self._life == 0).view(N, -1)
            draws = torch.rand(free.shape, generator=self._generator, device=self.device)
            cells = torch.where(free, draws, -1.0).argmax(1)
            self._food = torch.where(need[:, None], torch.stack([cells // W, cells % W], 1), self._food)

    # ------------------------------------------------------------------ observations

    def _observe(self, no_food: torch.Tensor | None = None) -> torch.Tensor:
        if self.obs_type == "features":
            return self._observe_features(no_food)
        return self._observe_grid(no_food)

    def _observe_features(self, no_food):
        N, H, W = self.num_envs, self.height, self.width
        headings = (self._direction[:, None] + self._turns[None, :]) % 4  # straight, right, left
        ahead = self._head[:, None, :] + self._deltas[headings]  # (N, 3, 2)
        row, col = ahead[..., 0], ahead[..., 1]
        outside = (row < 0) | (row >= H) | (col < 0) | (col >= W)
        cells = row.clamp(0, H - 1) * W + col.clamp(0, W - 1)
        # Danger: a wall, or a body cell other than the tail (life > 1).
        danger = outside | (self._life.view(N, -1).gather(1, cells) > 1)
        heading = self._direction[:, None] == self._headings[None, :]
        d_row = self._food[:, 0] - self._head[:, 0]
        d_col = self._food[:, 1] - self._head[:, 1]
        food = torch.stack([d_row < 0, d_col > 0, d_row > 0, d_col < 0], 1)
        if no_food is not None:
            food = food & ~no_food[:, None]
        return torch.cat([danger, heading, food], 1).float()

    def _observe_grid(self, no_food):
        head = ((self._rows[None, :, None] == self._head[:, 0, None, None])
                & (self._cols[None, None, :] == self._head[:, 1, None, None]))
        body = self._life.float() / self._length.float()[:, None, None]
        food = ((self._rows[None, :, None] == self._food[:, 0, None, None])
                & (self._cols[None, None, :] == self._food[:, 1, None, None]))
        if no_food is not None:
            food = food & ~no_food[:, None, None]
        return torch.stack([head.float(), body, food.float()], 1)

    # ------------------------------------------------------------------ state for tests and tools

    def get_state(self, index: int) -> SnakeState:
        """The state of game ``index`` (copies it to the host)."""
        index = check_int("index", index, 0, self.num_envs - 1)
        life = self._life[index].cpu().numpy()
        cells = sorted(zip(*np.nonzero(life)), key=lambda cell: -life[cell])
        return SnakeState(body=tuple((int(r), int(c)) for r, c in cells),
                          direction=int(self._direction[index]),
                          food=tuple(int(v) for v in self._food[index].tolist()),
                          steps_since_food=int(self._steps_since_food[index]))

    def set_state(self, index: int, state: SnakeState) -> None:
        """Make game ``index`` continue from ``state`` (checked first); other games are untouched."""
        index = check_int("index", index, 0, self.num_envs - 1)
        rules.validate_state(state, self.height, self.width, self.max_steps_without_food)
        if state.food is None:
            raise ValueError("state.food is None: a won game has ended and cannot be continued")
        life = torch.zeros(self.height, self.width, dtype=torch.int32)
        for k, (r, c) in enumerate(state.body):
            life[r, c] = len(state.body) - k
        self._life[index] = life.to(self.device)
        self._head[index] = torch.tensor(state.body[0], device=self.device)
        self._direction[index] = state.direction
        self._length[index] = len(state.body)
        self._food[index] = torch.tensor(state.food, device=self.device)
        self._steps_since_food[index] = state.steps_since_food
        self._episode_steps[index] = 0

    def __repr__(self) -> str:
        return (f"NaiveTensorSnake(num_envs={self.num_envs}, height={self.height}, width={self.width}, "
                f"obs_type={self.obs_type!r}, device={str(self.device)!r}, syncs={self.syncs!r})")


class Agreement(dict):
    """What :func:`agreement` compared and found: counts of game steps, meals, deaths,
    truncations, wins and disagreements (a dict, printed as one line)."""

    def __str__(self) -> str:
        return ", ".join(f"{key.replace('_', ' ')}: {value:,}" for key, value in self.items())


def agreement(first, second, *, steps: int, seed: int = 0) -> Agreement:
    """Step two envs of the same size side by side with the same random actions; count where they disagree.

    Both are reset with ``seed``. After each step, every game's reward, ``terminated``, ``truncated``
    and observation are compared, and the state of every game that neither ate nor ended. Food is
    random in each env, so where food was just placed, the bodies are compared and the first env's
    food copied into the second. Returns an :class:`Agreement`: 0 disagreements for a correct pair.
    """
    steps = check_int("steps", steps)
    if first.num_envs != second.num_envs:
        raise ValueError(f"the envs hold {first.num_envs} and {second.num_envs} games: compare envs of one size")
    n = first.num_envs
    counts = Agreement(game_steps=0, meals=0, deaths=0, truncations=0, wins=0, disagreements=0)

    def copy_food(games):
        for i in games:
            theirs, mine = first.get_state(i), second.get_state(i)
            if (mine.body, mine.direction) != (theirs.body, theirs.direction):
                counts["disagreements"] += 1
            elif mine.food != theirs.food:
                second.set_state(i, SnakeState(mine.body, mine.direction, theirs.food, mine.steps_since_food))
        if not torch.equal(first.observe().cpu(), second.observe().cpu()):
            counts["disagreements"] += 1

    first.reset(seed=seed)
    second.reset(seed=seed)
    copy_food(range(n))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        actions = torch.randint(0, rules.NUM_ACTIONS, (n,), generator=generator)
        one = first.step(actions.to(first.device))
        two = second.step(actions.to(second.device))
        for a, b in zip(one[1:4], two[1:4]):
            if not torch.equal(a.cpu(), b.cpu()):
                counts["disagreements"] += 1
        reward, terminated, truncated = (t.cpu() for t in one[1:4])
        counts["game_steps"] += n
        counts["meals"] += int((reward > 0).sum())
        counts["deaths"] += int((reward < 0).sum())
        counts["truncations"] += int(truncated.sum())
        counts["wins"] += int(one[4]["episode"]["won"].cpu()[terminated].sum())
        placed = ((reward > 0) | terminated | truncated).tolist()
        for i in range(n):
            if not placed[i] and first.get_state(i) != second.get_state(i):
                counts["disagreements"] += 1
        copy_food([i for i in range(n) if placed[i]])
    return counts
