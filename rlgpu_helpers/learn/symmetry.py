"""Left-right symmetry of Snake: mirrored observations and actions, for augmentation and checks (notebook 12).

Reflect a game's board left-right and the snake's right becomes its left. The rules do not care:
the mirror image of a game (``rules.mirror_state``), played with the mirrored actions, goes
through the mirror images of the original states and earns the same rewards. So a policy should
answer a mirrored observation with the mirrored action probabilities. That gives twice the
training data for free (add each transition's mirror image) and a way to make any policy exactly
symmetric (:func:`symmetric_logits`).

Every observation type has a mirror, computed from the observation alone:

* ``"ego_grid"`` and ``"grid"``: the image flipped left-right (the last axis);
* ``"features"``: danger right and left swap, heading right and left swap, food right and left
  swap;
* ``"features_reach"``: as ``"features"``, and the space to the right and to the left swap.
"""

from __future__ import annotations

import numpy as np
import torch

from ..snake import rules

_FEATURES_MIRROR = (0, 2, 1, 3, 6, 5, 4, 7, 10, 9, 8)
"""Which feature of the original each feature of the mirrored ``"features"`` observation is."""
_REACH_MIRROR = _FEATURES_MIRROR + (11, 13, 12, 14)
"""The same for ``"features_reach"``: the space straight / right / left, then the length."""


def mirror_observation(obs, obs_type: str):
    """The observation of the mirror image of the state ``obs`` shows (same type, new array).

    ``obs`` is one observation or a batch (leading axes), a NumPy array or a torch tensor. For
    every state s: ``mirror_observation(observe(s)) == observe(mirror_state(s))``.
    """
    rules.check_obs_type(obs_type)
    if obs_type in ("grid", "ego_grid"):
        if obs.ndim < 3 or obs.shape[-3] != 3:
            raise ValueError(f"obs has shape {tuple(obs.shape)}: a {obs_type!r} observation is (..., 3, rows, cols)")
        return obs.flip(-1) if isinstance(obs, torch.Tensor) else np.flip(obs, -1).copy()
    order = feature_mirror_order(obs_type)
    if obs.ndim < 1 or obs.shape[-1] != len(order):
        raise ValueError(f"obs has shape {tuple(obs.shape)}: a {obs_type!r} observation is (..., {len(order)})")
    return obs[..., list(order)]


def feature_mirror_order(obs_type: str) -> tuple[int, ...]:
    """Which feature of the original observation each feature of the mirrored one is (the vector obs types)."""
    if rules.check_obs_type(obs_type) not in ("features", "features_reach"):
        raise ValueError(f"obs_type={obs_type!r} is an image: its mirror is a flip of the last axis, not an order")
    return _FEATURES_MIRROR if obs_type == "features" else _REACH_MIRROR


def mirror_actions(actions):
    """The action that plays each of ``actions`` in the mirrored game: 0 straight stays, 1 right <-> 2 left.

    Works on ints, NumPy arrays and tensors alike (``(3 - a) % 3``), without reading the values,
    so without a host sync; see ``rules.MIRRORED_ACTIONS``.
    """
    return (rules.NUM_ACTIONS - actions) % rules.NUM_ACTIONS


def mirror_logits(logits):
    """Per-action scores (logits, Q-values, probabilities; actions on the last axis) for the mirrored game."""
    return logits[..., list(rules.MIRRORED_ACTIONS)]


def symmetric_logits(policy, obs: torch.Tensor, obs_type: str) -> torch.Tensor:
    """The mean of ``policy``'s logits for ``obs`` and the mirrored logits for its mirror image.

    ``policy`` maps a batch of observations to ``(batch, 3)`` logits. The result is exactly
    symmetric whatever the network learned: the mirrored observation gets the mirrored
    logits, so a policy made of it picks right where it would pick left in the mirrored game.
    """
    return (policy(obs) + mirror_logits(policy(mirror_observation(obs, obs_type)))) / 2
