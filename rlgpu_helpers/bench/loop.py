"""Measuring the naive DQN's loop: the rows of notebook 02, their table and their plots.

Introduced in notebook 01 (the time split of the baseline) and notebook 02 (the tunings; the
``loop`` bench suite: ``python -m rlgpu_helpers bench loop``).

:func:`tuning_rows` gives the settings of each row: the baseline, each cheap tuning alone, and
all of them together. :func:`measure_rows` times every row in turns (so a burst of other work
on the machine slows one segment of several rows, not every segment of one row) and
:func:`loop_table`, :func:`plot_time_split` and :func:`plot_throughput` show the result.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core.checks import check_int
from ..core.config import pick
from ..core.device import get_device, logical_cores, machine_of
from ..learn.naive_dqn import PARTS, LoopSettings, NaiveDQN, NaiveRunResult
from ..measure.claims import CLAIMS, Verdict, judge, relative_noise, speedup_spread
from ..measure.records import Record
from ..measure.table import Table, format_number

BASELINE, BASELINE_AGAIN = "baseline", "baseline, again"


def tuning_rows(base: LoopSettings | None = None, *, learn_every: int = 4,
                batch_sizes: tuple[int, ...] = (64, 128), together_threads: int | None = 1
                ) -> dict[str, LoopSettings]:
    """The rows of notebook 02: the baseline, each tuning alone, the tunings together, the baseline again.

    ``base`` (default ``LoopSettings()``) gives every row's hyperparameters. The thread rows use one
    thread and every core this process may use (PyTorch's default, the baseline's). "All together"
    turns on the four code-path switches on ``together_threads`` threads and keeps the baseline's
    batch size, which changes what the agent learns, not only how fast. The baseline measured twice
    gives this machine's noise (:func:`machine_noise`), against which every tuning is judged.
    """
    base = base if base is not None else LoopSettings()
    if not isinstance(base, LoopSettings):
        raise TypeError(f"base={base!r} must be a LoopSettings")
    check_int("learn_every", learn_every, 2)
    if together_threads is not None:
        check_int("together_threads", together_threads, 1)
    cores = logical_cores() or 1
    rows = {
        BASELINE: base,
        "inference_mode for acting": base.replace(inference_mode=True),
        "zero_grad(set_to_none=True)": base.replace(set_to_none=True),
        f"learn every {learn_every} steps": base.replace(learn_every=learn_every),
        "batches from arrays": base.replace(array_batches=True),
        "1 thread": base.replace(num_threads=1),
    }
    if cores > 1:
        rows["all cores"] = base.replace(num_threads=cores)
    for size in batch_sizes:
        rows[f"batch size {size}"] = base.replace(batch_size=size)
    rows["all together"] = base.replace(inference_mode=True, set_to_none=True, learn_every=learn_every,
                                        array_batches=True, num_threads=together_threads)
    rows[BASELINE_AGAIN] = base
    return rows


@dataclasses.dataclass
class LoopMeasurement:
    """Throughput of one setting: ``repeats`` timed segments of one training run after a warm-up."""

    settings: LoopSettings
    runs: list[NaiveRunResult]

    @property
    def steps_per_second(self) -> float:
        """Median over the timed segments."""
        return float(np.median([run.steps_per_second for run in self.runs]))

    @property
    def spread(self) -> float:
        """Interquartile range of the segments' steps/s (0 for a single segment)."""
        q1, q3 = np.percentile([run.steps_per_second for run in self.runs], [25, 75])
        return float(q3 - q1)

    def microseconds_per_step(self) -> dict[str, float]:
        """The median step time (µs, the same statistic as ``steps_per_second``), split into parts.

        Each part gets its share of the time of all timed segments, so the parts add up to
        exactly ``1e6 / steps_per_second``.
        """
        totals = {part: sum(run.times[part] for run in self.runs) for part in PARTS}
        whole = sum(totals.values())
        step_us = 1e6 / self.steps_per_second
        return {part: step_us * seconds / whole for part, seconds in totals.items()}

    def record(self, variant: str, machine: str) -> Record:
        """The median steps/s as a benchmark ``Record`` (name ``naive-dqn``)."""
        s = self.settings
        params = {"grid": f"{s.height}x{s.width}", "batch_size": s.batch_size, "learn_every": s.learn_every,
                  "steps": self.runs[0].steps, "repeats": len(self.runs)}
        return Record("naive-dqn", variant, "throughput", self.steps_per_second, "steps/s", params,
                      self.spread if len(self.runs) > 1 else None, machine)


