"""TensorReplayBuffer: writes wrap around in place, sampling covers exactly what is stored, and the
storage can live apart from where samples go. (The API every buffer shares: test_replay_api.py.)"""

import torch

from rlgpu_helpers.replay.tensor import TensorReplayBuffer


def add(buffer, start, count):
    ids = torch.arange(start, start + count, dtype=torch.float32)
    buffer.add(ids[:, None].repeat(1, 2), ids.long() % 3, ids, -ids[:, None].repeat(1, 2), (ids % 2 == 0))


def test_adding_wraps_around_in_place():
    buffer = TensorReplayBuffer(5, (2,))
    add(buffer, 0, 3)
    assert len(buffer) == 3 and buffer.pos == 3
    add(buffer, 3, 4)  # 3, 4 go to slots 3, 4; 5, 6 overwrite slots 0, 1
    assert len(buffer) == 5 and buffer.pos == 2
    assert buffer.rewards.tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.obs[:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.next_obs[:, 1].tolist() == [-5.0, -6.0, -2.0, -3.0, -4.0]
    assert buffer.terminated.tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]


def test_sampling_draws_only_stored_transitions_and_all_of_them():
    buffer = TensorReplayBuffer(100, (2,))
    add(buffer, 0, 7)
    batch = buffer.sample(5000, generator=torch.Generator().manual_seed(0))
    ids = batch["rewards"]
    assert set(ids.tolist()) == set(range(7))
    assert torch.equal(batch["indices"], ids.long())  # slot i holds transition i
    torch.testing.assert_close(batch["obs"][:, 0], ids)
    torch.testing.assert_close(batch["next_obs"][:, 0], -ids)
    assert torch.equal(batch["actions"], ids.long() % 3)


def test_a_loaded_state_continues_the_ring_after_its_newest_transition():
    buffer = TensorReplayBuffer(4, (2,))
    add(buffer, 0, 3)
    add(buffer, 3, 3)  # wrapped: slots hold 4, 5, 2, 3
    other = TensorReplayBuffer(4, (2,))
    other.load_state_dict(buffer.state_dict())
    assert other.rewards.tolist() == [2.0, 3.0, 4.0, 5.0] and other.pos == 0 and other.size == 4
    add(other, 6, 1)  # overwrites the oldest, 2
    assert other.rewards.tolist() == [6.0, 3.0, 4.0, 5.0]


def test_storage_and_samples_may_live_on_different_devices():
    buffer = TensorReplayBuffer(8, (2,), device="cpu", storage_device="cpu")
    assert buffer.storage_device == buffer.device == torch.device("cpu")
    assert buffer.memory_bytes() == {"host": 8 * (2 * 2 + 3) * 4 + 8 * 4}
