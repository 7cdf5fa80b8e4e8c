"""The ``accumulation`` bench suite: memory and time of an update against accumulation steps (introduced in notebook 07).

``python -m rlgpu_helpers bench accumulation`` runs :func:`measure_accumulation`. The workload is
one DQN-style update of the course's networks (``learn.nets.QNetwork``, MLP and CNN): the Huber
loss of Q(obs, action) against a target, Adam, gradient clipping, on real Snake observations.
The effective batch stays fixed while the accumulation steps K grow, so every point is the same
update in K micro-batches (``gpu.accumulate.accumulated_step``). Records:

* ``"accumulation"``: for each network and K, the **peak memory** of one update beyond what was
  allocated before it (``gpu.memory.peak_memory``), and the **time per update**, measured apart,
  without the profiler;
* ``"accumulated_gradient"``: how far the gradient accumulated over an uneven split is from the
  full batch's, in float64 and float32, in units of the type's machine epsilon
  (``gpu.accumulate.gradient_difference``; on a GPU, float32 convolutions may run in TF32).

The rest is the notebook's: the proof as tables (:func:`proof_table`), the "forgot to divide by
K" experiment (:func:`forgotten_division_table`), PPO's accumulation (:func:`ppo_gradient_table`,
:func:`ppo_update_difference`) and :func:`cost_table`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from ..core.checks import check_choices, check_int, check_ints, check_seed
from ..core.config import pick
from ..core.device import get_device, machine_of
from ..gpu.accumulate import (
    Comparison,
    accumulated_step,
    cast_batch,
    describe_sizes,
    flat_gradient,
    gradient_difference,
    micro_batch_sizes,
    parameter_change,
)
from ..gpu.memory import peak_memory
from ..learn.nets import QNetwork
from ..learn.ppo import PPO, ppo_with_rollout
from ..learn.settings import ppo_settings, settings_dict
from ..measure.records import Record, select
from ..measure.table import Table, format_number
from ..measure.timing import time_callable
from ..snake.vec import VecSnake

NAME = "accumulation"
GRADIENT_NAME = "accumulated_gradient"
NETS = {"MLP": "features", "CNN": "grid"}
"""The two networks of ``learn.nets``, by the observation type they read."""
HIDDEN = 128
LEARNING_RATE, ADAM_EPS, MAX_GRAD_NORM = 1e-4, 1e-5, 0.5
_MIB = 2**20


# ---------------------------------------------------------------------------- the workload

def snake_batch(batch_size: int, obs_type: str = "features", *, device: str | torch.device | None = "cpu",
                seed: int = 0, warm_steps: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of ``(observations, actions, targets)`` for a Q-network: ``batch_size`` rows.

    The observations are real: ``batch_size`` Snake games played ``warm_steps`` random moves from
    their start. The actions are random, and the targets, standing in for TD targets, are the
    games' rewards plus standard normal noise. Seeded: the same seed gives the same batch.
    """
    batch_size = check_int("batch_size", batch_size)
    seed = check_seed("seed", seed)
    warm_steps = check_int("warm_steps", warm_steps, 0)
    device = get_device(device, param="device")
    games = VecSnake(batch_size, obs_type=obs_type, device=device, seed=seed, check_action_values=False)
    obs, _ = games.reset(seed=seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    reward = torch.zeros(batch_size, device=device)
    for _ in range(warm_steps):
        obs, reward, *_ = games.step(torch.randint(0, 3, (batch_size,), device=device, generator=generator))
    actions = torch.randint(0, 3, (batch_size,), device=device, generator=generator)
    targets = reward + torch.randn(batch_size, device=device, generator=generator)
    return obs, actions, targets


def q_loss(model: nn.Module, batch) -> torch.Tensor:
    """The mean Huber loss of ``model``'s Q(obs, action) against the targets: a DQN's loss."""
    obs, actions, targets = batch
    q = model(obs).gather(1, actions[:, None]).squeeze(1)
    return nn.functional.smooth_l1_loss(q, targets)


def make_net(net: str, *, height: int = 10, width: int = 10, hidden: int = HIDDEN, seed: int = 0) -> QNetwork:
    """The ``QNetwork`` for ``net`` (``"MLP"`` or ``"CNN"``, see :data:`NETS`), seeded."""
    (net,) = check_choices("net", net, tuple(NETS))
    torch.manual_seed(check_seed("seed", seed))
    shape = (11,) if NETS[net] == "features" else (3, height, width)
    return QNetwork(shape, hidden=hidden)


# ---------------------------------------------------------------------------- the proof

def proof(nets=tuple(NETS), dtypes=(torch.float64, torch.float32), splits=None, *, batch_size: int = 1000,
          seed: int = 0) -> list[tuple[str, Comparison]]:
    """:func:`~rlgpu_helpers.gpu.accumulate.gradient_difference` for every network, float type and split.

    ``splits`` are keyword dicts for the split (``{"accumulation_steps": 3}`` or
    ``{"micro_batch_size": 300}``); the default takes 1000 rows in 1, 2, 3 and 7 micro-batches
    and in micro-batches of 300 (the last one 100). Returns ``(net, comparison)`` pairs.
    """
    nets = check_choices("nets", nets, tuple(NETS))
    batch_size = check_int("batch_size", batch_size)
    if splits is None:
        splits = [{"accumulation_steps": k} for k in (1, 2, 3, 7) if k <= batch_size]
        splits.append({"micro_batch_size": min(300, batch_size)})
    results = []
    for net in nets:
        model = make_net(net, seed=seed)
        batch = snake_batch(batch_size, NETS[net], seed=seed)
        for dtype in dtypes:
            for split in splits:
                results.append((net, gradient_difference(model, q_loss, batch, dtype=dtype, **split)))
    return results


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def proof_table(results: Sequence[tuple[str, Comparison]]) -> Table:
    """:func:`proof`'s results: one row per network, float type and split."""
    columns = ["network", "dtype", "micro-batches", "max |difference|", "max |gradient|", "relative",
               "in epsilons of the dtype"]
    rows = [[net, _dtype_name(c.dtype), describe_sizes(c.micro_batch_sizes), f"{c.max_abs_difference:.2e}",
             f"{c.max_abs_reference:.3g}", f"{c.relative:.2e}", format_number(c.in_epsilons)]
            for net, c in results]
    return Table(columns, rows, [False, False, False, True, True, True, True])


# ---------------------------------------------------------------------------- forgetting to divide by K

@dataclasses.dataclass(frozen=True)
class ForgottenDivision:
    """One row of :func:`forgotten_division`: how far the update with the mistake (no scaling) is
    from the right one, after each number of updates (``differences[steps]``: relative L2)."""

    optimizer: str
    clipping: str
    differences: dict


def _clip_label(max_grad_norm: float | None, norm: float) -> str:
    if max_grad_norm is None:
        return "none"
    if max_grad_norm < norm:
        return f"at |g| / 2 = {max_grad_norm:.3g}: both clipped"
    return f"at 2 |g| = {max_grad_norm:.3g}: only the mistake clipped"


def forgotten_division(net: str = "MLP", *, accumulation_steps: int = 4, updates=(1, 10), batch_size: int = 256,
                       seed: int = 0) -> tuple[float, list[ForgottenDivision]]:
    """The update with each micro-batch's loss left unscaled against the right one, for SGD and Adam.

    With ``accumulation_steps`` equal micro-batches, the mistake's gradient is exactly that many times
    the right one. Both run ``updates`` updates from the same start (float64); a row holds
    ``|Δθ_mistake - Δθ_right| / |Δθ_right|``, for clipping at 2 g (only the mistake is clipped) and
    g / 2 (both are), g the right gradient's norm. Returns ``(g, rows)``.
    """
    steps = check_int("accumulation_steps", accumulation_steps, 2)
    updates = check_ints("updates", updates)
    batch_size = check_int("batch_size", batch_size)
    if batch_size % steps:
        raise ValueError(f"batch_size={batch_size} must be divisible by accumulation_steps={steps}: "
                         "equal micro-batches make the mistake exactly a factor K")
    model = make_net(net, seed=seed)
    batch = snake_batch(batch_size, NETS[net], seed=seed)
    copied = copy.deepcopy(model).to(torch.float64)  # for the right gradient's norm, in float64
    q_loss(copied, cast_batch(batch, torch.float64)).backward()
    norm = float(flat_gradient(copied).norm())
    setups = [
        ("SGD (lr 0.1)", lambda p: torch.optim.SGD(p, lr=0.1), None),
        ("SGD (lr 0.1)", lambda p: torch.optim.SGD(p, lr=0.1), 2 * norm),
        ("SGD (lr 0.1)", lambda p: torch.optim.SGD(p, lr=0.1), norm / 2),
        ("Adam (eps 1e-8, its default)", lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-8), None),
        ("Adam (eps 1e-5, PPO's)", lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-5), None),
        ("Adam (eps 1e-5, PPO's)", lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-5), 2 * norm),
        ("Adam (eps 1e-5, PPO's)", lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-5), norm / 2),
    ]
    rows = []
    for label, make_optimizer, clip in setups:
        differences = {}
        for count in updates:
            kwargs = {"accumulation_steps": steps, "max_grad_norm": clip, "steps": count}
            right = parameter_change(model, q_loss, batch, make_optimizer, **kwargs)
            wrong = parameter_change(model, q_loss, batch, make_optimizer, scaling="none", **kwargs)
            differences[count] = float((wrong - right).norm() / right.norm())
        rows.append(ForgottenDivision(label, _clip_label(clip, norm), differences))
    return norm, rows