def measure_loop(settings: LoopSettings | None = None, *, steps: int, repeats: int = 3,
                 warmup_steps: int | None = None, progress: bool = True) -> LoopMeasurement:
    """Time the loop: a warm-up, then ``repeats`` segments of ``steps`` env steps each.

    The warm-up (default: until learning starts, plus 200 steps) is not timed: it fills the
    memory so that every timed step includes learning, as in most of a real run.
    """
    settings = settings if settings is not None else LoopSettings()
    check_int("steps", steps, 1)
    check_int("repeats", repeats, 1)
    agent = _warmed_up(settings, warmup_steps)
    runs = [agent.run(steps=steps, progress=progress) for _ in range(repeats)]
    return LoopMeasurement(settings, runs)


def _warmed_up(settings: LoopSettings, warmup_steps: int | None) -> NaiveDQN:
    if warmup_steps is None:
        warmup_steps = max(settings.learning_starts, settings.batch_size) + 200
    check_int("warmup_steps", warmup_steps, 0)
    agent = NaiveDQN(settings)
    if warmup_steps:
        agent.run(steps=warmup_steps, progress=False)
    return agent


def default_steps() -> int:
    """Timed env steps per segment in notebook 02's measurements: 2,000 (200 in quick mode)."""
    return pick(full=2_000, quick=200)


def default_repeats() -> int:
    """Timed segments per row: 3, of which the median is reported (1 in quick mode)."""
    return pick(full=3, quick=1)


def measure_rows(rows: dict[str, LoopSettings] | None = None, *, steps: int | None = None,
                 repeats: int | None = None, progress: bool = True) -> dict[str, LoopMeasurement]:
    """Measure every row (default: :func:`tuning_rows`) like :func:`measure_loop`, rows taking turns.

    Every row's agent is warmed up first; then each repeat times one segment of every row in
    turn. A burst of other work on the machine then slows one segment of several rows rather
    than every segment of one row, and the median of each row shrugs it off.
    """
    rows = rows if rows is not None else tuning_rows()
    if not isinstance(rows, dict) or not rows or not all(
            isinstance(name, str) and isinstance(settings, LoopSettings) for name, settings in rows.items()):
        raise ValueError(f"rows={rows!r} must be a non-empty dict of names to LoopSettings")
    steps = default_steps() if steps is None else steps
    repeats = default_repeats() if repeats is None else repeats
    check_int("steps", steps, 1)
    check_int("repeats", repeats, 1)
    runs = {name: [] for name in rows}
    with tqdm(total=len(rows) * (repeats + 1), desc="loops", unit="run", disable=not progress) as bar:
        agents = {}
        for name, settings in rows.items():
            agents[name] = _warmed_up(settings, None)
            bar.update()
        for _ in range(repeats):
            for name, agent in agents.items():
                runs[name].append(agent.run(steps=steps, progress=False))
                bar.update()
    return {name: LoopMeasurement(rows[name], runs[name]) for name in rows}


def measure_tunings(device: str | torch.device | None = "cpu", progress: bool = True) -> list[Record]:
    """Steps/s of every row of :func:`tuning_rows` as records (a bench suite for the command line).

    The naive loop runs on the CPU only, so ``device`` must be the CPU: on a GPU machine,
    measure its CPU with ``--device cpu``.
    """
    device = get_device(device)
    if device.type != "cpu":
        raise ValueError(f"device={str(device)!r}: the naive DQN runs on the CPU only; measure it with device 'cpu'")
    machine = machine_of(device)
    return [measured.record(name, machine) for name, measured in measure_rows(progress=progress).items()]


