"""Scoring a Q-network: greedy games on ``SnakeEnv``, and the random player to beat.

Introduced in notebook 01. The games are seeded, so the same network always gets the same
scores and two networks can be compared on the same games; ``score_gap`` says whether the
difference between two sets of scores is more than chance (notebook 02).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..core.checks import check_int, check_seed
from ..snake import rules
from ..snake.env import SnakeEnv


def _play(choose, episodes: int, seed: int, height: int, width: int, obs_type: str) -> np.ndarray:
    check_int("episodes", episodes, 1)
    check_seed("seed", seed)
    env = SnakeEnv(height, width, obs_type=obs_type)
    scores = []
    obs, _ = env.reset(seed=seed)
    while len(scores) < episodes:
        obs, _, terminated, truncated, info = env.step(choose(obs))
        if terminated or truncated:
            scores.append(info["score"])
            obs, _ = env.reset()
    return np.array(scores, dtype=np.float64)


def greedy_action(q_network: nn.Module, obs: np.ndarray) -> int:
    """The move with the highest Q-value for one observation (no exploration)."""
    with torch.inference_mode():
        return int(q_network(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0)).argmax(dim=1).item())


def evaluate(q_network: nn.Module, episodes: int = 100, seed: int = 0, *, height: int = 10,
             width: int = 10, obs_type: str = "features") -> np.ndarray:
    """Scores of ``episodes`` games played greedily (no exploration) by ``q_network``.

    The games are seeded, so the same network gives the same scores; ``.mean()`` is the mean score.
    """
    if not isinstance(q_network, nn.Module):
        raise TypeError(f"q_network={q_network!r} must be a torch.nn.Module")
    return _play(lambda obs: greedy_action(q_network, obs), episodes, seed, height, width, obs_type)


def evaluate_random(episodes: int = 1000, seed: int = 0, *, height: int = 10, width: int = 10) -> np.ndarray:
    """Scores of ``episodes`` seeded games with uniformly random actions: the score to beat."""
    rng = np.random.default_rng(seed)
    return _play(lambda obs: int(rng.integers(rules.NUM_ACTIONS)), episodes, seed, height, width, "features")


def standard_error(scores) -> float:
    """The standard error of the mean of ``scores`` (their standard deviation over sqrt(count))."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or len(scores) < 2:
        raise ValueError(f"scores must be a 1-d sequence of at least 2 scores, got shape {scores.shape}")
    return float(scores.std(ddof=1) / np.sqrt(len(scores)))


def score_gap(first, second) -> tuple[float, float]:
    """How much higher ``second``'s mean score is than ``first``'s, and that gap in standard errors.

    A gap within about 2 standard errors is what two equally good players often show on these
    many games; beyond it, one is likely better.
    """
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    gap = float(second.mean() - first.mean())
    error = float(np.hypot(standard_error(first), standard_error(second)))
    if error == 0:  # every game scored the same on both sides
        return gap, 0.0 if gap == 0 else math.copysign(math.inf, gap)
    return gap, gap / error
