"""Data-parallel PPO: one process per device, DDP, launched by ``torchrun`` (introduced in notebook 10).

Data parallelism runs W copies of the learner, one per process (rank). Each rank steps its own
``VecSnake`` (env seed ``seed + rank``: different games), collects its own rollout and computes
the gradient of its own minibatches; before every optimizer step the gradients are averaged over
the ranks (an *all-reduce*), so every rank takes the same step and the W models stay identical.
One update learns from W times the transitions: the gradient of the mean loss over the
concatenation of the W minibatches (the proof: :func:`gradient_check`).

``DistributedPPO`` wraps the model in ``DistributedDataParallel`` (DDP) rather than all-reducing
one flattened gradient by hand as CleanRL's ``ppo_atari_multigpu.py`` does: DDP broadcasts rank
0's parameters at construction (every rank starts from the same network), all-reduces in
buckets *while* the backward pass is still running, and has ``no_sync()`` for gradient
accumulation (``gpu.accumulate.sync_last_micro_batch_only``). Two things DDP does not do, which
PPO needs to equal the one-process update, are the two hooks of ``learn.ppo.PPO`` overridden
here: the advantages of a minibatch are normalized with the mean and standard deviation of all
W minibatches (all-reduced sum and count, then the all-reduced sum of squared deviations:
the unbiased std of the concatenation), and ``target_kl``'s approximate KL is averaged over the
ranks, so every rank stops at the same epoch (a rank that stopped alone would wait for the
others in its next all-reduce until the timeout).

``python -m rlgpu_helpers.gpu.distributed train|proof|measure`` is the entry point ``torchrun``
starts on each rank (``python -m rlgpu_helpers train --nproc N`` builds the command): it reads
torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, joins the
process group (gloo on CPUs, NCCL on GPUs: one GPU per process, ``cuda:LOCAL_RANK``) with a
timeout, so a missing or mismatched rank fails with an error instead of hanging, and checks that
every rank has the same settings. Rank 0 alone writes checkpoints (the same file as a
one-process run's, holding rank 0's games) and reports throughput, counting the global env steps
(W x each rank's); a checkpoint resumes on any number of ranks, one included.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from ..core.checks import check_bool, check_choice, check_int, check_number, check_seed
from ..core.device import get_device
from ..learn.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from ..learn.ppo import PPO, PPOConfig
from ..learn.training import FORMAT, ScoreCurve, TrainingResult, _check_budget, run_iterations
from ..snake import rules
from .accumulate import flat_gradient, sync_last_micro_batch_only

MODULE = "rlgpu_helpers.gpu.distributed"
BACKENDS = ("gloo", "nccl")
WORLD_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
DEFAULT_TIMEOUT_S = 120.0
"""How long a collective (or joining the group) waits for the other ranks before failing."""


# ---------------------------------------------------------------------------- the world

@dataclasses.dataclass(frozen=True)
class World:
    """Where this process stands among the ranks, as torchrun describes it in the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def world_from_env(environ=None) -> World:
    """The :class:`World` from torchrun's environment variables; a clear error when run without torchrun."""
    environ = os.environ if environ is None else environ
    missing = [name for name in WORLD_VARIABLES if name not in environ]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not set: this is one of the processes torchrun starts, e.g. "
            f"`{shlex.join(torchrun_command(2, ['train']))}` (or `python -m rlgpu_helpers train --nproc 2`)")
    numbers = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        try:
            numbers[name] = int(environ[name])
        except ValueError:
            raise ValueError(f"{name}={environ[name]!r} must be an integer") from None
    world = World(numbers["RANK"], numbers["WORLD_SIZE"], numbers["LOCAL_RANK"], numbers["LOCAL_WORLD_SIZE"],
                  environ["MASTER_ADDR"], numbers["MASTER_PORT"])
    check_int("WORLD_SIZE", world.world_size)
    check_int("RANK", world.rank, 0, world.world_size - 1)
    check_int("LOCAL_WORLD_SIZE", world.local_world_size, 1, world.world_size)
    check_int("LOCAL_RANK", world.local_rank, 0, world.local_world_size - 1)
    check_int("MASTER_PORT", world.master_port, 1, 65535)
    return world


