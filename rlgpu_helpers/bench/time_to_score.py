"""Time-to-score: three ways to train Snake, each given the same wall-clock budget (notebook 11).

* ``ours``: ``PPO`` on ``VecSnake``, everything on one device (this course's result);
* ``sb3``: stable-baselines3 PPO with its default hyperparameters on ``SnakeEnv``, set up as a
  user would on this machine: one game per core, in whichever of ``DummyVecEnv`` and
  ``SubprocVecEnv`` is faster here (measured); needs the optional extra ``compare``
  (``pip install -e ".[compare]"``);
* ``naive``: the single-env DQN of ``learn.naive_dqn``.

Every setup is given the same observation (``obs_type``, default the capstone's,
``learn.tune.CAPSTONE_OBS``), and its curve and label say which: a comparison of learners that see
different things would measure the observation, not the learner.

Each run returns a ``Curve``: points of (seconds, env steps, mean score of the last 100 finished
games), at most one a second for every setup. What the student cares about is the time until the
mean score reaches a threshold (:func:`time_to_score_table`, :func:`compare_to_score`,
:func:`comparison_sentences`), and the env steps that took; steps/s stands beside it.
``curve_records`` makes benchmark records of them.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core.checks import (
    check_choice,
    check_choices,
    check_int,
    check_ints,
    check_number,
)
from ..core.config import pick
from ..core.device import get_device, logical_cores, machine_of
from ..learn.naive_dqn import LoopSettings, NaiveDQN
from ..learn.training import ScoreCurve
from ..learn.tune import (
    CAPSTONE_OBS,
    capstone_settings,
    check_chosen_settings,
    trial_run,
)
from ..measure.records import Record, check_records, load_reference, select
from ..measure.table import Table, format_number
from ..snake.env import SnakeEnv

SETUPS = {
    "ours": "PPO on VecSnake (this course)",
    "sb3": "stable-baselines3 PPO (default settings)",
    "naive": "naive single-env DQN (notebook 01)",
}


@dataclasses.dataclass
class Curve:
    """A learning curve: ``points`` are dicts with seconds, env_steps, mean_score, episodes."""

    setup: str
    seconds: float
    env_steps: int
    points: list[dict]
    details: dict = dataclasses.field(default_factory=dict)
    """How the setup ran: ``obs_type`` (every setup), SB3's ``num_envs`` and ``vec_env``, ours' other
    chosen settings."""
    name: str | None = None
    """A label of its own (an ablation's arm), instead of the setup's."""

    @property
    def label(self) -> str:
        """The setup's name, with its details: "stable-baselines3 PPO (...), 2 envs in DummyVecEnv,
        'features_reach' observation"."""
        if self.name is not None:
            return self.name
        parts = [SETUPS[self.setup]]
        if "vec_env" in self.details:
            parts.append(f"{self.details['num_envs']} envs in {self.details['vec_env']}")
        if "obs_type" in self.details:
            parts.append(f"{self.details['obs_type']!r} observation")
        return ", ".join(parts)

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else float("nan")

    @property
    def final_mean_score(self) -> float | None:
        return self.points[-1]["mean_score"] if self.points else None

    def seconds_to_score(self, score: float) -> float | None:
        """When the mean of the last 100 scores first reached ``score`` (None: never)."""
        point = self._first_at(score)
        return None if point is None else point["seconds"]

    def steps_to_score(self, score: float) -> int | None:
        """The env steps made when the mean of the last 100 scores first reached ``score``."""
        point = self._first_at(score)
        return None if point is None else point["env_steps"]

    def _first_at(self, score: float) -> dict | None:
        return next((p for p in self.points if p["mean_score"] is not None and p["mean_score"] >= score), None)


def run_ours(seconds: float, seed: int = 0, device: str = "cpu", progress: bool = False, **settings) -> Curve:
    """This course's PPO on ``VecSnake`` for ``seconds`` (settings: any ``PPOConfig`` field)."""
    result = trial_run(seconds, seed, device, progress=progress, **settings)
    config = result.learner.config
    details = {"obs_type": config.obs_type, "num_envs": config.num_envs, "precision": config.precision,
               "compile": config.compile, "cuda_graphs": config.cuda_graphs}
    return Curve("ours", result.seconds, result.env_steps, result.curve, details)


def _snake_env(height, width, obs_type):
    return SnakeEnv(height, width, obs_type=obs_type)


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


SB3_VEC_ENVS = ("DummyVecEnv", "SubprocVecEnv")


def sb3_vec_env_rates(num_envs: int, seconds: float = 1.0, height: int = 10, width: int = 10,
                      obs_type: str = CAPSTONE_OBS) -> dict[str, float]:
    """Env steps/s of ``SnakeEnv`` with random actions in each of SB3's vector envs, here.

    ``DummyVecEnv`` steps the games one after another in this process; ``SubprocVecEnv`` steps
    each in its own process. Which is faster depends on the game's cost and the machine's cores:
    a user would try both, so the comparison measures both and trains with the faster.
    """
    from stable_baselines3.common import vec_env

    num_envs = check_int("num_envs", num_envs)
    check_number("seconds", seconds, above=0)
    rates = {}
    for name in SB3_VEC_ENVS:
        envs = getattr(vec_env, name)([functools.partial(_snake_env, height, width, obs_type)] * num_envs)
        try:
            envs.seed(0)
            envs.reset()
            rng, steps = np.random.default_rng(0), 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                envs.step(rng.integers(0, 3, size=num_envs))
                steps += num_envs
            rates[name] = steps / (time.perf_counter() - start)
        finally:
            envs.close()
    return rates


def run_sb3(seconds: float, seed: int = 0, num_envs: int | None = None, vec_env: str | None = None,
            height: int = 10, width: int = 10, obs_type: str = CAPSTONE_OBS) -> Curve:
    """stable-baselines3 PPO (default hyperparameters, MlpPolicy, CPU) as a user would set it up.

    ``num_envs`` defaults to one game per logical core; ``vec_env`` (``"DummyVecEnv"`` or
    ``"SubprocVecEnv"``) defaults to whichever :func:`sb3_vec_env_rates` measures faster here.
    The returned curve's ``details`` say which.
    """
    if not sb3_available():
        raise ImportError("stable-baselines3 is not installed: pip install -e \".[compare]\"")
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common import vec_env as sb3_vec_env
    from stable_baselines3.common.callbacks import BaseCallback

    num_envs = check_int("num_envs", logical_cores() or 1 if num_envs is None else num_envs)
    if vec_env is None:
        rates = sb3_vec_env_rates(num_envs, height=height, width=width, obs_type=obs_type)
        vec_env = max(rates, key=rates.get)
    check_choice("vec_env", vec_env, SB3_VEC_ENVS)
    curve = ScoreCurve()

    class Budget(BaseCallback):
        def _on_training_start(self):
            self.start = time.perf_counter()

        def _on_step(self):
            dones, infos = self.locals["dones"], self.locals["infos"]
            curve.add([info["score"] for info, done in zip(infos, dones) if done])
            elapsed = time.perf_counter() - self.start
            curve.point(elapsed, self.num_timesteps)
            return elapsed < seconds

    envs = getattr(sb3_vec_env, vec_env)([functools.partial(_snake_env, height, width, obs_type)] * num_envs)
    try:
        envs.seed(seed)
        # device="cpu": SB3 recommends the CPU for MLP policies (on a GPU it warns and runs slower).
        model = SB3PPO("MlpPolicy", envs, seed=seed, device="cpu", verbose=0)
        budget = Budget()
        model.learn(total_timesteps=10**12, callback=budget)
        elapsed = time.perf_counter() - budget.start
        curve.point(elapsed, model.num_timesteps, force=True)
    finally:
        envs.close()
    return Curve("sb3", elapsed, model.num_timesteps, curve.points,
                 {"obs_type": obs_type, "num_envs": num_envs, "vec_env": vec_env})


def run_naive(seconds: float, seed: int = 0, segment_s: float = 1.0, obs_type: str = CAPSTONE_OBS) -> Curve:
    """The naive DQN of ``learn.naive_dqn``, seeing ``obs_type``, run in segments of ``segment_s`` so
    its learning curve has a point every second, like the others' (a segment is timed by the loop
    itself)."""
    agent = NaiveDQN(LoopSettings(seed=seed, obs_type=obs_type))
    curve, spent, steps = ScoreCurve(), 0.0, 0
    while spent < seconds:
        result = agent.run(seconds=min(segment_s, seconds - spent), progress=False)
        spent += result.seconds
        steps += result.steps
        curve.add(result.episode_scores)
        curve.point(spent, steps, force=True)
    return Curve("naive", spent, steps, curve.points, {"obs_type": obs_type})


def curve_records(curve: Curve, machine: str, budget_s: float, seed: int,
                  thresholds=(5, 10, 20, 30, 40, 60), name: str = "training", variant: str | None = None) -> list[Record]:
    """Steps/s, final mean score, and the seconds and env steps to each score, as records.

    ``name`` and ``variant`` (default: the setup's description) say which suite and run they are.
    """
    params = {"budget_s": budget_s, "seed": seed, **curve.details}
    variant = SETUPS[curve.setup] if variant is None else variant
    records = [Record(name, variant, "throughput", curve.steps_per_second, "steps/s", params, None, machine)]
    if curve.final_mean_score is not None:
        records.append(Record(name, variant, "final mean score", curve.final_mean_score, "food",
                              params, None, machine))
    for score in thresholds:
        when = curve.seconds_to_score(score)
        if when is not None:
            records.append(Record(name, variant, f"seconds to mean score {score}", when, "s",
                                  params, None, machine))
            records.append(Record(name, variant, f"env steps to mean score {score}",
                                  curve.steps_to_score(score), "steps", params, None, machine))
    return records


def time_to_score_table(curves: list[Curve], thresholds=(10, 20)) -> Table:
    """The headline: for each run, the time and the env steps it took to reach each mean score.

    Beside them, the run's final mean score and its end-to-end steps/s. "not reached" means the
    run's mean score never got there within its budget.
    """
    def cell(value):
        return "not reached" if value is None else format_number(value)

    columns = ["setup"]
    for t in thresholds:
        columns += [f"time to mean score {t} (s)", f"env steps to mean score {t}"]
    columns += ["final mean score (food)", "throughput (steps/s)", "budget (s)"]
    rows = []
    for curve in curves:
        row = [curve.label]
        for t in thresholds:
            steps = curve.steps_to_score(t)
            row += [cell(curve.seconds_to_score(t)), "not reached" if steps is None else f"{steps:,}"]
        row += [cell(curve.final_mean_score), format_number(curve.steps_per_second), format_number(curve.seconds)]
        rows.append(row)
    return Table(columns, rows, [False] + [True] * (len(columns) - 1))


def compare_to_score(ours: Curve, other: Curve, score: float) -> str:
    """One measured sentence: how much sooner ``ours`` reached ``score``, and with how many env steps."""
    check_number("score", score)
    def reached(curve):
        return (f"{curve.label} took {format_number(curve.seconds_to_score(score))} s and "
                f"{curve.steps_to_score(score):,} env steps")

    def missed(curve):
        final = curve.final_mean_score
        return (f"{curve.label} did not reach it in {format_number(curve.seconds)} s "
                f"({curve.env_steps:,} env steps, final mean score {'—' if final is None else format_number(final)})")

    t_ours, t_other = ours.seconds_to_score(score), other.seconds_to_score(score)
    head = f"To a mean score of {format_number(score)}: "
    if t_ours is None or t_other is None:
        return head + "; ".join(reached(c) if t is not None else missed(c) for c, t in ((ours, t_ours), (other, t_other))) + "."
    steps_ratio = ours.steps_to_score(score) / other.steps_to_score(score)
    steps = (f"using {format_number(steps_ratio)}x as many env steps" if steps_ratio >= 1
             else f"using {format_number(1 / steps_ratio)}x fewer env steps")
    return (f"{head}{reached(ours)}; {reached(other)}. That is {format_number(t_other / t_ours)}x sooner, "
            f"{steps}.")


def comparison_sentences(ours: Curve, others: list[Curve], scores=(10, 20, 30)) -> str:
    """:func:`compare_to_score` for every other run at every score, then the ratio of the end-to-end
    env steps per second: one paragraph per other run, all in measured words."""
    paragraphs = []
    for other in others:
        lines = [compare_to_score(ours, other, score) for score in scores]
        lines.append(f"(End to end, {ours.label} made {format_number(ours.steps_per_second / other.steps_per_second)}x "
                     f"as many env steps per second as {other.label}.)")
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def seed_summary(records: list[Record]) -> Table:
    """Per machine, setup and settings (every param but the seed), over the seeds on file: mean and
    standard deviation of each metric. Runs with other settings (budget, observation) are not mixed."""
    groups = {}
    for r in records:
        if r.name == "training":
            settings = ", ".join(f"{key} {value}" for key, value in sorted(r.params.items()) if key != "seed")
            groups.setdefault((r.machine, r.variant, settings), {}).setdefault((r.metric, r.unit), []).append(r.value)
    metrics = list(dict.fromkeys(m for by_metric in groups.values() for m in by_metric))
    columns = ["machine", "setup", "settings", "runs"] + [f"{metric} ({unit}), mean ± sd" for metric, unit in metrics]
    rows = []
    for (machine, variant, settings), by_metric in sorted(groups.items()):
        runs = max(len(v) for v in by_metric.values())
        row = [machine, variant, settings, str(runs)]
        for metric in metrics:
            values = by_metric.get(metric, [])
            if not values:
                row.append("—")
                continue
            text = format_number(statistics.mean(values))
            if len(values) > 1:
                text += f" ± {format_number(statistics.stdev(values))}"
            if len(values) < runs:
                text += f" ({len(values)} of {runs} runs)"
            row.append(text)
        rows.append(row)
    return Table(columns, rows, [False, False, False] + [True] * (len(columns) - 3))


def plot_curves(curves: list[Curve], title: str = "Learning Snake: mean score of the last 100 games"):
    """Mean score against wall-clock seconds (left) and against env steps (right, log scale)."""
    import matplotlib.pyplot as plt

    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(11, 4.2))
    for curve in curves:
        points = [p for p in curve.points if p["mean_score"] is not None]
        label = curve.label
        by_time.plot([p["seconds"] for p in points], [p["mean_score"] for p in points], label=label)
        by_steps.plot([max(p["env_steps"], 1) for p in points], [p["mean_score"] for p in points], label=label)
    by_time.set_xlabel("wall-clock time (s)")
    by_steps.set_xlabel("env steps (log scale)")
    by_steps.set_xscale("log")
    for ax in (by_time, by_steps):
        ax.set_ylabel("mean score (food eaten)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    by_time.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    plt.close(fig)
    return fig


def measure_training(device, progress: bool = True, *, budget_s: float | None = None, seeds=None,
                     setups=tuple(SETUPS)) -> list[Record]:
    """The ``bench training`` suite: every setup for the same budget (ours over several seeds).

    Full size: ``budget_s`` 300 s per run, our PPO with ``seeds`` 0, 1, 2, the other ``setups``
    with seed 0 (25 minutes). Our PPO trains with the capstone's settings for this machine: the
    ones on file (``bench capstone``), or else chosen now (``learn.tune.capstone_settings``); the
    others see the observation those settings name.
    stable-baselines3 is skipped, with a printed note, where it is not installed.
    ``tools/gpu_sweep.py`` runs only ``setups=("ours",)`` on a GPU.
    """
    budget = check_number("budget_s", pick(full=300.0, quick=4.0) if budget_s is None else budget_s, above=0)
    seeds = check_ints("seeds", pick(full=(0, 1, 2), quick=(0,)) if seeds is None else seeds, minimum=0)
    setups = check_choices("setups", setups, tuple(SETUPS))
    machine = machine_of(device)
    runs = [("ours", seed) for seed in seeds if "ours" in setups] + [(s, 0) for s in ("sb3", "naive") if s in setups]
    if ("sb3", 0) in runs and not sb3_available():
        print("stable-baselines3 is not installed: skipping it (pip install -e \".[compare]\")")
        runs.remove(("sb3", 0))
    settings = None
    if "ours" in setups:
        settings = chosen_on_file(device) or capstone_settings(device, budget_s=budget, verbose=progress).settings
    obs_type = CAPSTONE_OBS if settings is None else settings["obs_type"]  # the one every setup sees
    records = []
    for setup, seed in tqdm(runs, desc="training runs", disable=not progress):
        if setup == "ours":
            curve = run_ours(budget, seed=seed, device=device, **settings)
        elif setup == "sb3":
            curve = run_sb3(budget, seed=seed, obs_type=obs_type)
        else:
            curve = run_naive(budget, seed=seed, obs_type=obs_type)
        records += curve_records(curve, machine, budget, seed)
    return records


CHOICE = "capstone choice"
"""The record name of the choice's measurements and of the settings chosen."""




def chosen_on_file(device: str | torch.device | None = None, records=None) -> dict | None:
    """The capstone settings last chosen on this machine (``capstone`` suite records), or None.

    The record is checked like ``train --set`` (:func:`~rlgpu_helpers.learn.tune.check_chosen_settings`):
    a hand-edited one with an unknown key or a value ``PPOConfig`` refuses is an error naming it.

    ``records``: where to look (default: ``data/reference/``).
    """
    device = get_device(device, param="device")
    machine = machine_of(device)
    records = load_reference() if records is None else check_records(records)
    chosen = select(records, name=CHOICE, variant="chosen settings", machine=machine)
    if not chosen:
        return None
    latest = max(chosen, key=lambda r: r.date)
    return check_chosen_settings(latest.params, device, f"the {machine} record of {latest.date}")
