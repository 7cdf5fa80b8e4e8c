"""Choosing settings for this device: every "what should I use here?" of the course in one place
(notebooks 08, 09 and 11).

- :func:`fastest_settings` / :func:`choose_settings`: eager, compiled, CUDA graphs or both,
  by time per PPO iteration and what each pays once before its first fast one (09);
- :func:`precision_policy` / :func:`bf16_speedup`: the precision to train in, from what the
  device does natively and, on a CPU, a measured bf16 step (08);
- :func:`capstone_settings`: the capstone's games in parallel, precision and launch settings,
  each chosen by a short measurement here (11).

The techniques themselves are in ``gpu/``; this module measures PPO with them and picks. Every
``PPOConfig`` it measures comes from ``learn.settings.ppo_settings``, a choice applied with
``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import torch

from ..core.args import check_settings
from ..core.checks import check_choice, check_int, check_ints, check_number
from ..core.config import pick
from ..core.device import get_device
from ..gpu.graphs import compiler_missing
from ..gpu.memory import try_to_fit
from ..gpu.precision import PrecisionPolicy, choose_policy, device_traits
from ..measure.table import format_number
from ..measure.timing import time_callable, time_sized
from .ppo import PPO, PPOConfig
from .settings import ppo_settings, settings_dict
from .train_step import TrainStep
from .training import TrainingResult, train


SETTINGS = {"eager": {"compile": False, "cuda_graphs": False},
            "compiled": {"compile": True, "cuda_graphs": False},
            "CUDA graphs": {"compile": False, "cuda_graphs": True},
            "compiled + CUDA graphs": {"compile": True, "cuda_graphs": True}}
"""The launch settings of ``PPOConfig`` that :func:`fastest_settings` compares, by name."""


STARTUP = {"compiled": "compile", "CUDA graphs": "capture", "compiled + CUDA graphs": "compile and capture"}
"""What each setting pays once, before its first fast iteration."""


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """The ``PPOConfig`` launch settings to use on a device, why, and what was measured.

    ``seconds`` holds, per setting name (:data:`SETTINGS`), the median seconds of one PPO
    iteration and its interquartile range, after the compile or capture; ``startup`` the
    seconds the compile or capture added to the first iterations; ``budget_s`` the training
    budget the choice was made for (None: steady-state speed only).
    """

    device_type: str
    compile: bool
    cuda_graphs: bool
    seconds: dict
    reasons: tuple[str, ...]
    startup: dict = dataclasses.field(default_factory=dict)
    budget_s: float | None = None

    @property
    def name(self) -> str:
        """The chosen setting's name in :data:`SETTINGS`."""
        return next(name for name, s in SETTINGS.items() if s == self.settings)

    @property
    def settings(self) -> dict:
        """``{"compile": ..., "cuda_graphs": ...}``, for ``PPOConfig(**settings)``."""
        return {"compile": self.compile, "cuda_graphs": self.cuda_graphs}

    def __str__(self) -> str:
        return "\n".join([f"Launch settings on {self.device_type}: {self.name} {self.settings}, because"]
                         + [f"  - {reason}" for reason in self.reasons])


