"""The naive DQN: one game on the CPU, one step at a time (introduced in notebook 01).

This is the baseline every later speedup in the course is compared to. It is written the way
most DQN tutorials write it: every step turns one observation into a tensor, asks the network
for its Q-values (with autograd recording, as nobody said not to), steps one ``SnakeEnv``,
appends a tuple to a ``deque`` and, every step, learns from a batch assembled from that deque
with list comprehensions.

``LoopSettings`` holds the DQN hyperparameters and the switches for the cheap tunings of
notebook 02; each switch changes one spot of the single loop in :meth:`NaiveDQN.run`:

- ``inference_mode``: act under ``torch.inference_mode()`` instead of recording a graph;
- ``set_to_none``: ``zero_grad(set_to_none=True)`` (PyTorch's default since 2.0; the baseline pins
  the older ``False``, which writes zeros into every gradient before each update);
- ``learn_every``: one update every ``k`` env steps instead of every step;
- ``array_batches``: the replay memory is a set of preallocated NumPy arrays, so a batch is one
  fancy-indexing per field instead of a list comprehension over tuples;
- ``num_threads``: ``torch.set_num_threads`` for the run (restored afterwards);
- ``batch_size``.

The loop times its parts with ``time.perf_counter``: ``env`` (the game), ``act`` (observation to
action), ``replay`` (storing transitions and assembling batches), ``learn`` (the gradient update
and the target-network copy) and ``other`` (everything else: loop bookkeeping, the epsilon
schedule, episode scores, the progress bar).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections import deque

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .bench import Record, Table, format_number
from .config import check_int, check_number, check_seed, pick
from .device import device_report, get_device, logical_cores, machine_label
from .nets import QNetwork
from .snake import SnakeEnv, rules

PARTS = ("env", "act", "replay", "learn", "other")
"""The parts of a step the loop times, in the order tables and plots show them."""


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the naive loop does: the tuning switches of notebook 02 and the DQN hyperparameters.

    The defaults are the baseline: every switch off, a 10 x 10 grid, feature observations.
    """

    # -- the cheap tunings (notebook 02) -------------------------------------------------------
    inference_mode: bool = False
    """Act under ``torch.inference_mode()``; off: a plain forward pass that records a graph."""
    set_to_none: bool = False
    """``optimizer.zero_grad(set_to_none=...)``: drop the gradients instead of zeroing them."""
    learn_every: int = 1
    """One gradient update every this many env steps."""
    array_batches: bool = False
    """Replay memory in preallocated NumPy arrays; off: a deque of tuples and list comprehensions."""
    num_threads: int | None = None
    """``torch.set_num_threads`` during the run; None keeps the current setting."""
    batch_size: int = 32
    """Transitions per gradient update."""

    # -- the game --------------------------------------------------------------------------------
    height: int = 10
    width: int = 10
    obs_type: str = "features"

    # -- DQN -------------------------------------------------------------------------------------
    hidden: int = 128
    """Width of the Q-network's two hidden layers."""
    learning_rate: float = 1e-3
    gamma: float = 0.9
    """Discount factor."""
    buffer_size: int = 50_000
    """Transitions the replay memory keeps; the oldest are dropped."""
    learning_starts: int = 1_000
    """Env steps before the first update (and never before the memory holds one batch)."""
    eps_start: float = 1.0
    eps_end: float = 0.05
    exploration_steps: int = 10_000
    """Epsilon falls linearly from eps_start to eps_end over this many env steps."""
    target_update_every: int = 500
    """Copy the online network into the target network every this many env steps."""
    seed: int = 0

    def __post_init__(self):
        for name in ("inference_mode", "set_to_none", "array_batches"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        for name in ("learn_every", "batch_size", "hidden", "buffer_size", "exploration_steps",
                     "target_update_every"):
            check_int(name, getattr(self, name), 1)
        check_int("learning_starts", self.learning_starts, 0)
        if self.num_threads is not None:
            check_int("num_threads", self.num_threads, 1)
        rules.check_grid_size(self.height, self.width)
        rules.check_obs_type(self.obs_type)
        if self.batch_size > self.buffer_size:
            raise ValueError(f"batch_size={self.batch_size!r} must not exceed buffer_size={self.buffer_size!r}")
        check_number("learning_rate", self.learning_rate, above=0)
        for name in ("gamma", "eps_start", "eps_end"):
            check_number(name, getattr(self, name), at_least=0, at_most=1)
        check_seed("seed", self.seed)

    def replace(self, **changes) -> LoopSettings:
        """A copy with ``changes`` (validated like any settings)."""
        return dataclasses.replace(self, **changes)


def tuning_rows(base: LoopSettings | None = None, *, learn_every: int = 4,
                batch_sizes: tuple[int, ...] = (64, 128), together_threads: int | None = 1
                ) -> dict[str, LoopSettings]:
    """The rows of notebook 02: the baseline, each tuning alone, then the tunings together.

    ``base`` (default ``LoopSettings()``) gives the hyperparameters of every row. The thread-count
    rows use one thread and every logical core this process may use (PyTorch's default, which
    the baseline keeps). "All together" turns on the four code-path switches and runs on
    ``together_threads`` threads (None: the baseline's); it keeps the baseline's batch size,
    since a batch size changes what the agent learns, not only how fast.
    """
    base = base if base is not None else LoopSettings()
    if not isinstance(base, LoopSettings):
        raise TypeError(f"base={base!r} must be a LoopSettings")
    check_int("learn_every", learn_every, 2)
    if together_threads is not None:
        check_int("together_threads", together_threads, 1)
    cores = logical_cores() or 1
    rows = {
        "baseline": base,
        "inference_mode for acting": base.replace(inference_mode=True),
        "zero_grad(set_to_none=True)": base.replace(set_to_none=True),
        f"learn every {learn_every} steps": base.replace(learn_every=learn_every),
        "batches from arrays": base.replace(array_batches=True),
        "1 thread": base.replace(num_threads=1),
    }
    if cores > 1:
        rows[f"{cores} threads"] = base.replace(num_threads=cores)
    for size in batch_sizes:
        rows[f"batch size {size}"] = base.replace(batch_size=size)
    rows["all together"] = base.replace(inference_mode=True, set_to_none=True, learn_every=learn_every,
                                        array_batches=True, num_threads=together_threads)
    return rows


# -- replay memory: the tutorial's deque, or preallocated arrays --------------------------------


class ListReplay:
    """The tutorial's memory: a deque of ``(obs, action, reward, next_obs, terminated)`` tuples."""

    def __init__(self, capacity: int):
        self.memory = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, obs, action, reward, next_obs, terminated) -> None:
        self.memory.append((obs, action, reward, next_obs, terminated))

    def batch(self, indices) -> tuple[torch.Tensor, ...]:
        """Transitions ``indices`` (oldest first) as tensors: obs, actions, rewards, next_obs, terminated."""
        transitions = [self.memory[i] for i in indices]
        obs, actions, rewards, next_obs, terminated = zip(*transitions)
        return (torch.tensor(np.array(obs), dtype=torch.float32),
                torch.tensor(actions, dtype=torch.int64),
                torch.tensor(rewards, dtype=torch.float32),
                torch.tensor(np.array(next_obs), dtype=torch.float32),
                torch.tensor(terminated, dtype=torch.float32))


