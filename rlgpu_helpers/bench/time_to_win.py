"""Time to win: the ``"win"`` preset trained for a budget on several seeds, then judged over many games (notebook 12).

Each seed trains ``PPO`` with ``ppo_settings(device, "win")`` (``learn.settings``) for ``budget_s``
seconds. Its curve holds, about once a second, the mean score of the last 100 finished games
and the share of them that filled the board (``win_rate``), against wall time and env steps:
the time-to-win curve. At the end the trained policy plays ``games`` games greedily and
``games`` sampled, on fixed seeds (:func:`~rlgpu_helpers.learn.wins.evaluate_wins`): each
slot's first game counts, so long games weigh as much as short ones.

Records (name ``"time to win"``, one set per seed): steps/s and the final mean score; the
seconds and env steps to the mean scores :data:`SCORE_THRESHOLDS` and to the training win rates
:data:`WIN_THRESHOLDS`; the seconds of compiling and capturing before the training (not in its
time, ``PPO.warm_up``); and per way of playing the evaluation's win rate, mean and median score
and the share of games cut off for circling without food.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import statistics
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode
from tqdm.auto import tqdm

from ..core.args import check_settings
from ..core.checks import check_choice, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..core.files import atomic_write
from ..learn.agents import save_agent
from ..learn.nets import ActorCritic
from ..learn.ppo import PPOConfig
from ..learn.settings import ppo_settings, preset_settings, settings_dict
from ..learn.tune import PER_RUN, trial_run
from ..learn.wins import WinRecord, evaluate_wins
from ..measure.records import Record, select
from ..measure.table import Table, format_number
from ..measure.timing import time_callable
from ..snake import rules
from .time_to_score import Curve, curve_records

NAME = "time to win"
VARIANT = "PPO, the 'win' preset"
SCORE_THRESHOLDS = (20, 40, 60, 80, 90)
"""Mean scores (of the last 100 games) whose first time is recorded; 97 fills a 10x10 board."""
WIN_THRESHOLDS = (0.01, 0.1, 0.5, 0.9)
"""Training win rates (of the last 100 games) whose first time is recorded."""
EVALUATION_SEED = 12345
"""The seed of the evaluation's games and sampled actions: the same games for every run."""
HELD_OUT_EVALUATION_SEED = 67890
"""The evaluation games of the held-out seeds: no setting of the preset was chosen on them."""
PLAYS = ("greedy", "sampled")


@dataclasses.dataclass
class WinRun:
    """One seed's training curve and its evaluation games, per way of playing."""

    seed: int
    curve: Curve
    evaluations: dict[str, WinRecord]
    warmup_s: float = 0.0
    """Seconds of compiling and capturing before the training (``PPO.warm_up``), not in the curve's time."""
    evaluation_seed: int = EVALUATION_SEED

    def seconds_to_win_rate(self, share: float) -> dict | None:
        """The first curve point whose training win rate reached ``share``, or None."""
        return next((p for p in self.curve.points if (p.get("win_rate") or 0.0) >= share), None)


def run_win(budget_s: float, seed: int, device, *, games: int, size: int = 10, progress: bool = False,
            agent: str | Path | None = None, evaluation_seed: int = EVALUATION_SEED, **overrides) -> WinRun:
    """Train the ``"win"`` preset (with ``overrides``, any ``PPOConfig`` field) for ``budget_s`` seconds, then evaluate.

    ``agent``: also save the trained network there (``play`` loads it). ``evaluation_seed``: the
    evaluation's games (:data:`HELD_OUT_EVALUATION_SEED` for games no setting was chosen on).
    """
    device = get_device(device, param="device")
    config = ppo_settings(device, "win", size=size, overrides=overrides)
    result = trial_run(budget_s, seed, device, progress=progress, **settings_dict(config, without=PER_RUN))
    learner, c = result.learner, result.learner.config
    details = {"obs_type": c.obs_type, "net": c.net, "num_envs": c.num_envs, "size": size,
               "precision": c.precision, "compile": c.compile, "cuda_graphs": c.cuda_graphs,
               "changes": preset_changes(preset_settings("win", device), overrides)}
    curve = Curve("ours", result.seconds, result.env_steps, result.curve, details, name=VARIANT)
    learner.model.eval()
    evaluations = {
        play: evaluate_wins(learner.model.logits, games, height=c.height, width=c.width, obs_type=c.obs_type,
                            seed=evaluation_seed, greedy=play == "greedy", device=device,
                            max_steps_without_food=c.max_steps_without_food)
        for play in PLAYS
    }
    if agent is not None:
        save_agent(agent, learner, extra={
            "command": "rlgpu_helpers.bench.time_to_win.run_win(" + ", ".join(
                f"{name}={value!r}" for name, value in {"budget_s": budget_s, "seed": seed, "size": size,
                                                         **overrides}.items()) + ")",
            "seconds": result.seconds, "env_steps": result.env_steps, "mean_score": result.mean_score,
            "warmup_seconds": result.warmup_seconds,
            **{f"{play} win rate": e.win_rate for play, e in evaluations.items()},
            "curve": result.curve,  # the time-to-win curve, for plotting it again
        })
    return WinRun(seed, curve, evaluations, result.warmup_seconds, evaluation_seed)


