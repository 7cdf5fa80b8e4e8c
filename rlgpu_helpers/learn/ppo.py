"""PPO on ``VecSnake``, the whole loop on the env's device (introduced in notebook 11).

Read it top to bottom, CleanRL style: ``PPOConfig`` documents every hyperparameter, and
``PPO.iterate`` collects ``num_steps`` steps of ``num_envs`` games, then runs ``update_epochs``
passes of clipped-objective minibatch updates over them.

What makes it fast: the env, acting, the rollout storage and the update stay on one device, and
the inner loops read nothing back to the host (a test audits ``rollout_step``). Actions are drawn
with the Gumbel-max trick, since ``Categorical.sample`` synchronizes; one pass of the trunk gives
both the policy's logits and the critic's value; the minibatches are a permutation drawn on the
device. ``iterate`` reads the host once: the finished games' scores, and a flag that every loss
and weight stayed finite (``DivergedError`` if not, so a diverged run is never checkpointed).

Each lesson is a switch. ``accumulation_steps`` (notebook 07) takes a minibatch in micro-batches
and gives exactly the unaccumulated update. ``precision`` (notebook 08) autocasts each forward
pass only; everything after the network stays float32, and fp16 adds a GradScaler and a fused
Adam, so a skipped step is decided on the device. ``compile`` and ``cuda_graphs`` (notebook 09)
compile or capture the rollout step, GAE and the update, with a graph-safe Adam; ``warm_up`` pays
for them on iterations it then undoes. A truncated game did not end: its reward is topped up with
the value of its real last observation. For long games (notebook 12), ``bootstrap_truncated``,
``reward_scale``, ``ent_coef_final``, ``net`` and ``mirror``: the preset ``learn/presets/win.toml``,
read by ``learn.settings.ppo_settings``, sets them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import torch

from ..core.checks import check_bool, check_choice, check_int, check_number, check_seed
from ..core.device import available_memory, check_fits, get_device, synchronize
from ..gpu.accumulate import accumulate_gradients, accumulated_step
from ..gpu.graphs import (
    CapturedStep,
    compile_or_say_why,
    graph_safe_adam,
    load_optimizer_state,
    set_learning_rate,
    with_launch_settings,
)
from ..gpu.precision import (
    check_precision,
    fp32_matmul_precision,
    precision_context,
    uses_tf32,
)
from ..snake import rules
from ..snake.vec import VecSnake
from .checkpoint import (
    check_entries,
    check_env_state,
    check_finite_tensor,
    check_optimizer_state,
    check_weights,
)
from .nets import NETS, ActorCritic, DivergedError, weights_finite
from .shaping import SHAPED_OBS_TYPES, shaping_rewards
from .symmetry import feature_mirror_order, mirror_actions


@dataclasses.dataclass
class PPOConfig:
    """Hyperparameters of ``PPO`` (defaults: the 2-core CPU settings of notebook 11)."""

    obs_type: str = "features"
    """Observation type of the env: ``"features"`` (MLP) or ``"grid"`` (CNN)."""
    height: int = 10
    width: int = 10
    num_envs: int = 512
    """Games stepped together; more use a GPU better, fewer update more often."""
    num_steps: int = 64
    """Steps per game in one rollout; a rollout holds ``num_envs * num_steps`` transitions."""
    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per pass; minibatch size is ``num_envs * num_steps / num_minibatches``."""
    learning_rate: float = 1e-3
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the training budget."""
    gamma: float = 0.99
    """Discount factor."""
    reward_scale: float = 1.0
    """Every reward times this before learning (not the scores): a smaller scale keeps the returns of a
    long game from swamping the policy's gradient in a shared trunk."""
    food_shaping: float = 0.0
    """Weight of the potential-based reward for moving towards the food (``learn.shaping``); 0: none.
    Needs an image observation (``"ego_grid"`` or ``"grid"``)."""
    max_steps_without_food: int | None = None
    """The env's truncation: a game is cut off after this many steps without food (None: the rules'
    ``height * width``, enough for a path through every cell)."""
    bootstrap_truncated: bool = True
    """Top up a truncated game's last reward with the value of its last observation (it did not end).
    False: a truncation ends the game as a death does, so circling without eating costs the future."""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_coef: float = 0.2
    """PPO's clipping range for the probability ratio."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (keeps exploring)."""
    ent_coef_final: float | None = None
    """With a value, the entropy weight goes linearly from ``ent_coef`` to this over the budget."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Gradient clipping threshold (global L2 norm), applied once per minibatch to the summed gradient."""
    target_kl: float | None = None
    """Stop an update's epochs once the approximate KL from the rollout's policy passes this (one host
    read per epoch); None: run every epoch."""
    accumulation_steps: int = 1
    """Micro-batches per minibatch (notebook 07): the same update, in the memory of a micro-batch.
    1: no accumulation."""
    hidden: int = 64
    """Width of the hidden layers."""
    net: str = "auto"
    """The network (``learn.nets``): ``"auto"``, separate actor and critic trunks for the observation;
    ``"mlp"`` or ``"ego_cnn"`` (``obs_type="ego_grid"``), one trunk both heads share."""
    mirror: bool = False
    """Play half of the games mirrored left-right (``learn.symmetry``): the rules are symmetric, so this
    teaches the symmetry at no cost, and the rollout stays on-policy."""
    precision: str = "fp32"
    """The forward passes' precision (notebook 08): ``"fp32"``, ``"tf32"`` (CUDA only), ``"bf16"`` or
    ``"fp16"`` (autocast around each forward pass; fp16 adds a GradScaler)."""
    compile: bool = False
    """Run the rollout step, GAE and the minibatch update through ``torch.compile`` (notebook 09)."""
    cuda_graphs: bool = False
    """Capture the rollout step, GAE and the update each in a CUDA graph (notebook 09; CUDA only)."""
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        rules.check_obs_type(self.obs_type)
        rules.check_grid_size(self.height, self.width)
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden", "accumulation_steps"):
            check_int(name, getattr(self, name), 1)
        for name in ("anneal_lr", "compile", "cuda_graphs", "bootstrap_truncated", "mirror"):
            check_bool(name, getattr(self, name))
        check_choice("net", self.net, NETS)
        if self.net == "ego_cnn" and self.obs_type != "ego_grid":
            raise ValueError(f"net='ego_cnn' reads the board seen from the head: it needs obs_type='ego_grid', "
                             f"not {self.obs_type!r}")
        rules.check_max_steps_without_food(self.max_steps_without_food, self.height, self.width)
        check_seed("seed", self.seed)
        device = get_device(self.device, param="device")
        check_precision("precision", self.precision)
        if self.precision == "tf32" and device.type != "cuda":
            raise ValueError(f"precision='tf32' needs a CUDA GPU, not device={self.device!r}")
        if self.cuda_graphs and device.type != "cuda":
            raise ValueError(f"cuda_graphs=True needs a CUDA GPU, not device={self.device!r}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps ({self.num_envs * self.num_steps}) must be divisible by "
                f"num_minibatches ({self.num_minibatches})"
            )
        minibatch = self.num_envs * self.num_steps // self.num_minibatches
        if self.accumulation_steps > minibatch:
            raise ValueError(
                f"accumulation_steps={self.accumulation_steps} is larger than the minibatch ({minibatch} = "
                f"num_envs * num_steps / num_minibatches transitions): every micro-batch needs at least one transition"
            )
        for name in ("gamma", "gae_lambda"):
            check_number(name, getattr(self, name), at_least=0, at_most=1)
        for name in ("learning_rate", "clip_coef", "max_grad_norm"):
            check_number(name, getattr(self, name), above=0)
        for name in ("ent_coef", "vf_coef"):
            check_number(name, getattr(self, name), at_least=0)
        if self.ent_coef_final is not None:
            check_number("ent_coef_final", self.ent_coef_final, at_least=0)
        check_number("reward_scale", self.reward_scale, above=0)
        check_number("food_shaping", self.food_shaping, at_least=0)
        if self.food_shaping and self.obs_type not in SHAPED_OBS_TYPES:
            raise ValueError(f"food_shaping={self.food_shaping} reads the food's distance from an image: it needs "
                             f"obs_type in {SHAPED_OBS_TYPES}, not {self.obs_type!r}")
        if self.target_kl is not None:
            check_number("target_kl", self.target_kl, above=0)


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None = None, *,
                   noise: torch.Tensor | None = None) -> torch.Tensor:
    """One action per row drawn from ``softmax(logits)``, without a host sync.

    The Gumbel-max trick: ``argmax(logits + g)`` with ``g = -log(e)``, ``e ~ Exponential(1)``,
    is exactly a draw from the softmax distribution. Unlike ``Categorical.sample``, nothing in
    it waits for the device. ``generator`` seeds the draws (an evaluation's); None uses torch's own.
    ``noise``: the draws ``e`` themselves, shaped as ``logits``, for a caller that draws more at once.
    """
    if noise is None:
        noise = torch.empty_like(logits).exponential_(generator=generator)
    return (logits - noise.log()).argmax(-1)