def choose_settings(device_type: str, seconds: dict, startup: dict | None = None,
                    budget_s: float | None = None) -> LaunchSettings:
    """The fastest of the measured settings, kept only if it beats eager beyond both spreads.

    ``seconds``: per setting name, ``(median, iqr)`` of one iteration; must include ``"eager"``.
    ``startup``: per setting name, the seconds its compile or capture cost once. With a
    ``budget_s``, a setting must also make more iterations than eager within the budget once
    that cost is paid, even at the slow end of both spreads: a compile of 10 s does not pay
    in a 5-second run.
    """
    if "eager" not in seconds:
        raise ValueError(f"seconds={seconds!r} must include 'eager'")
    for name in seconds:
        check_choice("setting", name, tuple(SETTINGS))
    startup = dict(startup or {})
    if budget_s is not None:
        check_number("budget_s", budget_s, above=0)
    base, base_iqr = seconds["eager"]
    reasons = [f"eager: {base * 1e3:.3g} ms per iteration"]
    best = "eager"
    for name, (median, iqr) in seconds.items():
        if name == "eager":
            continue
        cost = startup.get(name, 0.0)
        beyond = median + iqr < base - base_iqr
        reason = f"{name}: {median * 1e3:.3g} ms, {base / median:.2f}x eager's speed"
        if name in startup:
            reason += f"; its {STARTUP[name]} took {cost:.3g} s"
            if median < base:
                reason += f", paid back after {cost / (1 - median / base):.3g} s of training"
        if not beyond:
            reason += " (not beyond the noise)"
        elif budget_s is not None and (budget_s - cost) / (median + iqr) <= budget_s / (base - base_iqr):
            beyond = False
            reason += f" (fewer iterations than eager within the {budget_s:.3g} s budget)"
        reasons.append(reason)
        if beyond and median < seconds[best][0]:
            best = name
    if device_type != "cuda":
        reasons.append("CUDA graphs need a CUDA GPU: not tried here")
    within = "" if budget_s is None else f" within {budget_s:.3g} s"
    reasons.append(f"chosen: {best}, the fastest{within} beyond the noise" if best != "eager"
                   else f"chosen: eager, nothing was faster{within} beyond the noise")
    return LaunchSettings(device_type, **SETTINGS[best], seconds=dict(seconds), reasons=tuple(reasons),
                          startup=startup, budget_s=budget_s)


def fastest_settings(device: str | torch.device | None = None, *, iterations: int = 3,
                     settings: Sequence[str] | None = None, budget_s: float | None = None,
                     verbose: bool = True, **config) -> LaunchSettings:
    """Time PPO iterations with each launch setting on ``device`` and return the fastest, with reasons.

    ``config``: ``PPOConfig`` fields over the start preset's (``ppo_settings``; the network and
    sizes matter: compiling pays off where launches dominate). Each setting builds a fresh learner
    and runs two iterations (the compile or capture happens there: their time beyond two ordinary
    iterations is its ``startup``), then times ``iterations`` more. ``settings``: names from :data:`SETTINGS`
    (default: every one the device can run). ``budget_s``: choose for a run this long
    (:func:`choose_settings`). Without a compiler for the device (:func:`compiler_missing`), the
    settings that compile are not tried (a learner would run them eagerly), and a reason says why.
    """
    device = get_device(device, param="device")
    iterations = check_int("iterations", iterations)
    if settings is None:
        settings = [name for name, s in SETTINGS.items() if device.type == "cuda" or not s["cuda_graphs"]]
    settings = ["eager", *[name for name in settings if name != "eager"]]
    cannot_compile = compiler_missing(device.type)
    not_tried = [name for name in settings if cannot_compile and SETTINGS[name]["compile"]]
    settings = [name for name in settings if name not in not_tried]
    base = ppo_settings(device, overrides=config)
    seconds, startup = {}, {}
    for name in settings:
        check_choice("settings", name, tuple(SETTINGS))
        learner = PPO(dataclasses.replace(base, **SETTINGS[name]))
        first = time_callable(lambda step=learner.iterate: (step(), step()), warmup=0, repeats=1, device=device)
        timing = time_callable(learner.iterate, warmup=0, repeats=iterations, device=device)
        seconds[name] = (timing.median, timing.iqr)
        if name != "eager":
            startup[name] = max(0.0, first.median - 2 * timing.median)
        del learner
    chosen = choose_settings(device.type, seconds, startup, budget_s)
    if not_tried:  # before the last reason, the choice
        said = f"{' and '.join(not_tried)}: not measured here: {cannot_compile}"
        chosen = dataclasses.replace(chosen, reasons=(*chosen.reasons[:-1], said, chosen.reasons[-1]))
    if verbose:
        print(chosen)
    return chosen


