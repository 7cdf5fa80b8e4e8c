"""Networks for Snake: an MLP for ``"features"`` and a small CNN for ``"grid"`` observations.

Introduced in notebook 01 (the Q-network of the naive DQN) and used by every trainer after it.

``make_encoder`` picks the trunk from the observation shape (``net="auto"``) or by name: ``"mlp"``
(two ReLU layers on the flattened observation) or ``"ego_cnn"`` (:class:`EgoCNN`, for the board
seen from the head, ``obs_type="ego_grid"``). ``QNetwork`` and ``ActorCritic`` put heads on it.
Initialisation follows CleanRL's PPO: orthogonal weights with gain sqrt(2) in the trunk, a tiny
gain on the policy head (so the first policy is close to uniform), gain 1 on the value head.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.checks import check_choice, check_int, check_ints


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


NETS = ("auto", "mlp", "ego_cnn")
"""The trunks ``make_encoder`` builds (``PPOConfig.net``)."""


class EgoCNN(nn.Module):
    """A cheap trunk for the board seen from the head (``"ego_grid"``, 3 x S x S with the head at the centre).

    Two stride-2 3x3 convolutions (16 then 32 channels) summarize the whole window at a quarter
    of its resolution; the 5 x 5 cells around the head go in as they are, since the next moves
    need them exactly. One ReLU layer of ``hidden`` units joins both. About 0.4 M multiply-adds
    per 19 x 19 window, a tenth of two full-resolution convolutions (the ``"auto"`` CNN).
    """

    def __init__(self, obs_shape, hidden: int = 256):
        super().__init__()
        shape = _check_obs_shape(obs_shape)
        channels, rows, cols = shape if len(shape) == 3 else (0, 0, 0)
        if rows != cols or rows % 2 == 0 or rows < 5:
            raise ValueError(f"obs_shape={tuple(obs_shape)!r}: EgoCNN needs a square window of odd side >= 5, "
                             "centred on the head (obs_type='ego_grid')")
        self.centre = rows // 2
        self.convs = nn.Sequential(
            init_layer(nn.Conv2d(channels, 16, 3, stride=2, padding=1)),
            nn.ReLU(),
            init_layer(nn.Conv2d(16, 32, 3, stride=2, padding=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        side = (rows + 3) // 4  # each stride-2 convolution with padding 1 takes n to ceil(n / 2)
        self.join = nn.Sequential(init_layer(nn.Linear(32 * side * side + channels * 25, hidden)), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        near = obs[:, :, self.centre - 2 : self.centre + 3, self.centre - 2 : self.centre + 3].flatten(1)
        return self.join(torch.cat([self.convs(obs), near], 1))


def make_encoder(obs_shape, hidden: int = 128, net: str = "auto") -> nn.Module:
    """The trunk for ``obs_shape``, mapping a batch of observations to ``(batch, hidden)`` features.

    ``net="auto"``: two tanh layers for a vector, two 3x3 convolutions for a grid. ``"mlp"``: two
    ReLU layers on the flattened observation, whatever its shape. ``"ego_cnn"``: :class:`EgoCNN`.
    """
    obs_shape = _check_obs_shape(obs_shape)
    check_int("hidden", hidden)
    check_choice("net", net, NETS)
    if net == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            init_layer(nn.Linear(math.prod(obs_shape), hidden)),
            nn.ReLU(),
            init_layer(nn.Linear(hidden, hidden)),
            nn.ReLU(),
        )
    if net == "ego_cnn":
        return EgoCNN(obs_shape, hidden)
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

    With ``net="auto"`` actor and critic have separate trunks: for small inputs that costs little
    and keeps the value loss from pulling on the policy's features. A named ``net`` (``"mlp"``,
    ``"ego_cnn"``) is one trunk that both heads share: on a large observation the trunk is most of
    the cost, and ``forward`` runs it once for both.
    """

    def __init__(self, obs_shape, num_actions: int = 3, hidden: int = 128, net: str = "auto"):
        super().__init__()
        check_choice("net", net, NETS)
        if net == "auto":
            self.trunk = nn.Identity()
            self.actor = nn.Sequential(make_encoder(obs_shape, hidden), init_layer(nn.Linear(hidden, num_actions), 0.01))
            self.critic = nn.Sequential(make_encoder(obs_shape, hidden), init_layer(nn.Linear(hidden, 1), 1.0))
        else:
            self.trunk = make_encoder(obs_shape, hidden, net)
            self.actor = init_layer(nn.Linear(hidden, num_actions), 0.01)
            self.critic = init_layer(nn.Linear(hidden, 1), 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(obs)
        return self.actor(features), self.critic(features).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's action logits."""
        return self.actor(self.trunk(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's estimate of each observation's value."""
        return self.critic(self.trunk(obs)).squeeze(-1)

    def logits_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both, from one pass through the trunk: what acting needs (``forward`` is the same, for the loss)."""
        return self(obs)


class DivergedError(RuntimeError):
    """Training produced a loss or weights that are not finite (NaN or inf): it cannot go on."""


def weights_finite(module: nn.Module) -> torch.Tensor:
    """Whether every parameter of ``module`` is finite, as a bool tensor on its device: no host read."""
    return torch.stack([parameter.isfinite().all() for parameter in module.parameters()]).all()
