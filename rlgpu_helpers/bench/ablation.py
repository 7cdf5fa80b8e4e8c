"""The capstone's ablation: what each lesson contributed to the settings the helpers chose (notebook 11).

``learn.tune.capstone_settings`` starts from ``ppo_settings(device, obs=CAPSTONE_OBS)`` and asks
three helpers, in order, each measuring on the device:

* **the batch**: a short run at each number of games (``learn.tune.choose_num_envs``), judged by
  the score it learned, not by steps/s: more games per rollout make more steps/s but fewer
  updates each second, and past a point they slow the learning;
* **the precision**: ``learn.tune.precision_policy`` at the update's minibatch size and network
  width (fp16 on a T4 comes with PPO's ``GradScaler``);
* **the launches**: ``learn.tune.fastest_settings`` for the training budget, the compile or
  capture included: a compile that costs more than it saves within the budget loses.

PPO's rollout storage is a tensor on the device in every setting: there is nothing to choose.

:func:`ablation_arms` lists the runs: the chosen settings, and for each lesson the same settings
with that lesson switched off wherever that changes something on this device (else it says why).
:func:`run_arms` trains each for the same budget and seed; :func:`ablation_table` sets them side
by side and marks each effect within or beyond the seeds' spread (:func:`seed_spread`).
:func:`capstone_recap` puts what the notebook measured into sentences, :func:`capstone_verdicts`
the guide's training figures beside the run (untested off a GPU). ``python -m rlgpu_helpers bench
capstone`` runs both as a suite (:func:`measure_capstone`); the settings it chose go on file for
``bench training`` and the GPU sweep (``time_to_score.chosen_on_file``). This module imports
:mod:`.time_to_score`, never the reverse.
"""

from __future__ import annotations

import dataclasses

import torch
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_number
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..learn.settings import ppo_settings, settings_dict
from ..learn.tune import (
    CAPSTONE_OBS,
    CHOSEN_FIELDS,
    PER_RUN,
    CapstoneSettings,
    capstone_settings,
)
from ..measure.claims import CLAIMS, Verdict, judge
from ..measure.records import Record, check_records
from ..measure.table import Table, format_number
from .time_to_score import (
    CHOICE,
    Curve,
    chosen_on_file,
    curve_records,
    run_ours,
)

FEW_GAMES = 8
"""The games of the ablation's arm that switches off many games at once (``snake.vec``): a handful
stepped together, as a single-env loop per core would."""

BASELINE = "all lessons"
"""The name of the ablation's arm with every lesson on: the chosen settings."""


# ---------------------------------------------------------------------------- the ablation

@dataclasses.dataclass(frozen=True)
class Arm:
    """One run of the ablation: a lesson switched off (``settings`` is None where nothing can be)."""

    lesson: str
    change: str
    """What switching the lesson off means here, or why there is nothing to switch off."""
    settings: dict | None
    device: str | None = None
    """Where this arm trains, when not on the chosen device (the env on the device switched off)."""