def bf16_speedup(device: str | torch.device | None = "cpu", *, hidden: int = 64, batch_size: int = 256,
                 repeats: int = 7) -> tuple[float, float]:
    """fp32 step time over bf16 autocast step time of a :class:`TrainStep`, and its spread.

    The spread adds the relative IQRs of the two timings in quadrature.
    """
    timings = {}
    for precision in ("fp32", "bf16"):
        step = TrainStep(precision, hidden, batch_size, device)
        timings[precision] = time_sized(step, 0.05, repeats=repeats, device=step.device)
    fp32, bf16 = timings["fp32"], timings["bf16"]
    speedup = fp32.median / bf16.median
    return speedup, speedup * math.hypot(fp32.iqr / fp32.median, bf16.iqr / bf16.median)


def precision_policy(device: str | torch.device | None = None, *, hidden: int = 64, batch_size: int = 256,
                     verbose: bool = True) -> PrecisionPolicy:
    """The :func:`choose_policy` of a real device, printed with its reasons when ``verbose``.

    On a CPU with bf16 instructions, bf16 autocast is first measured against fp32 on a
    :class:`TrainStep` of this ``hidden`` width and ``batch_size``: a CPU's answer depends on
    the size of the net.
    """
    traits = device_traits(device)
    speedup, spread = None, 0.0
    if traits.type == "cpu" and traits.bf16_native:
        speedup, spread = bf16_speedup(device, hidden=hidden, batch_size=batch_size)
    policy = choose_policy(traits, speedup, spread)
    if verbose:
        print(policy)
    return policy


CAPSTONE_OBS = "features_reach"
"""The capstone's observation: the 11 features, the free space each move leads to, the length (``snake.rules``)."""


PER_RUN = ("device", "seed")
"""The ``PPOConfig`` fields each run is given apart: a settings dict of this module holds every other."""


CHOSEN_FIELDS = ("num_envs", "precision", "compile", "cuda_graphs")
"""The ``PPOConfig`` fields :func:`capstone_settings` chooses, which a record of its choice holds."""


def check_chosen_settings(chosen, device, where: str) -> dict:
    """The capstone settings a stored choice (``chosen``: :data:`CHOSEN_FIELDS` and their values) gives
    on ``device``: ``ppo_settings(device, obs=CAPSTONE_OBS, overrides=chosen)``, less :data:`PER_RUN`.

    A record may be edited by hand: a missing field, an unknown one, a value of the wrong type or
    one ``PPOConfig`` refuses (``precision='fp64'``) is a ``ValueError`` or ``TypeError`` that
    names ``where`` the record is and the key, now rather than in the run that would use it.
    """
    device = get_device(device, param="device")
    chosen = check_settings(PPOConfig, chosen, f"the chosen settings in {where}")
    missing = [name for name in CHOSEN_FIELDS if name not in chosen]
    if missing:
        raise ValueError(f"the chosen settings in {where} lack {missing}")
    try:
        config = ppo_settings(device, obs=CAPSTONE_OBS, overrides=chosen)
    except (TypeError, ValueError) as error:
        raise type(error)(f"the chosen settings in {where}: {error}") from None
    return settings_dict(config, without=PER_RUN)


@dataclasses.dataclass(frozen=True)
class Choice:
    """One lesson's choice: the ``PPOConfig`` fields it set and why, in measured words."""

    lesson: str
    settings: dict
    reasons: tuple[str, ...]
    figures: dict = dataclasses.field(default_factory=dict)
    """What was measured, by option: the batch's ``(average score, steps/s)`` per number of games; the
    launches' ``(median seconds per iteration, IQR, startup seconds)`` per setting."""