def default_backend(device) -> str:
    """NCCL for CUDA devices, gloo for CPUs."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def check_backend(backend: str, device) -> str:
    """``backend`` if this torch has it and it can serve ``device``; otherwise a clear error."""
    check_choice("backend", backend, BACKENDS)
    available = dist.is_available() and (dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available())
    if not available:
        hint = "NCCL comes with torch's CUDA builds on Linux; on CPUs use backend='gloo'" if backend == "nccl" else ""
        raise RuntimeError(f"backend={backend!r} is not available in this torch {torch.__version__}. {hint}".strip())
    if backend == "nccl" and torch.device(device).type != "cuda":
        raise ValueError(f"backend='nccl' runs on CUDA GPUs, not device={str(device)!r}: use backend='gloo' on CPUs")
    return backend


def rank_device(device, world: World) -> torch.device:
    """This rank's device: the CPU, or GPU ``LOCAL_RANK`` (NCCL needs one GPU per process)."""
    device = get_device(device, param="device")
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device={str(device)!r}: data-parallel training runs on 'cpu' (gloo) or 'cuda' (NCCL)")
    count = torch.cuda.device_count()
    if world.local_rank >= count:
        raise RuntimeError(f"LOCAL_RANK={world.local_rank} needs GPU {world.local_rank}, but this machine has {count}: "
                           f"start at most {count} processes per machine (one GPU per process)")
    return torch.device("cuda", world.local_rank)