def ablation_arms(chosen: CapstoneSettings, device: str | torch.device | None = None) -> list[Arm]:
    """The chosen settings, then each lesson switched off, in course order (the arms ``03 many games
    at once`` to ``11 the observation``)."""
    device = get_device(device, param="device")
    best = ppo_settings(device, overrides=chosen.settings)
    on_gpu = device.type == "cuda"

    def off(lesson, change, **changes):
        return Arm(lesson, change, settings_dict(dataclasses.replace(best, **changes), without=PER_RUN))

    def nothing(lesson, why):
        return Arm(lesson, why, None)

    arms = [Arm(BASELINE, "the chosen settings", settings_dict(best, without=PER_RUN))]
    arms.append(off("03 many games at once", f"{FEW_GAMES} games instead of {best.num_envs:,}",
                    num_envs=FEW_GAMES))
    if on_gpu:
        cpu = settings_dict(ppo_settings("cpu", obs=CAPSTONE_OBS), without=PER_RUN)
        arms.append(Arm("04 the env on the device", "everything on the CPU (its own starting settings)", cpu, "cpu"))
    else:
        arms.append(nothing("04 the env on the device", "the device is the CPU: nothing to move"))
    arms.append(nothing("05 transfers and replay", "PPO's rollout storage is a tensor on the device in every "
                        "setting; no replay buffer"))
    start_envs = ppo_settings(device, overrides=chosen.start).num_envs
    if best.num_envs != start_envs:
        arms.append(off("06 batch size", f"{start_envs:,} games (the starting point) instead of the measured "
                        f"{best.num_envs:,}", num_envs=start_envs))
    else:
        arms.append(nothing("06 batch size", f"the measured choice is the starting point, {start_envs:,} games"))
    arms.append(nothing("07 gradient accumulation", "the same update in less memory: the minibatch fits "
                        "without it"))
    if best.precision != "fp32":
        arms.append(off("08 precision", f"fp32 instead of {best.precision}", precision="fp32"))
    else:
        arms.append(nothing("08 precision", "fp32 was chosen: nothing to switch off"))
    if best.compile or best.cuda_graphs:
        arms.append(off("09 compile and CUDA graphs", "eager", compile=False, cuda_graphs=False))
    else:
        arms.append(nothing("09 compile and CUDA graphs", "eager was chosen: nothing to switch off"))
    arms.append(nothing("10 several processes", "one process trains here; notebook 10 measures more"))
    arms.append(off("11 the observation", f"the 11 'features' instead of {best.obs_type!r}", obs_type="features"))
    return arms


def run_arms(arms: list[Arm], budget_s: float, *, device: str | torch.device | None = None, seed: int = 0,
             done: dict[str, Curve] | None = None, progress: bool = True) -> dict[str, Curve]:
    """Train every arm that has settings for ``budget_s`` with ``seed``: ``{lesson: Curve}``, each
    curve named after its arm.

    ``done``: curves already trained, by lesson (the chosen settings' run, say), not run again.
    """
    device = get_device(device, param="device")
    budget_s = check_number("budget_s", budget_s, above=0)
    curves = dict(done or {})
    todo = [arm for arm in arms if arm.settings is not None and arm.lesson not in curves]
    for arm in tqdm(todo, desc="ablation runs", disable=not progress):
        curves[arm.lesson] = run_ours(budget_s, seed=seed, device=arm.device or device, **arm.settings)
    names = {arm.lesson: BASELINE if arm.lesson == BASELINE else f"{arm.lesson} off: {arm.change}" for arm in arms}
    return {lesson: dataclasses.replace(curve, name=names.get(lesson, curve.name)) for lesson, curve in curves.items()}


@dataclasses.dataclass(frozen=True)
class SeedSpread:
    """How far runs of the same settings with different seeds land apart: the range of each measure.

    ``final``: the lowest and highest final mean score; ``seconds``: per score, the lowest and
    highest time to it, or None where some run never reached it.
    """

    runs: int
    final: tuple[float, float]
    seconds: dict

    def __str__(self) -> str:
        times = ", ".join(f"time to {score} {format_number(low)}-{format_number(high)} s"
                          for score, (low, high) in self.seconds.items() if (low, high) != (None, None))
        low, high = self.final
        return f"over {self.runs} seeds: final score {format_number(low)}-{format_number(high)}" + (
            f", {times}" if times else "")


def seed_spread(curves: list[Curve], thresholds=(20, 30)) -> SeedSpread:
    """The :class:`SeedSpread` of ``curves``: runs of one setting with different seeds (at least 2)."""
    curves = list(curves)
    if len(curves) < 2 or not all(isinstance(c, Curve) and c.final_mean_score is not None for c in curves):
        raise ValueError(f"curves must be at least 2 Curves with a final mean score, got {len(curves)}: "
                         f"{[getattr(c, 'label', c) for c in curves]}")
    finals = [c.final_mean_score for c in curves]
    seconds = {}
    for score in thresholds:
        times = [c.seconds_to_score(score) for c in curves]
        seconds[score] = (None, None) if None in times else (min(times), max(times))
    return SeedSpread(len(curves), (min(finals), max(finals)), seconds)


