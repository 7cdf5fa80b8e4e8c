"""The naive DQN: one game on the CPU, one step at a time (introduced in notebook 01).

The baseline every later speedup is compared to, written as most DQN tutorials write it: every
step turns one observation into a tensor, asks the network for its Q-values (with autograd
recording, as nobody said not to), steps one ``SnakeEnv``, appends a tuple to a deque
(``replay.naive.DequeReplay``) and learns from a batch assembled with list comprehensions.

``LoopSettings`` holds the hyperparameters and the cheap tunings of notebook 02, each a switch
that changes one spot of the loop in :meth:`NaiveDQN.run`:

- ``inference_mode``: act under ``torch.inference_mode()`` instead of recording a graph;
- ``set_to_none``: ``zero_grad(set_to_none=True)`` (the baseline pins the older ``False``, which
  writes zeros into every gradient);
- ``learn_every``: one update every ``k`` env steps instead of every step;
- ``array_batches``: preallocated NumPy arrays (``replay.naive.ArrayReplay``), a batch one fancy
  index per field;
- ``num_threads``: ``torch.set_num_threads`` for the run; and ``batch_size``.

The loop times its parts: ``env`` (the game), ``act`` (observation to action), ``replay``
(storing and batching), ``learn`` (the update and the target copy) and ``other`` (the rest).
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..core.checks import check_bool, check_int, check_number, check_seed
from ..replay.naive import ArrayReplay, DequeReplay
from ..snake import rules
from ..snake.env import SnakeEnv
from .nets import QNetwork

PARTS = ("env", "act", "replay", "learn", "other")
"""The parts of a step the loop times, in the order tables and plots show them."""


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the naive loop does: the tuning switches of notebook 02 and the DQN hyperparameters.

    The defaults are the baseline: every switch off, a 10 x 10 grid, feature observations.
    """

    # -- the cheap tunings (notebook 02) -------------------------------------------------------
    inference_mode: bool = False
    """Act under ``torch.inference_mode()``; off: a plain forward pass that records a graph."""
    set_to_none: bool = False
    """``optimizer.zero_grad(set_to_none=...)``: drop the gradients instead of zeroing them."""
    learn_every: int = 1
    """One gradient update every this many env steps."""
    array_batches: bool = False
    """Replay memory in preallocated NumPy arrays; off: a deque of tuples and list comprehensions."""
    num_threads: int | None = None
    """``torch.set_num_threads`` during the run; None keeps the current setting."""
    batch_size: int = 32
    """Transitions per gradient update."""

    # -- the game --------------------------------------------------------------------------------
    height: int = 10
    width: int = 10
    obs_type: str = "features"

    # -- DQN -------------------------------------------------------------------------------------
    hidden: int = 128
    """Width of the Q-network's two hidden layers."""
    learning_rate: float = 1e-3
    gamma: float = 0.9
    """Discount factor."""
    buffer_size: int = 50_000
    """Transitions the replay memory keeps; the oldest are dropped."""
    learning_starts: int = 1_000
    """Env steps before the first update (and never before the memory holds one batch)."""
    eps_start: float = 1.0
    eps_end: float = 0.05
    exploration_steps: int = 10_000
    """Epsilon falls linearly from eps_start to eps_end over this many env steps."""
    target_update_every: int = 500
    """Copy the online network into the target network every this many env steps."""
    seed: int = 0

    def __post_init__(self):
        for name in ("inference_mode", "set_to_none", "array_batches"):
            check_bool(name, getattr(self, name))
        for name in ("learn_every", "batch_size", "hidden", "buffer_size", "exploration_steps",
                     "target_update_every"):
            check_int(name, getattr(self, name), 1)
        check_int("learning_starts", self.learning_starts, 0)
        if self.num_threads is not None:
            check_int("num_threads", self.num_threads, 1)
        rules.check_grid_size(self.height, self.width)
        rules.check_obs_type(self.obs_type)
        if self.batch_size > self.buffer_size:
            raise ValueError(f"batch_size={self.batch_size!r} must not exceed buffer_size={self.buffer_size!r}")
        check_number("learning_rate", self.learning_rate, above=0)
        for name in ("gamma", "eps_start", "eps_end"):
            check_number(name, getattr(self, name), at_least=0, at_most=1)
        check_seed("seed", self.seed)

    def replace(self, **changes) -> LoopSettings:
        """A copy with ``changes`` (validated like any settings)."""
        return dataclasses.replace(self, **changes)


# -- the loop -----------------------------------------------------------------------------------


@dataclasses.dataclass
class NaiveRunResult:
    """What one call of :meth:`NaiveDQN.run` did, and where its time went."""

    settings: LoopSettings
    steps: int
    """Env steps made in this run."""
    seconds: float
    """Wall-clock seconds of the loop."""
    times: dict[str, float]
    """Seconds spent in each part of ``PARTS``; they add up to ``seconds``."""
    updates: int
    """Gradient updates made in this run."""
    episode_scores: list[int]
    """Score (food eaten) of each game that ended in this run."""
    q_network: nn.Module
    """The online Q-network (the live one: it keeps learning if the agent runs on)."""

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")

    def microseconds_per_step(self) -> dict[str, float]:
        """Each part's time per env step, in microseconds."""
        return {part: 1e6 * seconds / max(self.steps, 1) for part, seconds in self.times.items()}


