"""TensorReplayBuffer: writes wrap around, sampling covers exactly what is stored."""

import pytest
import torch

from rlgpu_helpers.replay.tensor import TensorReplayBuffer


def add(buffer, start, count):
    ids = torch.arange(start, start + count, dtype=torch.float32)
    buffer.add(ids[:, None].repeat(1, 2), ids.long() % 3, ids, -ids[:, None].repeat(1, 2), (ids % 2 == 0))


def test_adding_wraps_around_and_keeps_the_newest():
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
    # Fields of one sample belong to the same transition.
    torch.testing.assert_close(batch["obs"][:, 0], ids)
    torch.testing.assert_close(batch["next_obs"][:, 0], -ids)
    assert torch.equal(batch["actions"], ids.long() % 3)
    counts = torch.bincount(ids.long(), minlength=7).float()
    assert (counts - 5000 / 7).abs().max() < 150  # uniform: about 714 each


def test_state_dict_round_trip():
    buffer = TensorReplayBuffer(4, (2,))
    add(buffer, 0, 3)
    add(buffer, 3, 3)  # wrapped: pos 2, full
    other = TensorReplayBuffer(4, (2,))
    other.load_state_dict(buffer.state_dict())
    assert (other.pos, other.size) == (buffer.pos, buffer.size)
    assert torch.equal(other.obs, buffer.obs) and torch.equal(other.terminated, buffer.terminated)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: TensorReplayBuffer(0, (2,)), "capacity=0 must be an int >= 1"),
        (lambda: TensorReplayBuffer(4, (2,)).sample(3), "empty replay buffer"),
        (lambda: add(TensorReplayBuffer(4, (2,)), 0, 5), "batch of 5 transitions does not fit in capacity 4"),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()