def _effect(curve: Curve, base: Curve, thresholds, spread: SeedSpread | None) -> str:
    """What switching a lesson off did, in measured words, at the highest score the base run reached,
    and whether that is more than two seeds of the same settings differ by (``spread``)."""
    reached = [t for t in thresholds if base.seconds_to_score(t) is not None]
    if not reached:
        return "the chosen settings reached none of the scores"
    score = reached[-1]
    t_base, t_off = base.seconds_to_score(score), curve.seconds_to_score(score)
    gap = (curve.final_mean_score or 0.0) - base.final_mean_score
    final = f"final score {'+' if gap >= 0 else ''}{format_number(gap)}"
    said = (f"never reached {score} ({final})" if t_off is None
            else f"{format_number(t_off / t_base)}x the time to {score} ({final})")
    if spread is None:
        return said
    final_within, time_within = _within_spread(curve, base, score, spread)
    if final_within == time_within:
        return f"{said}: {'within' if final_within else 'beyond'} the seeds' spread"
    beyond, within = ("final score", f"time to {score}") if time_within else (f"time to {score}", "final score")
    return f"{said}: {beyond} beyond the seeds' spread, {within} within"


def _within_spread(curve: Curve, base: Curve, score: float, spread: SeedSpread) -> tuple[bool, bool]:
    """Whether ``curve`` lands no farther from ``base`` than two seeds of ``base``'s settings do: in its
    final score, and in its time to ``score`` (within, where some seed never reached it)."""
    low, high = spread.final
    final_within = abs((curve.final_mean_score or 0.0) - base.final_mean_score) <= high - low
    if spread.seconds.get(score, (None, None)) == (None, None):
        return final_within, True
    fastest, slowest = spread.seconds[score]
    t_off = curve.seconds_to_score(score)
    return final_within, t_off is not None and abs(t_off - base.seconds_to_score(score)) <= slowest - fastest


def ablation_table(arms: list[Arm], curves: dict[str, Curve], thresholds=(20, 30),
                   seeds: list[Curve] | None = None) -> Table:
    """Every lesson: what switching it off means here and, where it was run, what it did.

    The effect compares the arm with the chosen settings' run (:data:`BASELINE`) at the highest
    of ``thresholds`` that run reached: the ratio of the times to it, and the final scores' difference.
    ``seeds``: runs of the chosen settings with other seeds. With them, each effect says whether it
    is *within the seeds' spread* (no larger than the range of the final scores, and of the times to
    that score, over the baseline and these runs: a difference two seeds can make, so not an effect)
    or beyond it, and the baseline's row gives the spread.
    """
    if BASELINE not in curves:
        raise ValueError(f"curves has no {BASELINE!r} run to compare with: {sorted(curves)}")
    base = curves[BASELINE]
    spread = None if not seeds else seed_spread([base, *seeds], thresholds)
    columns = ["lesson", "switched off", *[f"time to mean score {t} (s)" for t in thresholds],
               "final mean score (food)", "throughput (steps/s)", "effect of switching it off"]
    rows = []
    for arm in arms:
        curve = curves.get(arm.lesson)
        if curve is None:
            rows.append([arm.lesson, arm.change, *["—"] * len(thresholds), "—", "—",
                         "not run" if arm.settings is not None else "nothing to switch off"])
            continue
        times = [curve.seconds_to_score(t) for t in thresholds]
        if arm.lesson == BASELINE:
            effect = "—" if spread is None else f"— ({spread})"
        else:
            effect = _effect(curve, base, thresholds, spread)
        rows.append([arm.lesson, arm.change, *["not reached" if t is None else format_number(t) for t in times],
                     format_number(curve.final_mean_score) if curve.final_mean_score is not None else "—",
                     format_number(curve.steps_per_second), effect])
    return Table(columns, rows, [False, False] + [True] * (len(thresholds) + 2) + [False])