def machine_noise(measurements: dict[str, LoopMeasurement]) -> dict[str, float]:
    """This machine's noise: how far the two measurements of the same baseline loop disagree.

    Relative (0.05 is 5%) for steps/s (key ``"steps/s"``) and for each part of the step, from
    the rows ``"baseline"`` and ``"baseline, again"`` of :func:`tuning_rows`.
    """
    measurements = _check_measurements(measurements)
    missing = [row for row in (BASELINE, BASELINE_AGAIN) if row not in measurements]
    if missing:
        raise ValueError(f"measurements lack the rows {missing}: measure tuning_rows(), which has both baselines")
    first, second = measurements[BASELINE], measurements[BASELINE_AGAIN]
    noise = {"steps/s": relative_noise(first.steps_per_second, second.steps_per_second)}
    split_1, split_2 = first.microseconds_per_step(), second.microseconds_per_step()
    noise.update({part: relative_noise(split_1[part], split_2[part]) for part in PARTS})
    return noise


def tuning_factor(measurements: dict[str, LoopMeasurement], row: str, reference: str, what: str) -> float:
    """How many times faster ``row`` is than ``reference``: in steps/s, or in one part's µs/step."""
    measured, base = measurements[row], measurements[reference]
    if what == "steps/s":
        return measured.steps_per_second / base.steps_per_second
    return base.microseconds_per_step()[what] / measured.microseconds_per_step()[what]


# (claim, row, compared with, what is compared): each guide figure beside the row that tests it
TUNING_CLAIMS = (
    ("inference-mode", "inference_mode for acting", BASELINE, "act"),
    ("set-to-none", "zero_grad(set_to_none=True)", BASELINE, "learn"),
    ("array-batches", "batches from arrays", BASELINE, "replay"),
    ("learn-every-4", "learn every 4 steps", BASELINE, "steps/s"),
    ("all-cores", "all cores", "1 thread", "steps/s"),
    ("loop-tunings", "all together", BASELINE, "steps/s"),
)


def tuning_verdicts(measurements: dict[str, LoopMeasurement]) -> list[Verdict]:
    """The guide's claims about the tunings, each judged against this machine's noise.

    A tuning's factor is a ratio of two measurements, each as uncertain as the two baselines disagree
    (:func:`machine_noise`), so its spread adds that noise twice in quadrature. The guide's absolute
    figures are judged against the rows' interquartile ranges. A row not measured is left out.
    """
    noise = machine_noise(measurements)
    verdicts = []
    for key, row, reference, what in TUNING_CLAIMS:
        if row in measurements and reference in measurements:
            factor = tuning_factor(measurements, row, reference, what)
            verdicts.append(judge(CLAIMS[key], factor, speedup_spread(factor, noise[what], noise[what])))
    for key, row in (("loop-baseline-fps", BASELINE), ("loop-optimized-fps", "all together")):
        if row in measurements:
            verdicts.append(judge(CLAIMS[key], measurements[row].steps_per_second, measurements[row].spread))
    return verdicts


class LoopTable(Table):
    """Measured loops side by side: ``str()`` gives aligned text, Jupyter shows HTML.

    One row per measurement: steps/s and its spread, the speedup over the baseline row,
    transitions replayed per second (updates x batch size) and each part's time per env step.
    """

    def __init__(self, measurements: dict[str, LoopMeasurement], baseline: str | None = "baseline"):
        measurements = _check_measurements(measurements)
        if baseline is not None and baseline not in measurements:
            raise ValueError(f"baseline={baseline!r} is not one of the rows {list(measurements)}")
        base = measurements[baseline].steps_per_second if baseline is not None else None
        columns = ["loop", "steps/s", "spread (steps/s)"]
        if base is not None:
            columns.append(f"speedup vs {baseline} (x)")
        columns += ["replayed (transitions/s)", *(f"{part} (µs/step)" for part in PARTS), "total (µs/step)"]
        rows = []
        for name, measured in measurements.items():
            per_step = measured.microseconds_per_step()
            updates_per_step = sum(run.updates for run in measured.runs) / sum(run.steps for run in measured.runs)
            replayed = updates_per_step * measured.settings.batch_size * measured.steps_per_second
            values = [measured.steps_per_second, measured.spread]
            if base is not None:
                values.append(measured.steps_per_second / base)
            values += [replayed, *per_step.values(), sum(per_step.values())]
            rows.append([name, *(format_number(value) for value in values)])
        super().__init__(columns, rows, [index > 0 for index in range(len(columns))])


