"""PrioritizedReplayBuffer: draws in proportion to priority ** alpha (chi-square), importance weights
by the formula, update_priorities changes both, bad priorities are refused with nothing written,
and adding, sampling and updating make no host sync."""

import pytest
import torch
from test_replay_api import chi_square_p_value, transitions

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.replay.prioritized import PrioritizedReplayBuffer

SLOTS = 12


def filled(alpha=0.6, beta=0.4):
    buffer = PrioritizedReplayBuffer(SLOTS, (2,), alpha=alpha, beta=beta)
    buffer.add(**transitions(0, SLOTS))  # transition i in slot i
    return buffer


def priorities():
    return torch.linspace(0.2, 5.0, SLOTS)


def counts_of(buffer, draws=60 * 4096, seed=0):
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(SLOTS, dtype=torch.float64)
    for _ in range(draws // 4096):
        counts += torch.bincount(buffer.sample(4096, generator)["indices"], minlength=SLOTS)
    return counts


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_sampling_is_proportional_to_priority_to_the_alpha_chi_square(alpha):
    buffer = filled(alpha)
    buffer.update_priorities(torch.arange(SLOTS), priorities())
    counts = counts_of(buffer)
    expected = priorities().double() ** alpha
    expected = counts.sum() * expected / expected.sum()
    assert chi_square_p_value(counts, expected) > 1e-3
    if alpha > 0:  # and the test can tell: the same draws are far from uniform
        assert chi_square_p_value(counts, torch.full_like(counts, counts.sum() / SLOTS)) < 1e-6


def test_importance_weights_match_the_formula():
    buffer = filled(alpha=0.7, beta=0.5)
    buffer.update_priorities(torch.arange(SLOTS), priorities())
    batch = buffer.sample(256, torch.Generator().manual_seed(1))
    probability = priorities().double() ** 0.7 / (priorities().double() ** 0.7).sum()
    weights = (SLOTS * probability) ** -0.5
    want = (weights / weights.max())[batch["indices"]]
    torch.testing.assert_close(batch["weights"], want.float())
    assert batch["weights"].dtype == torch.float32 and batch["weights"].max() <= 1.0
    assert torch.equal(batch["rewards"], batch["indices"].float())  # the rows go with the indices


def test_update_priorities_changes_the_draws_and_the_weights():
    buffer = filled(alpha=1.0, beta=1.0)
    before = buffer.sample(64, torch.Generator().manual_seed(3))
    assert torch.equal(before["weights"], torch.ones(64))  # all at the initial priority: uniform
    buffer.update_priorities(torch.tensor([4]), torch.tensor([1000.0]))
    after = buffer.sample(4096, torch.Generator().manual_seed(3))
    share = (after["indices"] == 4).float().mean()
    assert 0.97 < share < 0.995  # 1000 / (1000 + 11)
    assert after["weights"][after["indices"] == 4].max() == pytest.approx(1 / 1000)
    assert after["weights"][after["indices"] != 4].min() == 1.0


def test_new_transitions_get_the_largest_priority_seen():
    buffer = PrioritizedReplayBuffer(8, (2,))
    buffer.add(**transitions(0, 4))
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([7.0, 0.5]))
    buffer.add(**transitions(4, 2))
    assert buffer.priorities[:6].tolist() == [7.0, 0.5, 1.0, 1.0, 7.0, 7.0]
    buffer.add(**transitions(6, 4))  # wraps: slots 0, 1 are new transitions
    assert buffer.priorities.tolist() == [7.0, 7.0, 1.0, 1.0, 7.0, 7.0, 7.0, 7.0]


