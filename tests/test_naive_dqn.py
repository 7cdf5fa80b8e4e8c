"""The naive single-env DQN: each tuning switch changes its code path, the time split adds up,
bad settings are refused, and it learns."""

import numpy as np
import pytest
import torch

from rlgpu_helpers.learn.evaluate import evaluate, evaluate_random
from rlgpu_helpers.learn.naive_dqn import PARTS, LoopSettings, NaiveDQN, run_naive_dqn
from rlgpu_helpers.replay.naive import ArrayReplay, DequeReplay

SMALL = dict(height=6, width=6, hidden=32, learning_starts=50, buffer_size=1_000, num_threads=1)


def test_the_memory_follows_the_array_batches_switch():
    assert isinstance(NaiveDQN(LoopSettings(**SMALL)).memory, DequeReplay)
    assert isinstance(NaiveDQN(LoopSettings(**SMALL, array_batches=True)).memory, ArrayReplay)


@pytest.mark.parametrize("set_to_none", [False, True])
def test_set_to_none_decides_whether_gradients_are_dropped_or_zeroed(set_to_none):
    agent = NaiveDQN(LoopSettings(**SMALL, set_to_none=set_to_none))
    agent.run(steps=80, progress=False)  # 30 updates: every parameter has a gradient
    agent.optimizer.zero_grad(set_to_none=agent.settings.set_to_none)
    grads = [p.grad for p in agent.q_network.parameters()]
    if set_to_none:
        assert all(g is None for g in grads)
    else:
        assert all(g is not None and not g.any() for g in grads)


@pytest.mark.parametrize("inference_mode", [False, True])
def test_inference_mode_decides_whether_acting_records_a_graph(inference_mode, monkeypatch):
    agent = NaiveDQN(LoopSettings(**SMALL, inference_mode=inference_mode))
    seen = []
    forward = agent.q_network.forward

    def spy(obs):
        out = forward(obs)
        seen.append((out.requires_grad, torch.is_inference_mode_enabled()))
        return out

    monkeypatch.setattr(agent.q_network, "forward", spy)
    agent.act(np.zeros(11, dtype=np.float32), epsilon=0.0)
    assert seen == [(not inference_mode, inference_mode)]


@pytest.mark.parametrize("learn_every", [1, 3, 4])
def test_learn_every_k_makes_one_update_every_k_steps(learn_every):
    settings = LoopSettings(**SMALL, learn_every=learn_every)
    agent = NaiveDQN(settings)
    first = agent.run(steps=100, progress=False)  # steps 1..100; learning from step 50
    second = agent.run(steps=120, progress=False)  # steps 101..220
    assert first.updates == sum(1 for t in range(50, 101) if t % learn_every == 0)
    assert second.updates == sum(1 for t in range(101, 221) if t % learn_every == 0)
    assert agent.total_updates == first.updates + second.updates


