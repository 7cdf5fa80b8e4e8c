"""The learners, what they need around them, and the choice of settings for a device.

- ``nets``: the MLP and CNN networks, ``QNetwork`` and ``ActorCritic`` (01);
- ``naive_dqn``: the single-game DQN everything is compared to (01, 02);
- ``evaluate``: greedy games of a Q-network, and the random player to beat (01);
- ``profile``: ``torch.profiler`` over PPO's iterations, and what it shows (06);
- ``train_step``: one optimizer step of the actor-critic in a precision, the precision lesson's workload (08);
- ``ppo``: PPO on ``VecSnake``, the whole loop on one device; ``collect`` and ``minibatch_update`` (11);
- ``ppo_ddp``: data-parallel PPO with DDP, and the proof that it equals one process (10);
- ``dqn``: DQN on ``VecSnake`` with a replay buffer of any kind (05, and `train --algo dqn`);
- ``training``: the outer loop with budgets, progress, learning curves and resume (11);
- ``checkpoint``: checkpoints that survive a kill at any moment (11);
- ``agents``: trained networks saved, loaded and watched (11);
- ``symmetry``: the left-right mirror of observations and actions, for augmentation (12);
- ``wins``: games played to the end, counting how often the board is filled (12);
- ``shaping``: potential-based shaping on the distance to the food, which keeps the best policy best (12);
- ``settings``: ``ppo_settings``, PPO's settings from a preset (``learn/presets/``) for the device (06, 11, 12);
- ``tune``: settings measured on this device: the precision, the launch settings, the capstone's (08, 09, 11).
"""