def ablation_records_table(records, thresholds=(20, 30)) -> Table:
    """The ablations on file (``capstone`` suite records): per machine and arm, as :func:`ablation_table` shows one run."""
    runs = {}
    for r in check_records(records):
        if r.name == ABLATION:
            key = (r.machine, r.params["budget_s"], r.params["seed"], r.variant != BASELINE, r.variant)
            runs.setdefault(key, {})[r.metric] = r.value
    columns = ["machine", "arm", "budget (s)", "seed", *[f"time to mean score {t} (s)" for t in thresholds],
               "final mean score (food)", "throughput (steps/s)"]
    rows = []
    for (machine, budget, seed, _, variant), metrics in sorted(runs.items()):
        times = [metrics.get(f"seconds to mean score {t}") for t in thresholds]
        final = metrics.get("final mean score")
        rows.append([machine, variant, format_number(budget), str(seed),
                     *["not reached" if t is None else format_number(t) for t in times],
                     "—" if final is None else format_number(final), format_number(metrics["throughput"])])
    return Table(columns, rows, [False, False, True, True] + [True] * (len(thresholds) + 2))


def capstone_verdicts(ours: Curve, naive: Curve, device: str | torch.device) -> list[Verdict]:
    """The guide's training figures beside the capstone's run on ``device``: seconds per million env
    steps, and env steps/s against the naive single-env loop of ``learn.naive_dqn`` on the same
    machine (one run each). The guide's figures are for a GPU: off a GPU they stand untested
    (``claims.judge``)."""
    for name, curve in (("ours", ours), ("naive", naive)):
        if not isinstance(curve, Curve) or not curve.steps_per_second > 0:
            raise ValueError(f"{name}={curve!r:.80} must be a Curve that made env steps")
    return [judge(CLAIMS["gpu-256-envs-million-steps"], 1e6 / ours.steps_per_second, device=device),
            judge(CLAIMS["gpu-256-envs-training-speedup"], ours.steps_per_second / naive.steps_per_second,
                  device=device)]