def test_the_thread_count_is_set_for_the_run_and_restored(monkeypatch):
    before = torch.get_num_threads()
    seen = []
    agent = NaiveDQN(LoopSettings(**{**SMALL, "num_threads": 1}))
    learn = agent.learn
    monkeypatch.setattr(agent, "learn", lambda batch: (seen.append(torch.get_num_threads()), learn(batch))[1])
    agent.run(steps=60, progress=False)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_the_thread_count_is_restored_when_the_run_fails(monkeypatch):
    before = torch.get_num_threads()
    agent = NaiveDQN(LoopSettings(**{**SMALL, "num_threads": 1}))
    monkeypatch.setattr(agent.env, "step", lambda action: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        agent.run(steps=10, progress=False)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("array_batches", [False, True])
def test_the_time_split_adds_up(array_batches):
    result = run_naive_dqn(LoopSettings(**SMALL, array_batches=array_batches), steps=150, progress=False)
    assert result.steps == 150
    assert set(result.times) == set(PARTS)
    assert all(seconds >= 0 for seconds in result.times.values())
    assert result.times["env"] > 0 and result.times["act"] > 0 and result.times["learn"] > 0
    assert sum(result.times.values()) == pytest.approx(result.seconds, rel=1e-6)
    assert result.steps_per_second == pytest.approx(150 / result.seconds)
    per_step = result.microseconds_per_step()
    assert sum(per_step.values()) == pytest.approx(1e6 * result.seconds / 150, rel=1e-6)


def test_a_seconds_budget_stops_the_run():
    result = run_naive_dqn(LoopSettings(**SMALL), seconds=0.3, progress=False)
    assert result.steps > 0
    assert 0.3 <= result.seconds < 3.0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(learn_every=0), ValueError, r"learn_every=0 must be an int >= 1"),
        (dict(batch_size=1.5), TypeError, r"batch_size=1.5 must be an int"),
        (dict(num_threads=0), ValueError, r"num_threads=0 must be an int >= 1"),
        (dict(inference_mode=1), TypeError, r"inference_mode=1 must be True or False"),
        (dict(gamma=1.5), ValueError, r"gamma=1.5 must be a finite number >= 0 and <= 1"),
        (dict(learning_rate=-1e-3), ValueError, r"learning_rate=-0.001 must be a finite number > 0"),
        (dict(batch_size=64, buffer_size=32), ValueError, r"batch_size=64 must not exceed buffer_size=32"),
        (dict(obs_type="pixels"), ValueError, r"obs_type='pixels' must be one of"),
        (dict(height=3), ValueError, r"height=3 must be an int in"),
        (dict(seed=-1), ValueError, r"seed=-1 must be a seed"),
        (dict(learning_starts=-5), ValueError, r"learning_starts=-5 must be an int >= 0"),
    ],
)
def test_bad_settings_raise_naming_parameter_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        LoopSettings(**kwargs)


def test_bad_run_budgets_raise():
    agent = NaiveDQN(LoopSettings(**SMALL))
    with pytest.raises(ValueError, match="exactly one of steps=None and seconds=None"):
        agent.run(progress=False)
    with pytest.raises(ValueError, match="exactly one of steps=10 and seconds=1"):
        agent.run(steps=10, seconds=1, progress=False)
    with pytest.raises(ValueError, match="steps=0 must be an int >= 1"):
        agent.run(steps=0, progress=False)
    with pytest.raises(ValueError, match="seconds=-1 must be a finite number > 0"):
        agent.run(seconds=-1, progress=False)
    with pytest.raises(ValueError, match="episodes=0 must be an int >= 1"):
        evaluate_random(0)
    with pytest.raises(TypeError, match="q_network="):
        evaluate("not a network")


def test_evaluation_is_seeded():
    assert np.array_equal(evaluate_random(50, seed=3), evaluate_random(50, seed=3))
    network = NaiveDQN(LoopSettings(**SMALL)).q_network
    first = evaluate(network, 5, seed=3, height=6, width=6)
    assert np.array_equal(first, evaluate(network, 5, seed=3, height=6, width=6))


def test_the_naive_dqn_beats_random_play_on_a_small_grid():
    random_score = evaluate_random(1000, seed=0, height=6, width=6).mean()
    # Seeds 0 to 5 all scored 12 to 14.5 here (random play: 0.2), so the margin is wide.
    settings = LoopSettings(height=6, width=6, num_threads=1, inference_mode=True, array_batches=True,
                            learning_starts=300, exploration_steps=2_000, seed=0)
    result = run_naive_dqn(settings, steps=3_000, progress=False)
    score = evaluate(result.q_network, 50, seed=1, height=6, width=6).mean()
    assert score > random_score + 3.0, (score, random_score)


def test_score_gap_counts_standard_errors():
    from rlgpu_helpers.learn.evaluate import score_gap, standard_error

    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.0, 4.0, 5.0, 6.0])
    assert standard_error(a) == pytest.approx(np.std(a, ddof=1) / 2)
    gap, in_errors = score_gap(a, b)
    assert gap == 2.0 and in_errors == pytest.approx(2.0 / np.hypot(standard_error(a), standard_error(b)))
    assert score_gap([1.0, 1.0], [1.0, 1.0]) == (0.0, 0.0)
    assert score_gap([1.0, 1.0], [2.0, 2.0]) == (1.0, float("inf"))
    with pytest.raises(ValueError, match="at least 2 scores"):
        standard_error([3.0])
