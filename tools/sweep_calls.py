"""The GPU sweep's calls, in order of value, and their steps: what ``tools/gpu_sweep.py`` runs.

The env step against its memory floor (``bench.env_floor``), the GPU tests and the tuning of the
``"win"`` preset (``bench win_speed``) first; its time to win
(trained for 3 minutes, then 1,000 games each way) on seed 0, then on seeds 1 and 2 and a held-out
seed; the launch comparison (the preset's learning a minute each eager, in 16 bits, graphed,
compiled); then the calls that have never run on a GPU, and last those on file for earlier code.
A step that needs another's records (the ablation reads the capstone's choice) runs only once those
are on file. The estimates are the first runs' times on an H200 where there are some, guesses
elsewhere; a step is killed at :data:`LIMIT_FACTOR` times its estimate.
"""

from __future__ import annotations

import dataclasses

LIMIT_FACTOR = 2
"""A step is killed at this many times its estimate: it is stuck, or its sizes are wrong for this GPU."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing a call does, in a process of its own, killed at ``limit_s`` or at the call's deadline.

    A test step runs ``pytest`` with the arguments ``tests``, with ``workers`` processes where
    pytest-xdist is installed (the GPU image has it). A suite step runs ``SUITES[suite]`` with
    ``options``, or, where ``part`` names a function (``"module:function"``) that makes part of
    the suite's records, that function with ``options``. ``sizes`` are more of its options: the
    full sizes shrunk to fit the lease (seconds per run, numbers of games), which a dry run leaves
    to the suites' quick sizes. ``needs`` names a step whose records this one reads (the
    capstone's choice): without them on file this one is skipped.
    ``estimate_s``: how long it should take on one H100, its process's start included (a guess:
    nothing has run on a GPU yet); the calls are packed by it.
    """

    name: str
    estimate_s: int
    suite: str | None = None
    part: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    sizes: dict = dataclasses.field(default_factory=dict)
    tests: str | None = None
    workers: int = 1
    needs: str | None = None

    @property
    def limit_s(self) -> int:
        return LIMIT_FACTOR * self.estimate_s

    def describe(self) -> str:
        """What the step runs, options included: its key in the sweep log."""
        if self.tests is not None:
            return f"pytest {self.tests}" + (f" (workers={self.workers})" if self.workers > 1 else "")
        what = f"bench {self.suite}" if self.part is None else f"bench {self.suite}: {self.part}"
        options = ", ".join(f"{key}={value!r}" for key, value in {**self.options, **self.sizes}.items())
        return what + (f" ({options})" if options else "")


@dataclasses.dataclass(frozen=True)
class Call:
    """Steps that go together in one command of the device tool, in order of value."""

    about: str
    steps: tuple[Step, ...]

    @property
    def estimate_s(self) -> int:
        return sum(step.estimate_s for step in self.steps)


GRAPHS = "rlgpu_helpers.bench.graphs"
FLOOR = "rlgpu_helpers.bench.env_floor"
CHOICE = "capstone: the settings chosen on the GPU"
WIN_SIZES = {"budget_s": 180.0, "games": 1000}
"""Every time-to-win step's sizes: the GPU target's 3 minutes of training, then 1,000 games each way (its seed is
an option: a dry run keeps it)."""
HELD_OUT_SEED = 3
"""A seed no setting of the preset was chosen on (the CPU's were chosen on seeds 0, 1 and 2)."""
COMPARISON_SIZES = {"budget_s": 60.0, "games": 200}
"""The launch comparison's sizes: one minute of training per setting, then 200 games each way."""


def time_to_win(seed: int, more: str = "") -> Step:
    """The ``"win"`` preset trained for 3 minutes on ``seed``, then 1,000 games played each way: about 270 s
    (its process, the compile and capture, the training, the evaluation)."""
    return Step(f"time to win: seed {seed}{more}", 270, "wins", options={"seeds": (seed,)}, sizes=WIN_SIZES)


def comparison(name: str, estimate_s: int, **launches) -> Step:
    """The preset's learning settings trained for a minute with other launch settings or precision
    (notebook 12's comparison, after LeanRL's): one step each, so that each saves its run as it ends."""
    return Step(f"launch comparison: {name}", estimate_s, "wins", options={"seeds": (0,), **launches},
                sizes=COMPARISON_SIZES)


