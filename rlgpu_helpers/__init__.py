"""Helpers for the course "Making reinforcement learning use a GPU well", taught with Snake.

Each module holds one concept, and its docstring names the notebook that introduces it. The
package is built in layers, and a module imports only from its own layer or from layers below
(``tests/test_layers.py`` enforces it)::

    core  <  measure  <  gpu  <  snake, replay  <  learn  <  bench  <  cli

``core`` is what every lesson uses, ``measure`` the measuring harness (no lesson in it), ``gpu``
one technique per module (knowing nothing of PPO or of benchmark suites), ``snake`` and
``replay`` the game and the buffers, ``learn`` the learners and the choice of settings for a
device, ``bench`` one benchmark suite per lesson, and ``cli`` the one command line.

Where each lesson's helpers live:

====  ==========================  ==========================================================
 #    notebook                    modules
====  ==========================  ==========================================================
00    setup                       core.config, core.checks, core.device, core.files,
                                  core.compat, measure.timing, measure.records,
                                  measure.table, measure.plots, bench.ceilings
01    cpu_snake                   snake.rules, snake.env, snake.render, snake.widgets,
                                  learn.nets, learn.naive_dqn, learn.evaluate, replay.naive,
                                  bench.loop, measure.claims (used by every lesson after it)
02    cpu_loop_tuning             bench.loop (rows, tables, plots), learn.naive_dqn (switches)
03    vectorized_envs             snake.cpu_vector, snake.vec, snake.vec_state,
                                  snake.vec_observe, bench.envs, bench.env_records,
                                  bench.fps_claims
04    gpu_vectorized_env          snake.vec, snake.naive_tensor, snake.step_bytes, gpu.sync,
                                  gpu.launches, bench.syncs, bench.launch, bench.envs (floor),
                                  bench.env_floor, snake.vec_fused
05    transfers_and_replay        gpu.transfer, bench.transfers, replay (the registry),
                                  replay.base, replay.naive, replay.tensor, replay.pinned,
                                  replay.memmap, replay.prioritized, bench.replay,
                                  learn.dqn, core.logs
06    batch_size_and_memory       gpu.memory, gpu.monitor, learn.profile, learn.settings,
                                  bench.batch_size
07    gradient_accumulation       gpu.accumulate, learn.ppo (accumulation), bench.accumulation
08    mixed_precision             gpu.precision, learn.train_step, learn.tune (precision),
                                  bench.precision
09    compile_and_graphs          gpu.graphs, learn.tune (launch settings), bench.graphs
10    multi_gpu                   gpu.distributed, learn.ppo_ddp, bench.ddp
11    capstone                    learn.ppo, learn.training, learn.checkpoint, learn.agents,
                                  learn.settings, learn.tune (the capstone's settings),
                                  bench.time_to_score, bench.ablation
12    winning_the_board           learn.nets (shared trunks), learn.symmetry, learn.wins,
                                  learn.shaping, learn.settings (the win preset),
                                  learn.ppo (warm_up), learn.profile (device_timeline),
                                  bench.time_to_win, bench.win_speed
====  ==========================  ==========================================================

The command line (``python -m rlgpu_helpers bench | train | play | rank``) is in ``cli``, its
argument types in ``core.args``; its benchmark suites are listed in ``bench.suites``.
"""

__version__ = "0.1.0"