class ArrayReplay:
    """The same memory in preallocated NumPy arrays, written as a ring (oldest overwritten)."""

    def __init__(self, capacity: int, obs_shape):
        self.capacity = capacity
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated) -> None:
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.next_obs[i] = next_obs
        self.terminated[i] = terminated
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def batch(self, indices) -> tuple[torch.Tensor, ...]:
        """Slots ``indices`` as tensors (the same slots as ``ListReplay`` until the ring wraps)."""
        return tuple(torch.from_numpy(field[indices]) for field in
                     (self.obs, self.actions, self.rewards, self.next_obs, self.terminated))


# -- the loop -----------------------------------------------------------------------------------


@dataclasses.dataclass
class NaiveRunResult:
    """What one call of :meth:`NaiveDQN.run` did, and where its time went."""

    settings: LoopSettings
    steps: int
    """Env steps made in this run."""
    seconds: float
    """Wall-clock seconds of the loop."""
    times: dict[str, float]
    """Seconds spent in each part of ``PARTS``; they add up to ``seconds``."""
    updates: int
    """Gradient updates made in this run."""
    episode_scores: list[int]
    """Score (food eaten) of each game that ended in this run."""
    q_network: nn.Module
    """The online Q-network (the live one: it keeps learning if the agent runs on)."""

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")

    def microseconds_per_step(self) -> dict[str, float]:
        """Each part's time per env step, in microseconds."""
        return {part: 1e6 * seconds / max(self.steps, 1) for part, seconds in self.times.items()}