def forgotten_division_table(rows: Sequence[ForgottenDivision]) -> Table:
    """:func:`forgotten_division`'s rows: the relative difference after each number of updates."""
    counts = list(rows[0].differences) if rows else []
    columns = ["optimizer", "clipping", *(f"after {n} update{'s' if n > 1 else ''}" for n in counts)]
    body = [[row.optimizer, row.clipping, *(f"{row.differences[n]:.2e}" for n in counts)] for row in rows]
    return Table(columns, body, [False, False, *([True] * len(counts))])


# ---------------------------------------------------------------------------- PPO


PPO_DEMO = {"num_envs": 64, "num_steps": 32, "num_minibatches": 4, "hidden": 64, "seed": 0}
"""The small PPO of notebook 07's comparisons: minibatches of 512 transitions."""


def _demo_learner(dtype: torch.dtype, config: dict, **fixed) -> PPO:
    """``ppo_with_rollout`` of the settings ``ppo_settings`` builds on a CPU (PPOConfig's defaults),
    :data:`PPO_DEMO`, then ``config``, then ``fixed`` over it (a device among them wins)."""
    settings = ppo_settings("cpu", overrides=[*PPO_DEMO.items(), *config.items(), *fixed.items()])
    return ppo_with_rollout(dtype, **settings_dict(settings))


