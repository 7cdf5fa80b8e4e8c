"""Trained agents: save the network, load it back, watch it play (introduced in notebook 11).

A checkpoint holds everything needed to continue training (optimizer, env, replay buffer); an
agent file holds only what playing needs: the algorithm, its settings and the network's
weights. ``load_agent`` reads either. ``play_episode`` runs one game with the agent's greedy
policy and returns the states, so ``render.show_animation`` or ``save_animation`` can show it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..core.device import get_device
from ..snake import rules
from ..snake.vec import VecSnake
from .checkpoint import (
    CheckpointError,
    check_entries,
    check_weights,
    load_checkpoint,
    save_checkpoint,
)
from .nets import ActorCritic, QNetwork
from .training import FORMAT as TRAIN_FORMAT
from .training import check_checkpoint

AGENT_FORMAT = "rlgpu-agent/1"
NETWORKS = {"ppo": ActorCritic, "dqn": QNetwork}


@dataclasses.dataclass
class Agent:
    """A trained network and the settings it was trained with."""

    algorithm: str
    config: dict
    model: torch.nn.Module
    extra: dict = dataclasses.field(default_factory=dict)
    """Notes saved with an agent file: how it was trained (command, machine, time, score)."""

    @property
    def obs_type(self) -> str:
        return self.config["obs_type"]

    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """The action each network rates best: highest logit (PPO) or Q-value (DQN)."""
        with torch.inference_mode():
            out = self.model(obs)
        scores = out[0] if isinstance(out, tuple) else out
        return scores.argmax(-1)


def save_agent(path: str | Path, learner, extra: dict | None = None) -> Path:
    """Write ``learner``'s network and settings (plus ``extra`` notes) to ``path``."""
    state = {
        "format": AGENT_FORMAT,
        "algorithm": learner.algorithm,
        "config": dataclasses.asdict(learner.config),
        "model": {k: v.detach().cpu() for k, v in learner.model.state_dict().items()},
        "extra": dict(extra or {}),
    }
    return save_checkpoint(path, state)


def load_agent(path: str | Path, device: str | torch.device = "cpu") -> Agent:
    """An ``Agent`` from an agent file or a training checkpoint."""
    state = load_checkpoint(path)
    if state.get("format") == AGENT_FORMAT:
        weights, extra = state.get("model"), state.get("extra", {})
    elif state.get("format") == TRAIN_FORMAT:
        check_checkpoint(state, path)
        weights = state["learner"].get("model")
        extra = {"seconds": state["seconds"], "env_steps": state["learner"].get("env_steps")}
    else:
        raise CheckpointError(f"{path} is neither an agent file nor a training checkpoint of this package")
    algorithm, config = state.get("algorithm"), state.get("config")
    if algorithm not in NETWORKS:
        raise CheckpointError(f"{path} names an unknown algorithm {algorithm!r}")
    try:
        check_entries("config", config, ("obs_type", "height", "width", "hidden"))
        rules.check_grid_size(config["height"], config["width"])
        obs_shape = rules.observation_shape(rules.check_obs_type(config["obs_type"]), config["height"], config["width"])
        model = NETWORKS[algorithm](obs_shape, hidden=config["hidden"], **({"net": config["net"]} if "net" in config else {}))
        check_weights("model", weights, model)  # the network's entries and shapes, all finite
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: {error}") from None
    model.load_state_dict(weights)
    config = dict(config)
    device = get_device(device, param="device")
    config["device"] = str(device)
    return Agent(algorithm, config, model.to(device).eval(), dict(extra))


def play_episode(agent: Agent, seed: int = 0, max_steps: int = 10_000):
    """One game with the agent's greedy policy.

    Returns ``(states, score, won)``: every ``SnakeState`` from the start to the last one before
    the game ended (or ``max_steps`` steps), the food eaten, and whether the board was filled.
    """
    c = agent.config
    env = VecSnake(1, c["height"], c["width"], obs_type=c["obs_type"], device=c["device"], seed=seed,
                   max_steps_without_food=c.get("max_steps_without_food"))
    obs, _ = env.reset(seed=seed)  # the first game drawn from ``seed``
    states = [env.get_state(0)]
    for _ in range(max_steps):
        obs, _, terminated, truncated, info = env.step(agent.greedy_actions(obs))
        if bool(terminated[0] | truncated[0]):
            score = int(info["episode"]["score"][0])
            won = bool(info["episode"]["won"][0])
            if won:  # the last move went onto the last food: the board is full
                last = states[-1]
                step = (last.food[0] - last.body[0][0], last.food[1] - last.body[0][1])
                heading = rules.DIRECTION_DELTAS.index(step)
                states.append(rules.SnakeState((last.food,) + last.body, heading, None))
            return states, score, won
        states.append(env.get_state(0))
    return states, states[-1].score, False