def preset_changes(preset: dict, overrides: dict) -> str:
    """The ``overrides`` that change the preset's settings, as ``"name=value, ..."`` ("" for the preset itself).

    A run's records carry it, so that a run with, say, ``food_shaping=0.2`` is never mistaken
    for the preset's.
    """
    return ", ".join(f"{name}={value!r}" for name, value in sorted(overrides.items()) if preset.get(name) != value)


def win_records(run: WinRun, machine: str, budget_s: float) -> list[Record]:
    """The records of one seed's run (see the module's docstring)."""
    records = curve_records(run.curve, machine, budget_s, run.seed, thresholds=SCORE_THRESHOLDS, name=NAME,
                            variant=VARIANT)
    params = {"budget_s": budget_s, "seed": run.seed, **run.curve.details}
    records.append(Record(NAME, VARIANT, "compile and capture time", run.warmup_s, "s", params, None, machine))
    for share in WIN_THRESHOLDS:
        point = run.seconds_to_win_rate(share)
        if point is not None:
            records.append(Record(NAME, VARIANT, f"seconds to win rate {share:.0%}", point["seconds"], "s",
                                  params, None, machine))
            records.append(Record(NAME, VARIANT, f"env steps to win rate {share:.0%}", point["env_steps"], "steps",
                                  params, None, machine))
    for play, evaluation in run.evaluations.items():
        at = {**params, "play": play, "games": evaluation.games, "evaluation_seed": run.evaluation_seed}
        records += [
            Record(NAME, VARIANT, f"evaluation win rate ({play})", 100 * evaluation.win_rate, "%", at, None, machine),
            Record(NAME, VARIANT, f"evaluation mean score ({play})", evaluation.mean, "food", at, None, machine),
            Record(NAME, VARIANT, f"evaluation median score ({play})", evaluation.median, "food", at, None, machine),
            Record(NAME, VARIANT, f"evaluation truncated ({play})", 100 * float(evaluation.truncated.mean()), "%",
                   at, None, machine),
        ]
    return records


def measure_wins(device, progress: bool = True, *, budget_s: float | None = None, seeds=None, games: int | None = None,
                 size: int | None = None, agents: str | Path | None = None, evaluation_seed: int = EVALUATION_SEED,
                 **overrides) -> list[Record]:
    """The ``bench wins`` suite: the ``"win"`` preset on each of ``seeds`` for ``budget_s``, then ``games`` games each.

    Full size: 30 minutes on each of seeds 0, 1, 2 on the 10x10 board, 1,000 evaluation games per
    way of playing (about 95 minutes on a 2-core CPU). Quick: 3 s on a 6x6 board with fewer games
    and steps, to check that it runs. ``agents``: a folder to save each seed's trained agent in.
    ``overrides``: ``PPOConfig`` settings that change the preset; the records name them (``changes``).
    ``evaluation_seed``: the evaluation's games (:data:`HELD_OUT_EVALUATION_SEED`: games no setting was chosen on).
    """
    budget = check_number("budget_s", pick(full=1800.0, quick=3.0) if budget_s is None else budget_s, above=0)
    seeds = check_ints("seeds", pick(full=(0, 1, 2), quick=(0,)) if seeds is None else seeds, minimum=0)
    games = check_int("games", pick(full=1000, quick=8) if games is None else games)
    size = check_int("size", pick(full=10, quick=6) if size is None else size)
    taken = sorted(set(overrides) & {"device", "seed", "height", "width"})
    if taken:
        raise ValueError(f"bench wins sets {taken} itself: give the device, seeds= and size= instead")
    check_settings(PPOConfig, overrides, "the settings changed from the preset")
    overrides = {**pick(full={}, quick={"num_envs": 32, "num_steps": 16, "hidden": 16}), **overrides}
    machine = machine_of(device)
    records = []
    for seed in tqdm(seeds, desc="training runs", disable=not progress):
        agent = None if agents is None else Path(agents) / f"win-{size}x{size}-seed{seed}.pt"
        run = run_win(budget, seed, device, games=games, size=size, progress=progress, agent=agent,
                      evaluation_seed=check_int("evaluation_seed", evaluation_seed, 0), **overrides)
        records += win_records(run, machine, budget)
    return records