@dataclasses.dataclass(frozen=True)
class CapstoneSettings:
    """The capstone's ``PPOConfig`` settings on a device (``settings``) and the choices that made them.

    ``start`` and ``settings`` hold every ``PPOConfig`` field but :data:`PER_RUN` (``settings_dict``).
    """

    device_type: str
    start: dict
    """Where the choices started: ``ppo_settings(device, obs=CAPSTONE_OBS)`` with the caller's ``start``."""
    settings: dict
    choices: tuple[Choice, ...]

    def __str__(self) -> str:
        lines = [f"Capstone settings on {self.device_type}:"]
        for choice in self.choices:
            chosen = ", ".join(f"{key}={value!r}" for key, value in choice.settings.items())
            lines.append(f"{choice.lesson}: {chosen}, because")
            lines += [f"  - {reason}" for reason in choice.reasons]
        return "\n".join(lines)


def default_num_envs(device: str | torch.device | None = None) -> tuple[int, ...]:
    """The numbers of games :func:`choose_num_envs` tries: around the starting point, by powers of two."""
    device = get_device(device, param="device")
    if device.type == "cuda":
        return pick(full=(2048, 4096, 8192, 16384, 32768), quick=(256, 512))
    return pick(full=(128, 256, 512, 1024), quick=(32, 64))


def average_score(points: list[dict], seconds: float) -> float:
    """A learning curve's mean score averaged over its ``seconds`` of wall-clock time (0 before any
    game ended); ``points`` as in ``TrainingResult.curve``.

    It rewards learning soon as well as learning far: the area under the curve over its length.
    """
    points = [(p["seconds"], p["mean_score"] or 0.0) for p in points]
    if not points or seconds <= 0:
        return 0.0
    area = sum(score * (t_next - t) for (t, score), (t_next, _) in itertools.pairwise(points))
    last_t, last_score = points[-1]
    return (area + last_score * max(seconds - last_t, 0.0)) / seconds


def trial_run(seconds: float, seed: int, device, *, progress: bool = False, **settings) -> TrainingResult:
    """A PPO run of ``settings`` (``PPOConfig`` fields over the start preset's) for ``seconds``, to judge them by."""
    config = ppo_settings(device, overrides=[*settings.items(), ("seed", seed)])
    return train(PPO(config), seconds=seconds, progress=progress)


def _config(settings: dict | PPOConfig, device) -> PPOConfig:
    """``settings`` as a ``PPOConfig`` on ``device``: a config as it is, a dict over the start preset's."""
    if isinstance(settings, PPOConfig):
        return settings
    return ppo_settings(device, overrides=settings)


def choose_num_envs(settings: dict | PPOConfig, device: str | torch.device | None = None, *, num_envs=None,
                    trial_s: float | None = None, seed: int = 0) -> Choice:
    """The batch lesson's choice for PPO, judged by learning: the number of games that learns best in a short run.

    Each number of games in ``num_envs`` (default: :func:`default_num_envs`) trains ``settings``
    for ``trial_s`` seconds; the one with the highest :func:`average_score` wins. Steps/s
    alone would pick the most games: past a point, more games per rollout mean fewer updates per
    second, and the time to a score grows. A number that runs out of memory ends the search.
    """
    device = get_device(device, param="device")
    config = _config(settings, device)
    candidates = sorted(check_ints("num_envs", default_num_envs(device) if num_envs is None else num_envs, minimum=1))
    trial_s = check_number("trial_s", pick(full=20.0, quick=1.0) if trial_s is None else trial_s, above=0)
    runs, reasons = {}, []
    for n in candidates:
        trial = settings_dict(dataclasses.replace(config, num_envs=n), without=PER_RUN)
        run, why = try_to_fit(lambda trial=trial: trial_run(trial_s, seed, device, **trial), device)
        if why is not None:
            reasons.append(f"{n:,} games did not fit in the device's memory ({why}): larger numbers not tried")
            break
        runs[n] = run
    if not runs:
        raise RuntimeError(f"not even {candidates[0]:,} games fit in the memory of {device}")
    scores = {n: average_score(run.curve, run.seconds) for n, run in runs.items()}
    chosen = max(scores, key=scores.get)
    fastest = max(runs, key=lambda n: runs[n].steps_per_second)
    reasons.insert(0, f"each number of games trained for {format_number(trial_s)} s: "
                   + "; ".join(f"{n:,} games averaged a score of {format_number(scores[n])} at "
                               f"{format_number(runs[n].steps_per_second)} steps/s" for n in runs))
    reasons.append(f"{chosen:,} games learned best" + (f" (steps/s alone would pick {fastest:,})"
                                                        if fastest != chosen else ", and fastest"))
    figures = {n: (scores[n], runs[n].steps_per_second) for n in runs}
    return Choice("06 batch size", {"num_envs": chosen}, tuple(reasons), figures)


