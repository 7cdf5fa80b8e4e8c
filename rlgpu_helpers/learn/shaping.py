"""Reward shaping that cannot change the best policy: a potential on the distance to the food (notebook 12).

A game that fills the board is thousands of steps long, and its rewards are far apart: early in
training almost every step earns nothing. Potential-based shaping (Ng, Harada and Russell, 1999)
adds to each step's reward ``F = gamma * phi(s') - phi(s)`` for a potential ``phi`` of the state;
summed over a game the added rewards telescope to ``-phi(s_0)``, a constant of the start, so
every policy's return changes by the same amount and the best policy stays the best. Here
``phi(s) = -distance(head, food) / (height + width - 2)``: a step towards the food earns a little,
a step away costs a little. The end of a game has potential 0.

The distance is read from the observation itself, for the two image observations: ``"ego_grid"``
(the head is the centre of the window) and ``"grid"`` (the head has its own channel). It is
computed from the one-hot channels with sums, not indexing, so nothing waits for the device.
"""

from __future__ import annotations

import torch

from ..snake import rules

SHAPED_OBS_TYPES = ("ego_grid", "grid")
"""The observation types the food's distance can be read from."""


def _position(channel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column of the one cell set in each ``(rows, cols)`` map of a batch (0, 0 where none is)."""
    rows = torch.arange(channel.shape[-2], device=channel.device, dtype=channel.dtype)
    cols = torch.arange(channel.shape[-1], device=channel.device, dtype=channel.dtype)
    return (channel.sum(-1) * rows).sum(-1), (channel.sum(-2) * cols).sum(-1)


def food_distance(obs: torch.Tensor, obs_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The head-to-food distance in steps (Manhattan) of each observation of a batch, and whether there is food."""
    if rules.check_obs_type(obs_type) not in SHAPED_OBS_TYPES:
        raise ValueError(f"obs_type={obs_type!r}: the food's distance is read from an image observation, "
                         f"one of {SHAPED_OBS_TYPES}")
    food = obs[:, 1] if obs_type == "ego_grid" else obs[:, 2]
    food_row, food_col = _position(food)
    if obs_type == "ego_grid":
        centre = obs.shape[-1] // 2
        head_row = head_col = torch.full_like(food_row, centre)
    else:
        head_row, head_col = _position(obs[:, 0])
    return (food_row - head_row).abs() + (food_col - head_col).abs(), food.sum((-2, -1)) > 0


def food_potential(obs: torch.Tensor, obs_type: str, height: int, width: int) -> torch.Tensor:
    """``phi`` of each observation: minus the distance to the food over the longest one; 0 without food."""
    distance, has_food = food_distance(obs, obs_type)
    return torch.where(has_food, -distance / (height + width - 2), torch.zeros_like(distance))


def shaping_rewards(obs: torch.Tensor, reached: torch.Tensor, ended: torch.Tensor, gamma: float, obs_type: str,
                    height: int, width: int) -> torch.Tensor:
    """``gamma * phi(reached) - phi(obs)`` per game: ``reached`` is the observation each step led to (for a
    game that restarted, its last one); a game that ``ended`` goes to potential 0."""
    after = torch.where(ended, 0.0, food_potential(reached, obs_type, height, width))
    return gamma * after - food_potential(obs, obs_type, height, width)