def compute_gae(rewards, values, dones, next_value, gamma: float, gae_lambda: float):
    """Generalized advantage estimates and returns for a rollout of shape ``(steps, envs)``.

    ``dones[t]`` marks that the episode ended at step t (the env restarted after it), so step
    t + 1 is not its continuation; ``values[t]`` is V(obs[t]) and ``next_value`` is V of the
    observation after the last step. Truncated episodes must already carry their bootstrap in
    ``rewards``. Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following = next_value if t == steps - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * following * not_done - values[t]
        last = delta + gamma * gae_lambda * not_done * last
        advantages[t] = last
    return advantages, advantages + values


def rollout_bytes(config: PPOConfig) -> int:
    """Bytes of ``PPO``'s rollout storage: per step of each game an observation (float32), an action and a
    score (int64), six float32 values and a finished flag."""
    obs = math.prod(rules.observation_shape(config.obs_type, config.height, config.width))
    return config.num_steps * config.num_envs * (4 * obs + 8 + 8 + 6 * 4 + 1)


class PPO:
    """The PPO learner: env, model, optimizer and rollout storage, all on ``config.device``."""

    algorithm = "ppo"

    def __init__(self, config: PPOConfig):
        self.device = get_device(config.device, param="device")
        if config.compile and not compile_or_say_why(True, self.device, "PPO (compile=True)"):
            config = dataclasses.replace(config, compile=False)
        self.config = c = config
        check_fits("num_envs", c.num_envs, rollout_bytes(c), available_memory(self.device),
                   f"{self.device} memory for the rollout storage ({c.num_steps} steps of every game)")
        torch.manual_seed(c.seed)
        self.env = VecSnake(
            c.num_envs, c.height, c.width, obs_type=c.obs_type, device=self.device, seed=c.seed,
            max_steps_without_food=c.max_steps_without_food,
            check_action_values=False,  # the policy only samples 0..2; skipping saves a sync
        )
        obs_shape = self.env.single_observation_space.shape
        self.model = ActorCritic(obs_shape, hidden=c.hidden, net=c.net).to(self.device)
        fused = True if c.precision == "fp16" else None  # the GradScaler's skip decided on the device
        if c.compile or c.cuda_graphs:
            self.optimizer = graph_safe_adam(self.model.parameters(), c.learning_rate, eps=1e-5, device=self.device,
                                             fused=fused)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c.learning_rate, eps=1e-5, fused=fused)
        self.scaler = torch.amp.GradScaler(self.device.type) if c.precision == "fp16" else None
        T, N, dev = c.num_steps, c.num_envs, self.device
        self.obs = torch.zeros(T, N, *obs_shape, device=dev)
        self.actions = torch.zeros(T, N, dtype=torch.int64, device=dev)
        self.logprobs = torch.zeros(T, N, device=dev)
        self.rewards = torch.zeros(T, N, device=dev)
        self.dones = torch.zeros(T, N, device=dev)
        self.values = torch.zeros(T, N, device=dev)
        self.scores = torch.zeros(T, N, dtype=torch.int64, device=dev)
        self.finished = torch.zeros(T, N, dtype=torch.bool, device=dev)
        self.advantages = torch.zeros(T, N, device=dev)
        self.returns = torch.zeros(T, N, device=dev)
        self._t = torch.zeros(1, dtype=torch.int64, device=dev)  # the step being stored, on the device
        self._losses_finite = torch.ones((), dtype=torch.bool, device=dev)  # every loss of this iteration finite?
        # The entropy weight, where it changes during the run: a device tensor set in place, which compiled
        # and captured updates read where it lies (a Python float would be baked into them).
        self._ent_coef = None if c.ent_coef_final is None else torch.tensor(float(c.ent_coef), device=dev)
        self._mirror_order = (None if not c.mirror or c.obs_type in ("grid", "ego_grid")
                              else torch.tensor(feature_mirror_order(c.obs_type), device=dev))
        self.next_obs, _ = self.env.reset(seed=c.seed)
        self.flipped = torch.zeros(N, dtype=torch.bool, device=dev)  # which games the policy sees mirrored
        if c.mirror:
            self.flipped.copy_(torch.rand(N, device=dev) < 0.5)
            self.next_obs = self._seen(self.next_obs, self.flipped)
        self.next_value = None  # the critic's value of next_obs, set by each collect (notebook 11 reads it)
        self.env_steps = 0
        self.iterations = 0
        launches = {"compile": c.compile, "cuda_graphs": c.cuda_graphs}
        self._rollout_fn = with_launch_settings(self._rollout_step_at, dev, **launches)
        self._gae_fn = with_launch_settings(self._gae, dev, **launches)
        # backward and the optimizer step break the update's graph
        self._update_fn = with_launch_settings(self.minibatch_update, dev, **launches, fullgraph=False)

    def iterate(self, budget_used: float = 0.0) -> torch.Tensor:
        """One rollout and one update; returns the scores of games that finished (on the CPU).
        ``budget_used`` (0..1), the share of the training budget spent, anneals the learning rate."""
        c = self.config
        # The one host read per iteration: the finished games' scores, and whether the update diverged.
        read = self.iterate_on_device(budget_used).cpu()
        if read[-1]:
            raise DivergedError(f"PPO diverged in iteration {self.iterations + 1}: a loss or the weights are not "
                                "finite (NaN or inf); try a smaller learning_rate or max_grad_norm")
        self.env_steps += c.num_steps * c.num_envs
        self.iterations += 1
        scores = read[:-1]
        return scores[scores >= 0]

    def iterate_on_device(self, budget_used: float = 0.0) -> torch.Tensor:
        """One rollout and one update, queued on the device without waiting for it.

        Returns what ``iterate`` reads back, still on the device: every rollout step's score
        where a game finished (-1 elsewhere), then 1 if a loss or a weight is not finite, else 0.
        """
        c = self.config
        if c.anneal_lr:
            set_learning_rate(self.optimizer, c.learning_rate * max(1.0 - budget_used, 0.0))
        if self._ent_coef is not None:
            self._ent_coef.fill_(c.ent_coef + (c.ent_coef_final - c.ent_coef) * min(max(budget_used, 0.0), 1.0))
        self._losses_finite.fill_(True)
        with self.matmul_precision():
            self.collect()
            self.update()
        diverged = ~(self._losses_finite & weights_finite(self.model)).view(1)
        return torch.cat([torch.where(self.finished, self.scores, -1).flatten(), diverged.long()])

    def warm_up(self) -> float:
        """Compile and capture what ``compile`` and ``cuda_graphs`` ask for, on iterations then undone.

        A compiled function compiles on its first call, a captured one is captured on its third: work
        that ``training.train`` keeps out of the training time. Everything those iterations changed is
        put back in place, so the graphs keep their tensors and the run is the one it would have been.
        Returns the seconds it took (0 for an eager learner).
        """
        c = self.config
        if not (c.compile or c.cuda_graphs):
            return 0.0
        synchronize(self.device)
        start = time.perf_counter()
        saved = self._iteration_state()
        for _ in range(CapturedStep.WARMUP + 1 if c.cuda_graphs else 1):
            self.iterate()
        self._restore_iteration_state(saved)
        synchronize(self.device)
        return time.perf_counter() - start

    def _iteration_state(self) -> dict:
        """Copies of everything an iteration changes that a later one reads (what ``warm_up`` undoes)."""
        return {
            "model": {name: value.clone() for name, value in self.model.state_dict().items()},
            "optimizer": [{key: value.clone() for key, value in self.optimizer.state.get(p, {}).items()}
                          for p in self.model.parameters()],
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "env": self.env.state_dict(),
            "next_obs": self.next_obs.clone(),
            "flipped": self.flipped.clone(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            "counters": (self.env_steps, self.iterations),
        }

    def _restore_iteration_state(self, saved: dict) -> None:
        """Put back what ``_iteration_state`` copied, into the same tensors (CUDA graphs read them there);
        Adam's state made since is zeroed, as a fresh Adam's is."""
        self.model.load_state_dict(saved["model"])  # copies into the parameters in place
        for p, before in zip(self.model.parameters(), saved["optimizer"]):
            for key, value in self.optimizer.state.get(p, {}).items():
                value.copy_(before[key]) if key in before else value.zero_()
        if self.scaler is not None:
            self.scaler.load_state_dict(saved["scaler"])  # fills its scale and growth tracker in place
        self.env.load_state_dict(saved["env"])
        self.next_obs = saved["next_obs"]
        self.flipped.copy_(saved["flipped"])
        torch.set_rng_state(saved["rng"])
        if saved["cuda_rng"] is not None:
            torch.cuda.set_rng_state(saved["cuda_rng"], self.device)
        self.env_steps, self.iterations = saved["counters"]

    def collect(self):
        """One rollout of ``num_steps`` steps of every game, then its advantages and returns (GAE)."""
        c = self.config
        with torch.inference_mode():
            for t in range(c.num_steps):
                self.rollout_step(t)
            self.next_value, advantages, returns = self._gae_fn(self.next_obs)
            self.advantages.copy_(advantages)  # into the same tensors every time: a captured update reads them there
            self.returns.copy_(returns)

    def _gae(self, next_obs: torch.Tensor):
        """The critic's value of ``next_obs`` (the observations after the rollout's last step), then GAE."""
        c = self.config
        with self._forward():  # rated by the critic as it is now
            next_value = self.model.value(next_obs).float()
        advantages, returns = compute_gae(self.rewards, self.values, self.dones, next_value, c.gamma, c.gae_lambda)
        return next_value, advantages, returns

    @torch.inference_mode()
    def rollout_step(self, t: int) -> None:
        """Act in every game, step the env and store step ``t`` of the rollout: no host read."""
        self._t.fill_(t)
        self.next_obs = self._rollout_fn(self._t, self.next_obs)

    def _rollout_step_at(self, t: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The rollout step ``t`` (a 1-element device tensor) from ``obs``; returns the next observations.
        With ``bootstrap_truncated``, a second pass of the critic rates the finished games' last observations."""
        c = self.config
        # Every random number of the step in one draw: a compiler may not reorder two draws of one stream
        # (torch 2.6 did, and compiled games then differed from eager ones under the same seed).
        noise = torch.empty(obs.shape[0], rules.NUM_ACTIONS + c.mirror, device=obs.device).exponential_()
        action, logprob, value = self.act(obs, noise[:, : rules.NUM_ACTIONS])
        next_obs, reward, terminated, truncated, info = self.env.step(
            torch.where(self.flipped, mirror_actions(action), action) if c.mirror else action)
        final_obs, done = info["final_obs"], terminated | truncated
        if c.mirror:  # a finished game's last observation as its game was seen; a new game is drawn again
            final_obs = self._seen(final_obs, self.flipped)
            new_flip = noise[:, -1] < math.log(2)  # P(e < ln 2) = 1/2 for e ~ Exponential(1)
            self.flipped.copy_(torch.where(done, new_flip, self.flipped))
            next_obs = self._seen(next_obs, self.flipped)
        if c.food_shaping:  # towards the food earns, away costs; a game's end has potential 0
            ended = terminated if c.bootstrap_truncated else done
            reached = torch.where(done.view(-1, *[1] * (obs.ndim - 1)), final_obs, next_obs)
            reward = reward + c.food_shaping * shaping_rewards(obs, reached, ended, c.gamma, c.obs_type, c.height,
                                                               c.width)
        if c.reward_scale != 1.0:
            reward = reward * c.reward_scale
        if c.bootstrap_truncated:  # a truncated game did not end: bootstrap from the value of its real last observation
            with self._forward():
                final_value = self.model.value(final_obs).float()
            reward = reward + c.gamma * final_value * truncated
        for storage, x in ((self.obs, obs), (self.actions, action), (self.logprobs, logprob), (self.values, value),
                           (self.rewards, reward), (self.dones, done.to(torch.float32)),
                           (self.scores, info["episode"]["score"]), (self.finished, info["_episode"])):
            storage.index_copy_(0, t, x[None].to(storage.dtype))
        return next_obs

    def _seen(self, obs: torch.Tensor, flipped: torch.Tensor) -> torch.Tensor:
        """``obs`` as the policy sees it: mirrored (``learn.symmetry.mirror_observation``) in the ``flipped`` games.

        The features' mirror is an index kept on the device, so that a CUDA graph can hold it.
        """
        mirrored = obs.flip(-1) if self._mirror_order is None else obs.index_select(-1, self._mirror_order)
        return torch.where(flipped.view(-1, *[1] * (obs.ndim - 1)), mirrored, obs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor]:
        """The policy acting on ``obs`` and the critic rating it, from one pass through the network:
        an action per row (sampled without a sync), its log-probability, and the value of ``obs``.
        ``noise``: the Exponential(1) draws of the sampling (``sample_actions``), if already drawn."""
        with self._forward():
            logits, value = self.model.logits_and_value(obs)
        logits = logits.float()
        action = sample_actions(logits, noise=noise)
        return action, torch.log_softmax(logits, -1).gather(1, action[:, None]).squeeze(1), value.float()

    def matmul_precision(self):
        """The TF32 setting of ``config.precision`` around a whole iteration, where compiled code cannot make it."""
        if self.config.precision == "fp32" or self.device.type != "cuda":
            return contextlib.nullcontext()
        return fp32_matmul_precision(uses_tf32(self.config.precision))

    def _forward(self):
        """The context of every forward pass: ``config.precision``'s autocast and TF32, only around it.

        fp32 adds none, so code around the learner decides. ``self.device`` is resolved once, in
        ``__init__``, so the compiled rollout checks no device.
        """
        if self.config.precision == "fp32":
            return contextlib.nullcontext()
        return precision_context(self.config.precision, self.device)

    def update(self):
        c = self.config
        batch = c.num_envs * c.num_steps
        minibatch = batch // c.num_minibatches
        for _ in range(c.update_epochs):
            order = torch.randperm(batch, device=self.device)
            for start in range(0, batch, minibatch):
                idx = order[start : start + minibatch]
                loss = self._update_fn(idx)
                if self.scaler is None:  # with one, a step with inf in it is skipped, as it should be
                    self._losses_finite &= loss.isfinite()
            if c.target_kl is not None and self._approx_kl(idx).item() > c.target_kl:
                break  # the one host read of an update, once per epoch, only with target_kl

    def minibatch_update(self, idx: torch.Tensor) -> torch.Tensor:
        """One optimizer step on the minibatch ``idx`` (accumulated over ``accumulation_steps``); returns the loss."""
        c = self.config
        return accumulated_step(self.optimizer, self._minibatch_loss(idx), idx, accumulation_steps=c.accumulation_steps,
                                max_grad_norm=c.max_grad_norm, scaler=self.scaler).loss

    def _approx_kl(self, idx: torch.Tensor) -> torch.Tensor:
        """KL(rollout policy || current policy) estimated on the transitions ``idx`` (``(r - 1) - log r``, r the ratio)."""
        with torch.no_grad(), self._forward():
            logits = self.model.logits(self.obs.flatten(0, 1)[idx])
        log_ratio = (torch.log_softmax(logits.float(), -1).gather(1, self.actions.flatten()[idx, None]).squeeze(1)
                     - self.logprobs.flatten()[idx])
        return self._mean_over_learners((log_ratio.exp() - 1 - log_ratio).mean())

    def _mean_over_learners(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over the learners sharing this update: one here (``learn.ppo_ddp`` has several)."""
        return value

    def _advantage_stats(self, advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and standard deviation that normalize a minibatch's advantages (over every learner in DDP)."""
        return advantages.mean(), advantages.std()

    def _minibatch_loss(self, idx: torch.Tensor, normalize_advantages_over: str = "minibatch"):
        """PPO's loss on the transitions ``idx`` of the flat rollout, as a function ``loss(rows)`` of a piece of it.

        The advantages are normalized with the statistics of the whole minibatch, computed once, so
        every micro-batch sees the unaccumulated update's normalization.
        ``normalize_advantages_over="micro-batch"`` is the classic mistake, kept for notebook 07 to show.
        """
        c = self.config
        check_choice("normalize_advantages_over", normalize_advantages_over, ("minibatch", "micro-batch"))
        obs = self.obs.flatten(0, 1)
        actions, logprobs = self.actions.flatten(), self.logprobs.flatten()
        advantages, returns = self.advantages.flatten(), self.returns.flatten()
        mean, std = self._advantage_stats(advantages[idx])

        def loss(rows: torch.Tensor) -> torch.Tensor:
            with self._forward():
                logits, value = self.model(obs[rows])
            logits, value = logits.float(), value.float()
            log_all = torch.log_softmax(logits, -1)
            new_logprob = log_all.gather(1, actions[rows, None]).squeeze(1)
            ratio = (new_logprob - logprobs[rows]).exp()
            adv = advantages[rows]
            if normalize_advantages_over == "minibatch":
                adv = (adv - mean) / (std + 1e-8)
            else:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef)).mean()
            value_loss = 0.5 * (value - returns[rows]).pow(2).mean()
            entropy = -(log_all.exp() * log_all).sum(-1).mean()
            ent_coef = c.ent_coef if self._ent_coef is None else self._ent_coef
            return policy_loss + c.vf_coef * value_loss - ent_coef * entropy

        return loss

    def minibatch_gradient(self, idx: torch.Tensor, *, accumulation_steps: int | None = None,
                           normalize_advantages_over: str = "minibatch") -> torch.Tensor:
        """Set every ``.grad`` to the gradient of PPO's loss on minibatch ``idx`` of the last rollout; return the loss.

        Accumulated over ``accumulation_steps`` micro-batches (default: the config's) as an update does,
        but neither clipped nor applied, so notebook 07 and the tests can compare it across steps.
        """
        steps = self.config.accumulation_steps if accumulation_steps is None else accumulation_steps
        self.optimizer.zero_grad(set_to_none=True)
        return accumulate_gradients(self._minibatch_loss(idx, normalize_advantages_over), idx,
                                    accumulation_steps=steps)

    def state_dict(self) -> dict:
        """Model, optimizer, env and counters (``training.train`` adds the RNG states)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
            "env": self.env.state_dict(),
            "next_obs": self.next_obs,
            **({"flipped": self.flipped} if self.config.mirror else {}),
            "env_steps": self.env_steps,
            "iterations": self.iterations,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` of a learner with the same settings, all or nothing: anything wrong
        raises naming the entry (:meth:`check_state`), and the learner stays as it was."""
        self.check_state(state)
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        if self.scaler is not None and "scaler" in state:  # a run started in another precision has none
            self.scaler.load_state_dict(state["scaler"])
        self.env.load_state_dict(state["env"])
        self.next_obs = state["next_obs"].to(self.device, copy=True)  # shares nothing with the state's learner
        if self.config.mirror:
            self.flipped.copy_(state["flipped"])
        self.env_steps = int(state["env_steps"])
        self.iterations = int(state["iterations"])

    def check_state(self, state) -> None:
        """Raise naming the entry unless :meth:`load_state_dict` can take all of ``state``; changes nothing."""
        check_entries("state", state, ("model", "optimizer", "env", "next_obs", "env_steps", "iterations")
                      + (("flipped",) if self.config.mirror else ()))
        check_weights("state['model']", state["model"], self.model)
        check_optimizer_state("state['optimizer']", state["optimizer"], self.optimizer)
        if self.scaler is not None and "scaler" in state:
            check_entries("state['scaler']", state["scaler"], ("scale",))
            check_number("state['scaler']['scale']", state["scaler"]["scale"], above=0)
        check_env_state("state['env']", state["env"], self.env)
        check_finite_tensor("state['next_obs']", state["next_obs"], self.next_obs.shape)
        for name in ("env_steps", "iterations"):
            check_int(f"state[{name!r}]", state[name], 0)
        if self.config.mirror:
            check_finite_tensor("state['flipped']", state["flipped"], self.flipped.shape)
            if state["flipped"].dtype != torch.bool:
                raise TypeError(f"state['flipped'] must be a bool tensor, not {state['flipped'].dtype}")


def ppo_with_rollout(dtype: torch.dtype = torch.float64, **config) -> PPO:
    """A PPO learner (``PPOConfig(**config)``) that has collected one rollout, its model and the
    rollout's float tensors then converted to ``dtype`` for comparing updates."""
    learner = PPO(PPOConfig(**config))
    learner.collect()
    learner.model.to(dtype)
    for name in ("obs", "logprobs", "rewards", "values", "advantages", "returns"):
        setattr(learner, name, getattr(learner, name).to(dtype))
    return learner
