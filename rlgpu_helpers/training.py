"""The outer training loop shared by PPO and DQN (introduced in notebook 11).

A learner (``PPO`` or ``DQN``) knows how to do one iteration and how to save and load itself.
``train`` runs iterations until a budget of wall-clock seconds or env steps is spent, shows a
progress bar with steps/s and the mean score of the last 100 finished games, records the
learning curve, and checkpoints every few minutes and at the end. ``train(..., resume=True)``
continues from the last checkpoint in ``out_dir``: killed at any moment, a run loses at most the
work since that checkpoint.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint, save_checkpoint
from .dqn import DQN, DQNConfig
from .ppo import PPO, PPOConfig

FORMAT = "rlgpu-train/1"
ALGORITHMS = {"ppo": (PPOConfig, PPO), "dqn": (DQNConfig, DQN)}
SCORE_WINDOW = 100


@dataclasses.dataclass
class TrainingResult:
    """What a run did: its learning curve and where it ended."""

    algorithm: str
    config: dict
    curve: list[dict]
    """One point per iteration (at most one a second): seconds, env_steps, mean_score, episodes."""
    seconds: float
    env_steps: int
    episodes: int
    mean_score: float | None
    """Mean score of the last 100 finished games, None before any game finished."""
    checkpoint: Path | None
    learner: object = dataclasses.field(repr=False, default=None)
    """The trained learner (with ``resume=True``, the one rebuilt from the checkpoint)."""

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else float("nan")


def make_learner(algorithm: str, **config):
    """A fresh ``PPO`` or ``DQN`` learner from keyword settings of its config."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    config_class, learner_class = ALGORITHMS[algorithm]
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown {algorithm} settings {unknown}; known: {sorted(known)}")
    return learner_class(config_class(**config))


def load_learner(path: str | Path, device: str | None = None):
    """The learner stored in a checkpoint (a file, or a folder holding ``checkpoint.pt``)."""
    state = load_checkpoint(path)
    learner = _learner_from(state, path, device)
    learner.load_state_dict(state["learner"])
    return learner


def _learner_from(state: dict, path, device: str | None):
    if state.get("format") != FORMAT or state.get("algorithm") not in ALGORITHMS:
        raise CheckpointError(f"{path} is not a training checkpoint of this package")
    config = dict(state["config"])
    if device is not None:
        config["device"] = str(device)
    return make_learner(state["algorithm"], **config)


def _check_budget(seconds, steps):
    if seconds is None and steps is None:
        raise ValueError("give a budget: seconds, steps, or both")
    for name, value in (("seconds", seconds), ("steps", steps)):
        if value is not None and (isinstance(value, bool) or not value > 0 or not math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def train(
    learner=None,
    *,
    seconds: float | None = None,
    steps: int | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 120.0,
    progress: bool = True,
) -> TrainingResult:
    """Train ``learner`` until ``seconds`` of training time or ``steps`` env steps are spent.

    Both budgets count the whole run, resumed parts included. With ``out_dir``, a checkpoint is
    written there every ``checkpoint_every_s`` seconds and at the end; ``resume=True`` continues
    from the one already there, with its settings (``learner`` may then be None; if given, only
    its device is used).
    """
    _check_budget(seconds, steps)
    if learner is None and not resume:
        raise ValueError("give a learner (make_learner(...)), or resume=True with out_dir")
    if not checkpoint_every_s > 0:
        raise ValueError(f"checkpoint_every_s must be positive, got {checkpoint_every_s!r}")
    path = Path(out_dir) / CHECKPOINT_NAME if out_dir is not None else None
    if resume and path is None:
        raise ValueError("resume=True needs out_dir, the folder holding the checkpoint")
    curve: list[dict] = []
    recent = collections.deque(maxlen=SCORE_WINDOW)
    episodes, spent = 0, 0.0
    if resume:
        state = load_checkpoint(path)
        learner = _learner_from(state, path, learner.config.device if learner is not None else None)
        learner.load_state_dict(state["learner"])
        curve, episodes, spent = list(state["curve"]), int(state["episodes"]), float(state["seconds"])
        recent.extend(state["recent_scores"])
        torch.set_rng_state(state["rng"]["torch"])
        if torch.cuda.is_available() and state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])

    def snapshot() -> dict:
        return {
            "format": FORMAT,
            "algorithm": learner.algorithm,
            "config": dataclasses.asdict(learner.config),
            "learner": learner.state_dict(),
            "seconds": spent,
            "episodes": episodes,
            "curve": curve,
            "recent_scores": list(recent),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
        }

    def mean_score():
        return sum(recent) / len(recent) if recent else None

    def used() -> float:
        fractions = []
        if seconds is not None:
            fractions.append(spent / seconds)
        if steps is not None:
            fractions.append(learner.env_steps / steps)
        return max(fractions)

    bar = tqdm(total=steps if steps is not None else round(seconds), initial=0, disable=not progress,
               unit="step" if steps is not None else "s", dynamic_ncols=True)
    started, last_saved, last_point = time.perf_counter() - spent, time.perf_counter(), -math.inf
    try:
        while used() < 1.0:
            scores = learner.iterate(budget_used=used())
            recent.extend(scores.tolist())
            episodes += len(scores)
            spent = time.perf_counter() - started
            if spent - last_point >= 1.0 or used() >= 1.0:
                last_point = spent
                curve.append({"seconds": spent, "env_steps": learner.env_steps,
                              "mean_score": mean_score(), "episodes": episodes})
                bar.n = min(learner.env_steps, steps) if steps is not None else min(round(spent), round(seconds))
                score = mean_score()
                bar.set_postfix({"steps/s": f"{learner.env_steps / spent:,.0f}",
                                 "mean score": "-" if score is None else f"{score:.1f}"}, refresh=True)
            if path is not None and time.perf_counter() - last_saved >= checkpoint_every_s:
                save_checkpoint(path, snapshot())
                last_saved = time.perf_counter()
    finally:
        bar.close()
    if path is not None:
        save_checkpoint(path, snapshot())
    return TrainingResult(
        algorithm=learner.algorithm, config=dataclasses.asdict(learner.config), curve=curve,
        seconds=spent, env_steps=learner.env_steps, episodes=episodes, mean_score=mean_score(),
        checkpoint=path, learner=learner,
    )
