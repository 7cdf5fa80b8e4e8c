"""DQN on ``VecSnake``: the naive DQN's loop vectorized, with any replay buffer (trained in notebook 05).

The naive DQN (``learn.naive_dqn``) steps one game, asks the network for one action, stores one
transition in a deque and learns from a batch assembled from a list, every step. Here
``num_envs`` games step together; one forward pass picks all their actions (epsilon-greedy, on
the device); the transitions go into a replay buffer; and every ``train_every`` vector steps the
learner takes ``gradient_steps`` Double-DQN updates against a target network copied every
``target_update_every`` updates. As in ``PPO``, the loop reads the host once per iteration: the
finished games' scores and a flag that every TD error and weight stayed finite (a test audits
``act_and_learn``).

``buffer`` picks the replay buffer by name (``replay.KINDS``): by default ``"tensor"``, on the
learner's device. The host-memory buffers copy every added batch from a GPU and wait for it,
except ``"pinned"``, whose ``sample`` waits instead. ``"prioritized"`` weights each loss by the
importance weights, sets priorities to ``|TD error| + PRIORITY_EPS``, and anneals ``beta`` from
``priority_beta`` to 1 over the budget.

``compile`` and ``cuda_graphs`` compile or capture acting and the TD update (``gpu.graphs``):
epsilon is a device tensor, so a new one needs no recompile, and Adam is graph-safe. The env
step and the buffer stay eager: the buffers differ in what they can take.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch import nn

from ..core.checks import check_bool, check_choice, check_int, check_number, check_seed
from ..core.device import get_device
from ..gpu.graphs import compile_or_say_why, graph_safe_adam, load_optimizer_state, with_launch_settings
from ..replay import KINDS, make_buffer
from ..replay.prioritized import PrioritizedReplayBuffer
from ..snake import rules
from ..snake.vec import VecSnake
from .checkpoint import (
    check_entries,
    check_env_state,
    check_finite_tensor,
    check_optimizer_state,
    check_weights,
)
from .nets import DivergedError, QNetwork, weights_finite

PRIORITY_EPS = 1e-6
"""Added to ``|TD error|`` for a new priority, so that no transition's priority is zero."""


@dataclasses.dataclass
class DQNConfig:
    """Hyperparameters of ``DQN`` (defaults suit a 10x10 grid on a CPU)."""

    obs_type: str = "features"
    height: int = 10
    width: int = 10
    num_envs: int = 64
    """Games stepped together; each vector step adds this many transitions."""
    steps_per_iteration: int = 32
    """Vector steps per ``iterate`` call (between two reads of the finished games' scores)."""
    buffer: str = "tensor"
    """The replay buffer, by name: one of ``replay.base.KINDS``."""
    buffer_size: int = 100_000
    """Transitions kept; the oldest are overwritten."""
    priority_alpha: float = 0.6
    """``buffer="prioritized"`` only: how strongly priorities skew sampling (0: uniform)."""
    priority_beta: float = 0.4
    """``buffer="prioritized"`` only: the importance-weight exponent at the start (it rises to 1)."""
    batch_size: int = 256
    learning_rate: float = 5e-4
    gamma: float = 0.99
    train_every: int = 1
    """Learn every this many vector steps ..."""
    gradient_steps: int = 1
    """... taking this many gradient steps each time."""
    target_update_every: int = 250
    """Copy the online network into the target network every this many gradient steps."""
    learning_starts: int = 5_000
    """Transitions to collect before the first update."""
    eps_start: float = 1.0
    eps_end: float = 0.02
    exploration_fraction: float = 0.3
    """Epsilon decays linearly from eps_start to eps_end over this fraction of the budget."""
    max_grad_norm: float = 10.0
    hidden: int = 128
    compile: bool = False
    """Run acting and the TD update through ``torch.compile`` (``gpu.graphs``); the first calls pay the compile."""
    cuda_graphs: bool = False
    """Capture acting and the TD update each in a CUDA graph and replay it (``gpu.graphs``; CUDA only)."""
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        rules.check_obs_type(self.obs_type)
        rules.check_grid_size(self.height, self.width)
        check_choice("buffer", self.buffer, tuple(KINDS))
        check_number("priority_alpha", self.priority_alpha, at_least=0)
        check_number("priority_beta", self.priority_beta, at_least=0, at_most=1)
        for name in ("num_envs", "steps_per_iteration", "buffer_size", "batch_size",
                     "train_every", "gradient_steps", "target_update_every", "hidden"):
            check_int(name, getattr(self, name), 1)
        check_int("learning_starts", self.learning_starts, 0)
        check_seed("seed", self.seed)
        for name in ("compile", "cuda_graphs"):
            check_bool(name, getattr(self, name))
        device = get_device(self.device, param="device")
        if self.cuda_graphs and device.type != "cuda":
            raise ValueError(f"cuda_graphs=True needs a CUDA GPU, not device={self.device!r}")
        if self.num_envs > self.buffer_size:
            raise ValueError(f"buffer_size={self.buffer_size!r} must hold at least one vector step "
                             f"(num_envs={self.num_envs!r})")
        if self.learning_starts > self.buffer_size:
            raise ValueError(f"learning_starts={self.learning_starts!r} must not exceed "
                             f"buffer_size={self.buffer_size!r}: the buffer never holds more, so "
                             "learning would never start")
        for name in ("gamma", "eps_start", "eps_end", "exploration_fraction"):
            check_number(name, getattr(self, name), at_least=0, at_most=1)
        for name in ("learning_rate", "max_grad_norm"):
            check_number(name, getattr(self, name), above=0)