# The estimates: the first runs' times on an H200 with 16 cores (2026-11-26 and 27) where there are some (the
# GPU tests took 185 s with 53 passing, before the win preset's were added; the env steps/s 81 s, the precision
# table 45 s, the graphs of an iteration 23 to 56 s and of the env step 23 to 54 s; the time to win 204 s for
# the eager preset, before compile and CUDA graphs; ddp had not finished its CPU processes in 90 s; the unit
# tests had done 80% in 257 s on 8 workers), guesses elsewhere: a timed point of a suite takes about 1.5 s, a
# torch.compile 10 to 60 s (the win preset's rollout, GAE and update took 44 s on a 2-core CPU, cold), a step's
# process about 5 s to start. The calls go by issue 34's order, with issue 38's env step in the first call (which
# moved the tuning's launch settings after the held-out seed, and its eager rungs beside seed 1): the env step
# and the GPU tests, the time to win on seed 0, then on seeds 1, 2 and a held-out seed, the tuning's launch
# settings, the launch comparison, the calls that have never run, and last those that have.
CALLS = (
    Call("the env step against its memory floor; the GPU tests", (
        # issue 38's targets first (the GPU tests ran in both earlier leases, the env floor never): features at
        # 4,194,304 games and grid at 1,048,576, eager and compiled (2 compiles); then fused (Triton kernels never
        # run on a GPU before: 2 compiles) in a process of its own, so that a kernel that fails, or leaves the GPU
        # unusable, costs only its own figures; then 2 x 23 eager steps profiled
        Step("env step floor: eager and compiled", 75, "env_floor", f"{FLOOR}:floor_throughput",
             {"modes": ("eager", "compiled")}),
        Step("env step floor: fused", 40, "env_floor", f"{FLOOR}:floor_throughput", {"modes": ("fused",)}),
        Step("env step floor: where an eager step's time goes", 25, "env_floor", f"{FLOOR}:step_op_shares"),
        # 66 tests, one compiling the preset at full size, 12 the fused steps' Triton kernels, on 4 workers;
        # then the 3 that need the GPU alone
        Step("GPU tests", 180, tests="tests -m 'gpu and not gpu_alone'", workers=4),
        Step("GPU tests, the GPU alone", 40, tests="tests -m 'gpu and gpu_alone'"),
    )),
    Call("the time to win on seed 0; the preset's tuning: the shapes of the work", (
        time_to_win(0),
        Step("win speed: the shapes", 70, "win_speed", options={"groups": ("shapes",)}),  # 4 captures, no compile
    )),
    Call("the time to win on seed 1; the 'win' preset's tuning: the eager rungs", (
        time_to_win(1),
        Step("win speed: eager", 50, "win_speed", options={"groups": ("eager",)}),  # 2 x 2 slow iterations
    )),
    Call("the time to win on seed 2; batch size", (
        time_to_win(2),
        Step("batch size", 90, "batch_size"),  # 34 points, two searches of the card's limit, 10 s of PPO
    )),
    Call("the time to win on a held-out seed; launches and bytes, accumulation", (
        time_to_win(HELD_OUT_SEED, " (held out)"),
        Step("launch", 30, "launch"),
        Step("accumulation", 40, "accumulation"),
    )),
    Call("the preset's tuning: its launch settings; sync costs, graphs of acting and the update", (
        # the old preset, CUDA graphs, the preset (compiled + CUDA graphs): about 10 s of iterations each
        Step("win speed: the launches", 150, "win_speed", options={"groups": ("launches",)}),
        Step("sync costs", 75, "syncs"),  # 28 points, 28 audits, 10 read costs (each about a second)
        Step("graphs: acting and the update", 50, "graphs", f"{GRAPHS}:step_records", {"parts": ("acting", "update")},
             {"num_envs": (65536,)}),  # 4 compiles
    )),
    Call("the launch comparison: the preset's learning, a minute each eager in fp32, in 16 bits, graphed, compiled", (
        comparison("eager, fp32", 80, precision="fp32", compile=False, cuda_graphs=False),
        comparison("eager, 16 bits", 80, compile=False, cuda_graphs=False),
        comparison("CUDA graphs, 16 bits", 85, compile=False),
        comparison("compiled + CUDA graphs (the preset)", 100),
    )),
    Call("headline records: the time to a score, with the settings chosen on the GPU for a run of 60 s", (
        # 5 trials of 20 s, then the launch settings timed: 2 compiles of a whole iteration
        Step(CHOICE, 180, "capstone", options={"parts": ("choice",)}, sizes={"run_s": 60.0}),
        Step("time to score", 195, "training", options={"setups": ("ours",)},
             sizes={"seeds": (0, 1, 2), "budget_s": 60.0}, needs=CHOICE),
    )),
    Call("the unit tests with CUDA present, transfers, ceilings", (
        # On 14 workers, the longest test is the critical path: PPO learning a 6 x 6 grid on the CPU.
        Step("unit tests", 240, tests="tests -m 'not gpu'", workers=14),
        Step("transfers", 50, "transfers"),
        Step("ceilings", 50, "ceilings"),  # 36 points
    )),
    Call("replay buffers, ddp", (
        Step("replay", 80, "replay"),  # 30 sampling points, DQN with 6 buffers for 4 s each
        Step("ddp", 120, "ddp"),  # 5 torchruns: 1, 2, 4 CPU processes, 1 with every core, 1 on the GPU
    )),
    Call("notebook 11's ablation; the naive loop on the CPU", (
        Step("ablation: lessons 03 04 06", 140, "capstone",
             options={"parts": ("ablation",), "arms": ("all lessons", "03", "04", "06")}, sizes={"budget_s": 30.0},
             needs=CHOICE),  # 4 runs of 30 s
        Step("ablation: lessons 08 09 11", 100, "capstone",
             options={"parts": ("ablation",), "arms": ("08", "09", "11")}, sizes={"budget_s": 30.0}, needs=CHOICE),
        Step("naive loop", 85, "loop"),  # the CPU's: notebook 02's 11 rows of about 7,000 steps
    )),
    Call("on file for earlier code: env steps/s, the precision table, graphs of an iteration and of the env step", (
        Step("env steps/s", 85, "envs", sizes={"gym_num_envs": (1, 4, 16)}),  # 33 points
        Step("precision", 50, "precision"),  # 32 points; PPO, 3 x 3 runs of 3 M steps
        Step("graphs: a PPO iteration", 55, "graphs", f"{GRAPHS}:step_records", {"parts": ("iteration",)},
             {"num_envs": (65536,)}),  # 2 compiles of a whole iteration
        Step("graphs: the env step", 55, "graphs", f"{GRAPHS}:step_records", {"parts": ("env",)},
             {"num_envs": (256, 65536, 4194304)}),  # 6 compiles of a step
        Step("graphs: one operator by size", 15, "graphs", f"{GRAPHS}:op_time_by_size"),
        Step("graphs: launches per part", 15, "graphs", f"{GRAPHS}:launch_records"),
    )),
)