def ppo_gradient_table(accumulation_steps=(1, 2, 3, 4, 8, 32), dtype: torch.dtype = torch.float64,
                       **config) -> Table:
    """PPO's gradient on one minibatch, accumulated over K micro-batches, against K = 1.

    Two columns of relative difference (max |difference| / max |gradient|): advantages
    normalized over the whole minibatch (what ``PPO`` does) and per micro-batch (the mistake).
    ``config`` overrides :data:`PPO_DEMO`.
    """
    steps = check_ints("accumulation_steps", accumulation_steps)
    learner = _demo_learner(dtype, config)
    c = learner.config
    minibatch = c.num_envs * c.num_steps // c.num_minibatches
    idx = torch.randperm(c.num_envs * c.num_steps, generator=torch.Generator().manual_seed(c.seed))[:minibatch]
    learner.minibatch_gradient(idx, accumulation_steps=1)
    reference = flat_gradient(learner.model)
    rows = []
    for k in steps:
        cells = []
        for over in ("minibatch", "micro-batch"):
            learner.minibatch_gradient(idx, accumulation_steps=k, normalize_advantages_over=over)
            g = flat_gradient(learner.model)
            cells.append(f"{float((g - reference).abs().max()) / float(reference.abs().max()):.2e}")
        rows.append([str(k), describe_sizes(micro_batch_sizes(minibatch, accumulation_steps=k)), *cells])
    columns = ["K", "micro-batches", "normalized over the minibatch", "normalized per micro-batch (mistake)"]
    return Table(columns, rows, [True, False, True, True])