def capstone_recap(machine: str, curves: list[Curve], verdicts: list[Verdict], ablation: dict[str, Curve],
                   seeds: list[Curve], score: float = 30) -> str:
    """What notebook 11 found on ``machine``, in sentences computed from its runs: which setup reached
    ``score`` first and what each saw, which lessons' effects exceeded the seeds' spread, and the
    verdicts on the guide's figures. Nothing in it is typed: a run on another machine says other things."""
    lines = [f"On {machine}, each setup given the same budget:"]
    for curve in curves:
        when = curve.seconds_to_score(score)
        reached = (f"reached a mean score of {format_number(score)} after {format_number(when)} s and "
                   f"{curve.steps_to_score(score):,} env steps" if when is not None
                   else f"did not reach a mean score of {format_number(score)} in {format_number(curve.seconds)} s")
        lines.append(f"- {curve.label}: {reached} (final mean score {format_number(curve.final_mean_score or 0.0)}, "
                     f"{format_number(curve.steps_per_second)} env steps/s).")
    seen = {curve.details.get("obs_type") for curve in curves}
    lines.append(f"- Every setup saw the same observation, {seen.pop()!r}." if len(seen) == 1
                 else "- The setups saw different observations (see each label): the comparison mixes two effects.")
    if BASELINE in ablation:
        base, spread = ablation[BASELINE], seed_spread([ablation[BASELINE], *seeds], (score,))
        arms = {lesson: curve for lesson, curve in ablation.items() if lesson != BASELINE}
        beyond = [lesson for lesson, curve in arms.items() if not all(_within_spread(curve, base, score, spread))]
        within = [lesson for lesson in arms if lesson not in beyond]
        lines.append(f"- Switching a lesson off changed the run by more than {spread.runs} seeds of the chosen settings "
                     f"differ: {', '.join(beyond) or 'none'}; within that spread (no effect shown): "
                     f"{', '.join(within) or 'none'}.")
    for verdict in verdicts:
        lines.append(f"- The guide's \"{verdict.claim.quote}\": {verdict.outcome}, measured "
                     f"{format_number(verdict.measured)} {verdict.claim.unit}.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the bench suite

ABLATION = "capstone ablation"
"""The record name of the ablation's runs."""


def choice_records(chosen: CapstoneSettings, machine: str, budget_s: float) -> list[Record]:
    """The choice as records: every batch trial, every launch setting's timing, and the settings chosen."""
    records = []
    for choice in chosen.choices:
        if choice.lesson.startswith("06"):
            for n, (score, rate) in choice.figures.items():
                params = {"num_envs": n, "budget_s": budget_s}
                records += [Record(CHOICE, choice.lesson, "average score of its trial", score, "food", params, None, machine),
                            Record(CHOICE, choice.lesson, "throughput", rate, "steps/s", params, None, machine)]
        if choice.lesson.startswith("09"):
            for name, (median, iqr, startup) in choice.figures.items():
                params = {"setting": name, "startup_s": startup, "budget_s": budget_s}
                records.append(Record(CHOICE, choice.lesson, "time per iteration", median, "s", params, iqr, machine))
    settings = {key: chosen.settings[key] for key in CHOSEN_FIELDS}
    records.append(Record(CHOICE, "chosen settings", "for a budget of", budget_s, "s", settings, None, machine))
    return records


def measure_capstone(device: str | torch.device | None = None, progress: bool = True, *,
                     budget_s: float | None = None, run_s: float | None = None, parts=("choice", "ablation"),
                     arms=None, seed: int = 0) -> list[Record]:
    """The ``capstone`` bench suite: the choice (:func:`capstone_settings`) and the ablation, as records.

    Full size: the choice for a run of ``run_s`` (120 s), then every arm for ``budget_s`` (60 s) with ``seed``.
    ``parts=("ablation",)`` takes the choice on file for this machine (:func:`chosen_on_file`),
    measuring it only when there is none. ``arms``: the arms to run, by the start of their lesson
    (``("all lessons", "03")``; default: all). ``tools/gpu_sweep.py`` spreads the parts and the
    arms over several calls.
    """
    device = get_device(device, param="device")
    parts = check_choices("parts", parts, ("choice", "ablation"))
    budget_s = check_number("budget_s", pick(full=60.0, quick=3.0) if budget_s is None else budget_s, above=0)
    run_s = check_number("run_s", pick(full=120.0, quick=6.0) if run_s is None else run_s, above=0)
    machine = machine_of(device)
    records = []
    on_file = None if "choice" in parts else chosen_on_file(device)
    if on_file is None:
        chosen = capstone_settings(device, budget_s=run_s, verbose=progress)
        records += choice_records(chosen, machine, run_s)
    else:
        start = settings_dict(ppo_settings(device, obs=CAPSTONE_OBS), without=PER_RUN)
        chosen = CapstoneSettings(device.type, start, on_file, ())
    if "ablation" in parts:
        every = ablation_arms(chosen, device)
        wanted = [arm.lesson for arm in every] if arms is None else list(arms)
        for prefix in wanted:
            if not any(arm.lesson.startswith(prefix) for arm in every):
                raise ValueError(f"arms: {prefix!r} starts none of the lessons {[arm.lesson for arm in every]}")
        chosen_arms = [arm for arm in every if any(arm.lesson.startswith(prefix) for prefix in wanted)]
        curves = run_arms(chosen_arms, budget_s, device=device, seed=seed, progress=progress)
        for arm in chosen_arms:
            if arm.lesson in curves:
                records += curve_records(curves[arm.lesson], machine, budget_s, seed, name=ABLATION,
                                         variant=arm.lesson if arm.lesson == BASELINE else f"{arm.lesson} off")
    return records