# ---------------------------------------------------------------------------- showing the runs

def win_table(records, budget_s: float | None = None) -> Table:
    """One row per run of ``bench wins`` records: the time to mean 60, the end, the evaluation.

    A run is a machine, a setup (its precision, and its changes to the preset if any), a seed and
    a budget. ``budget_s``: only the runs of that budget. Then, per machine, setup and budget, a
    row for the median and one for the worst seed (a target is met only if the worst seed meets it).
    """
    records = [r for r in select(records, name=NAME) if budget_s is None or r.params.get("budget_s") == budget_s]
    columns = ["machine", "setup", "seed", "budget (s)", "env steps/s", "s to mean 60", "final mean (food)",
               "greedy wins (%)", "sampled wins (%)", "greedy mean (food)", "greedy median (food)"]
    metrics = ["throughput", "seconds to mean score 60", "final mean score", "evaluation win rate (greedy)",
               "evaluation win rate (sampled)", "evaluation mean score (greedy)", "evaluation median score (greedy)"]

    def cells(values):
        return ["not reached" if v is None else format_number(v) for v in values]

    rows, groups = [], {}
    for key in sorted({_run_key(r) for r in records}):
        machine, setup, seed, budget = key
        values = [_run_value(records, key, m) for m in metrics]
        groups.setdefault((machine, setup, budget), []).append(values)
        rows.append([machine, setup, str(seed), format_number(budget)] + cells(values))
    for (machine, setup, budget), runs in groups.items():
        if len(runs) < 2:
            continue
        for how in ("median", "worst"):
            rows.append([machine, setup, how, format_number(budget)]
                        + cells([_over_seeds([run[i] for run in runs], m, how) for i, m in enumerate(metrics)]))
    return Table(columns, rows, [False, False, False] + [True] * (len(columns) - 3))


def steps_table(records, steps: dict[str, str], machine: str, budget_s: float = 1800.0) -> Table:
    """How a preset got where it is, one row per step: ``steps`` maps each step's label to the setup of its runs
    (:func:`setup_of`), in the order they were taken; each row gives the median and the worst seed of
    ``machine``'s runs of ``budget_s``: the time to a mean of 60 and the greedy games won."""
    runs = [r for r in select(records, name=NAME, machine=machine) if r.params.get("budget_s") == budget_s]
    rows = []
    for label, setup in steps.items():
        seeds = sorted({r.params["seed"] for r in runs if setup_of(r.params) == setup})
        if not seeds:
            raise ValueError(f"steps[{label!r}]: no {format_number(budget_s)} s runs of {setup!r} on {machine}")

        def over(metric, how):
            value = _over_seeds([_run_value(runs, (machine, setup, seed, budget_s), metric) for seed in seeds],
                                metric, how)
            return "not reached" if value is None else format_number(value)

        rows.append([label, ", ".join(map(str, seeds)), over("throughput", "median"),
                     over("seconds to mean score 60", "median"), over("seconds to mean score 60", "worst"),
                     over("evaluation win rate (greedy)", "median"), over("evaluation win rate (greedy)", "worst")])
    return Table(["step", "seeds", "env steps/s (median)", "s to mean 60 (median)", "(worst)",
                  "greedy games won, % (median)", "(worst)"], rows, [False, False] + [True] * 5)


