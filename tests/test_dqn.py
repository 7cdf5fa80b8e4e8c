"""DQN on VecSnake: config checks, replay contents, and real learning."""

import pytest
import torch
from test_ppo import random_policy_mean_score

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.learn.dqn import DQN, DQNConfig
from rlgpu_helpers.learn.training import make_learner, train
from rlgpu_helpers.replay import KINDS


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), "batch_size=0 must be an int >= 1"),
        (dict(num_envs=64, buffer_size=32), "must hold at least one vector step"),
        (dict(eps_end=1.5), r"eps_end=1.5 must be a finite number >= 0 and <= 1"),
        (dict(learning_starts=-1), "learning_starts=-1 must be an int >= 0"),
        (dict(learning_starts=2_000, buffer_size=1_000), "learning_starts=2000 must not exceed buffer_size=1000"),
        (dict(obs_type="rgb"), "obs_type='rgb' must be one of"),
        (dict(seed=-1), "seed=-1 must be a seed"),
        (dict(buffer="ring"), "buffer='ring' must be one of"),
        (dict(priority_alpha=-1.0), "priority_alpha=-1.0 must be a finite number >= 0"),
        (dict(priority_beta=2.0), "priority_beta=2.0 must be a finite number >= 0 and <= 1"),
        (dict(cuda_graphs=True), "cuda_graphs=True needs a CUDA GPU"),
    ],
)
def test_bad_config_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DQNConfig(**kwargs)
    with pytest.raises(TypeError, match="compile='yes' must be True or False"):
        DQNConfig(compile="yes")


def test_an_act_and_learn_step_makes_no_host_sync():
    dqn = DQN(DQNConfig(height=6, width=6, num_envs=32, learning_starts=64, batch_size=32, hidden=16,
                        target_update_every=1))
    for _ in range(3):
        dqn.act_and_learn(0.5)  # past learning_starts: the audited step learns and copies the target
    updates = dqn.updates
    report = audit_syncs(lambda: dqn.act_and_learn(0.5), "cpu", warmup=0)
    assert dqn.updates == updates + 1
    assert report.total == 0, report


def test_finished_games_store_their_real_last_observation():
    dqn = DQN(DQNConfig(height=4, width=4, num_envs=32, steps_per_iteration=20, learning_starts=100_000))
    dqn.iterate(budget_used=0.0)  # epsilon 1: random play, many deaths on a 4x4 grid
    stored = dqn.buffer.size
    assert stored == 32 * 20
    term = dqn.buffer.terminated[:stored].bool()
    assert term.any()
    # A game that died did not move: its stored next observation shows the same heading and
    # head as the observation it acted on (features 3..6 are the heading one-hot).
    obs, next_obs = dqn.buffer.obs[:stored][term], dqn.buffer.next_obs[:stored][term]
    actions = dqn.buffer.actions[:stored][term]
    straight = actions == 0
    assert torch.equal(obs[straight, 3:7], next_obs[straight, 3:7])


def test_epsilon_decays_over_the_exploration_fraction():
    dqn = DQN(DQNConfig(height=4, width=4, num_envs=4, eps_start=1.0, eps_end=0.1, exploration_fraction=0.5))
    assert dqn.epsilon(0.0) == 1.0
    assert dqn.epsilon(0.25) == pytest.approx(0.55)
    assert dqn.epsilon(0.5) == pytest.approx(0.1) and dqn.epsilon(1.0) == pytest.approx(0.1)


@pytest.mark.learning
def test_dqn_learns_to_beat_a_random_policy_on_a_small_grid():
    random_score = random_policy_mean_score(6, 6)
    learner = make_learner("dqn", height=6, width=6, num_envs=32, learning_starts=2_000, seed=1)
    result = train(learner, steps=150_000, progress=False)
    assert result.mean_score is not None
    assert result.mean_score > random_score + 2.0, (result.mean_score, random_score)


SMALL = dict(height=6, width=6, num_envs=16, learning_starts=64, batch_size=32, hidden=16, buffer_size=512)


@pytest.mark.parametrize("buffer", KINDS)
def test_every_buffer_kind_learns_and_resumes_from_its_state(buffer):
    dqn = DQN(DQNConfig(**SMALL, buffer=buffer))
    for _ in range(6):
        dqn.act_and_learn(0.5)
    assert len(dqn.buffer) == 6 * 16 and dqn.updates == 3
    resumed = DQN(DQNConfig(**SMALL, buffer=buffer))
    resumed.load_state_dict(dqn.state_dict())
    assert resumed.buffer.state_dict()["rewards"].tolist() == dqn.buffer.state_dict()["rewards"].tolist()


def test_prioritized_replay_weights_the_loss_and_updates_priorities_without_host_sync():
    dqn = DQN(DQNConfig(**SMALL, buffer="prioritized", priority_beta=0.4))
    for _ in range(5):
        dqn.act_and_learn(0.5)
    assert not torch.all(dqn.buffer.priorities[:len(dqn.buffer)] == 1.0)  # TD errors became priorities
    report = audit_syncs(lambda: dqn.act_and_learn(0.5), "cpu", warmup=0)
    assert report.total == 0, report
    dqn.iterate(budget_used=0.5)
    assert dqn.buffer.beta == pytest.approx(0.7)  # halfway from priority_beta to 1


def test_compiled_acting_and_td_update_match_eager():
    """The compiled update takes the same step on the same batch; compiled greedy acting picks the same actions."""
    settings = dict(height=6, width=6, num_envs=32, learning_starts=1_000, batch_size=32, hidden=16)
    eager, compiled = DQN(DQNConfig(**settings)), DQN(DQNConfig(**settings, compile=True))
    compiled.model.load_state_dict(eager.model.state_dict())
    compiled.target.load_state_dict(eager.target.state_dict())
    for _ in range(3):
        eager.act_and_learn(1.0)  # random moves fill the buffer (no learning yet)
    batch = eager.buffer.sample(32)
    args = (batch["obs"], batch["actions"], batch["rewards"], batch["next_obs"], batch["terminated"], eager._ones)
    for _ in range(3):  # Adam's first steps, with the compiled learner's graph-safe Adam
        want, got = eager._update_fn(*args), compiled._update_fn(*args)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(compiled.model.parameters(), eager.model.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    compiled._epsilon.fill_(0.0)
    with torch.no_grad():
        assert torch.equal(compiled._act_fn(batch["obs"], compiled._epsilon), eager.act(batch["obs"], 0.0))
    compiled.iterate(budget_used=0.5)  # and it trains: a new epsilon each iteration, no recompile needed
    assert compiled.env_steps == 32 * compiled.config.steps_per_iteration
