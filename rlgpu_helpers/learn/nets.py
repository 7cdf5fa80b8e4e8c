"""Networks for Snake: an MLP for ``"features"`` and a small CNN for ``"grid"`` observations.

Introduced in notebook 01 (the Q-network of the naive DQN) and used by every trainer after it.

``make_encoder`` picks the trunk from the observation shape; ``QNetwork`` and ``ActorCritic`` put
heads on it. Initialisation follows CleanRL's PPO: orthogonal weights with gain sqrt(2) in the
trunk, a tiny gain on the policy head (so the first policy is close to uniform) and gain 1 on the
value head, zero biases.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.checks import check_int, check_ints


def init_layer(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    """Orthogonal weights with ``gain``, zero bias (CleanRL's ``layer_init``)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _check_obs_shape(obs_shape) -> tuple[int, ...]:
    obs_shape = check_ints("obs_shape", tuple(obs_shape))
    if len(obs_shape) not in (1, 3):
        raise ValueError(f"obs_shape={obs_shape!r} must be (features,) or (channels, height, width)")
    return obs_shape


def make_encoder(obs_shape, hidden: int = 128) -> nn.Sequential:
    """The trunk for ``obs_shape``: two tanh layers for a vector, two 3x3 convolutions for a grid.

    Returns a module mapping a batch of observations to ``(batch, hidden)`` features.
    """
    obs_shape = _check_obs_shape(obs_shape)
    check_int("hidden", hidden)
    if len(obs_shape) == 1:
        return nn.Sequential(
            init_layer(nn.Linear(obs_shape[0], hidden)),
            nn.Tanh(),
            init_layer(nn.Linear(hidden, hidden)),
            nn.Tanh(),
        )
    channels, height, width = obs_shape
    return nn.Sequential(
        init_layer(nn.Conv2d(channels, 32, 3, padding=1)),
        nn.ReLU(),
        init_layer(nn.Conv2d(32, 64, 3, padding=1)),
        nn.ReLU(),
        nn.Flatten(),
        init_layer(nn.Linear(64 * height * width, hidden)),
        nn.ReLU(),
    )


class QNetwork(nn.Module):
    """Q-values of the 3 actions for a batch of observations (DQN)."""

    def __init__(self, obs_shape, num_actions: int = 3, hidden: int = 128):
        super().__init__()
        self.encoder = make_encoder(obs_shape, hidden)
        self.head = init_layer(nn.Linear(hidden, num_actions), gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(obs))


class ActorCritic(nn.Module):
    """Policy logits and state value for a batch of observations (PPO).

    Actor and critic have separate trunks: for small inputs that costs little and keeps the
    value loss from pulling on the policy's features.
    """

    def __init__(self, obs_shape, num_actions: int = 3, hidden: int = 128):
        super().__init__()
        self.actor = nn.Sequential(make_encoder(obs_shape, hidden), init_layer(nn.Linear(hidden, num_actions), 0.01))
        self.critic = nn.Sequential(make_encoder(obs_shape, hidden), init_layer(nn.Linear(hidden, 1), 1.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.logits(obs), self.value(obs)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's action logits."""
        return self.actor(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's estimate of each observation's value."""
        return self.critic(obs).squeeze(-1)


class DivergedError(RuntimeError):
    """Training produced a loss or weights that are not finite (NaN or inf): it cannot go on."""


def weights_finite(module: nn.Module) -> torch.Tensor:
    """Whether every parameter of ``module`` is finite, as a bool tensor on its device: no host read."""
    return torch.stack([parameter.isfinite().all() for parameter in module.parameters()]).all()