class NaiveDQN:
    """A single-env DQN agent on the CPU; :meth:`run` continues its training for a budget.

    Several ``run`` calls continue the same training (memory, networks, epsilon schedule), which
    lets a benchmark warm up and then time a few segments of one run.
    """

    def __init__(self, settings: LoopSettings | None = None):
        self.settings = s = settings if settings is not None else LoopSettings()
        if not isinstance(s, LoopSettings):
            raise TypeError(f"settings={s!r} must be a LoopSettings")
        torch.manual_seed(s.seed)
        self.rng = np.random.default_rng(s.seed)
        self.env = SnakeEnv(s.height, s.width, obs_type=s.obs_type)
        obs_shape = self.env.observation_space.shape
        self.q_network = QNetwork(obs_shape, hidden=s.hidden)
        self.target_network = copy.deepcopy(self.q_network)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=s.learning_rate)
        self.memory = ArrayReplay(s.buffer_size, obs_shape) if s.array_batches else ListReplay(s.buffer_size)
        self.obs, _ = self.env.reset(seed=s.seed)
        self.total_steps = 0
        self.total_updates = 0

    def epsilon(self) -> float:
        s = self.settings
        fraction = min(self.total_steps / s.exploration_steps, 1.0)
        return s.eps_start + fraction * (s.eps_end - s.eps_start)

    def act(self, obs: np.ndarray, epsilon: float) -> int:
        """Epsilon-greedy action for one observation.

        The Q-values are computed on every step, also when the action will be random, so the
        cost of a step does not change as epsilon decays.
        """
        state = torch.tensor(obs, dtype=torch.float32).unsqueeze(0)
        if self.settings.inference_mode:
            with torch.inference_mode():
                q_values = self.q_network(state)
        else:
            q_values = self.q_network(state)  # records a graph nobody will use
        action = int(q_values.argmax(dim=1).item())
        if self.rng.random() < epsilon:
            action = int(self.rng.integers(rules.NUM_ACTIONS))
        return action

    def sample_indices(self) -> np.ndarray:
        """Uniform random memory positions (with replacement) for one batch."""
        return self.rng.integers(0, len(self.memory), size=self.settings.batch_size)

    def learn(self, batch) -> torch.Tensor:
        """One DQN update on ``batch``; returns the loss (detached)."""
        s = self.settings
        obs, actions, rewards, next_obs, terminated = batch
        q = self.q_network(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q = self.target_network(next_obs).max(dim=1).values
            target = rewards + s.gamma * (1.0 - terminated) * next_q
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=s.set_to_none)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def run(self, steps: int | None = None, seconds: float | None = None,
            progress: bool = True) -> NaiveRunResult:
        """Train for ``steps`` env steps or ``seconds`` of wall-clock time (give exactly one)."""
        if (steps is None) == (seconds is None):
            raise ValueError(f"give exactly one of steps={steps!r} and seconds={seconds!r}")
        if steps is not None:
            check_int("steps", steps, 1)
        else:
            check_number("seconds", seconds, above=0)
        s = self.settings
        threads_before = torch.get_num_threads()
        if s.num_threads is not None:
            torch.set_num_threads(s.num_threads)  # restored in `finally`
        env_time = act_time = replay_time = learn_time = 0.0
        scores, updates, done_steps = [], 0, 0
        bar = tqdm(total=steps, desc="naive DQN", unit="step", disable=not progress, mininterval=0.5)
        learn_from = max(s.learning_starts, s.batch_size)
        start = time.perf_counter()
        try:
            while (done_steps < steps) if steps is not None else (time.perf_counter() - start < seconds):
                epsilon = self.epsilon()

                t0 = time.perf_counter()
                action = self.act(self.obs, epsilon)
                t1 = time.perf_counter()
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                t2 = time.perf_counter()
                self.memory.add(self.obs, action, reward, next_obs, terminated)
                t3 = time.perf_counter()
                act_time += t1 - t0
                env_time += t2 - t1
                replay_time += t3 - t2

                self.obs = next_obs
                self.total_steps += 1
                done_steps += 1
                if terminated or truncated:
                    scores.append(info["score"])
                    t0 = time.perf_counter()
                    self.obs, _ = self.env.reset()
                    env_time += time.perf_counter() - t0

                if self.total_steps >= learn_from and self.total_steps % s.learn_every == 0:
                    t0 = time.perf_counter()
                    batch = self.memory.batch(self.sample_indices())
                    t1 = time.perf_counter()
                    self.learn(batch)
                    updates += 1
                    self.total_updates += 1
                    replay_time += t1 - t0
                    learn_time += time.perf_counter() - t1
                if self.total_steps % s.target_update_every == 0:
                    t0 = time.perf_counter()
                    self.target_network.load_state_dict(self.q_network.state_dict())
                    learn_time += time.perf_counter() - t0

                bar.update()
                if scores and done_steps % 1000 == 0:
                    bar.set_postfix(score=f"{np.mean(scores[-100:]):.2f}", refresh=False)
        finally:
            total = time.perf_counter() - start
            bar.close()
            if s.num_threads is not None:
                torch.set_num_threads(threads_before)
        parts = {"env": env_time, "act": act_time, "replay": replay_time, "learn": learn_time}
        parts["other"] = max(total - sum(parts.values()), 0.0)
        return NaiveRunResult(s, done_steps, total, parts, updates, scores, self.q_network)


