"""Snake is left-right symmetric: mirrored games have mirrored observations, moves and the same rewards."""

import random
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_vec_snake import random_state

from rlgpu_helpers.learn.nets import QNetwork
from rlgpu_helpers.learn.symmetry import (
    check_feature_mirror,
    feature_mirror_order,
    mirror_actions,
    mirror_logits,
    mirror_observation,
    random_states,
    symmetric_logits,
)
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.env import SnakeEnv
from rlgpu_helpers.snake.rules import LEFT, RIGHT, UP, SnakeState
from rlgpu_helpers.snake.vec import VecSnake


def test_mirror_state_reflects_the_columns_and_swaps_right_and_left():
    state = SnakeState(((1, 3), (1, 2), (0, 2)), RIGHT, (3, 0), 5)
    assert rules.mirror_state(state, 4, 6) == SnakeState(((1, 2), (1, 3), (0, 3)), LEFT, (3, 5), 5)
    up = SnakeState(((1, 1), (2, 1), (3, 1)), UP, None)
    assert rules.mirror_state(up, 4, 4).direction == UP


def test_mirrored_actions_keep_straight_and_swap_right_and_left():
    assert rules.MIRRORED_ACTIONS == (0, 2, 1)
    assert [mirror_actions(a) for a in range(3)] == [0, 2, 1]
    assert torch.equal(mirror_actions(torch.tensor([0, 1, 2, 2])), torch.tensor([0, 2, 1, 1]))
    np.testing.assert_array_equal(mirror_actions(np.array([1, 0, 2])), [2, 0, 1])
    assert torch.equal(mirror_logits(torch.tensor([[0.5, 1.0, 2.0]])), torch.tensor([[0.5, 2.0, 1.0]]))


@settings(max_examples=60)
@given(height=st.integers(4, 10), width=st.integers(4, 10), seed=st.integers(0, 2**32 - 1),
       obs_type=st.sampled_from(rules.OBS_TYPES))
def test_the_mirror_image_of_a_state_shows_the_mirrored_observation(height, width, seed, obs_type):
    state = random_state(random.Random(seed), height, width, height * width)
    mirrored = rules.mirror_state(state, height, width)
    rules.validate_state(mirrored, height, width, height * width)  # a state of a real game
    assert rules.mirror_state(mirrored, height, width) == state
    obs = rules.observe(state, height, width, obs_type)
    np.testing.assert_array_equal(rules.observe(mirrored, height, width, obs_type), mirror_observation(obs, obs_type))
    np.testing.assert_array_equal(mirror_observation(mirror_observation(obs, obs_type), obs_type), obs)


@settings(max_examples=60)
@given(height=st.integers(4, 10), width=st.integers(4, 10), seed=st.integers(0, 2**32 - 1),
       actions=st.lists(st.integers(0, 2), min_size=1, max_size=40))
def test_the_mirrored_action_in_the_mirrored_game_gives_the_mirrored_next_state(height, width, seed, actions):
    state = random_state(random.Random(seed), height, width, height * width)
    game, mirror_game = SnakeEnv(height, width), SnakeEnv(height, width)
    game.reset(seed=0), mirror_game.reset(seed=0)
    game.set_state(state)
    mirror_game.set_state(rules.mirror_state(state, height, width))
    for action in actions:
        _, reward, terminated, truncated, _ = game.step(action)
        _, m_reward, m_terminated, m_truncated, _ = mirror_game.step(mirror_actions(action))
        assert (m_reward, m_terminated, m_truncated) == (reward, terminated, truncated)
        after, m_after = game.get_state(), mirror_game.get_state()
        if reward > 0 and after.food is not None:
            # The new food is random in each game: put the mirror of this game's food in the other.
            m_after = SnakeState(m_after.body, m_after.direction, (after.food[0], width - 1 - after.food[1]),
                                 m_after.steps_since_food)
            mirror_game.set_state(m_after)
        assert m_after == rules.mirror_state(after, height, width)
        if terminated or truncated:
            break


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_batches_of_tensors_mirror_like_single_arrays(obs_type):
    env = VecSnake(8, 5, 7, obs_type=obs_type, seed=2)
    generator = torch.Generator().manual_seed(3)
    for _ in range(10):
        obs = env.step(torch.randint(0, 3, (8,), generator=generator))[0]
    mirrored = mirror_observation(obs, obs_type)
    assert isinstance(mirrored, torch.Tensor) and mirrored.shape == obs.shape
    for i in range(8):
        np.testing.assert_array_equal(mirrored[i].numpy(), mirror_observation(obs[i].numpy(), obs_type))


@pytest.mark.parametrize("obs_type", ["ego_grid", "features"])
def test_a_symmetrized_network_gives_the_mirrored_probabilities_for_the_mirrored_observation(obs_type):
    torch.manual_seed(0)
    net = QNetwork(rules.observation_shape(obs_type, 6, 6), hidden=32)
    env = VecSnake(32, 6, 6, obs_type=obs_type, seed=4)
    generator = torch.Generator().manual_seed(1)
    for _ in range(12):
        obs = env.step(torch.randint(0, 3, (32,), generator=generator))[0]
    mirrored_obs = mirror_observation(obs, obs_type)
    with torch.no_grad():
        probs = symmetric_logits(net, obs, obs_type).softmax(-1)
        mirrored = mirror_logits(symmetric_logits(net, mirrored_obs, obs_type).softmax(-1))
        raw, raw_mirrored = net(obs).softmax(-1), mirror_logits(net(mirrored_obs).softmax(-1))
    torch.testing.assert_close(mirrored, probs, rtol=0, atol=1e-6)
    assert (raw - raw_mirrored).abs().max() > 1e-3  # the network alone is not symmetric


def test_bad_input_names_the_obs_type_or_the_shape():
    with pytest.raises(ValueError, match="obs_type='pixels' must be one of"):
        mirror_observation(np.zeros(11, np.float32), "pixels")
    with pytest.raises(ValueError, match=r"shape \(11,\): a 'ego_grid' observation is \(\.\.\., 3, rows, cols\)"):
        mirror_observation(np.zeros(11, np.float32), "ego_grid")
    with pytest.raises(ValueError, match=r"shape \(3, 4, 4\): a 'features' observation is \(\.\.\., 11\)"):
        mirror_observation(np.zeros((3, 4, 4), np.float32), "features")


def test_the_exercise_checker_passes_the_mirror_and_fails_each_wrong_one_with_its_first_wrong_state():
    """Notebook 12's exercise 6: one state of one heading let a mirror that also swaps up and down pass."""
    states = random_states(games=32, steps=20, seed=1)
    assert {state.direction for state in states} == {0, 1, 2, 3} and len(states) > 300
    right = list(feature_mirror_order("features"))
    assert check_feature_mirror(lambda obs: obs[right], states).endswith(
        f"right on all {len(states)} states (headings [0, 1, 2, 3])")
    up_and_down_too = [0, 2, 1, 5, 6, 3, 4, 7, 10, 9, 8]
    verdict = check_feature_mirror(lambda obs: obs[up_and_down_too], states)
    assert " wrong on " in verdict and re.search(r"the first, heading [02]:", verdict)  # up or down shows it
    assert " wrong on " in check_feature_mirror(lambda obs: obs, states)
    assert " wrong on " in check_feature_mirror(lambda obs: obs[:10], states)  # a wrong shape, no exception
    with pytest.raises(TypeError, match="fn=3 is not callable"):
        check_feature_mirror(3, states)
