"""The benchmark suites: what ``python -m rlgpu_helpers bench SUITE`` runs (introduced in notebook 00).

Each suite measures what one lesson teaches and returns a list of
:class:`~rlgpu_helpers.measure.records.Record`. A suite is a function ``(device, progress) ->
list[Record]`` and the devices it can measure: the naive DQN's loop runs on the CPU only, so
on a GPU machine ``bench loop`` measures that machine's CPU. ``tools/gpu_sweep.py`` runs every
suite here on a GPU machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ..learn.ppo import PPOConfig
from ..measure.records import Record
from .ablation import measure_capstone
from .accumulation import measure_accumulation
from .batch_size import measure_batch_size
from .ceilings import measure_ceilings
from .ddp import measure_ddp
from .env_floor import measure_env_floor
from .envs import measure_env_throughput
from .graphs import measure_graphs
from .launch import measure_launch
from .loop import measure_tunings
from .precision import measure_precision
from .replay import measure_replay
from .syncs import measure_sync_costs
from .time_to_score import measure_training
from .time_to_win import measure_wins
from .win_speed import measure_win_speed
from .transfers import measure_transfers


@dataclasses.dataclass(frozen=True)
class Suite:
    """A benchmark suite: its function, the lesson it belongs to, and whether it runs on the CPU only.

    ``settings``: a config dataclass whose fields ``bench --set`` may also give, passed on to the
    suite's function as keywords (``bench wins --set food_shaping=0.2`` changes the trained preset).
    """

    run: Callable[[torch.device, bool], list[Record]]
    lesson: str
    cpu_only: bool = False
    settings: type | None = None


SUITES = {
    "ceilings": Suite(measure_ceilings, "00: matmul FLOP/s and memory GB/s of the device"),
    "loop": Suite(measure_tunings, "02: the naive DQN's loop and its cheap tunings", cpu_only=True),
    "envs": Suite(measure_env_throughput, "03, 04: env steps/s of every way of running Snake"),
    "env_floor": Suite(measure_env_floor, "04: the env step eager, compiled and fused against its memory floor, "
                                          "and where an eager step's time goes"),
    "syncs": Suite(measure_sync_costs, "04: what each host-device sync point of a tensor Snake costs"),
    "launch": Suite(measure_launch, "04: the two ceilings of a step: launches and bytes moved"),
    "transfers": Suite(measure_transfers, "05: host-device copies, pageable or pinned, and a side-stream prefetch"),
    "replay": Suite(measure_replay, "05: samples/s and memory of every replay buffer, DQN steps/s with each"),
    "batch_size": Suite(measure_batch_size, "06: samples/s and peak memory against batch size, the largest batch"),
    "accumulation": Suite(measure_accumulation, "07: peak memory and time per update against accumulation steps"),
    "precision": Suite(measure_precision, "08: step time and memory by precision and width, PPO in bf16"),
    "graphs": Suite(measure_graphs, "09: time per step eager, compiled and graph-captured, by part and N"),
    "ddp": Suite(measure_ddp, "10: PPO's env steps/s and time per update by processes (torchrun, DDP)"),
    "training": Suite(measure_training, "11: time to a mean score, PPO against the baselines"),
    "wins": Suite(measure_wins, "12: time to win: the 'win' preset on 3 seeds for 30 minutes, then 1,000 games each",
                  settings=PPOConfig),
    "win_speed": Suite(measure_win_speed, "12: the 'win' preset's env steps/s, technique by technique and by shape",
                       settings=PPOConfig),
    "capstone": Suite(measure_capstone, "11: the capstone's settings chosen by the helpers, and each lesson switched off"),
}
