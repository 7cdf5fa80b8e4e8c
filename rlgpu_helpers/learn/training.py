"""The outer training loop shared by PPO and DQN (introduced in notebook 11).

A learner (``PPO`` or ``DQN``) knows how to do one iteration and how to save and load itself.
``train`` runs iterations until a budget of wall-clock seconds or env steps is spent, shows a
progress bar with steps/s and the mean score of the last 100 finished games, records the
learning curve, and checkpoints every few minutes and at the end. A learner that compiles or
captures CUDA graphs does that first (``PPO.warm_up``, the bar says so): its seconds are reported
apart, and the budget and the curve's clock start after it. ``train(..., resume=True)``
continues from the last checkpoint in ``out_dir``: killed at any moment, a run loses at most the
work since that checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.checks import check_bool, check_choice, check_number
from ..core.device import get_device
from ..core.files import LockHeld, exclusive_lock, remove_temporaries
from .checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from ..snake import rules
from .dqn import DQN, DQNConfig
from .nets import DivergedError
from .ppo import PPO, PPOConfig

FORMAT = "rlgpu-train/1"
ALGORITHMS = {"ppo": (PPOConfig, PPO), "dqn": (DQNConfig, DQN)}
SCORE_WINDOW = 100


class ScoreCurve:
    """A learning curve as it grows: the last 100 scores and a point at most once a second.

    Each point is a dict: seconds, env_steps, mean_score (of the last 100 finished games, None
    before the first) and episodes (finished so far); with a ``win_score`` (the score of a full
    board, ``rules.winning_score``) also win_rate, the share of those 100 games that were won.
    """

    def __init__(self, points: list[dict] | None = None, recent_scores=(), episodes: int = 0,
                 win_score: int | None = None):
        self.points = list(points or [])
        self.recent = collections.deque(recent_scores, maxlen=SCORE_WINDOW)
        self.episodes = episodes
        self.win_score = win_score
        self.last = self.points[-1]["seconds"] if self.points else -math.inf

    def add(self, scores) -> None:
        """Record the scores of games that just finished."""
        self.recent.extend(scores)
        self.episodes += len(scores)

    @property
    def mean_score(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    @property
    def win_rate(self) -> float | None:
        """The share of the last 100 finished games that filled the board (None before the first game)."""
        if not self.recent or self.win_score is None:
            return None
        return sum(score >= self.win_score for score in self.recent) / len(self.recent)

    def point(self, seconds: float, env_steps: int, force: bool = False) -> bool:
        """Append a point if a second has passed since the last (or ``force``); say if it did."""
        if not (force or seconds - self.last >= 1.0):
            return False
        point = {"seconds": seconds, "env_steps": env_steps, "mean_score": self.mean_score, "episodes": self.episodes}
        if self.win_score is not None:
            point["win_rate"] = self.win_rate
        self.points.append(point)
        self.last = seconds
        return True


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
    warmup_seconds: float = 0.0
    """Seconds spent compiling and capturing before the training started (``PPO.warm_up``), not in ``seconds``."""

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else float("nan")


def make_learner(algorithm: str, **config):
    """A fresh ``PPO`` or ``DQN`` learner from keyword settings of its config."""
    check_choice("algorithm", algorithm, sorted(ALGORITHMS))
    config_class, learner_class = ALGORITHMS[algorithm]
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"unknown {algorithm} settings {unknown}; known: {sorted(known)}")
    return learner_class(config_class(**config))


def load_learner(path: str | Path, device: str | None = None):
    """The learner stored in a checkpoint (a file, or a folder holding ``checkpoint.pt``)."""
    return _restore(load_checkpoint(path), path, device)


CUDA_ONLY = {"cuda_graphs": (True, False, "CUDA graphs need a CUDA GPU"),
             "precision": ("tf32", "fp32", "TF32 is a mode of CUDA matmuls; the weights are float32 either way")}
"""The settings only a CUDA GPU runs: ``name: (value, what it becomes elsewhere, why)``."""


def for_device(config: dict, device: str) -> tuple[dict, list[str]]:
    """``config`` moved to ``device``, with its CUDA-only settings translated off a GPU, and what changed.

    Nothing a run learned depends on them: CUDA graphs replay the same operations, and TF32
    only rounds float32 matmuls. ``compile`` and the autocast precisions run everywhere and stay.
    """
    moved, changes = {**config, "device": device}, []
    if get_device(device, param="device").type != "cuda":
        for name, (value, elsewhere, why) in CUDA_ONLY.items():
            if moved.get(name) == value:
                moved[name] = elsewhere
                changes.append(f"{name}={value!r} -> {elsewhere!r} ({why})")
    return moved, changes


def check_checkpoint(state: dict, path) -> None:
    """Raise :class:`CheckpointError` naming the field unless ``state`` is a whole training checkpoint.

    The learner's own part is checked when it is loaded (all or nothing); this checks the rest.
    """
    def fail(field, why):
        raise CheckpointError(f"{path}: {field} {why}")

    if state.get("format") != FORMAT:
        fail("format", f"is {state.get('format')!r}, not {FORMAT!r}: not a training checkpoint of this version "
                       "of the package")
    if state.get("algorithm") not in ALGORITHMS:
        fail("algorithm", f"is {state.get('algorithm')!r}, not one of {sorted(ALGORITHMS)}")
    kinds = {"config": dict, "learner": dict, "rng": dict, "curve": list, "recent_scores": list,
             "seconds": (int, float), "episodes": int}
    for field, kind in kinds.items():
        if field not in state:
            fail(field, "is missing")
        if not isinstance(state[field], kind) or isinstance(state[field], bool):
            fail(field, f"is a {type(state[field]).__name__}, not a {getattr(kind, '__name__', 'number')}")
    if not (math.isfinite(state["seconds"]) and state["seconds"] >= 0) or state["episodes"] < 0:
        fail("seconds or episodes", f"are {state['seconds']!r} and {state['episodes']!r}: must be >= 0 and finite")
    fields = {f.name for f in dataclasses.fields(ALGORITHMS[state["algorithm"]][0])}
    missing = sorted(fields - set(state["config"]) - set(ADDED_FIELDS))
    unknown = sorted(set(state["config"]) - fields)
    if missing or unknown:
        wrong = " and ".join(([f"lacks {missing}"] if missing else []) + ([f"has unknown {unknown}"] if unknown else []))
        fail("config", f"{wrong}: saved by another version of the package")
    for i, point in enumerate(state["curve"]):
        if not isinstance(point, dict) or set(point) - {"win_rate"} != {"seconds", "env_steps", "mean_score", "episodes"}:
            fail(f"curve[{i}]", f"is {point!r}, not a point of a learning curve")
    if not all(isinstance(score, int) and not isinstance(score, bool) for score in state["recent_scores"]):
        fail("recent_scores", "must hold int scores")
    rng = state["rng"]
    if not isinstance(rng.get("torch"), torch.Tensor) or not isinstance(rng.get("cuda"), list):
        fail("rng", "must hold a tensor 'torch' and a list 'cuda'")
    try:
        torch.Generator().set_state(rng["torch"])  # a spare generator: the real one is set only once all fits
    except (RuntimeError, TypeError) as error:
        fail("rng['torch']", f"is not a CPU random state: {error}")
    if not all(isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in rng["cuda"]):
        fail("rng['cuda']", "must be a list of CUDA random states (uint8 tensors)")


ADDED_FIELDS = ("reward_scale", "food_shaping", "max_steps_without_food", "bootstrap_truncated", "ent_coef_final",
                "net", "mirror")
"""``PPOConfig`` fields added after runs and agents were saved (issue 22). A saved config without them
gets their defaults, which train and act exactly as the saved run did."""


def complete_config(algorithm: str, config: dict) -> dict:
    """A copy of the saved ``config`` of an ``algorithm`` learner, with the defaults of fields added since."""
    config_class = ALGORITHMS[algorithm][0]
    defaults = {f.name: f.default for f in dataclasses.fields(config_class) if f.name in ADDED_FIELDS}
    return {**defaults, **config}


def _restore(state: dict, path, device: str | None):
    """The learner a loaded checkpoint ``state`` describes, with its saved state put back.

    Everything is checked before anything is built or changed; what is wrong is a
    :class:`CheckpointError` naming the field. ``device`` moves the learner (:func:`for_device`).
    """
    check_checkpoint(state, path)
    config = complete_config(state["algorithm"], state["config"])
    if device is not None:
        config, changes = for_device(config, str(device))
        if changes:
            print(f"Resuming on {device}: " + "; ".join(changes))
    try:
        learner = make_learner(state["algorithm"], **config)
    except (TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path}: config cannot build a learner here: {error}") from None
    try:
        learner.load_state_dict(state["learner"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: learner: {error}") from None
    return learner


def _check_budget(seconds, steps):
    if seconds is None and steps is None:
        raise ValueError("give a budget: seconds, steps, or both")
    for name, value in (("seconds", seconds), ("steps", steps)):
        if value is not None:
            check_number(name, value, above=0)


def train(
    learner=None,
    *,
    seconds: float | None = None,
    steps: int | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    device: str | None = None,
    checkpoint_every_s: float = 120.0,
    progress: bool = True,
) -> TrainingResult:
    """Train ``learner`` until ``seconds`` of training time or ``steps`` env steps are spent.

    Both budgets count the whole run, resumed parts included. With ``out_dir``, a checkpoint is
    written there every ``checkpoint_every_s`` seconds and at the end. ``resume=True`` (with no
    ``learner``) continues the learner saved in ``out_dir``, with its saved settings; ``device``
    moves it to another device (default: the one it was saved from).
    """
    _check_budget(seconds, steps)
    check_bool("resume", resume)
    check_number("checkpoint_every_s", checkpoint_every_s, above=0)
    if resume and learner is not None:
        raise ValueError("resume=True continues the learner saved in out_dir with its own settings: "
                         "give learner=None (and device= to move it to another device)")
    if not resume and learner is None:
        raise ValueError("give a learner (make_learner(...)), or resume=True with out_dir")
    if not resume and device is not None:
        raise ValueError(f"device={device!r} is for resume=True; a new learner's device is in its config")
    path = Path(out_dir) / CHECKPOINT_NAME if out_dir is not None else None
    if resume and path is None:
        raise ValueError("resume=True needs out_dir, the folder holding the checkpoint")
    if resume and not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: nothing to resume")
    with contextlib.ExitStack() as stack:
        if out_dir is not None:
            hold_run_folder(stack, out_dir)
        return _train(learner, path, seconds=seconds, steps=steps, resume=resume, device=device,
                      checkpoint_every_s=checkpoint_every_s, progress=progress)


RUN_LOCK_NAME = "train.lock"


class RunFolderError(ValueError):
    """A run folder that cannot take this run: it cannot be written, or another run holds it."""


def hold_run_folder(stack: contextlib.ExitStack, out_dir: str | Path) -> None:
    """Lock the run folder ``out_dir`` for as long as ``stack`` is open: one ``train`` at a time.

    Checked before any work: a folder that cannot be written (a file, no permission) or that
    another run holds (the message names its pid) is a :class:`RunFolderError`. Once held, the
    unfinished checkpoints that killed runs left (``checkpoint.pt.*.tmp``) are removed.
    """
    try:
        stack.enter_context(exclusive_lock(Path(out_dir) / RUN_LOCK_NAME, wait=False))
    except LockHeld as error:
        raise RunFolderError(f"out_dir={str(out_dir)!r} is in use: {error}") from None
    except OSError as error:
        raise RunFolderError(f"out_dir={str(out_dir)!r} cannot hold a run: {error}") from None
    for tmp in remove_temporaries(Path(out_dir) / CHECKPOINT_NAME):
        print(f"Removed {tmp}, the unfinished checkpoint of a run that was killed")


def _train(learner, path: Path | None, *, seconds, steps, resume, device, checkpoint_every_s, progress):
    """:func:`train` once its arguments are checked and its run folder is held."""
    saved, spent = {}, 0.0
    if resume:
        state = load_checkpoint(path)
        learner = _restore(state, path, None if device is None else str(get_device(device, param="device")))
        saved = {"points": state["curve"], "recent_scores": state["recent_scores"], "episodes": int(state["episodes"])}
        spent = float(state["seconds"])
        torch.set_rng_state(state["rng"]["torch"])
        if torch.cuda.is_available():  # as many GPUs' states as both machines have
            for index, rng in enumerate(state["rng"]["cuda"][: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(rng, index)

    curve = ScoreCurve(**saved, win_score=rules.winning_score(learner.config.height, learner.config.width))
    spent, warmup = run_iterations(learner, curve, spent, seconds=seconds, steps=steps, path=path,
                                   checkpoint_every_s=checkpoint_every_s, progress=progress)
    return TrainingResult(
        algorithm=learner.algorithm, config=dataclasses.asdict(learner.config), curve=curve.points,
        seconds=spent, env_steps=learner.env_steps, episodes=curve.episodes, mean_score=curve.mean_score,
        checkpoint=path, learner=learner, warmup_seconds=warmup,
    )


def snapshot(learner, curve: ScoreCurve, spent: float) -> dict:
    """What a checkpoint of a run holds: the learner, its curve, the time spent and the RNG states."""
    return {
        "format": FORMAT,
        "algorithm": learner.algorithm,
        "config": dataclasses.asdict(learner.config),
        "learner": learner.state_dict(),
        "seconds": spent,
        "episodes": curve.episodes,
        "curve": curve.points,
        "recent_scores": list(curve.recent),
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
    }


def run_iterations(learner, curve: ScoreCurve, spent: float, *, seconds: float | None, steps: int | None,
                   path: Path | None, checkpoint_every_s: float, progress: bool, lead: bool = True,
                   agree=None) -> tuple[float, float]:
    """The loop of :func:`train`: iterate until the budget is spent; returns the seconds spent in all
    and the seconds of the warm-up before (compile and capture, ``PPO.warm_up``; 0 for other learners).

    budget used = the larger of spent / seconds and env steps / steps (the whole run, resumed
    parts included); each iteration anneals with it. The curve gets the finished games' scores
    and a point at most once a second; the checkpoint in ``path`` is written every
    ``checkpoint_every_s`` seconds and at the end. An iteration whose loss or weights are not
    finite raises ``DivergedError`` before anything is saved: the last good checkpoint stays.

    Several processes training one learner together (notebook 10) pass ``agree``, which turns
    this process's budget fraction into the one every process uses (rank 0's), so all of them
    anneal alike and stop after the same iteration; only the ``lead`` process shows progress,
    keeps points and writes checkpoints.
    """

    def used() -> float:
        fractions = []
        if seconds is not None:
            fractions.append(spent / seconds)
        if steps is not None:
            fractions.append(learner.env_steps / steps)
        return max(fractions)

    agree = agree if agree is not None else (lambda fraction: fraction)
    bar = tqdm(total=steps if steps is not None else round(seconds), initial=0, disable=not (progress and lead),
               unit="step" if steps is not None else "s", dynamic_ncols=True)
    warmup = 0.0
    if hasattr(learner, "warm_up") and (learner.config.compile or learner.config.cuda_graphs):
        bar.set_description_str("compiling" + (" and capturing" if learner.config.cuda_graphs else ""), refresh=True)
        warmup = learner.warm_up()
        bar.set_description_str(f"compiled in {warmup:.0f} s (not counted); training", refresh=True)
    started, last_saved = time.perf_counter() - spent, time.perf_counter()
    try:
        while (budget := agree(used())) < 1.0:
            try:
                scores = learner.iterate(budget_used=budget)
            except DivergedError as error:
                kept = (f"the last good checkpoint, {path}, is kept" if path is not None and path.exists()
                        else "no checkpoint was written")
                raise DivergedError(f"{error}; {kept}") from None
            curve.add(scores.tolist())
            spent = time.perf_counter() - started
            if lead and curve.point(spent, learner.env_steps, force=used() >= 1.0):
                bar.n = min(learner.env_steps, steps) if steps is not None else min(round(spent), round(seconds))
                score = curve.mean_score
                won = {"won": f"{curve.win_rate:.0%}"} if curve.win_rate else {}  # once a game filled the board
                bar.set_postfix({"steps/s": f"{learner.env_steps / spent:,.0f}",
                                 "mean score": "-" if score is None else f"{score:.1f}", **won}, refresh=True)
            if lead and path is not None and time.perf_counter() - last_saved >= checkpoint_every_s:
                save_checkpoint(path, snapshot(learner, curve, spent))
                last_saved = time.perf_counter()
    finally:
        bar.close()
    if lead and path is not None:
        save_checkpoint(path, snapshot(learner, curve, spent))
    return spent, warmup