def plot_step_curves(curves: dict[str, list[list[dict]]], title: str, x: str = "seconds"):
    """The share of the last 100 games won, one colour per step and one line per seed: ``curves`` maps each
    step's label to its seeds' curve points, against wall time (``x="seconds"``) or env steps."""
    import matplotlib.pyplot as plt

    check_choice("x", x, ("seconds", "env_steps"))
    scale, xlabel = (60, "training time (minutes)") if x == "seconds" else (1e6, "env steps played (millions)")
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for colour, (label, runs) in zip(plt.get_cmap("tab10").colors, curves.items()):
        for i, points in enumerate(runs):
            ax.plot([p[x] / scale for p in points], [100 * (p.get("win_rate") or 0.0) for p in points],
                    color=colour, linewidth=1.2, label=label if i == 0 else None)
    ax.set(xlabel=xlabel, ylabel="games won among the last 100 (%)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def setup_of(params: dict) -> str:
    """How a run was set up, as the tables name it: its precision, then its changes to the preset if any."""
    changes = params.get("changes", "")
    return params.get("precision", "fp32") + (f", {changes}" if changes else "")


def _run_key(record: Record) -> tuple:
    """The run a record belongs to: machine, setup, seed, budget."""
    return record.machine, setup_of(record.params), record.params["seed"], record.params["budget_s"]


def _run_value(records, key: tuple, metric: str) -> float | None:
    """The value of ``metric`` in the records of the run ``key`` (:func:`_run_key`), or None where it has none."""
    return next((r.value for r in records if r.metric == metric and _run_key(r) == key), None)


def _over_seeds(values: list, metric: str, how: str) -> float | None:
    """The median or the worst of one metric over seeds; a time never reached (None) is the slowest of all."""
    if metric.startswith("seconds"):
        times = [math.inf if v is None else v for v in values]
        result = statistics.median(times) if how == "median" else max(times)
        return None if math.isinf(result) else result
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values) if how == "median" else min(values)


def target_lines(records, machine: str, budget_s: float = 1800.0) -> list[str]:
    """The targets against the worst seed of ``machine``'s ``bench wins`` runs of ``budget_s``, per setup.

    Issue 22's: a mean score of 60 within 10 minutes, read two ways: on the training curve (the
    last 100 games, played by the sampling policy while it learns) and, for runs of 10 minutes or
    less, by the agent at the end of the run in its greedy evaluation games; for longer runs, half
    of the greedy evaluation games won. A GPU's runs of 3 minutes or less are read by issue 34's
    (on an H100 or H200; another GPU's lines say so): 2M env steps/s, 66% of the greedy games won
    on seed 0 (the CPU's worst seed after 30 minutes) and 90% on every seed. A target of every
    seed is met only if the worst seed meets it.
    """
    runs = [r for r in select(records, name=NAME, machine=machine) if r.params.get("budget_s") == budget_s]
    if not runs:
        return [f"{machine}: no 'bench wins' runs of {format_number(budget_s)} s on file"]

    def worst(setup, seeds, metric):
        values = [_run_value(runs, (machine, setup, seed, budget_s), metric) for seed in seeds]
        return _over_seeds(values, metric, "worst")

    def judged(target, worst_value, met, missing, unit="", which="worst seed"):
        """``target``: met or not by the ``which`` seed's value, shown with ``unit`` (``missing`` if it has none)."""
        shown = missing if worst_value is None else format_number(worst_value) + unit
        verdict = "met" if worst_value is not None and met(worst_value) else "not met"
        return f"{target}: {verdict} ({which}: {shown})"

    minutes = f"{budget_s / 60:g}"
    lines = []
    for setup in sorted({setup_of(r.params) for r in runs}):
        seeds = sorted({r.params["seed"] for r in runs if setup_of(r.params) == setup})
        head = f"{machine} ({setup}), {len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))}):"
        wins = worst(setup, seeds, "evaluation win rate (greedy)")
        if machine.startswith("gpu-") and budget_s <= 180:
            named = "" if any(gpu in machine for gpu in ("h100", "h200")) else " (the target names an H100 or H200)"
            seed_0 = _run_value(runs, (machine, setup, 0, budget_s), "evaluation win rate (greedy)")
            lines += [judged(f"{head} 2M env steps/s or more on every seed{named}", worst(setup, seeds, "throughput"),
                             lambda v: v >= 2e6, "no run", " steps/s"),
                      judged(f"{head} 66% of the greedy games won within 3 minutes on seed 0{named}", seed_0,
                             lambda v: v >= 66, "no evaluation", "%", which="seed 0"),
                      judged(f"{head} 90% of the greedy games won within 3 minutes on every seed{named}",
                             wins, lambda v: v >= 90, "no evaluation", "%")]
            continue
        lines.append(judged(f"{head} mean score 60 within 10 minutes on every seed, on the training curve",
                            worst(setup, seeds, "seconds to mean score 60"), lambda v: v <= 600, "never", " s"))
        if budget_s <= 600:
            games = sorted({r.params["games"] for r in runs if setup_of(r.params) == setup and "games" in r.params})
            lines.append(judged(f"{head} the agent after {minutes} minutes scores a mean of 60 in its greedy games"
                                + (f" ({' or '.join(map(str, games))} per seed)" if games else "") + " on every seed",
                                worst(setup, seeds, "evaluation mean score (greedy)"), lambda v: v >= 60,
                                "no evaluation"))
        else:
            lines.append(judged(f"{head} half of the greedy games won after {minutes} minutes on every seed",
                                wins, lambda v: v >= 50, "no evaluation", "%"))
    return lines


