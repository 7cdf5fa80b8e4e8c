"""Helpers for the course "Making reinforcement learning use a GPU well", taught with Snake.

Each module holds one concept, and its docstring names the notebook that introduces it. Where
each lesson's helpers live:

====  ==========================  ==========================================================
 #    notebook                    modules
====  ==========================  ==========================================================
00    setup                       core.config, core.checks, core.device, core.files,
                                  core.compat, bench.timing, bench.records, bench.report,
                                  bench.ceilings
01    cpu_snake                   snake.rules, snake.env, snake.render, snake.widgets,
                                  learn.nets, learn.naive_dqn, learn.evaluate, replay.naive,
                                  bench.loop, bench.claims (used by every lesson after it)
02    cpu_loop_tuning             bench.loop (rows, tables, plots), learn.naive_dqn (switches)
03    vectorized_envs             snake.cpu_vector, snake.vec, bench.envs
04    gpu_vectorized_env          snake.vec, snake.naive_tensor, gpu.sync, bench.envs,
                                  bench.launch
05    transfers_and_replay        gpu.transfer, bench.transfers, replay.base, replay.naive,
                                  replay.tensor, replay.pinned, replay.memmap,
                                  replay.prioritized, bench.replay
06    batch_size_and_memory       gpu.memory, gpu.monitor, bench.batch_size
07    gradient_accumulation       gpu.accumulate, learn.ppo (accumulation), bench.accumulation
08    mixed_precision             gpu.precision, learn.ppo (precision), bench.precision
09    compile_and_graphs          gpu.graphs, bench.graphs
10    multi_gpu                   gpu.distributed, bench.ddp
11    capstone                    learn.ppo, learn.dqn, learn.training, learn.checkpoint,
                                  learn.agents, bench.time_to_score, bench.capstone
====  ==========================  ==========================================================

The command line (``python -m rlgpu_helpers bench | train | play``) is in ``cli``; its
benchmark suites are listed in ``bench.suites``.
"""

__version__ = "0.1.0"
