"""The learners and what they need around them.

- ``nets``: the MLP and CNN networks, ``QNetwork`` and ``ActorCritic`` (01);
- ``naive_dqn``: the single-game DQN everything is compared to (01, 02);
- ``evaluate``: greedy games of a Q-network, and the random player to beat (01);
- ``ppo``: PPO on ``VecSnake``, the whole loop on one device (11);
- ``dqn``: DQN on ``VecSnake`` with a replay buffer on the same device (11);
- ``training``: the outer loop with budgets, progress, learning curves and resume (11);
- ``checkpoint``: checkpoints that survive a kill at any moment (11);
- ``agents``: trained networks saved, loaded and watched (11).
"""
