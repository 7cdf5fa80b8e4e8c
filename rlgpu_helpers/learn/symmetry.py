"""Left-right symmetry of Snake: mirrored observations and actions, for augmentation and checks (notebook 12).

Reflect a game's board left-right and the snake's right becomes its left. The rules do not care:
the mirror image of a game (``rules.mirror_state``), played with the mirrored actions, goes
through the mirror images of the original states and earns the same rewards. So a policy should
answer a mirrored observation with the mirrored action probabilities. That gives twice the
training data for free (add each transition's mirror image) and a way to make any policy exactly
symmetric (:func:`symmetric_logits`). :func:`check_feature_mirror` checks a student's mirror of the
``"features"`` observation on states of every heading (notebook 12's exercise).

Every observation type has a mirror, computed from the observation alone:

* ``"ego_grid"`` and ``"grid"``: the image flipped left-right (the last axis);
* ``"features"``: danger right and left swap, heading right and left swap, food right and left
  swap;
* ``"features_reach"``: as ``"features"``, and the space to the right and to the left swap.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.checks import check_int
from ..snake import rules
from ..snake.vec import VecSnake

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


def random_states(games: int = 64, steps: int = 30, height: int = 10, width: int = 10, seed: int = 0) -> list:
    """The distinct states of ``games`` games played at random for ``steps`` steps (``VecSnake``, seeded):
    every heading, food on every side of the head, bodies of several lengths."""
    games, steps, seed = check_int("games", games), check_int("steps", steps), check_int("seed", seed, 0)
    env = VecSnake(games, height, width, seed=seed)
    moves = torch.randint(0, rules.NUM_ACTIONS, (steps, games), generator=torch.Generator().manual_seed(seed))
    states = {}
    for actions in moves:
        env.step(actions)
        for game in range(games):
            state = env.get_state(game)
            states[state] = None
    return list(states)


def check_feature_mirror(fn, states=None) -> str:
    """Notebook 12's exercise checker: does ``fn`` turn a ``"features"`` observation into its mirror image's?

    On each of ``states`` (default: :func:`random_states`, every heading), ``fn(observe(s))`` must equal
    ``observe(mirror_state(s))``. Returns text: how many states, which headings, and the first wrong
    one with what ``fn`` gave and what it should give. It never raises for a wrong answer.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    states = random_states() if states is None else list(states)
    height = width = 10
    wrong = []
    for state in states:
        got = np.asarray(fn(rules.observe(state, height, width, "features")))
        want = rules.observe(rules.mirror_state(state, height, width), height, width, "features")
        if got.shape != want.shape or not np.array_equal(got, want):
            wrong.append((state, got, want))
    headings = sorted({state.direction for state in states})
    name = getattr(fn, "__name__", "fn")
    if not wrong:
        return f"{name}: right on all {len(states)} states (headings {headings})"
    state, got, want = wrong[0]
    return (f"{name}: wrong on {len(wrong)} of {len(states)} states (headings {headings}); the first, heading "
            f"{state.direction}: gave {got.tolist()}, the mirrored game's features are {want.tolist()}")
