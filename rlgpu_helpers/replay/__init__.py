"""Replay buffers, from the tutorial's deque to preallocated tensors on the learner's device.

- ``naive``: ``DequeReplay`` and ``ArrayReplay``, the naive DQN's memories (01, 02);
- ``tensor``: ``TensorReplayBuffer``, preallocated tensors on one device (05, used by ``learn.dqn``).
"""