class DQN:
    """The DQN learner: env, online and target networks, optimizer and replay buffer."""

    algorithm = "dqn"

    def __init__(self, config: DQNConfig):
        self.device = get_device(config.device, param="device")
        if config.compile and not compile_or_say_why(True, self.device, "DQN (compile=True)"):
            config = dataclasses.replace(config, compile=False)
        self.config = c = config
        torch.manual_seed(c.seed)
        self.env = VecSnake(c.num_envs, c.height, c.width, obs_type=c.obs_type, device=self.device,
                            seed=c.seed, check_action_values=False)
        obs_shape = self.env.single_observation_space.shape
        self.model = QNetwork(obs_shape, hidden=c.hidden).to(self.device)
        self.target = copy.deepcopy(self.model)
        if c.compile or c.cuda_graphs:
            self.optimizer = graph_safe_adam(self.model.parameters(), c.learning_rate, device=self.device)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c.learning_rate)
        options = {"num_actions": int(self.env.single_action_space.n)}  # the buffer refuses other actions
        if c.buffer == "prioritized":
            options.update(alpha=c.priority_alpha, beta=c.priority_beta)
        try:  # a buffer checks that it fits before it allocates: say which setting asked for it
            self.buffer = make_buffer(c.buffer, c.buffer_size, obs_shape, self.device, **options)
        except ValueError as error:
            raise ValueError(f"buffer_size={c.buffer_size!r} (buffer={c.buffer!r}): {error}") from None
        self.prioritized = isinstance(self.buffer, PrioritizedReplayBuffer)
        self.obs, _ = self.env.reset(seed=c.seed)
        self.env_steps = 0
        self.vector_steps = 0
        self.updates = 0
        self._epsilon = torch.zeros((), device=self.device)  # the step's epsilon, on the device
        self._losses_finite = torch.ones((), dtype=torch.bool, device=self.device)  # every TD error finite?
        self._ones = torch.ones(c.batch_size, device=self.device)  # the weights of a uniform buffer's batch
        launches = {"compile": c.compile, "cuda_graphs": c.cuda_graphs}
        self._act_fn = with_launch_settings(self._explore, self.device, **launches)
        # backward and the optimizer step break the update's graph
        self._update_fn = with_launch_settings(self._td_update, self.device, **launches, fullgraph=False)

    def epsilon(self, budget_used: float) -> float:
        c = self.config
        fraction = min(budget_used / c.exploration_fraction, 1.0) if c.exploration_fraction > 0 else 1.0
        return c.eps_start + fraction * (c.eps_end - c.eps_start)

    def act(self, obs: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
        """Greedy actions, each replaced by a random one with probability ``epsilon``."""
        with torch.inference_mode():
            return self._explore(obs, epsilon)

    def _explore(self, obs: torch.Tensor, epsilon: float | torch.Tensor) -> torch.Tensor:
        """``act``'s choice; ``epsilon`` may be a 0-d device tensor (``self._epsilon``), so that a compiled
        or captured step takes a new value without recompiling."""
        greedy = self.model(obs).argmax(-1)
        explore = torch.rand(obs.shape[0], device=obs.device) < epsilon
        return torch.where(explore, torch.randint_like(greedy, 3), greedy)

    def iterate(self, budget_used: float = 0.0) -> torch.Tensor:
        """``steps_per_iteration`` vector steps with learning; returns finished games' scores (CPU)."""
        c = self.config
        epsilon = self.epsilon(budget_used)
        if self.prioritized:
            self.buffer.beta = c.priority_beta + (1.0 - c.priority_beta) * min(budget_used, 1.0)
        self._losses_finite.fill_(True)
        steps = [self.act_and_learn(epsilon) for _ in range(c.steps_per_iteration)]
        diverged = ~(self._losses_finite & weights_finite(self.model)).view(1)
        # The one host read: the finished games' scores, and whether an update diverged.
        read = torch.cat([torch.stack([torch.where(done, score, -1) for score, done in steps]).flatten(),
                          diverged.long()]).cpu()
        if read[-1]:
            raise DivergedError(f"DQN diverged by env step {self.env_steps:,}: a TD error or the weights are not "
                                "finite (NaN or inf); try a smaller learning_rate or max_grad_norm")
        scores = read[:-1]
        return scores[scores >= 0]

    def act_and_learn(self, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One vector step: act, step the env, store the transitions, learn when due. No host read.

        Returns the finished games' scores and which games finished, on the device.
        """
        c = self.config
        self._epsilon.fill_(epsilon)
        with torch.no_grad():
            action = self._act_fn(self.obs, self._epsilon)
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = (terminated | truncated).view(-1, *[1] * (obs.dim() - 1))
        # A finished game's next observation is its real last one, not the restarted game's.
        next_obs = torch.where(done, info["final_obs"], obs)
        self.buffer.add(self.obs, action, reward, next_obs, terminated)
        self.obs = obs
        self.env_steps += c.num_envs
        self.vector_steps += 1
        if len(self.buffer) >= c.learning_starts and self.vector_steps % c.train_every == 0:
            for _ in range(c.gradient_steps):
                self._learn()
        return info["episode"]["score"], info["_episode"]

    def _learn(self):
        c = self.config
        batch = self.buffer.sample(c.batch_size)
        weights = batch["weights"] if self.prioritized else self._ones
        td_error = self._update_fn(batch["obs"], batch["actions"], batch["rewards"], batch["next_obs"],
                                   batch["terminated"], weights)
        self._losses_finite &= td_error.isfinite().all()
        if self.prioritized:
            self.buffer.update_priorities(batch["indices"], td_error + PRIORITY_EPS)
        self.updates += 1
        if self.updates % c.target_update_every == 0:
            self.target.load_state_dict(self.model.state_dict())

    def _td_update(self, obs, actions, rewards, next_obs, terminated, weights) -> torch.Tensor:
        """One Double-DQN step on a batch, its Huber losses weighted by ``weights``; returns ``|TD error|``.

        Uniform weights of 1 give exactly the plain mean loss; a prioritized buffer's importance
        weights correct for its skewed sampling.
        """
        c = self.config
        with torch.no_grad():
            # Double DQN: the online network picks the next action, the target network rates it.
            next_action = self.model(next_obs).argmax(-1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_action).squeeze(1)
            target = rewards + c.gamma * (1.0 - terminated) * next_q
        q = self.model(obs).gather(1, actions[:, None]).squeeze(1)
        loss = (weights * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        self.optimizer.step()
        return (q.detach() - target).abs()

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "buffer": self.buffer.state_dict(),
            "env": self.env.state_dict(),
            "obs": self.obs,
            "env_steps": self.env_steps,
            "vector_steps": self.vector_steps,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` of a learner with the same settings, all or nothing.

        Everything but the buffer is checked first (:meth:`check_state`), then the buffer loads, checking
        its own part before it changes anything. So anything wrong raises naming the entry, and the
        learner stays exactly as it was.
        """
        self.check_state(state)
        self.buffer.load_state_dict(state["buffer"])
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.env.load_state_dict(state["env"])
        self.obs = state["obs"].to(self.device, copy=True)  # shares nothing with the state's learner
        self.env_steps, self.vector_steps = int(state["env_steps"]), int(state["vector_steps"])
        self.updates = int(state["updates"])

    def check_state(self, state) -> None:
        """Raise naming the entry unless every part of ``state`` but the buffer fits this learner; changes nothing."""
        check_entries("state", state, ("model", "target", "optimizer", "buffer", "env", "obs", "env_steps",
                                       "vector_steps", "updates"))
        check_weights("state['model']", state["model"], self.model)
        check_weights("state['target']", state["target"], self.target)
        check_optimizer_state("state['optimizer']", state["optimizer"], self.optimizer)
        check_env_state("state['env']", state["env"], self.env)
        check_finite_tensor("state['obs']", state["obs"], self.obs.shape)
        for name in ("env_steps", "vector_steps", "updates"):
            check_int(f"state[{name!r}]", state[name], 0)
