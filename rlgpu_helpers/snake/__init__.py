"""The game: Snake's rules, one game in NumPy, many games as tensors, pictures, a player.

- ``rules``: grid sizes, actions, the start position, ``SnakeState`` and the observations (01);
- ``env``: ``SnakeEnv``, one game, a ``gymnasium.Env`` (01);
- ``render``: images and animations of states (01);
- ``widgets``: ``SnakePlayer``, play by hand, and ``ReplayPlayer``, step through a recorded game (01);
- ``cpu_vector``: many ``SnakeEnv`` through gymnasium's Sync/AsyncVectorEnv (03);
- ``vec``: ``VecSnake``, N games as tensors on any device, no host syncs in ``step`` (03, 04);
- ``vec_state``: ``VecSnake``'s state as tensors, each game read, written and checked (03, 04);
- ``vec_observe``: ``VecSnake``'s observations, read from its state with no host sync (03, 04);
- ``step_bytes``: the bytes one ``VecSnake`` step must read and write, its memory floor (04);
- ``vec_fused``: ``FusedStep``, the features and grid steps as hand-written Triton kernels (04);
- ``naive_tensor``: ``NaiveTensorSnake``, the bad example (04): a tensor Snake written the common
  way, each of its host syncs a switch, to measure what they cost.
"""
