"""The guides' claims as data, and one verdict beside a measurement (introduced in notebook 01).

The course grew from guides that state figures: "~500 FPS for a single CPU env", "4.7x faster",
"2-3x faster transfers". Each is a :class:`Claim` here: where it comes from, the guide's words,
the figure (or range), its unit, and what it was about. A notebook measures the same thing on
its own machine and asks :func:`judge` for a :class:`Verdict`; :func:`verdicts_table` shows
them. No notebook writes its own rule.

The rule respects the measurement's spread (its IQR, or the noise of the machine as measured by
running the same thing twice):

* the claim covers ``[low, high]``; a figure stated as "about X" covers X ± 25%, and a speedup
  stated as "about X" covers a gain of (X - 1) ± 25% ("~15% faster" is 1.11x to 1.19x, not
  0.86x to 1.44x, which would count a slowdown as holding);
* the measurement covers ``measured ± spread``;
* **within noise: can't tell** when the claim is a speedup and the measurement's range includes
  1 (no change): the effect cannot be told apart from none on this machine;
* **held** when the two ranges overlap;
* **partly** when they do not, but the measurement points the claimed way: a speedup beyond
  noise in the claimed direction, or a figure within a factor of 2 of the claimed range;
* **did not hold** otherwise;
* **not tested here (no GPU)**, before any of these, when the claim is about a GPU
  (``Claim.gpu``) and the measurement was made on another device: a CPU's figure says nothing
  for or against it, so it stands beside the claim with no verdict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..core.checks import check_bool, check_choice, check_number
from .records import Record
from .table import Table, format_number

APPROX = 0.25
"""How far "about X" reaches on either side of X, as a fraction of X."""
KINDS = ("figure", "speedup")
HELD, PARTLY, NOT_HELD, WITHIN_NOISE = "held", "partly", "did not hold", "within noise: can't tell"
NOT_TESTED = "not tested here (no GPU)"
OUTCOMES = (HELD, PARTLY, NOT_HELD, WITHIN_NOISE, NOT_TESTED)

GUIDE_GPU_RL = "GPU Utilization for Reinforcement Learning (guide)"
GUIDE_SNAKE_OPT = "Performance Optimizations for Snake RL Training (guide)"
GUIDE_UARA_DRL = "GPU Optimization Guide for UARA-DRL (guide)"
GUIDE_TETRIS = "GPU-Optimized DQN Tetris Training (guide)"
LEANRL = "LeanRL README, pytorch-labs/LeanRL: their speed-up table, H100 (guide)"
PUFFERLIB = "PufferLib 3.0 announcement, puffer.ai/blog.html: a peer's figure (guide)"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A figure a guide states: ``low``..``high`` in ``unit`` (equal ends: "about" that figure).

    ``kind`` is ``"speedup"`` for a ratio against a baseline (1 means no change) or
    ``"figure"`` for an absolute quantity (a rate, a time, a ratio of two costs). A speedup the
    guide gives no figure for ("faster") is ``low=1, high=math.inf``. ``gpu``: the claim is
    about a GPU, so only a measurement on a GPU can hold or refute it (:func:`judge`).
    """

    key: str
    source: str
    quote: str
    low: float
    high: float
    unit: str
    kind: str
    about: str
    lesson: str
    gpu: bool = False

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        check_number("low", self.low, above=0)
        if not (self.kind == "speedup" and self.high == math.inf):  # "faster", with no figure
            check_number("high", self.high, at_least=self.low)
        for field in ("key", "source", "quote", "unit", "about", "lesson"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field):
                raise ValueError(f"{field}={getattr(self, field)!r} must be a non-empty str")
        check_bool("gpu", self.gpu)

    @property
    def approximate(self) -> bool:
        """A single figure ("~500"), read as that figure ± ``APPROX``."""
        return self.low == self.high

    @property
    def covers(self) -> tuple[float, float]:
        """The range of values the claim allows (see the module docstring)."""
        if not self.approximate:
            return self.low, self.high
        if self.kind == "speedup":
            gain = self.low - 1
            return 1 + gain * (1 - APPROX), 1 + gain * (1 + APPROX)
        return self.low * (1 - APPROX), self.high * (1 + APPROX)

    @property
    def figure(self) -> str:
        """The claim's figure as the guide puts it: "~500 steps/s", "2-3 x", "faster (no figure)"."""
        if self.high == math.inf:
            return f"faster than {format_number(self.low)} {self.unit} (no figure given)"
        if self.approximate:
            return f"~{format_number(self.low)} {self.unit}"
        return f"{format_number(self.low)}-{format_number(self.high)} {self.unit}"