@contextlib.contextmanager
def process_group(world: World, backend: str, device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S):
    """Join the process group for the ``with`` block, and leave it after, even on an error.

    Every collective, and joining itself, fails after ``timeout_s`` seconds instead of waiting
    forever for a rank that never comes (or called a different collective).
    """
    timeout_s = check_number("timeout_s", timeout_s, above=0)
    check_backend(backend, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend, rank=world.rank, world_size=world.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as error:  # the store raises several types; all mean the group did not form
        raise RuntimeError(f"rank {world.rank}: the {world.world_size} processes did not meet at "
                           f"{world.master_addr}:{world.master_port} within {timeout_s:g} s ({error})") from error
    try:
        yield
    finally:
        gc.collect()  # free DDP's reducers (in reference cycles) while their group still exists
        dist.destroy_process_group()


def check_same_settings(settings: dict) -> None:
    """Fail, on every rank, unless every rank was given the same ``settings`` (compared as JSON)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, json.dumps(settings, sort_keys=True, default=str))
    for rank, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            mine, other = json.loads(everyone[0]), json.loads(theirs)
            diff = {key: (mine.get(key), other.get(key)) for key in sorted(set(mine) | set(other))
                    if mine.get(key) != other.get(key)}
            raise ValueError(f"rank {rank} was started with other settings than rank 0 (rank 0's, rank {rank}'s): "
                             f"{diff}; every rank needs the same ones")


def gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` from every rank (same shape on each), in rank order."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return parts


def parameters_agree(model: torch.nn.Module) -> bool:
    """Whether every rank holds exactly the same parameters (bit for bit); the same answer on every rank."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return all(torch.equal(flat, other) for other in gather(flat))


# ---------------------------------------------------------------------------- the learner

def check_data_parallel_settings(cuda_graphs: bool) -> None:
    """Refuse the ``PPOConfig`` launch settings that data-parallel PPO cannot run, before any rank starts."""
    if cuda_graphs:
        raise ValueError(
            "cuda_graphs=True is not supported by data-parallel PPO: DDP all-reduces inside the update, and "
            "capturing that needs DDP built and warmed up on the capture's stream with NCCL's graph support, "
            "which this learner does not do. Use compile=True, or cuda_graphs=True in one process")


class DataParallelActorCritic(DistributedDataParallel):
    """DDP around ``ActorCritic``: ``forward`` (the loss) goes through DDP and all-reduces its
    gradients; ``logits`` and ``value`` (acting and the critic's ratings, no gradient) go straight
    to the network."""

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module.logits(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module.value(obs)


class DistributedPPO(PPO):
    """``PPO`` on one rank of a process group: its own games, DDP's gradients, global statistics.

    Call it on every rank after joining the group (:func:`process_group`), with the same
    ``config`` everywhere. ``dtype`` converts the network before DDP wraps it (float64 for the
    proofs). ``env_steps`` counts every rank's steps.
    """

    def __init__(self, config: PPOConfig, *, dtype: torch.dtype | None = None):
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("DistributedPPO needs a process group: run it under torchrun inside process_group(...)")
        check_data_parallel_settings(config.cuda_graphs)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        check_seed("seed + rank", config.seed + self.rank)
        super().__init__(dataclasses.replace(config, seed=config.seed + self.rank))  # this rank's games and RNG
        self.config = config
        if dtype is not None:
            self.model.to(dtype)
        ids = [self.device.index if self.device.index is not None else torch.cuda.current_device()] \
            if self.device.type == "cuda" else None
        self.model = DataParallelActorCritic(self.model, device_ids=ids)  # broadcasts rank 0's parameters

    def iterate(self, budget_used: float = 0.0) -> torch.Tensor:
        scores = super().iterate(budget_used)
        self.env_steps += (self.world_size - 1) * self.config.num_steps * self.config.num_envs
        return scores

    def _minibatch_update(self, idx: torch.Tensor) -> torch.Tensor:
        """PPO's update, its micro-batches but the last inside DDP's ``no_sync``: one all-reduce per step."""
        with sync_last_micro_batch_only(self.model.no_sync):
            return super()._minibatch_update(idx)

    def _mean_over_learners(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over the ranks: the same number on every rank."""
        total = value.detach().clone()
        dist.all_reduce(total)
        return total / self.world_size

    def _advantage_stats(self, advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and unbiased std of every rank's minibatch advantages together (two small all-reduces).

        Sum and count give the mean; the sum of squared deviations from it gives the std, as
        ``Tensor.std`` of the concatenation does (two passes: no cancellation between large sums).
        """
        sums = torch.stack([advantages.sum(), advantages.new_full((), advantages.numel())])
        dist.all_reduce(sums)
        mean = sums[0] / sums[1]
        squares = (advantages - mean).pow(2).sum()
        dist.all_reduce(squares)
        return mean, (squares / (sums[1] - 1)).sqrt()

    def state_dict(self) -> dict:
        """As ``PPO``'s, with the bare network's keys: the same checkpoint as a one-process run's."""
        return {**super().state_dict(), "model": self.model.module.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the network, optimizer and counters; rank 0 also the games (only its are saved)."""
        state = {**state, "model": {f"module.{key}": value for key, value in state["model"].items()}}
        if self.rank:
            state.update(env=self.env.state_dict(), next_obs=self.next_obs)  # keep this rank's own games
        super().load_state_dict(state)


@dataclasses.dataclass
class AllreduceCounter:
    """How many gradient all-reduces a DDP model launched (one per bucket per synchronized backward)."""

    calls: int = 0


def count_allreduces(model: DistributedDataParallel) -> AllreduceCounter:
    """Count ``model``'s gradient all-reduces from now on: DDP's own all-reduce, through a comm hook
    that counts each call. Register it before the model's first backward."""
    if not isinstance(model, DistributedDataParallel):
        raise TypeError(f"model must be a DistributedDataParallel, not {type(model).__name__}")
    counter = AllreduceCounter()

    def hook(state, bucket):
        counter.calls += 1
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    return counter


# ---------------------------------------------------------------------------- training

def _resume(path: Path, device: torch.device) -> tuple[DistributedPPO, ScoreCurve, float]:
    state = load_checkpoint(path)
    if state.get("format") != FORMAT or state.get("algorithm") != "ppo":
        raise CheckpointError(f"{path} is not a PPO training checkpoint of this package")
    learner = DistributedPPO(PPOConfig(**{**state["config"], "device": str(device)}))
    learner.load_state_dict(state["learner"])
    if learner.rank == 0:
        torch.set_rng_state(state["rng"]["torch"])
    return learner, ScoreCurve(state["curve"], state["recent_scores"], int(state["episodes"])), float(state["seconds"])


def train_distributed(config: PPOConfig | None = None, *, seconds: float | None = None, steps: int | None = None,
                      out_dir: str | Path | None = None, resume: bool = False, device=None,
                      checkpoint_every_s: float = 120.0, progress: bool = True) -> TrainingResult:
    """``training.train`` for :class:`DistributedPPO`; call it on every rank, with the same arguments.

    Rank 0 decides: its clock and the global env steps say how much of the budget is spent, and
    it broadcasts that fraction before each iteration, so every rank anneals the learning rate
    alike and stops after the same iteration. Only rank 0 shows a progress bar, keeps the
    learning curve (of its own games: every rank plays the same policy) and writes checkpoints.
    ``resume=True`` continues the checkpoint in ``out_dir`` (from any number of ranks) on ``device``.
    """
    _check_budget(seconds, steps)
    check_bool("resume", resume)
    check_number("checkpoint_every_s", checkpoint_every_s, above=0)
    if resume == (config is not None):
        raise ValueError("give a config for a new run, or resume=True (and no config) to continue the one in out_dir")
    path = Path(out_dir) / CHECKPOINT_NAME if out_dir is not None else None
    if resume:
        if path is None:
            raise ValueError("resume=True needs out_dir, the folder holding the checkpoint")
        learner, curve, spent = _resume(path, get_device(device, param="device"))
    else:
        learner, curve, spent = DistributedPPO(config), ScoreCurve(), 0.0
    lead = learner.rank == 0
    shared = torch.zeros((), dtype=torch.float64, device=learner.device)

    def agree(fraction: float) -> float:
        """Rank 0's fraction of the budget, for every rank: the one extra host read per iteration."""
        shared.fill_(fraction)
        dist.broadcast(shared, 0)
        return float(shared)

    spent = run_iterations(learner, curve, spent, seconds=seconds, steps=steps, path=path if lead else None,
                           checkpoint_every_s=checkpoint_every_s, progress=progress, lead=lead, agree=agree)
    return TrainingResult(
        algorithm=learner.algorithm, config=dataclasses.asdict(learner.config), curve=curve.points, seconds=spent,
        env_steps=learner.env_steps, episodes=curve.episodes, mean_score=curve.mean_score,
        checkpoint=path if lead else None, learner=learner)


# ---------------------------------------------------------------------------- the proof

ROLLOUT = ("obs", "actions", "logprobs", "advantages", "returns")
"""What ``PPO._minibatch_loss`` reads from a rollout."""
PROOF_SETTINGS = {"num_envs": 8, "num_steps": 16, "num_minibatches": 2, "hidden": 16, "seed": 0}


def gradient_check(accumulation_steps: int = 4, **config) -> dict | None:
    """Run on every rank of a group: DDP's gradient on one minibatch against one process's, in float64.

    Each rank collects a rollout from its own games (``PPOConfig(**PROOF_SETTINGS, **config)``,
    env seed ``seed + rank``) and computes PPO's gradient on a minibatch of it through DDP: in
    one piece, in ``accumulation_steps`` micro-batches, and in as many inside ``no_sync`` (only
    the last all-reduces), counting the all-reduces of each. Rank 0 then puts every rank's
    rollout side by side in one single-process learner and computes the gradient of the
    concatenated minibatch (advantages normalized over all of it). Returns, on rank 0, for each
    way: the relative difference to that gradient (max |difference| / max |gradient|), the
    largest difference between ranks, and the all-reduce count; None on the other ranks.
    """
    from ..bench.accumulation import ppo_with_rollout

    steps = check_int("accumulation_steps", accumulation_steps)
    settings = {**PROOF_SETTINGS, **config}
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = ppo_with_rollout(torch.float64, **{**settings, "seed": settings["seed"] + rank})
    learner = DistributedPPO(PPOConfig(**settings), dtype=torch.float64)
    for name in ROLLOUT:
        setattr(learner, name, getattr(mine, name))
    counter = count_allreduces(learner.model)
    c = learner.config
    batch = c.num_envs * c.num_steps
    generator = torch.Generator().manual_seed(c.seed + rank)
    idx = torch.randperm(batch, generator=generator)[: batch // c.num_minibatches].to(learner.device)
    ways = {"DDP, in one piece": (1, False), f"DDP, {steps} micro-batches": (steps, False),
            f"DDP, {steps} micro-batches, no_sync": (steps, True)}
    gradients, counts = {}, {}
    for way, (k, quiet) in ways.items():
        before = counter.calls
        with sync_last_micro_batch_only(learner.model.no_sync) if quiet else contextlib.nullcontext():
            learner.minibatch_gradient(idx, accumulation_steps=k)
        counts[way] = counter.calls - before
        gradients[way] = flat_gradient(learner.model.module).clone()
    same_start = parameters_agree(learner.model)
    rollouts = {name: gather(getattr(mine, name)) for name in ROLLOUT}
    indices = gather(idx)
    spread = {way: max(float((g - other).abs().max()) for other in gather(g)) for way, g in gradients.items()}
    if rank:
        return None
    # One process, every rank's rollout side by side: rank r's game n is game r * num_envs + n.
    for name in ROLLOUT:
        setattr(mine, name, torch.cat(rollouts[name], dim=1))
    n, wide = c.num_envs, c.num_envs * world_size
    whole = torch.cat([(i // n) * wide + r * n + i % n for r, i in enumerate(indices)])
    mine.minibatch_gradient(whole, accumulation_steps=1)
    reference = flat_gradient(mine.model)
    scale = float(reference.abs().max())
    return {
        "world_size": world_size, "backend": dist.get_backend(), "minibatch_per_rank": int(idx.numel()),
        "minibatch": int(whole.numel()), "accumulation_steps": steps, "parameters_agree_at_start": same_start,
        "ways": [{"way": way, "micro_batches": ways[way][0], "no_sync": ways[way][1],
                  "relative_difference": float((g - reference).abs().max()) / scale,
                  "max_difference_between_ranks": spread[way], "allreduces": counts[way]}
                 for way, g in gradients.items()],
    }


# ---------------------------------------------------------------------------- the scaling measurement

def measure_iterations(config: PPOConfig, *, repeats: int = 5) -> dict | None:
    """Run on every rank: the time of a PPO iteration, a rollout and an update, each the median of
    ``repeats`` runs after one warm-up (rank 0's clock; ranks run in lockstep). Rank 0 returns
    seconds and IQRs and the global env steps per iteration; the others None."""
    from ..measure.timing import time_callable

    learner = DistributedPPO(config)
    timings = {part: time_callable(fn, warmup=1, repeats=repeats, device=learner.device)
               for part, fn in (("iteration", learner.iterate), ("rollout", learner._collect),
                                ("update", learner._update))}
    if learner.rank:
        return None
    return {"world_size": learner.world_size, "backend": dist.get_backend(), "device": learner.device.type,
            "threads_per_process": torch.get_num_threads(), "envs_per_process": config.num_envs,
            "env_steps_per_iteration": learner.world_size * config.num_envs * config.num_steps,
            **{f"{part}_s": t.median for part, t in timings.items()},
            **{f"{part}_iqr_s": t.iqr for part, t in timings.items()}}


# ---------------------------------------------------------------------------- launching

def torchrun_command(nproc: int, arguments, *, nnodes: int = 1, rdzv_endpoint: str | None = None,
                     rdzv_id: str = "rlgpu") -> list[str]:
    """The torchrun command that starts ``nproc`` ranks of this module per machine with ``arguments``.

    One machine: ``--standalone`` (torchrun picks a free port on localhost). Several machines, or
    to go through the rendezvous explicitly: ``rdzv_endpoint="HOST:PORT"`` (c10d rendezvous, hosted
    by the torchrun on HOST), the same command on every machine. torchrun is started as
    ``python -m torch.distributed.run`` with this Python, so no ``torchrun`` on PATH is needed.
    """
    nproc, nnodes = check_int("nproc", nproc), check_int("nnodes", nnodes)
    command = [sys.executable, "-m", "torch.distributed.run"]
    if rdzv_endpoint is None:
        if nnodes > 1:
            raise ValueError(f"nnodes={nnodes} needs rdzv_endpoint, the HOST:PORT every machine can reach")
        command.append("--standalone")
    else:
        command += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                    "--rdzv-id", rdzv_id]
    return command + ["--nproc-per-node", str(nproc), "-m", MODULE, *map(str, arguments)]


def launch(nproc: int, arguments, *, timeout_s: float = 300.0, threads: int | None = 1, capture: bool = True,
           **rendezvous) -> subprocess.CompletedProcess:
    """Run :func:`torchrun_command` and wait; kill torchrun and every rank if it runs past ``timeout_s``.

    ``threads`` sets OMP_NUM_THREADS of each rank (None: leave it to torchrun, which sets 1).
    ``capture`` keeps the output in the result instead of showing it. A failed run raises
    ``RuntimeError`` with the end of its output.
    """
    timeout_s = check_number("timeout_s", timeout_s, above=0)
    command = torchrun_command(nproc, arguments, **rendezvous)
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(check_int("threads", threads))
    pipe = subprocess.PIPE if capture else None
    process = subprocess.Popen(command, stdout=pipe, stderr=subprocess.STDOUT if capture else None, text=True,
                               env=env, start_new_session=True)  # its own group: a timeout kills every rank
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise RuntimeError(f"`{shlex.join(command)}` ran past timeout_s={timeout_s:g} s and was killed") from None
    if process.returncode:
        lines = (output or "").splitlines()
        ranks = [line for line in lines if line.startswith("[rank")]  # the ranks' own tracebacks, not torchrun's
        tail = "\n".join(ranks[-15:] if ranks else lines[-25:])
        raise RuntimeError(f"`{shlex.join(command)}` failed (exit {process.returncode}):\n{tail}")
    return subprocess.CompletedProcess(command, process.returncode, output, None)


def run_json(nproc: int, arguments, **kwargs) -> dict:
    """:func:`launch` a subcommand that writes rank 0's result with ``--json``, and return that result."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "result.json"
        launch(nproc, [*arguments, "--json", str(path)], **kwargs)
        return json.loads(path.read_text())


def ddp_proof(world_size: int = 2, accumulation_steps: int = 4, *, timeout_s: float = 120.0, **config) -> dict:
    """:func:`gradient_check` in a real gloo group of ``world_size`` processes started by torchrun."""
    options = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    return run_json(world_size, ["proof", "--accumulation-steps", accumulation_steps, *options], timeout_s=timeout_s)


# ---------------------------------------------------------------------------- the entry point

def _run_train(args, world: World, device: torch.device) -> dict:
    from ..cli import _typed_settings
    from ..learn.tune import suggested_settings

    if args.resume:
        given = [f"--{name}" for name in ("obs", "size", "envs", "seed", "set")
                 if getattr(args, name) not in (None, [])]
        if given:
            raise ValueError(f"--resume continues the run in --out with its own settings; leave out {', '.join(given)}")
        config = None
    else:
        settings = {**suggested_settings(device), "obs_type": args.obs or "features", "seed": args.seed or 0,
                    "device": str(device), "height": args.size or 10, "width": args.size or 10}
        if args.envs is not None:
            settings["num_envs"] = args.envs
        settings.update(_typed_settings("ppo", args.set or []))
        config = PPOConfig(**settings)
    check_same_settings({key: value for key, value in vars(args).items() if key not in ("run", "json")})
    result = train_distributed(config, seconds=args.seconds, steps=args.steps, out_dir=args.out, resume=args.resume,
                               device=device, checkpoint_every_s=args.checkpoint_every, progress=args.progress)
    agree = parameters_agree(result.learner.model)
    if world.rank == 0:
        score = "no game finished" if result.mean_score is None else f"{result.mean_score:.2f}"
        print(f"ppo on {world.world_size} processes ({dist.get_backend()}): {result.env_steps:,} env steps in "
              f"{result.seconds:,.1f} s ({result.steps_per_second:,.0f} steps/s), mean score of rank 0's last "
              f"100 games: {score}; parameters identical on every rank: {agree}", flush=True)
        if result.checkpoint is not None:
            print(f"Checkpoint: {result.checkpoint}", flush=True)
    return {"world_size": world.world_size, "backend": dist.get_backend(), "config": result.config,
            "seconds": result.seconds, "env_steps": result.env_steps, "episodes": result.episodes,
            "mean_score": result.mean_score, "iterations": result.learner.iterations,
            "parameters_agree": agree, "curve": result.curve}


def _run_proof(args, world: World, device: torch.device) -> dict | None:
    if device.type != "cpu":
        raise ValueError("the proof runs in float64 on CPUs (gloo): give --device cpu")
    config = {key: getattr(args, key) for key in PROOF_SETTINGS if getattr(args, key) is not None}
    check_same_settings({"accumulation_steps": args.accumulation_steps, **config})
    return gradient_check(args.accumulation_steps, **config)


def _run_measure(args, world: World, device: torch.device) -> dict | None:
    config = PPOConfig(num_envs=args.num_envs, num_steps=args.num_steps, hidden=args.hidden, device=str(device),
                       seed=args.seed)
    check_same_settings(dataclasses.asdict(config) | {"repeats": args.repeats})
    return measure_iterations(config, repeats=args.repeats)


def build_parser() -> argparse.ArgumentParser:
    from ..cli import _positive, _seed_argument, _setting

    parser = argparse.ArgumentParser(prog=f"torchrun ... -m {MODULE}", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default=None, help="cpu or cuda (default: cuda if there is one, else cpu)")
    common.add_argument("--backend", choices=BACKENDS, default=None, help="default: nccl on cuda, gloo on cpu")
    common.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long a collective waits for the other ranks (default: %(default)s)")
    common.add_argument("--json", default=None, metavar="PATH", help="rank 0 writes its result here")

    train = subparsers.add_parser("train", parents=[common], help="train PPO, data-parallel")
    train.add_argument("--algo", choices=["ppo"], default="ppo", help="data-parallel training is PPO only")
    train.add_argument("--obs", choices=list(rules.OBS_TYPES), default=None)
    train.add_argument("--size", type=_positive(int), default=None)
    train.add_argument("--envs", type=_positive(int), default=None, help="games stepped together on each rank")
    train.add_argument("--seed", type=_seed_argument, default=None, help="rank r's games use seed + r")
    train.add_argument("--set", type=_setting, action="append", default=None, metavar="NAME=VALUE")
    train.add_argument("--seconds", type=_positive(float), default=None)
    train.add_argument("--steps", type=_positive(int), default=None, help="env step budget, all ranks together")
    train.add_argument("--out", default=None)
    train.add_argument("--resume", action="store_true")
    train.add_argument("--checkpoint-every", type=_positive(float), default=120.0, metavar="SECONDS")
    train.add_argument("--no-progress", dest="progress", action="store_false")
    train.set_defaults(run=_run_train)

    proof = subparsers.add_parser("proof", parents=[common], help="DDP's gradient against one process's (float64)")
    proof.add_argument("--accumulation-steps", type=_positive(int), default=4)
    for key in PROOF_SETTINGS:
        proof.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    proof.set_defaults(run=_run_proof)

    measure = subparsers.add_parser("measure", parents=[common], help="time PPO's iteration, rollout and update")
    measure.add_argument("--num-envs", type=_positive(int), default=512)
    measure.add_argument("--num-steps", type=_positive(int), default=64)
    measure.add_argument("--hidden", type=_positive(int), default=64)
    measure.add_argument("--repeats", type=_positive(int), default=5)
    measure.add_argument("--seed", type=_seed_argument, default=0)
    measure.set_defaults(run=_run_measure)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The entry point of each rank: parse, join the group, run the subcommand, leave the group."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        world = world_from_env()
        device = rank_device(args.device if args.device is not None else get_device(), world)
        backend = check_backend(args.backend or default_backend(device), device)
    except (RuntimeError, ValueError) as error:
        parser.error(str(error))
    if args.command == "train" and args.seconds is None and args.steps is None:
        args.seconds = 300.0
    with process_group(world, backend, device, args.timeout):
        result = args.run(args, world, device)
        if world.rank == 0 and args.json is not None:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
