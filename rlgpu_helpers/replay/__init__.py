"""Replay buffers, from the tutorial's deque to GPU-resident and prioritized, all with one API.

- ``base``: ``ReplayBuffer``, the API every buffer shares, its checks, ``make_buffer`` (05);
- ``naive``: ``DequeReplay`` and ``ArrayReplay``, the naive DQN's memories (01, 02; measured in 05);
- ``tensor``: ``TensorReplayBuffer``, preallocated tensors on the GPU or in host memory (05);
- ``pinned``: ``PinnedReplayBuffer``, pinned host memory, next batch prefetched on a side stream (05);
- ``memmap``: ``MemmapReplayBuffer``, memory-mapped files: larger than RAM, kept across restarts (05);
- ``prioritized``: ``PrioritizedReplayBuffer``, proportional prioritization without host syncs (05).
"""