def run_naive_dqn(settings: LoopSettings | None = None, *, steps: int | None = None,
                  seconds: float | None = None, progress: bool = True) -> NaiveRunResult:
    """Train a fresh naive DQN for ``steps`` env steps or ``seconds`` (exactly one of them)."""
    return NaiveDQN(settings).run(steps=steps, seconds=seconds, progress=progress)


# -- measuring throughput -----------------------------------------------------------------------


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
        """Each part's time per env step (µs), summed over the segments."""
        steps = sum(run.steps for run in self.runs)
        return {part: 1e6 * sum(run.times[part] for run in self.runs) / steps for part in PARTS}

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
    machine = machine_label(device_report(device))
    return [measured.record(name, machine) for name, measured in measure_rows(progress=progress).items()]


# -- tables and plots ---------------------------------------------------------------------------


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
            seconds = sum(run.seconds for run in measured.runs)
            replayed = sum(run.updates for run in measured.runs) * measured.settings.batch_size / seconds
            values = [measured.steps_per_second, measured.spread]
            if base is not None:
                values.append(measured.steps_per_second / base)
            values += [replayed, *per_step.values(), sum(per_step.values())]
            rows.append([name, *(format_number(value) for value in values)])
        super().__init__(columns, rows, [index > 0 for index in range(len(columns))])


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


# -- evaluation ---------------------------------------------------------------------------------


def _play(choose, episodes: int, seed: int, height: int, width: int, obs_type: str) -> np.ndarray:
    check_int("episodes", episodes, 1)
    check_seed("seed", seed)
    env = SnakeEnv(height, width, obs_type=obs_type)
    scores = []
    obs, _ = env.reset(seed=seed)
    while len(scores) < episodes:
        obs, _, terminated, truncated, info = env.step(choose(obs))
        if terminated or truncated:
            scores.append(info["score"])
            obs, _ = env.reset()
    return np.array(scores, dtype=np.float64)


def greedy_action(q_network: nn.Module, obs: np.ndarray) -> int:
    """The move with the highest Q-value for one observation (no exploration)."""
    with torch.inference_mode():
        return int(q_network(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0)).argmax(dim=1).item())


def evaluate(q_network: nn.Module, episodes: int = 100, seed: int = 0, *, height: int = 10,
             width: int = 10, obs_type: str = "features") -> np.ndarray:
    """Scores of ``episodes`` games played greedily (no exploration) by ``q_network``.

    The games are seeded, so the same network gives the same scores; ``.mean()`` is the mean score.
    """
    if not isinstance(q_network, nn.Module):
        raise TypeError(f"q_network={q_network!r} must be a torch.nn.Module")
    return _play(lambda obs: greedy_action(q_network, obs), episodes, seed, height, width, obs_type)


def evaluate_random(episodes: int = 1000, seed: int = 0, *, height: int = 10, width: int = 10) -> np.ndarray:
    """Scores of ``episodes`` seeded games with uniformly random actions: the score to beat."""
    rng = np.random.default_rng(seed)
    return _play(lambda obs: int(rng.integers(rules.NUM_ACTIONS)), episodes, seed, height, width, "features")
