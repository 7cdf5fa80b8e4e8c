"""The naive DQN's memories: the per-transition path gives the same batches from the deque and the
arrays and keeps the newest; the batch API stores what the per-transition path stores."""

import numpy as np
import torch

from rlgpu_helpers.replay.naive import ArrayReplay, DequeReplay


def fill(memory, transitions):
    for transition in transitions:
        memory.append(*transition)


def random_transitions(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.random(11, dtype=np.float32), int(rng.integers(3)), float(rng.choice([-1.0, 0.0, 1.0])),
             rng.random(11, dtype=np.float32), bool(rng.random() < 0.2)) for _ in range(count)]


def test_array_batches_equal_list_batches_for_the_same_indices():
    transitions = random_transitions(100)
    as_deque, as_arrays = DequeReplay(200, (11,)), ArrayReplay(200, (11,))
    fill(as_deque, transitions)
    fill(as_arrays, transitions)
    assert len(as_deque) == len(as_arrays) == 100
    indices = np.random.default_rng(1).integers(0, 100, size=64)
    for from_deque, from_arrays in zip(as_deque.batch(indices), as_arrays.batch(indices)):
        assert from_deque.dtype == from_arrays.dtype
        assert torch.equal(from_deque, from_arrays)


def test_both_memories_keep_the_newest_transitions_when_full():
    transitions = random_transitions(25)
    as_deque, as_arrays = DequeReplay(10, (11,)), ArrayReplay(10, (11,))
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


def test_a_batch_added_at_once_is_stored_as_the_per_transition_path_stores_it():
    transitions = random_transitions(30)
    for memory_class in (DequeReplay, ArrayReplay):
        one_by_one, batched = memory_class(40, (11,)), memory_class(40, (11,))
        fill(one_by_one, transitions)
        obs, actions, rewards, next_obs, terminated = zip(*transitions)
        batched.add(torch.tensor(np.array(obs)), torch.tensor(actions), torch.tensor(rewards),
                    torch.tensor(np.array(next_obs)), torch.tensor(terminated))
        assert len(batched) == len(one_by_one) == 30
        every = np.arange(30)
        for a, b in zip(one_by_one.batch(every), batched.batch(every)):
            assert torch.equal(a, b)