def save_win_curves(path: str | Path, curves: dict[str, list[dict]], report: dict, command: str) -> Path:
    """Write time-to-win curves (label -> curve points) with the machine ``report`` and the ``command`` that made them."""
    document = {"format": "rlgpu-win-curves/1", "machine": report, "date": datetime.date.today().isoformat(),
                "command": command, "curves": curves}
    return atomic_write(path, json.dumps(document, indent=1).encode())


def load_win_curves(path: str | Path) -> dict:
    """The document :func:`save_win_curves` wrote: machine, date, command and curves."""
    document = json.loads(Path(path).read_text())
    if document.get("format") != "rlgpu-win-curves/1":
        raise ValueError(f"{path} is not a file of time-to-win curves")
    return document


def plot_win_curves(curves: dict[str, list[dict]], title: str = "The 'win' preset: learning to fill the board",
                    size: int = 10, x: str = "seconds"):
    """Mean score of the last 100 games and the share of them won, one line per run, against wall time
    (``x="seconds"``) or against the env steps played (``x="env_steps"``: what each step taught, whatever it cost).

    ``size``: the side of the runs' board, whose full score is drawn as a dotted line.
    """
    import matplotlib.pyplot as plt

    check_choice("x", x, ("seconds", "env_steps"))
    scale, xlabel = (60, "training time (minutes)") if x == "seconds" else (1e6, "env steps played (millions)")
    fig, (score_ax, win_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for label, points in curves.items():
        along = [p[x] / scale for p in points]
        score_ax.plot(along, [p["mean_score"] if p["mean_score"] is not None else float("nan") for p in points],
                      label=label)
        win_ax.plot(along, [100 * (p.get("win_rate") or 0.0) for p in points], label=label)
    full = rules.winning_score(size, size)
    score_ax.axhline(full, color="grey", linestyle=":", label=f"a full {size}x{size} board ({full})")
    score_ax.set(xlabel=xlabel, ylabel="mean score of the last 100 games (food)", title=title)
    win_ax.set(xlabel=xlabel, ylabel="games won among the last 100 (%)", title="The time-to-win curve")
    score_ax.legend(fontsize=8)
    win_ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def network_costs(obs_shape, nets=("auto", "ego_cnn", "mlp"), *, hidden: int = 256, batch: int = 8192,
                  device="cpu", repeats: int = 3) -> Table:
    """What each network costs per sample of an update: weights, multiply-adds of a forward pass, and the
    measured time of one forward and backward pass (with an Adam step) on a batch of ``batch`` on ``device``."""
    device = get_device(device, param="device")
    rows = []
    for net in nets:
        model = ActorCritic(obs_shape, hidden=hidden, net=net).to(device)
        optimizer = torch.optim.Adam(model.parameters())
        obs = torch.rand(batch, *obs_shape, device=device)
        with FlopCounterMode(display=False) as counter:
            model(obs[:1])
        macs = counter.get_total_flops() / 2

        def step():
            logits, value = model(obs)
            (logits.square().mean() + value.square().mean()).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        timing = time_callable(step, warmup=1, repeats=repeats, device=device)
        seconds = timing.median
        rows.append([net, f"{sum(p.numel() for p in model.parameters()):,}", format_number(macs / 1e6),
                     format_number(seconds * 1e3), f"{batch / seconds:,.0f}",
                     format_number(3 * 2 * macs * batch / seconds / 1e9)])
    return Table(["net", "weights", "forward MMAC per sample", f"forward+backward ms ({batch:,} samples)",
                  "samples/s", "GFLOP/s"], rows, [False] + [True] * 5)
