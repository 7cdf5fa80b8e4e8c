"""Counting wins: how often a policy fills the whole board, the measure of a solved Snake (notebook 12).

A game is won when the snake fills the board: it ate its last food with no empty cell left, so
its score is ``height * width - 3``; ``VecSnake`` ends it (``terminated``) and marks it
``info["episode"]["won"]``. A game cut off by ``max_steps_without_food`` is ``truncated``: it counts
as a game, never as a win, whatever its score.

:func:`evaluate_wins` plays ``games`` games at once, one in each game slot of a ``VecSnake``, and
counts each slot's first game only. Every game is counted once, and long games weigh as much as
short ones (counting the first ``games`` games to end, in slots that restart, would favour the
short ones: a policy that dies early would look more often).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..core.checks import check_bool, check_int, check_seed
from ..snake import rules
from ..snake.vec import VecSnake
from .ppo import sample_actions


@dataclasses.dataclass(frozen=True)
class WinRecord:
    """The outcome of each of ``games`` games, in the order of their slots in the env.

    scores: food eaten in each game (int64).
    won: whether the game filled the board (bool).
    truncated: whether the game was cut off by ``max_steps_without_food`` (bool; never a win).
    states: with ``record_slot``, that slot's game, every ``SnakeState`` from its start to the last
    one before it ended (for an animation); otherwise empty.
    """

    scores: np.ndarray
    won: np.ndarray
    truncated: np.ndarray
    states: tuple = ()

    @property
    def games(self) -> int:
        return len(self.scores)

    @property
    def wins(self) -> int:
        return int(self.won.sum())

    @property
    def win_rate(self) -> float:
        return self.wins / self.games

    @property
    def mean(self) -> float:
        return float(self.scores.mean())

    @property
    def median(self) -> float:
        return float(np.median(self.scores))


def evaluate_wins(policy, games: int = 100, *, height: int = 10, width: int = 10, obs_type: str = "features",
                  seed: int = 0, greedy: bool = True, device: str | torch.device = "cpu",
                  max_steps_without_food: int | None = None, record_slot: int | None = None) -> WinRecord:
    """Play ``games`` full games with ``policy`` in one ``VecSnake`` and record scores and wins.

    ``policy`` maps a batch of observations ``(games, *obs_shape)`` to logits ``(games, 3)`` (for
    ``ActorCritic`` pass ``model.logits``). ``greedy`` plays the highest logit; otherwise actions
    are drawn from ``softmax(logits)`` with a ``torch.Generator`` seeded with ``seed``. The food is
    seeded with ``seed`` too, so the same policy, seed and device give the same record.
    ``record_slot``: also keep the states of that slot's game (to watch a game the record counted,
    say its first win: play once, pick the slot from ``won``, play again recording it).
    """
    if not callable(policy):
        raise TypeError(f"policy={policy!r} must be callable: observations -> logits")
    games = check_int("games", games)
    seed = check_seed("seed", seed)
    greedy = check_bool("greedy", greedy)
    if record_slot is not None:
        check_int("record_slot", record_slot, 0, games - 1)
    env = VecSnake(games, height, width, obs_type=obs_type, max_steps_without_food=max_steps_without_food,
                   device=device, seed=seed)
    generator = torch.Generator(device=env.device).manual_seed(seed)
    obs, _ = env.reset(seed=seed)
    scores = torch.zeros(games, dtype=torch.int64, device=env.device)
    won = torch.zeros(games, dtype=torch.bool, device=env.device)
    cut_off = torch.zeros_like(won)
    finished = torch.zeros_like(won)
    states = []
    while not bool(finished.all()):  # one host read a step: evaluation, not a hot loop
        if record_slot is not None and not finished[record_slot]:
            states.append(env.get_state(record_slot))
        with torch.inference_mode():
            logits = policy(obs)
        if not isinstance(logits, torch.Tensor) or logits.shape != (games, rules.NUM_ACTIONS):
            got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise ValueError(f"policy returned {got}: it must return logits of shape ({games}, {rules.NUM_ACTIONS})")
        actions = logits.argmax(-1) if greedy else sample_actions(logits.float(), generator)
        obs, _, terminated, truncated, info = env.step(actions)
        first = (terminated | truncated) & ~finished  # the slot's first game ends now
        scores = torch.where(first, info["episode"]["score"].to(torch.int64), scores)
        won |= first & info["episode"]["won"]
        cut_off |= first & truncated
        finished |= first
    return WinRecord(scores.cpu().numpy(), won.cpu().numpy(), cut_off.cpu().numpy(), tuple(states))
