"""One benchmark suite per lesson, each returning records and showing tables and claim checks.

The harness they build on (timing, records, tables, plots, claims) is ``measure``.

- ``suites``: the suites ``python -m rlgpu_helpers bench SUITE`` runs, by name (00);
- ``ceilings``: matmul FLOP/s and memory GB/s of a device (00);
- ``loop``: the naive DQN's loop and its cheap tunings (01, 02);
- ``envs``: env steps/s of every way of running Snake games (03);
- ``env_records``: reading env steps/s: the fastest N, each curve in a line, a step's time (03, 04);
- ``fps_claims``: the guide's FPS table against env steps/s (03, 04);
- ``env_floor``: the env step eager and compiled against its memory floor, where its time goes (04);
- ``syncs``: time per step against N on a GPU, and the cost of each sync point (04);
- ``launch``: the two ceilings of an env's step: launches x their latency, bytes / bandwidth (04);
- ``transfers``: host-device copies, pageable or pinned, blocking or not, by size (05);
- ``replay``: samples/s and memory of every replay buffer, and DQN steps/s with each (05);
- ``batch_size``: samples/s and peak memory by batch size, the largest batch, utilization (06);
- ``accumulation``: peak memory and time per update against accumulation steps (07);
- ``precision``: step time and memory by width and precision, PPO learning in each (08);
- ``graphs``: time per step eager, compiled and graph-captured, by part of the iteration and N (09);
- ``ddp``: env steps/s and time per update by number of processes (10);
- ``time_to_score``: PPO against the naive DQN and stable-baselines3, to a mean score (11);
- ``ablation``: the capstone's chosen settings, and each lesson switched off (11);
- ``time_to_win``: the win preset per seed, its time-to-win curve, games played to the end (12);
- ``win_speed``: the win preset's env steps/s by technique and shape, a profile of its iteration (12).
"""
