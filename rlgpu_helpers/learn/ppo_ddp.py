"""Data-parallel PPO: one process per device, DDP, launched by ``torchrun`` (introduced in notebook 10).

Data parallelism runs W copies of the learner, one per process (rank). Each rank steps its own
``VecSnake`` (env seed ``seed + rank``: different games), collects its own rollout and computes
the gradient of its own minibatches; before every optimizer step the gradients are averaged over
the ranks (an *all-reduce*), so every rank takes the same step and the W models stay identical.
One update learns from W times the transitions: the gradient of the mean loss over the W
minibatches concatenated (the proof: :func:`gradient_check`).

``DistributedPPO`` wraps the model in ``DistributedDataParallel`` (DDP) rather than all-reducing
one flattened gradient by hand as CleanRL's ``ppo_atari_multigpu.py`` does: DDP broadcasts rank
0's parameters at construction, all-reduces in buckets *while* the backward pass runs, and has
``no_sync()`` for gradient accumulation (``gpu.accumulate.sync_last_micro_batch_only``). Two
hooks of ``learn.ppo.PPO``, overridden here, do what DDP does not and PPO needs to equal the
one-process update: a minibatch's advantages are normalized with the mean and the unbiased std of
all W minibatches (all-reduced), and ``target_kl``'s approximate KL is averaged over the ranks,
so every rank stops at the same epoch (one that stopped alone would wait in its next all-reduce
until the timeout).

``python -m rlgpu_helpers rank train|proof|measure`` is the entry point ``torchrun`` starts on
each rank (``python -m rlgpu_helpers train --nproc N`` builds the command); the process group,
the world and the launching are in ``gpu/distributed.py``. Rank 0 alone writes checkpoints (the
same file as a one-process run's, holding rank 0's games) and reports throughput, counting the
global env steps (W x each rank's); a checkpoint resumes on any number of ranks, one included.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..core.checks import check_bool, check_int, check_number, check_seed
from ..core.device import get_device
from ..gpu.accumulate import flat_gradient, sync_last_micro_batch_only
from ..gpu.distributed import (
    check_data_parallel_settings,
    count_allreduces,
    gather,
    global_mean_std,
    parameters_agree,
    run_json,
)
from ..measure.timing import time_callable
from ..snake import rules
from .checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from .ppo import PPO, PPOConfig, ppo_with_rollout
from .settings import ppo_settings, settings_dict
from .training import (
    RunFolderError,
    ScoreCurve,
    TrainingResult,
    _check_budget,
    check_checkpoint,
    for_device,
    hold_run_folder,
    run_iterations,
)


class DataParallelActorCritic(DistributedDataParallel):
    """DDP around ``ActorCritic``: ``forward`` (the loss) goes through DDP and all-reduces its
    gradients; ``logits``, ``value`` and ``logits_and_value`` (acting and the critic's ratings, no
    gradient) go straight to the network."""

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module.logits(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module.value(obs)

    def logits_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module(obs)


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
        self.config = dataclasses.replace(config, compile=self.config.compile)  # eager where nothing compiles
        if dtype is not None:
            self.model.to(dtype)
        ids = [self.device.index if self.device.index is not None else torch.cuda.current_device()] \
            if self.device.type == "cuda" else None
        self.model = DataParallelActorCritic(self.model, device_ids=ids)  # broadcasts rank 0's parameters

    def iterate(self, budget_used: float = 0.0) -> torch.Tensor:
        scores = super().iterate(budget_used)
        self.env_steps += (self.world_size - 1) * self.config.num_steps * self.config.num_envs
        return scores

    def minibatch_update(self, idx: torch.Tensor) -> torch.Tensor:
        """PPO's update, its micro-batches but the last inside DDP's ``no_sync``: one all-reduce per step."""
        with sync_last_micro_batch_only(self.model.no_sync):
            return super().minibatch_update(idx)

    def _mean_over_learners(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over the ranks: the same number on every rank."""
        total = value.detach().clone()
        dist.all_reduce(total)
        return total / self.world_size

    def _advantage_stats(self, advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and unbiased std of every rank's minibatch advantages together (``global_mean_std``)."""
        return global_mean_std(advantages)

    def state_dict(self) -> dict:
        """As ``PPO``'s, with the bare network's keys: the same checkpoint as a one-process run's."""
        return {**super().state_dict(), "model": self.model.module.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the network, optimizer and counters; rank 0 also the games (only its are saved)."""
        state = {**state, "model": {f"module.{key}": value for key, value in state["model"].items()}}
        if self.rank:  # keep this rank's own games, and which of them it sees mirrored
            state.update(env=self.env.state_dict(), next_obs=self.next_obs,
                         **({"flipped": self.flipped.clone()} if self.config.mirror else {}))
        super().load_state_dict(state)


def _resume(path: Path, device: torch.device) -> tuple[DistributedPPO, ScoreCurve, float]:
    state = load_checkpoint(path)
    check_checkpoint(state, path)  # the same checks and device translation as one process's resume
    if state["algorithm"] != "ppo":
        raise CheckpointError(f"{path}: algorithm is {state['algorithm']!r}: data-parallel training is PPO only")
    config, changes = for_device(dict(state["config"]), str(device))
    if changes and dist.get_rank() == 0:
        print(f"Resuming on {device}: " + "; ".join(changes))
    try:
        learner = DistributedPPO(PPOConfig(**config))
        learner.load_state_dict(state["learner"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: {error}") from None
    if learner.rank == 0:
        torch.set_rng_state(state["rng"]["torch"])
    curve = ScoreCurve(state["curve"], state["recent_scores"], int(state["episodes"]),
                       win_score=rules.winning_score(learner.config.height, learner.config.width))
    return learner, curve, float(state["seconds"])


def train_distributed(config: PPOConfig | None = None, *, seconds: float | None = None, steps: int | None = None,
                      out_dir: str | Path | None = None, resume: bool = False, device=None,
                      checkpoint_every_s: float = 120.0, progress: bool = True) -> TrainingResult:
    """``training.train`` for :class:`DistributedPPO`; call it on every rank, with the same arguments.

    Rank 0 decides: its clock and the global env steps say how much of the budget is spent, and
    it broadcasts that fraction before each iteration, so every rank anneals the learning rate
    alike and stops after the same iteration. Only rank 0 shows a progress bar, keeps the
    learning curve (of its own games: every rank plays the same policy) and writes checkpoints.
    ``resume=True`` continues the checkpoint in ``out_dir`` (from any number of ranks) on ``device``.
    Rank 0 holds the run folder as ``train`` does (``training.hold_run_folder``); if it cannot, every
    rank raises the same ``RunFolderError``, before any work.
    """
    _check_budget(seconds, steps)
    check_bool("resume", resume)
    check_number("checkpoint_every_s", checkpoint_every_s, above=0)
    if resume == (config is not None):
        raise ValueError("give a config for a new run, or resume=True (and no config) to continue the one in out_dir")
    with contextlib.ExitStack() as stack:
        refusal = [None]
        if out_dir is not None and dist.get_rank() == 0:
            try:
                hold_run_folder(stack, out_dir)
            except RunFolderError as error:
                refusal = [str(error)]
        dist.broadcast_object_list(refusal, 0)  # every rank learns rank 0's answer: none waits alone
        if refusal[0] is not None:
            raise RunFolderError(refusal[0])
        return _train_distributed(config, seconds=seconds, steps=steps, out_dir=out_dir, resume=resume,
                                  device=device, checkpoint_every_s=checkpoint_every_s, progress=progress)


def _train_distributed(config, *, seconds, steps, out_dir, resume, device, checkpoint_every_s,
                       progress) -> TrainingResult:
    """:func:`train_distributed` once its arguments are checked and rank 0 holds the run folder."""
    path = Path(out_dir) / CHECKPOINT_NAME if out_dir is not None else None
    if resume:
        if path is None:
            raise ValueError("resume=True needs out_dir, the folder holding the checkpoint")
        learner, curve, spent = _resume(path, get_device(device, param="device"))
    else:
        learner, spent = DistributedPPO(config), 0.0
        curve = ScoreCurve(win_score=rules.winning_score(config.height, config.width))
    lead = learner.rank == 0
    shared = torch.zeros((), dtype=torch.float64, device=learner.device)

    def agree(fraction: float) -> float:
        """Rank 0's fraction of the budget, for every rank: the one extra host read per iteration."""
        shared.fill_(fraction)
        dist.broadcast(shared, 0)
        return float(shared)

    spent, warmup = run_iterations(learner, curve, spent, seconds=seconds, steps=steps,
                                   path=path if lead else None, checkpoint_every_s=checkpoint_every_s,
                                   progress=progress, lead=lead, agree=agree)
    return TrainingResult(
        algorithm=learner.algorithm, config=dataclasses.asdict(learner.config), curve=curve.points, seconds=spent,
        env_steps=learner.env_steps, episodes=curve.episodes, mean_score=curve.mean_score,
        checkpoint=path if lead else None, learner=learner, warmup_seconds=warmup)


ROLLOUT = ("obs", "actions", "logprobs", "advantages", "returns")
"""What ``PPO._minibatch_loss`` reads from a rollout."""


PROOF_SETTINGS = {"num_envs": 8, "num_steps": 16, "num_minibatches": 2, "hidden": 16, "seed": 0}


def gradient_check(accumulation_steps: int = 4, **config) -> dict | None:
    """Run on every rank of a group: DDP's gradient on one minibatch against one process's, in float64.

    Each rank collects a rollout from its own games (``config`` over :data:`PROOF_SETTINGS`, on a CPU,
    env seed ``seed + rank``) and computes PPO's gradient on a minibatch of it through DDP: in
    one piece, in ``accumulation_steps`` micro-batches, and in as many inside ``no_sync`` (only
    the last all-reduces), counting the all-reduces of each. Rank 0 then puts every rank's
    rollout side by side in one single-process learner and computes the gradient of the
    concatenated minibatch (advantages normalized over all of it). Returns, on rank 0, for each
    way: the relative difference to that gradient (max |difference| / max |gradient|), the
    largest difference between ranks, and the all-reduce count; None on the other ranks.

    Then the learner's own update path (``config.accumulation_steps = accumulation_steps``): the
    all-reduces of one ``DistributedPPO.update`` per optimizer step (its ``no_sync``: 1), against
    one step of ``PPO.minibatch_update`` run on the DDP model without it (``accumulation_steps``),
    and whether the ranks' parameters still agree after both."""
    steps = check_int("accumulation_steps", accumulation_steps)
    proof = ppo_settings("cpu", overrides=[*PROOF_SETTINGS.items(), *config.items()])  # config's over the proof's
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = ppo_with_rollout(torch.float64, **settings_dict(dataclasses.replace(proof, seed=proof.seed + rank)))
    learner = DistributedPPO(dataclasses.replace(proof, accumulation_steps=steps), dtype=torch.float64)
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
    before = counter.calls
    learner.update()  # PPO's update path: every minibatch through DistributedPPO.minibatch_update
    optimizer_steps = c.update_epochs * c.num_minibatches
    update = {"accumulation_steps": steps, "optimizer_steps": optimizer_steps,
              "allreduces_per_step": (counter.calls - before) / optimizer_steps}
    before = counter.calls
    PPO.minibatch_update(learner, idx)  # the same step without DistributedPPO's no_sync
    update["allreduces_per_step_without_no_sync"] = counter.calls - before
    update["parameters_agree_after"] = parameters_agree(learner.model)
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
        "update": update,
        "ways": [{"way": way, "micro_batches": ways[way][0], "no_sync": ways[way][1],
                  "relative_difference": float((g - reference).abs().max()) / scale,
                  "max_difference_between_ranks": spread[way], "allreduces": counts[way]}
                 for way, g in gradients.items()],
    }


def measure_iterations(config: PPOConfig, *, repeats: int = 5) -> dict | None:
    """Run on every rank: the time of a PPO iteration, a rollout and an update, each the median of
    ``repeats`` runs after one warm-up (rank 0's clock; ranks run in lockstep). Rank 0 returns
    seconds and IQRs and the global env steps per iteration; the others None."""
    learner = DistributedPPO(config)
    timings = {part: time_callable(fn, warmup=1, repeats=repeats, device=learner.device)
               for part, fn in (("iteration", learner.iterate), ("rollout", learner.collect),
                                ("update", learner.update))}
    if learner.rank:
        return None
    return {"world_size": learner.world_size, "backend": dist.get_backend(), "device": learner.device.type,
            "threads_per_process": torch.get_num_threads(), "envs_per_process": config.num_envs,
            "env_steps_per_iteration": learner.world_size * config.num_envs * config.num_steps,
            **{f"{part}_s": t.median for part, t in timings.items()},
            **{f"{part}_iqr_s": t.iqr for part, t in timings.items()}}


def ddp_proof(world_size: int = 2, accumulation_steps: int = 4, *, timeout_s: float = 120.0, **config) -> dict:
    """:func:`gradient_check` in a real gloo group of ``world_size`` processes started by torchrun."""
    options = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    return run_json(world_size, ["proof", "--accumulation-steps", accumulation_steps, *options], timeout_s=timeout_s)