class NaiveDQN:
    """A single-env DQN agent on the CPU; :meth:`run` continues its training for a budget.

    Several ``run`` calls continue the same training (memory, networks, epsilon schedule), which
    lets a benchmark warm up and then time a few segments of one run.
    """

    def __init__(self, settings: LoopSettings | None = None):
        self.settings = s = settings if settings is not None else LoopSettings()
        if not isinstance(s, LoopSettings):
            raise TypeError(f"settings={s!r} must be a LoopSettings")
        torch.manual_seed(s.seed)
        self.rng = np.random.default_rng(s.seed)
        self.env = SnakeEnv(s.height, s.width, obs_type=s.obs_type)
        obs_shape = self.env.observation_space.shape
        self.q_network = QNetwork(obs_shape, hidden=s.hidden)
        self.target_network = copy.deepcopy(self.q_network)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=s.learning_rate)
        self.memory = ArrayReplay(s.buffer_size, obs_shape) if s.array_batches else DequeReplay(s.buffer_size, obs_shape)
        self.obs, _ = self.env.reset(seed=s.seed)
        self.total_steps = 0
        self.total_updates = 0

    def epsilon(self) -> float:
        s = self.settings
        fraction = min(self.total_steps / s.exploration_steps, 1.0)
        return s.eps_start + fraction * (s.eps_end - s.eps_start)

    def act(self, obs: np.ndarray, epsilon: float) -> int:
        """Epsilon-greedy action for one observation.

        The Q-values are computed on every step, also when the action will be random, so the
        cost of a step does not change as epsilon decays.
        """
        state = torch.tensor(obs, dtype=torch.float32).unsqueeze(0)
        if self.settings.inference_mode:
            with torch.inference_mode():
                q_values = self.q_network(state)
        else:
            q_values = self.q_network(state)  # records a graph nobody will use
        action = int(q_values.argmax(dim=1).item())
        if self.rng.random() < epsilon:
            action = int(self.rng.integers(rules.NUM_ACTIONS))
        return action

    def sample_indices(self) -> np.ndarray:
        """Uniform random memory positions (with replacement) for one batch."""
        return self.rng.integers(0, len(self.memory), size=self.settings.batch_size)

    def learn(self, batch) -> torch.Tensor:
        """One DQN update on ``batch``; returns the loss (detached)."""
        s = self.settings
        obs, actions, rewards, next_obs, terminated = batch
        q = self.q_network(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q = self.target_network(next_obs).max(dim=1).values
            target = rewards + s.gamma * (1.0 - terminated) * next_q
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=s.set_to_none)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def run(self, steps: int | None = None, seconds: float | None = None,
            progress: bool = True) -> NaiveRunResult:
        """Train for ``steps`` env steps or ``seconds`` of wall-clock time (give exactly one)."""
        if (steps is None) == (seconds is None):
            raise ValueError(f"give exactly one of steps={steps!r} and seconds={seconds!r}")
        if steps is not None:
            check_int("steps", steps, 1)
        else:
            check_number("seconds", seconds, above=0)
        s = self.settings
        threads_before = torch.get_num_threads()
        if s.num_threads is not None:
            torch.set_num_threads(s.num_threads)  # restored in `finally`
        env_time = act_time = replay_time = learn_time = 0.0
        scores, updates, done_steps = [], 0, 0
        bar = tqdm(total=steps, desc="naive DQN", unit="step", disable=not progress, mininterval=0.5)
        learn_from = max(s.learning_starts, s.batch_size)
        start = time.perf_counter()
        try:
            while (done_steps < steps) if steps is not None else (time.perf_counter() - start < seconds):
                epsilon = self.epsilon()

                t0 = time.perf_counter()
                action = self.act(self.obs, epsilon)
                t1 = time.perf_counter()
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                t2 = time.perf_counter()
                self.memory.append(self.obs, action, reward, next_obs, terminated)
                t3 = time.perf_counter()
                act_time += t1 - t0
                env_time += t2 - t1
                replay_time += t3 - t2

                self.obs = next_obs
                self.total_steps += 1
                done_steps += 1
                if terminated or truncated:
                    scores.append(info["score"])
                    t0 = time.perf_counter()
                    self.obs, _ = self.env.reset()
                    env_time += time.perf_counter() - t0

                if self.total_steps >= learn_from and self.total_steps % s.learn_every == 0:
                    t0 = time.perf_counter()
                    batch = self.memory.batch(self.sample_indices())
                    t1 = time.perf_counter()
                    self.learn(batch)
                    updates += 1
                    self.total_updates += 1
                    replay_time += t1 - t0
                    learn_time += time.perf_counter() - t1
                if self.total_steps % s.target_update_every == 0:
                    t0 = time.perf_counter()
                    self.target_network.load_state_dict(self.q_network.state_dict())
                    learn_time += time.perf_counter() - t0

                bar.update()
                if scores and done_steps % 1000 == 0:
                    bar.set_postfix(score=f"{np.mean(scores[-100:]):.2f}", refresh=False)
        finally:
            total = time.perf_counter() - start
            bar.close()
            if s.num_threads is not None:
                torch.set_num_threads(threads_before)
        parts = {"env": env_time, "act": act_time, "replay": replay_time, "learn": learn_time}
        parts["other"] = max(total - sum(parts.values()), 0.0)
        return NaiveRunResult(s, done_steps, total, parts, updates, scores, self.q_network)


def run_naive_dqn(settings: LoopSettings | None = None, *, steps: int | None = None,
                  seconds: float | None = None, progress: bool = True) -> NaiveRunResult:
    """Train a fresh naive DQN for ``steps`` env steps or ``seconds`` (exactly one of them)."""
    return NaiveDQN(settings).run(steps=steps, seconds=seconds, progress=progress)