def choose_precision(settings: dict | PPOConfig, device: str | torch.device | None = None) -> Choice:
    """Notebook 08's choice: ``precision_policy`` at the update's minibatch and width."""
    config = _config(settings, get_device(device, param="device"))
    minibatch = config.num_envs * config.num_steps // config.num_minibatches
    policy = precision_policy(device, hidden=config.hidden, batch_size=minibatch, verbose=False)
    reasons = list(policy.reasons)
    if any("autocast measured" in reason for reason in reasons):
        reasons.append(f"measured on the update's shape: {config.hidden} wide, {minibatch:,} per minibatch")
    return Choice("08 precision", {"precision": policy.precision}, tuple(reasons))


def choose_launches(settings: dict | PPOConfig, device: str | torch.device | None = None, *, budget_s: float,
                    iterations: int | None = None) -> Choice:
    """Notebook 09's choice: ``fastest_settings`` for a run of ``budget_s``, compile and capture included."""
    iterations = pick(full=3, quick=1) if iterations is None else iterations
    if isinstance(settings, PPOConfig):
        settings = settings_dict(settings, without=("device",))
    launch = fastest_settings(device, iterations=iterations, budget_s=budget_s, verbose=False, **settings)
    figures = {name: (median, iqr, launch.startup.get(name, 0.0)) for name, (median, iqr) in launch.seconds.items()}
    return Choice("09 compile and CUDA graphs", launch.settings, launch.reasons, figures)


def capstone_settings(device: str | torch.device | None = None, *, budget_s: float,
                      start: dict | PPOConfig | None = None, num_envs=None, trial_s: float | None = None,
                      verbose: bool = True) -> CapstoneSettings:
    """The fastest settings the device supports for a run of ``budget_s``: batch, precision, launches.

    Each choice is measured with the ones before it applied (``dataclasses.replace``; see the module
    docstring), starting from ``ppo_settings(device, obs=CAPSTONE_OBS, overrides=start)``: ``start``
    changes it (another observation or grid size, say; a ``PPOConfig``: every field but the device).
    ``num_envs`` and ``trial_s``: the numbers of games to try and how long (:func:`choose_num_envs`).
    """
    device = get_device(device, param="device")
    budget_s = check_number("budget_s", budget_s, above=0)
    if isinstance(start, PPOConfig):
        start = settings_dict(start, without=("device",))
    config = first = ppo_settings(device, obs=CAPSTONE_OBS, overrides=start or {})
    batch = choose_num_envs(config, device, num_envs=num_envs, trial_s=trial_s)
    config = dataclasses.replace(config, **batch.settings)
    precision = choose_precision(config, device)
    config = dataclasses.replace(config, **precision.settings)
    launches = choose_launches(config, device, budget_s=budget_s)
    config = dataclasses.replace(config, **launches.settings)
    chosen = CapstoneSettings(device.type, settings_dict(first, without=PER_RUN),
                              settings_dict(config, without=PER_RUN), (batch, precision, launches))
    if verbose:
        print(chosen)
    return chosen
