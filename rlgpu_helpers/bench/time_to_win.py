"""Time to win: the ``"win"`` preset trained for a budget on several seeds, then judged over many games (notebook 11).

Each seed trains ``PPO`` with :func:`~rlgpu_helpers.learn.tune.win_settings` for ``budget_s``
seconds. Its curve holds, about once a second, the mean score of the last 100 finished games
and the share of them that filled the board (``win_rate``), against wall time and env steps:
the time-to-win curve. At the end the trained policy plays ``games`` games greedily and
``games`` sampled, on fixed seeds (:func:`~rlgpu_helpers.learn.wins.evaluate_wins`): each
slot's first game counts, so long games weigh as much as short ones.

Records (name ``"time to win"``, one set per seed): steps/s and the final mean score; the
seconds and env steps to the mean scores :data:`SCORE_THRESHOLDS` and to the training win rates
:data:`WIN_THRESHOLDS`; and per way of playing the evaluation's win rate, mean and median score
and the share of games cut off for circling without food.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tqdm.auto import tqdm

from ..core.checks import check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..learn.agents import save_agent
from ..learn.tune import trial_run, win_settings
from ..learn.wins import WinRecord, evaluate_wins
from ..measure.records import Record
from .time_to_score import Curve, curve_records

NAME = "time to win"
VARIANT = "PPO, the 'win' preset"
SCORE_THRESHOLDS = (20, 40, 60, 80, 90)
"""Mean scores (of the last 100 games) whose first time is recorded; 97 fills a 10x10 board."""
WIN_THRESHOLDS = (0.01, 0.1, 0.5, 0.9)
"""Training win rates (of the last 100 games) whose first time is recorded."""
EVALUATION_SEED = 12345
"""The seed of the evaluation's games and sampled actions: the same games for every run."""
PLAYS = ("greedy", "sampled")


@dataclasses.dataclass
class WinRun:
    """One seed's training curve and its evaluation games, per way of playing."""

    seed: int
    curve: Curve
    evaluations: dict[str, WinRecord]

    def seconds_to_win_rate(self, share: float) -> dict | None:
        """The first curve point whose training win rate reached ``share``, or None."""
        return next((p for p in self.curve.points if (p.get("win_rate") or 0.0) >= share), None)


def run_win(budget_s: float, seed: int, device, *, games: int, size: int = 10, progress: bool = False,
            agent: str | Path | None = None, **overrides) -> WinRun:
    """Train the ``"win"`` preset (with ``overrides``, any ``PPOConfig`` field) for ``budget_s`` seconds, then evaluate.

    ``agent``: also save the trained network there (``play`` loads it).
    """
    device = get_device(device, param="device")
    settings = {**win_settings(device), "height": size, "width": size, **overrides}
    result = trial_run(budget_s, seed, device, progress=progress, **settings)
    learner, c = result.learner, result.learner.config
    details = {"obs_type": c.obs_type, "net": c.net, "num_envs": c.num_envs, "size": size,
               "precision": c.precision, "compile": c.compile}
    curve = Curve("ours", result.seconds, result.env_steps, result.curve, details, name=VARIANT)
    learner.model.eval()
    evaluations = {
        play: evaluate_wins(learner.model.logits, games, height=c.height, width=c.width, obs_type=c.obs_type,
                            seed=EVALUATION_SEED, greedy=play == "greedy", device=device,
                            max_steps_without_food=c.max_steps_without_food)
        for play in PLAYS
    }
    if agent is not None:
        save_agent(agent, learner, extra={
            "command": f"rlgpu_helpers.bench.time_to_win.run_win(budget_s={budget_s}, seed={seed}, size={size})",
            "seconds": result.seconds, "env_steps": result.env_steps, "mean_score": result.mean_score,
            **{f"{play} win rate": e.win_rate for play, e in evaluations.items()},
            "curve": result.curve,  # the time-to-win curve, for plotting it again
        })
    return WinRun(seed, curve, evaluations)


def win_records(run: WinRun, machine: str, budget_s: float) -> list[Record]:
    """The records of one seed's run (see the module's docstring)."""
    records = curve_records(run.curve, machine, budget_s, run.seed, thresholds=SCORE_THRESHOLDS, name=NAME,
                            variant=VARIANT)
    params = {"budget_s": budget_s, "seed": run.seed, **run.curve.details}
    for share in WIN_THRESHOLDS:
        point = run.seconds_to_win_rate(share)
        if point is not None:
            records.append(Record(NAME, VARIANT, f"seconds to win rate {share:.0%}", point["seconds"], "s",
                                  params, None, machine))
            records.append(Record(NAME, VARIANT, f"env steps to win rate {share:.0%}", point["env_steps"], "steps",
                                  params, None, machine))
    for play, evaluation in run.evaluations.items():
        at = {**params, "play": play, "games": evaluation.games, "evaluation_seed": EVALUATION_SEED}
        records += [
            Record(NAME, VARIANT, f"evaluation win rate ({play})", 100 * evaluation.win_rate, "%", at, None, machine),
            Record(NAME, VARIANT, f"evaluation mean score ({play})", evaluation.mean, "food", at, None, machine),
            Record(NAME, VARIANT, f"evaluation median score ({play})", evaluation.median, "food", at, None, machine),
            Record(NAME, VARIANT, f"evaluation truncated ({play})", 100 * float(evaluation.truncated.mean()), "%",
                   at, None, machine),
        ]
    return records


def measure_wins(device, progress: bool = True, *, budget_s: float | None = None, seeds=None, games: int | None = None,
                 size: int | None = None, agents: str | Path | None = None, **overrides) -> list[Record]:
    """The ``bench wins`` suite: the ``"win"`` preset on each of ``seeds`` for ``budget_s``, then ``games`` games each.

    Full size: 30 minutes on each of seeds 0, 1, 2 on the 10x10 board, 1,000 evaluation games per
    way of playing (about 95 minutes on a 2-core CPU). Quick: 3 s on a 6x6 board with fewer games
    and steps, to check that it runs. ``agents``: a folder to save each seed's trained agent in.
    """
    budget = check_number("budget_s", pick(full=1800.0, quick=3.0) if budget_s is None else budget_s, above=0)
    seeds = check_ints("seeds", pick(full=(0, 1, 2), quick=(0,)) if seeds is None else seeds, minimum=0)
    games = check_int("games", pick(full=1000, quick=8) if games is None else games)
    size = check_int("size", pick(full=10, quick=6) if size is None else size)
    overrides = {**pick(full={}, quick={"num_envs": 32, "num_steps": 16, "hidden": 16}), **overrides}
    machine = machine_of(device)
    records = []
    for seed in tqdm(seeds, desc="training runs", disable=not progress):
        agent = None if agents is None else Path(agents) / f"win-{size}x{size}-seed{seed}.pt"
        run = run_win(budget, seed, device, games=games, size=size, progress=progress, agent=agent, **overrides)
        records += win_records(run, machine, budget)
    return records