def changes_table(measurements: dict[str, LoopMeasurement]) -> Table:
    """Each row's speedup and the µs per step it saved (−) or added (+) in each part, vs the baseline.

    A change no larger than this machine's noise in that part (:func:`machine_noise`) is shown in
    parentheses: it cannot be told apart from measuring the same loop twice.
    """
    noise = machine_noise(measurements)
    base = measurements[BASELINE]
    base_split = base.microseconds_per_step()
    rows = []
    for name, measured in measurements.items():
        split = measured.microseconds_per_step()
        cells = []
        for part in PARTS:
            change = split[part] - base_split[part]
            text = f"{change:+,.0f}"
            cells.append(f"({text})" if abs(change) <= noise[part] * base_split[part] else text)
        factor = measured.steps_per_second / base.steps_per_second
        within = abs(factor - 1) <= noise["steps/s"]
        rows.append([name, f"({factor:.2f})" if within else f"{factor:.2f}", *cells])
    columns = ["loop", "speedup (x)", *(f"{part} change (µs/step)" for part in PARTS)]
    return Table(columns, rows, [False] + [True] * (1 + len(PARTS)))


def loop_table(measurements: dict[str, LoopMeasurement], baseline: str | None = "baseline") -> LoopTable:
    """A :class:`LoopTable` of ``{row name: measure_loop(...)}``; speedups relative to ``baseline``."""
    return LoopTable(measurements, baseline)


def _check_measurements(measurements) -> dict[str, LoopMeasurement]:
    if not isinstance(measurements, dict) or not measurements or not all(
            isinstance(name, str) and isinstance(value, LoopMeasurement) for name, value in measurements.items()):
        raise ValueError(f"measurements={measurements!r} must be a non-empty dict of names to LoopMeasurement")
    return measurements


PART_COLOURS = {"env": "#4c72b0", "act": "#dd8452", "replay": "#55a868", "learn": "#c44e52", "other": "#8c8c8c"}


def plot_time_split(measurements: dict[str, LoopMeasurement], title: str = "Where a step's time goes",
                    figsize: tuple[float, float] = (9, 5)):
    """Stacked horizontal bars: each row's time per env step (µs), split into ``PARTS``."""
    import matplotlib.pyplot as plt

    measurements = _check_measurements(measurements)
    names = list(measurements)
    fig, ax = plt.subplots(figsize=figsize)
    left = np.zeros(len(names))
    for part in PARTS:
        widths = np.array([measurements[name].microseconds_per_step()[part] for name in names])
        ax.barh(names, widths, left=left, color=PART_COLOURS[part], label=part)
        left += widths
    ax.invert_yaxis()  # first row on top, as in the table
    ax.set_title(title)
    ax.set_xlabel("time per env step (µs)")
    ax.set_ylabel("loop")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14 * 5 / figsize[1]),
              ncol=len(PARTS), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    plt.close(fig)  # returned, not also drawn by pyplot at the end of a notebook cell
    return fig


def plot_throughput(measurements: dict[str, LoopMeasurement], title: str = "Steps per second",
                    claims: dict[str, float] | None = None, figsize: tuple[float, float] = (9, 5)):
    """Horizontal bars of steps/s per row (IQR as error bars); ``claims`` as labelled dotted lines."""
    import matplotlib.pyplot as plt

    measurements = _check_measurements(measurements)
    names = list(measurements)
    values = [measurements[name].steps_per_second for name in names]
    spreads = [measurements[name].spread for name in names]
    fig, ax = plt.subplots(figsize=figsize)
    ax.barh(names, values, xerr=spreads, color="#4c72b0", label="measured here (median, IQR)")
    for (label, value), style in zip((claims or {}).items(), (":", "--", "-.")):
        ax.axvline(value, color="#c44e52", linestyle=style, label=label)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel("env steps per second (steps/s)")
    ax.set_ylabel("loop")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14 * 5 / figsize[1]),
              ncol=2, frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig
