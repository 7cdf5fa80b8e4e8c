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


def snapshot(buffer):
    return {name: getattr(buffer, name).clone() for name in TensorReplayBuffer.FIELDS}, buffer.pos, buffer.size


def assert_unchanged(buffer, before):
    fields, pos, size = snapshot(buffer)
    assert (pos, size) == before[1:]
    assert all(torch.equal(fields[name], before[0][name]) for name in fields)


def batch(count=3):
    ids = torch.arange(count, dtype=torch.float32)
    return dict(obs=ids[:, None].repeat(1, 2), actions=ids.long() % 3, rewards=ids,
                next_obs=-ids[:, None].repeat(1, 2), terminated=ids % 2 == 0)


@pytest.mark.parametrize("field, value, error, message", [
    ("next_obs", torch.zeros(3, 5), ValueError, r"next_obs has shape \(3, 5\), expected \(3, 2\)"),
    ("next_obs", torch.zeros(2, 2), ValueError, r"next_obs has shape \(2, 2\), expected \(3, 2\)"),
    ("rewards", torch.zeros(3, 1), ValueError, r"rewards has shape \(3, 1\), expected \(3,\)"),
    ("terminated", [True, False, True], TypeError, "terminated must be a torch.Tensor, not list"),
    ("actions", torch.zeros(3), TypeError, "actions must be an integer tensor, not torch.float32"),
    ("obs", torch.zeros(3, 3), ValueError, r"obs has shape \(3, 3\), expected \(3, 2\)"),
])
def test_a_malformed_add_writes_nothing(field, value, error, message):
    """Every field is checked before the first write: obs must not land when next_obs is bad."""
    buffer = TensorReplayBuffer(8, (2,))
    buffer.add(**batch())
    before = snapshot(buffer)
    with pytest.raises(error, match=message):
        buffer.add(**(batch() | {field: value}))
    assert_unchanged(buffer, before)


def stored_state():
    buffer = TensorReplayBuffer(4, (2,))
    add(buffer, 0, 3)
    return buffer.state_dict()


@pytest.mark.parametrize("change, error, message", [
    (lambda s: s.update(size=5), ValueError, r"state\['size'\]=5 must be an int in \[0, 4\]"),
    (lambda s: s.update(pos=-1), ValueError, r"state\['pos'\]=-1 must be an int in \[0, 3\]"),
    (lambda s: s.update(pos=1), ValueError, r"state\['pos'\]=1 must equal state\['size'\]=3"),
    (lambda s: s.update(size=2.0), TypeError, r"state\['size'\]=2.0 must be an int"),
    (lambda s: s.update(obs=torch.zeros(3, 7)), ValueError, r"obs has shape \(3, 7\), expected \(3, 2\)"),
    (lambda s: s.update(rewards=torch.zeros(2)), ValueError, r"rewards has shape \(2,\), expected \(3,\)"),
    (lambda s: s.update(rewards=torch.tensor([0.0, float("nan"), 1.0])), ValueError, "rewards.*not finite"),
    (lambda s: s.update(terminated=torch.tensor([0.0, 2.0, 1.0])), ValueError, "only 0 and 1"),
    (lambda s: s.pop("actions"), ValueError, r"missing \['actions'\]"),
])
def test_a_bad_state_dict_is_refused_and_the_buffer_left_alone(change, error, message):
    state = stored_state()
    change(state)
    buffer = TensorReplayBuffer(4, (2,))
    add(buffer, 10, 2)
    before = snapshot(buffer)
    with pytest.raises(error, match=message):
        buffer.load_state_dict(state)
    assert_unchanged(buffer, before)
