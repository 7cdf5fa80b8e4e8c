"""Agent files: save, load (also from checkpoints), greedy play, and clear errors."""

import dataclasses
import itertools
import json

import pytest
import torch

from rlgpu_helpers.core.files import data_dir
from rlgpu_helpers.learn.agents import Agent, load_agent, play_episode, save_agent
from rlgpu_helpers.learn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rlgpu_helpers.learn.training import make_learner, train
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.rules import SnakeState
from rlgpu_helpers.snake.vec import VecSnake


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_an_agent_file_holds_the_same_network(tmp_path, algorithm):
    learner = make_learner(algorithm, height=5, width=5, num_envs=4, hidden=8)
    path = save_agent(tmp_path / "agent.pt", learner, extra={"note": "test"})
    agent = load_agent(path)
    obs = torch.rand(7, 11)
    want = learner.model(obs)
    got = agent.model(obs)
    want, got = (want[0], got[0]) if algorithm == "ppo" else (want, got)
    torch.testing.assert_close(want, got)
    assert agent.algorithm == algorithm and agent.config["height"] == 5


def test_a_training_checkpoint_loads_as_an_agent(tmp_path):
    result = train(make_learner("ppo", height=5, width=5, num_envs=8, num_steps=8, hidden=8),
                   steps=64, out_dir=tmp_path, progress=False)
    agent = load_agent(tmp_path)
    for a, b in zip(result.learner.model.parameters(), agent.model.parameters()):
        assert torch.equal(a, b)


def test_play_episode_follows_the_greedy_policy_until_the_game_ends():
    agent = untrained_agent()
    states, score, won = play_episode(agent, seed=3)
    assert states[0] == VecSnake(1, 5, 5, seed=3).get_state(0)  # the first game drawn from the seed
    assert score == states[-1].score and not won
    # Each state is one move of the previous one (the games are valid all the way).
    for a, b in itertools.pairwise(states):
        assert b.body[1:] == a.body[: len(b.body) - 1]


def test_a_won_game_ends_with_the_full_board(monkeypatch):
    # Put the agent's game one move from filling a 4x4 board; the serpentine's last cell is food.
    path = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0),
            (2, 0), (2, 1), (2, 2), (2, 3), (3, 3), (3, 2), (3, 1), (3, 0)]
    almost = SnakeState(tuple(reversed(path[:-1])), rules.LEFT, food=(3, 0), steps_since_food=0)
    agent = untrained_agent(height=4, width=4)
    from rlgpu_helpers.learn import agents

    class Preset(VecSnake):
        def reset(self, **kwargs):
            out = super().reset(**kwargs)
            self.set_state(0, almost)
            return self.observe(), out[1]

    monkeypatch.setattr(agents, "VecSnake", Preset)
    monkeypatch.setattr(agent, "greedy_actions", lambda obs: torch.zeros(1, dtype=torch.int64))
    states, score, won = play_episode(agent)
    assert won and score == 13
    assert len(states[-1].body) == 16 and states[-1].food is None


def untrained_agent(height=5, width=5):
    learner = make_learner("ppo", height=height, width=width, num_envs=4, hidden=8)
    return Agent("ppo", dataclasses.asdict(learner.config), learner.model.eval())


def test_unknown_files_raise_clear_errors(tmp_path):
    path = save_checkpoint(tmp_path / "other.pt", {"format": "something else"})
    with pytest.raises(CheckpointError, match="neither an agent file nor a training checkpoint"):
        load_agent(path)
    learner = make_learner("ppo", height=5, width=5, num_envs=4, hidden=8)
    agent_path = save_agent(tmp_path / "agent.pt", learner)
    state = load_checkpoint(agent_path)
    state["config"]["hidden"] = 32  # weights no longer fit the described network
    save_checkpoint(agent_path, state)
    with pytest.raises(CheckpointError, match=r"model\['actor.0.0.weight'\] has shape \(8, 11\), expected \(32, 11\)"):
        load_agent(agent_path)


@pytest.mark.parametrize("edit, message", [
    (lambda state: state["config"].pop("hidden"), r"config is missing \['hidden'\]"),
    (lambda state: state.pop("config"), "config must be a dict, not NoneType"),
    (lambda state: state["config"].update(height="5"), "height='5' must be an int"),
    (lambda state: state.pop("model"), "model must be a dict of tensors, not NoneType"),
    (lambda state: state["model"]["actor.1.bias"].fill_(float("nan")), r"model\['actor.1.bias'\] holds values that are not finite"),
])
def test_a_broken_agent_file_is_a_checkpoint_error_naming_the_field(tmp_path, edit, message):
    learner = make_learner("ppo", height=5, width=5, num_envs=4, hidden=8)
    path = save_agent(tmp_path / "agent.pt", learner)
    state = load_checkpoint(path)
    edit(state)
    save_checkpoint(path, state)
    with pytest.raises(CheckpointError, match=message):
        load_agent(path)


def test_every_agent_on_file_loads_and_names_the_command_machine_and_date_that_made_it():
    paths = sorted((data_dir() / "agents").glob("*.pt"))
    assert paths
    for path in paths:
        agent = load_agent(path)
        summary = json.loads(path.with_suffix(".json").read_text())
        assert summary["command"].startswith("python -m rlgpu_helpers "), path.name
        assert summary["machine"]["torch"] and len(summary["date"]) == 10, path.name
        assert summary["config"]["obs_type"] == agent.config["obs_type"], path.name