def _claims(*claims: Claim) -> dict[str, Claim]:
    return {claim.key: claim for claim in claims}


CLAIMS = _claims(
    # notebooks 01, 03 and 04: how fast one env, and many, run
    Claim("single-env-fps", GUIDE_GPU_RL, "Single Environment (CPU) ... ~500 FPS", 500, 500, "steps/s",
          "figure", "one Snake env on a CPU, stepped one game at a time", "01"),
    Claim("cpu-16-envs-fps", GUIDE_GPU_RL, "16 CPU envs | ~6,000", 6_000, 6_000, "steps/s",
          "figure", "16 Snake envs on a CPU", "03"),
    Claim("gpu-64-envs-fps", GUIDE_GPU_RL, "64 GPU envs | ~35,000", 35_000, 35_000, "steps/s",
          "figure", "64 Snake games vectorized on a GPU", "04", gpu=True),
    Claim("gpu-256-envs-fps", GUIDE_GPU_RL, "~120,000 FPS with N=256", 120_000, 120_000, "steps/s",
          "figure", "256 Snake games vectorized on a GPU", "04", gpu=True),
    Claim("vectorized-speedup", GUIDE_GPU_RL, "100-300x speedup over single CPU environment", 100, 300, "x",
          "speedup", "vectorized envs on a GPU against one CPU env", "04", gpu=True),
    Claim("single-env-million-steps", GUIDE_GPU_RL, "Single CPU env | ~500 | ~33 min (training time, 1M steps)",
          33, 33, "min", "figure", "one million training steps with one Snake env on a CPU", "01"),
    Claim("same-cost-1-vs-256", GUIDE_GPU_RL, "Same computational cost for 1 or 256 environments (GPU "
          "parallelism)", 1.0, 1.0, "x", "figure",
          "time of one VecSnake step of 256 games over one of 1 game, on a GPU", "04", gpu=True),
    # notebook 05: transfers and replay buffers
    Claim("pinned-transfer", GUIDE_GPU_RL, "Pinned (page-locked) memory enables faster CPU-GPU transfer ... "
          "2-3x faster transfer to GPU", 2.0, 3.0, "x", "speedup",
          "host-to-device GB/s from pinned against pageable memory", "05", gpu=True),
    Claim("pinned-replay", GUIDE_GPU_RL, "Use Pinned Memory: For replay buffer storage ... 2-3x faster transfers",
          2.0, 3.0, "x", "speedup",
          "sampling a batch to the GPU from a pinned, prefetching buffer against a pageable one", "05", gpu=True),
    Claim("replay-on-gpu", GUIDE_GPU_RL, "Keep Data on GPU: ... Keep replay buffer samples on GPU, Avoid "
          "repeated CPU-GPU transfers", 1.0, math.inf, "x", "speedup",
          "sampling from a buffer on the GPU against a buffer in pageable host memory", "05", gpu=True),
    # notebook 06: batch size and memory
    Claim("batch-rtx-3060-3070", GUIDE_GPU_RL, "Optimal Batch Sizes ... RTX 3060/3070: 64-128", 64, 128,
          "samples", "figure", "the batch from which the update's samples/s stops growing, on an RTX 3060 or 3070",
          "06", gpu=True),
    Claim("batch-rtx-3080-3090", GUIDE_GPU_RL, "Optimal Batch Sizes ... RTX 3080/3090: 256-512", 256, 512,
          "samples", "figure", "the batch from which the update's samples/s stops growing, on an RTX 3080 or 3090",
          "06", gpu=True),
    Claim("batch-rtx-4090", GUIDE_GPU_RL, "Optimal Batch Sizes ... RTX 4090: 512-1024", 512, 1024, "samples",
          "figure", "the batch from which the update's samples/s stops growing, on an RTX 4090", "06", gpu=True),
    Claim("batch-a100", GUIDE_GPU_RL, "Optimal Batch Sizes ... A100: 1024-2048", 1024, 2048, "samples",
          "figure", "the batch from which the update's samples/s stops growing, on an A100", "06", gpu=True),
    Claim("larger-batches-utilize", GUIDE_GPU_RL, "Larger batches better utilize GPU", 1.0, math.inf, "x",
          "speedup", "samples/s of the update at the largest batch measured against batch 64, on a GPU", "06", gpu=True),
    Claim("utilization-70-90", GUIDE_UARA_DRL, "Better GPU utilization (70-90% vs 10-30% previously)", 70, 90,
          "%", "figure", "NVML utilization averaged over a PPO training run on a GPU", "06", gpu=True),
    # notebook 08: mixed precision
    Claim("amp-speedup", GUIDE_GPU_RL, "Mixed Precision Training ... 2-3x speedup on modern GPUs", 2.0, 3.0, "x",
          "speedup", "a training step in 16-bit autocast against fp32, on a GPU, at the widest net measured", "08", gpu=True),
    Claim("amp-memory", GUIDE_GPU_RL, "Mixed Precision Training ... 2x memory reduction", 2.0, 2.0, "x", "speedup",
          "the memory of a training step in fp32 over that in 16-bit autocast, at the widest net measured", "08", gpu=True),
    Claim("fp16-speedup", GUIDE_SNAKE_OPT, "Mixed precision training (FP16) can provide an additional 2-3x speedup",
          2.0, 3.0, "x", "speedup", "a training step in fp16 autocast against fp32, on a GPU, at the widest net "
          "measured", "08", gpu=True),
    Claim("amp-up-to-2x", GUIDE_TETRIS, "Uses Automatic Mixed Precision (AMP) for up to 2x speedup", 1.0, 2.0, "x",
          "speedup", "a training step in 16-bit autocast against fp32, on a GPU, at the widest net measured", "08", gpu=True),
    # notebook 02: the cheap tunings of the naive loop (a 2-core CPU, per the guide)
    Claim("loop-tunings", GUIDE_SNAKE_OPT, "Baseline: ~435 steps/second; Optimized: ~2050 steps/second; "
          "Speedup: 4.7x faster", 2050 / 435, 2050 / 435, "x", "speedup",
          "all the tunings together against the naive loop, on 2 CPU cores", "02"),
    Claim("loop-baseline-fps", GUIDE_SNAKE_OPT, "CPU-only Performance (2 cores) - Baseline: ~435 steps/second",
          435, 435, "steps/s", "figure", "the naive DQN loop on 2 CPU cores", "02"),
    Claim("loop-optimized-fps", GUIDE_SNAKE_OPT, "Optimized: ~2050 steps/second", 2050, 2050, "steps/s",
          "figure", "the tuned DQN loop on 2 CPU cores", "02"),
    Claim("inference-mode", GUIDE_SNAKE_OPT, "Use torch.inference_mode() for action selection ... "
          "~15% faster inference during action selection", 1.15, 1.15, "x", "speedup",
          "the act part of a step, inference_mode against a plain forward pass", "02"),
    Claim("set-to-none", GUIDE_SNAKE_OPT, "Use zero_grad(set_to_none=True) ... ~20% reduction in memory usage "
          "and allocation time", 1.2, 1.2, "x", "speedup",
          "the learn part of a step, set_to_none=True against False", "02"),
    Claim("array-batches", GUIDE_SNAKE_OPT, "Convert numpy arrays to tensors in batches, avoid list "
          "comprehensions ... ~30% faster tensor creation and data loading", 1.3, 1.3, "x", "speedup",
          "the replay part of a step, batches from arrays against a deque of tuples", "02"),
    Claim("learn-every-4", GUIDE_SNAKE_OPT, "Train every 4 steps instead of every step ... ~3x faster episode "
          "completion", 3.0, 3.0, "x", "speedup", "learning every 4 steps against every step", "02"),
    Claim("all-cores", GUIDE_SNAKE_OPT, "Configure PyTorch to use all available CPU cores ... ~50% faster on "
          "multi-core CPUs", 1.5, 1.5, "x", "speedup", "all cores against one thread", "02"),
    # notebook 09: LeanRL's published speed-up table (theirs: an H100, simulation on the CPU). Each against
    # LeanRL's own script eager (the same code), not CleanRL's original script, whose "overall speed-up"
    # (6.8x, 2.7x) also counts LeanRL's rewrite of the eager code.
    Claim("leanrl-ppo-atari", LEANRL, "PPO (Atari): 3728 fps (LeanRL implementation) ... 6809 fps "
          "(compile+cudagraphs)", 6809 / 3728, 6809 / 3728, "x", "speedup",
          "a PPO iteration compiled and graph-captured against the same code eager, on a GPU", "09", gpu=True),
    Claim("leanrl-ppo-continuous", LEANRL, "PPO (Continuous action): 683 fps (LeanRL implementation) ... 1774 "
          "fps (compile+cudagraphs)", 1774 / 683, 1774 / 683, "x", "speedup",
          "a PPO iteration compiled and graph-captured against the same code eager, on a GPU", "09", gpu=True),
    Claim("leanrl-compile-alone", LEANRL, "the compile column against the LeanRL implementation column: 3841/3728 "
          "(PPO Atari), 908/683 (PPO continuous), 255/130 (SAC), 272/247 (TD3)", 3841 / 3728, 255 / 130, "x",
          "speedup", "a PPO iteration compiled (no CUDA graphs) against eager, on a GPU", "09", gpu=True),
    # notebook 12: the peer's end-to-end figure (theirs: their own C envs and network, an RTX 5090)
    Claim("pufferlib-4m-sps", PUFFERLIB, "train at up to 4M steps/second on a single RTX 5090", 4e6, 4e6, "steps/s",
          "figure", "end-to-end PPO training on one GPU: the 'win' preset's env steps/s, acting and learning", "12",
          gpu=True),
    # notebook 11: the capstone's training against the guide's table (its GPU rows)
    Claim("gpu-256-envs-million-steps", GUIDE_GPU_RL, "256 GPU envs | ~120,000 | ~8 sec (training time, 1M steps)",
          8, 8, "s", "figure", "one million env steps of the capstone's PPO, acting and learning, with the chosen "
          "settings", "11", gpu=True),
    Claim("gpu-256-envs-training-speedup", GUIDE_GPU_RL, "256 GPU envs | ~120,000 | ~8 sec | 240x (against a "
          "single CPU env)", 240, 240, "x", "speedup", "the capstone's end-to-end env steps/s against the naive "
          "single-env DQN of notebook 01, on the same machine", "11", gpu=True),
    # notebook 10: several GPUs, data-parallel
    Claim("ddp-further-speedup", GUIDE_GPU_RL, "Multi-GPU Training ... Benefits: 2-4x further speedup", 2.0, 4.0, "x",
          "speedup", "PPO's env steps/s with the most GPUs measured (one process each) against one GPU", "10", gpu=True),
    Claim("ddp-diminishing-beyond-4", GUIDE_GPU_RL, "Multi-GPU Training ... Challenges: Diminishing returns beyond "
          "4 GPUs", 1.0, 2.0, "x", "speedup", "PPO's env steps/s with 8 GPUs against 4: more, but less than twice "
          "(twice would be no diminishing)", "10", gpu=True),
)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A claim beside a measurement (``measured`` ± ``spread``, in the claim's unit)."""

    claim: Claim
    measured: float
    spread: float
    outcome: str

    def __str__(self) -> str:
        return (f"{self.claim.key}: claimed {self.claim.figure}, measured {format_number(self.measured)} "
                f"± {format_number(self.spread)} {self.claim.unit}: {self.outcome}")


def judge(claim: Claim, measured: float, spread: float = 0.0, *, device: str | None = None) -> Verdict:
    """The verdict on ``claim`` given a measurement and its spread (same unit as the claim).

    ``device``: where the measurement was made (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a
    ``torch.device``). A claim about a GPU measured on anything else gets :data:`NOT_TESTED`;
    None leaves the device unsaid (the caller vouches that the measurement fits the claim).
    """
    if not isinstance(claim, Claim):
        raise TypeError(f"claim={claim!r} must be a Claim (see CLAIMS)")
    measured = check_number("measured", measured, above=0)
    spread = check_number("spread", spread, at_least=0)
    if device is not None:
        device_type = str(device).split(":")[0]
        if not device_type or not str(device).replace(":", "").isalnum():
            raise ValueError(f"device={device!r} must name a device, like 'cpu' or 'cuda:0'")
        if claim.gpu and device_type != "cuda":
            return Verdict(claim, measured, spread, NOT_TESTED)
    low, high = claim.covers
    lowest, highest = measured - spread, measured + spread
    if claim.kind == "speedup" and lowest <= 1 <= highest:
        outcome = WITHIN_NOISE
    elif lowest <= high and highest >= low:
        outcome = HELD
    elif claim.kind == "speedup":
        same_way = (measured > 1) == (claim.high > 1)
        outcome = PARTLY if same_way else NOT_HELD
    else:
        near = low / 2 <= measured <= high * 2
        outcome = PARTLY if near else NOT_HELD
    return Verdict(claim, measured, spread, outcome)


def verdicts_table(verdicts: Sequence[Verdict], machine: str | None = None) -> Table:
    """One row per verdict: the claim and its source, the figure, the measurement, the verdict."""
    verdicts = list(verdicts)
    bad = [v for v in verdicts if not isinstance(v, Verdict)]
    if bad:
        raise TypeError(f"verdicts must hold only Verdict objects, not {bad[0]!r}")
    where = f"measured on {machine}" if machine else "measured here"
    columns = ["claim (guide's words)", "about", "claimed", where, "verdict"]
    rows = []
    for v in verdicts:
        shown = f"{format_number(v.measured)} ± {format_number(v.spread)} {v.claim.unit}"
        rows.append([v.claim.quote, v.claim.about, v.claim.figure, shown, v.outcome])
    return Table(columns, rows, [False, False, True, True, False])


def claims_table(claims: Sequence[Claim]) -> Table:
    """The claims alone (no measurement): what the lesson will test, the same on every machine."""
    rows = [[c.key, c.quote, c.figure, c.about, c.source] for c in claims]
    return Table(["claim", "guide's words", "claimed", "about", "source"], rows, [False] * 5)


def relative_noise(first: float, second: float) -> float:
    """The noise of a machine from one measurement made twice: ``|a - b|`` over their mean (0 if both are 0)."""
    first, second = check_number("first", first, at_least=0), check_number("second", second, at_least=0)
    mean = (first + second) / 2
    return abs(first - second) / mean if mean > 0 else 0.0


def record_ratio(top: Record, bottom: Record) -> tuple[float, float]:
    """``top.value / bottom.value`` and its spread: both records' relative spreads added in
    quadrature (:func:`speedup_spread`; a record without a spread counts as exact)."""
    ratio = top.value / bottom.value
    return ratio, speedup_spread(ratio, (top.spread or 0.0) / top.value, (bottom.spread or 0.0) / bottom.value)


def speedup_spread(speedup: float, *relative_spreads: float) -> float:
    """The spread of a ratio whose parts have these relative spreads (added in quadrature)."""
    check_number("speedup", speedup, above=0)
    return speedup * math.sqrt(sum(check_number("relative spread", r, at_least=0) ** 2
                                   for r in relative_spreads))


NOT_MEASURED = "not measured"


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
    """One claim of the guide's FPS table beside the measurement that answers it.

    ``answered_by`` names that measurement (variant, N, device, machine). ``verdict`` is
    :func:`~rlgpu_helpers.measure.claims.judge`'s; None where no record answers the claim, and then
    ``answered_by`` says why.
    """

    claim: Claim
    answered_by: str
    verdict: Verdict | None = None

    @property
    def outcome(self) -> str:
        """The verdict's outcome, or :data:`NOT_MEASURED`."""
        return self.verdict.outcome if self.verdict is not None else NOT_MEASURED


def claim_checks_table(checks: Sequence[ClaimCheck],
                       answered_by: str = "answered here by (variant, N, device, machine)") -> Table:
    """One row per check: the guide's words and figure, what answers it, the measurement, the verdict.

    ``answered_by`` heads the column that names the measurement.

    The measurement is the median ± its spread (the IQR; for a speedup, both records' relative
    spreads added in quadrature), in the claim's unit.
    """
    checks = list(checks)
    bad = [c for c in checks if not isinstance(c, ClaimCheck)]
    if bad:
        raise TypeError(f"checks must hold only ClaimCheck objects, not {bad[0]!r}")
    rows = []
    for check in checks:
        verdict = check.verdict
        shown = (f"{format_number(verdict.measured)} ± {format_number(verdict.spread)} {check.claim.unit}"
                 if verdict is not None else "none")
        rows.append([check.claim.quote, check.claim.figure, check.answered_by, shown, check.outcome])
    columns = ["claim (guide's words)", "claimed", answered_by, "measured (median ± spread)", "verdict"]
    return Table(columns, rows, [False, True, False, True, False])