@pytest.mark.parametrize("indices, values, error, message", [
    (torch.tensor([0, 1, 2]), torch.tensor([1.0, float("nan"), 2.0]), ValueError,
     r"priorities\[1\]=nan must be a finite number > 0"),
    (torch.tensor([0, 1, 2]), torch.tensor([1.0, 2.0, -3.0]), ValueError, r"priorities\[2\]=-3.0 must be a finite"),
    (torch.tensor([0, 1]), torch.tensor([0.0, 2.0]), ValueError, r"priorities\[0\]=0.0 must be a finite number > 0"),
    (torch.tensor([0, 1]), torch.tensor([float("inf"), 2.0]), ValueError, r"priorities\[0\]=inf"),
    (torch.tensor([0, 12]), torch.tensor([1.0, 2.0]), ValueError, r"indices\[1\]=12 must hold a stored transition"),
    (torch.tensor([-1, 0]), torch.tensor([1.0, 2.0]), ValueError, r"indices\[0\]=-1 must hold"),
    (torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]), ValueError, r"priorities has shape \(3,\), expected \(2,\)"),
    (torch.tensor([[0, 1]]), torch.tensor([[1.0, 2.0]]), TypeError, "indices must be a 1-d integer tensor"),
    (torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]), TypeError, "indices must be a 1-d integer tensor"),
    (torch.tensor([0, 1]), torch.tensor([True, True]), TypeError, "priorities must be a real tensor"),
    (torch.tensor([0, 1]), [1.0, 2.0], TypeError, "priorities must be a torch.Tensor, not list"),
    (torch.tensor([0, 1]), torch.tensor([1.0, 2.0], device="meta"), ValueError,
     "priorities is on meta: the priorities live on cpu"),
])
def test_bad_priorities_are_refused_and_nothing_is_written(indices, values, error, message):
    buffer = filled()
    buffer.update_priorities(torch.arange(SLOTS), priorities())
    before, max_before = buffer.priorities.clone(), buffer._max_priority.clone()
    with pytest.raises(error, match=message):
        buffer.update_priorities(indices, values)
    assert torch.equal(buffer.priorities, before) and torch.equal(buffer._max_priority, max_before)
    buffer.update_priorities(torch.tensor([3]), torch.tensor([9.0]))  # and it goes on working
    assert buffer.priorities[3] == 9.0


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(alpha=-0.1), ValueError, "alpha=-0.1 must be a finite number >= 0"),
    (dict(beta=1.5), ValueError, "beta=1.5 must be a finite number >= 0 and <= 1"),
    (dict(alpha="high"), TypeError, "alpha='high' must be a number"),
])
def test_bad_alpha_or_beta_is_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrioritizedReplayBuffer(8, (2,), **kwargs)
    buffer = PrioritizedReplayBuffer(8, (2,))
    if "beta" in kwargs:
        with pytest.raises(error, match=message):
            buffer.beta = kwargs["beta"]
        assert buffer.beta == 0.4


def test_priorities_round_trip_with_the_state_and_are_checked():
    buffer = filled()
    buffer.update_priorities(torch.arange(SLOTS), priorities())
    other = PrioritizedReplayBuffer(SLOTS, (2,))
    other.load_state_dict(buffer.state_dict())
    assert torch.equal(other.priorities, buffer.priorities)
    assert float(other._max_priority) == pytest.approx(5.0)
    bad = buffer.state_dict() | {"priorities": -priorities()}
    with pytest.raises(ValueError, match=r"state\['priorities'\] must hold only finite numbers > 0"):
        other.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"state\['priorities'\] has shape \(3,\), expected \(12,\)"):
        other.load_state_dict(buffer.state_dict() | {"priorities": torch.ones(3)})
    with pytest.raises(ValueError, match=r"state\['max_priority'\]=0.0 must be a finite number > 0"):
        other.load_state_dict(buffer.state_dict() | {"max_priority": 0.0})
    assert torch.equal(other.priorities, buffer.priorities)


def test_adding_sampling_and_updating_make_no_host_sync():
    buffer = PrioritizedReplayBuffer(1000, (11,))
    batch = transitions(0, 64, (11,))
    buffer.add(**batch)
    assert audit_syncs(lambda: buffer.add(**batch), "cpu").total == 0
    sampled = {}
    report = audit_syncs(lambda: sampled.update(buffer.sample(256)), "cpu")
    assert report.total == 0, report
    new = sampled["weights"] + 0.5
    report = audit_syncs(lambda: buffer.update_priorities(sampled["indices"], new), "cpu")
    assert report.total == 0, report