def ppo_update_difference(accumulation_steps: int, dtype: torch.dtype = torch.float64, **config) -> float:
    """One whole PPO update (every epoch and minibatch: clipping, Adam) with ``accumulation_steps``
    against the same update without accumulation, from the same rollout and the same shuffles:
    the relative difference (max |difference| / max |change|) of the parameter changes."""
    changes = []
    for k in (1, check_int("accumulation_steps", accumulation_steps)):
        learner = _demo_learner(dtype, config, accumulation_steps=k)
        before = torch.cat([p.detach().flatten() for p in learner.model.parameters()]).clone()
        torch.manual_seed(learner.config.seed)  # the same minibatch shuffles for both
        learner.update()
        changes.append(torch.cat([p.detach().flatten() for p in learner.model.parameters()]) - before)
    return float((changes[1] - changes[0]).abs().max()) / float(changes[0].abs().max())


# ---------------------------------------------------------------------------- memory and time against K

def default_batch_size(device: str | torch.device | None = None) -> int:
    """The effective batch: 4,096 rows on a CPU, 65,536 on a GPU (1,024 and 256 in quick mode)."""
    cuda = get_device(device, param="device").type == "cuda"
    return pick(full=65_536 if cuda else 4_096, quick=1_024 if cuda else 256)


def default_accumulation_steps(device: str | torch.device | None = None) -> tuple[int, ...]:
    """K from 1 to 64 in powers of 2 (to 128 on a GPU); 1, 4 and 16 in quick mode."""
    cuda = get_device(device, param="device").type == "cuda"
    return pick(full=tuple(2**k for k in range(8 if cuda else 7)), quick=(1, 4, 16))


def _update(net: str, batch, accumulation_steps: int, device: torch.device, seed: int):
    """One update of a fresh ``net`` on ``batch`` in ``accumulation_steps`` micro-batches, as a function."""
    model = make_net(net, seed=seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, eps=ADAM_EPS)

    def update():
        accumulated_step(optimizer, lambda rows: q_loss(model, rows), batch, accumulation_steps=accumulation_steps,
                         max_grad_norm=MAX_GRAD_NORM)

    return update


