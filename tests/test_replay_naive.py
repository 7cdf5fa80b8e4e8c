"""The naive DQN's memories: the deque and the arrays give the same batches and keep the newest."""

import numpy as np
import torch

from rlgpu_helpers.replay.naive import ArrayReplay, DequeReplay


def fill(memory, transitions):
    for transition in transitions:
        memory.add(*transition)


def random_transitions(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.random(11, dtype=np.float32), int(rng.integers(3)), float(rng.choice([-1.0, 0.0, 1.0])),
             rng.random(11, dtype=np.float32), bool(rng.random() < 0.2)) for _ in range(count)]


def test_array_batches_equal_list_batches_for_the_same_indices():
    transitions = random_transitions(100)
    as_deque, as_arrays = DequeReplay(200), ArrayReplay(200, (11,))
    fill(as_deque, transitions)
    fill(as_arrays, transitions)
    assert len(as_deque) == len(as_arrays) == 100
    indices = np.random.default_rng(1).integers(0, 100, size=64)
    for from_deque, from_arrays in zip(as_deque.batch(indices), as_arrays.batch(indices)):
        assert from_deque.dtype == from_arrays.dtype
        assert torch.equal(from_deque, from_arrays)


def test_both_memories_keep_the_newest_transitions_when_full():
    transitions = random_transitions(25)
    as_deque, as_arrays = DequeReplay(10), ArrayReplay(10, (11,))
    fill(as_deque, transitions)
    fill(as_arrays, transitions)
    assert len(as_deque) == len(as_arrays) == 10
    every = np.arange(10)
    # Same transitions, stored in a different order once the ring wraps: compare sorted rows.
    rows = [torch.cat([field.reshape(10, -1).float() for field in memory.batch(every)], dim=1)
            for memory in (as_deque, as_arrays)]
    newest = torch.tensor(np.array([t[0] for t in transitions[-10:]]))
    assert torch.equal(torch.sort(rows[0][:, 0]).values, torch.sort(rows[1][:, 0]).values)
    assert torch.equal(torch.sort(rows[0][:, 0]).values, torch.sort(newest[:, 0]).values)