def update_cost(device: str | torch.device | None = None, *, nets=tuple(NETS), batch_size: int | None = None,
                accumulation_steps=None, progress: bool = True, seed: int = 0) -> list[Record]:
    """Peak memory and time of one update at a fixed effective batch, for each network and K.

    Records ``"accumulation"``, variant the network: ``"peak memory"`` (MiB, no spread: an update's
    allocations do not vary) and ``"time per update"`` (ms, median and IQR), params
    ``{"accumulation_steps", "batch", "device"}``. The peak is the second of two profiled updates: a
    CPU profiler learns a block's size when it sees it allocated, so the first would miss the free of
    the gradients it replaces and count them twice.
    """
    device = get_device(device, param="device")
    nets = check_choices("nets", nets, tuple(NETS))
    batch_size = check_int("batch_size", default_batch_size(device) if batch_size is None else batch_size)
    steps = check_ints("accumulation_steps", default_accumulation_steps(device) if accumulation_steps is None
                       else accumulation_steps)
    for k in steps:
        micro_batch_sizes(batch_size, accumulation_steps=k)  # a K larger than the batch fails here, named
    machine = machine_of(device)
    records = []
    jobs = [(net, k) for net in nets for k in steps]
    batches = {}
    for net, k in tqdm(jobs, desc="accumulation", disable=not progress):
        if net not in batches:
            batches = {net: snake_batch(batch_size, NETS[net], device=device, seed=seed)}  # one net's batch at a time
        update = _update(net, batches[net], k, device, seed)
        update()  # Adam's state exists from here on: what the peak counts is the update's own memory
        peak = peak_memory(update, device)  # after its own warm-up call (see peak_memory)
        timing = time_callable(update, warmup=1, repeats=pick(full=5, quick=2), device=device)
        params = {"accumulation_steps": k, "batch": batch_size, "device": device.type}
        records.append(Record(NAME, net, "peak memory", peak / _MIB, "MiB", params, None, machine))
        records.append(Record(NAME, net, "time per update", timing.median * 1e3, "ms", params,
                              timing.iqr * 1e3, machine))
        del update  # the model and its optimizer go with it, before the next one is made
    return records


def gradient_records(device: str | torch.device | None = None, *, batch_size: int = 1000,
                     accumulation_steps: int = 3, seed: int = 0) -> list[Record]:
    """The accumulated gradient against the full batch's on ``device``, each network, float64 and float32.

    Records ``"accumulated_gradient"``, variant the network, metric ``"max |difference| / max
    |gradient|"`` in ``"x dtype epsilon"`` (a few means rounding), params ``{"dtype",
    "accumulation_steps", "batch", "device"}``. The default split is uneven.
    """
    device = get_device(device, param="device")
    machine = machine_of(device)
    records = []
    for net, obs_type in NETS.items():
        model = make_net(net, seed=seed).to(device)
        batch = snake_batch(batch_size, obs_type, device=device, seed=seed)
        for dtype in (torch.float64, torch.float32):
            comparison = gradient_difference(model, q_loss, batch, accumulation_steps=accumulation_steps, dtype=dtype)
            records.append(Record(GRADIENT_NAME, net, "max |difference| / max |gradient|", comparison.in_epsilons,
                                  "x dtype epsilon",
                                  {"dtype": _dtype_name(dtype), "accumulation_steps": accumulation_steps,
                                   "batch": batch_size, "device": device.type}, None, machine))
    return records


def measure_accumulation(device: str | torch.device | None = None, progress: bool = True) -> list[Record]:
    """The ``accumulation`` bench suite (see the module docstring). About 3 minutes on a 2-core CPU at full size."""
    device = get_device(device, param="device")
    return gradient_records(device) + update_cost(device, progress=progress)


def cost_table(records: Sequence[Record]) -> Table:
    """Peak memory and time per update against K, per machine and network, each also as a
    multiple of the same machine's K = 1 (the full batch in one piece)."""
    records = select(records, name=NAME)
    groups = {}
    for r in records:
        key = (r.machine, r.variant, r.params["batch"])
        groups.setdefault(key, {}).setdefault(r.params["accumulation_steps"], {})[r.metric] = r
    rows = []
    for (machine, net, batch), by_k in groups.items():
        base = by_k.get(1, {})
        for k in sorted(by_k):
            row = [machine, net, f"{batch:,}", str(k), describe_sizes(micro_batch_sizes(batch, accumulation_steps=k))]
            for metric in ("peak memory", "time per update"):
                record, first = by_k[k].get(metric), base.get(metric)
                row.append(format_number(record.value) if record else "")
                row.append(f"{record.value / first.value:.2f}x" if record and first and first.value else "")
            rows.append(row)
    columns = ["machine", "network", "batch", "K", "micro-batches", "peak memory (MiB)", "vs K=1",
               "time per update (ms)", "vs K=1"]
    return Table(columns, rows, [False, False, True, True, False, True, True, True, True])
