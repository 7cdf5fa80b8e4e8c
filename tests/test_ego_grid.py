"""The "ego_grid" observation: the board seen from the head, heading up, the same in every env."""

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_vec_snake import random_state, run_lockstep

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.env import SnakeEnv
from rlgpu_helpers.snake.rules import DOWN, LEFT, RIGHT, UP, SnakeState
from rlgpu_helpers.snake.vec import VecSnake

# Where each action takes the head on the observation, written from the issue: straight is up,
# right is right, left is left.
MOVE_ON_OBS = {0: (-1, 0), 1: (0, 1), 2: (0, -1)}


@pytest.mark.parametrize("height, width, size", [(4, 4, 7), (10, 10, 19), (5, 9, 17), (12, 6, 23)])
def test_shape_holds_the_board_whichever_way_the_snake_faces(height, width, size):
    assert rules.ego_size(height, width) == size
    assert rules.observation_shape("ego_grid", height, width) == (3, size, size)
    assert SnakeEnv(height, width, obs_type="ego_grid").observation_space.shape == (3, size, size)
    assert VecSnake(2, height, width, obs_type="ego_grid", seed=0).single_observation_space.shape == (3, size, size)


def test_heading_right_on_a_4x4_board_written_out_by_hand():
    # Head (1, 1) heading right, neck (1, 0), tail (0, 0); food (1, 3), two cells straight ahead.
    state = SnakeState(((1, 1), (1, 0), (0, 0)), RIGHT, (1, 3))
    obs = rules.observe(state, 4, 4, "ego_grid")
    body = np.zeros((7, 7), np.float32)
    body[3, 3], body[4, 3], body[4, 2] = 1.0, 2 / 3, 1 / 3  # neck behind (below), tail behind-left
    food = np.zeros((7, 7), np.float32)
    food[1, 3] = 1.0  # directly above the centre, two rows up
    # The board: 2 cells ahead (up), 1 behind (down), 1 to the snake's left (row 0), 2 to its right.
    off_board = np.ones((7, 7), np.float32)
    off_board[1:5, 2:6] = 0.0
    np.testing.assert_array_equal(obs, np.stack([body, food, off_board]))
    env = VecSnake(3, 4, 4, obs_type="ego_grid", seed=0)
    env.set_state(1, state)
    np.testing.assert_array_equal(env.observe()[1].numpy(), obs)


@pytest.mark.parametrize("direction, body, food", [
    (UP, ((3, 3), (4, 3), (5, 3)), (1, 4)),
    (RIGHT, ((3, 3), (3, 2), (3, 1)), (4, 5)),
    (DOWN, ((3, 3), (2, 3), (1, 3)), (5, 2)),
    (LEFT, ((3, 3), (3, 4), (3, 5)), (2, 1)),
])
def test_every_heading_points_up_and_the_snakes_right_is_right(direction, body, food):
    # Food two cells ahead and one to the snake's right, worked out on the board for each heading.
    state = SnakeState(body, direction, food)
    obs = rules.observe(state, 7, 7, "ego_grid")
    c = 6  # the centre of the 13 x 13 window
    assert obs[1, c - 2, c + 1] == 1.0 and obs[1].sum() == 1.0
    assert (obs[0, c, c], obs[0, c + 1, c], obs[0, c + 2, c]) == (1.0, np.float32(2 / 3), np.float32(1 / 3))
    assert obs[0].sum() == pytest.approx(2.0)
    # The head is at the centre of the 7 x 7 board, so the board fills the middle whatever the heading.
    assert obs[2, c - 3 : c + 4, c - 3 : c + 4].sum() == 0 and obs[2].sum() == 13 * 13 - 49


@settings(max_examples=60)
@given(height=st.integers(4, 9), width=st.integers(4, 9), seed=st.integers(0, 2**32 - 1))
def test_the_cell_an_action_enters_is_where_the_action_points_on_the_observation(height, width, seed):
    """What the observation shows at up / right / left of the centre is what straight / right / left meets."""
    state = random_state(random.Random(seed), height, width, height * width)
    obs = rules.observe(state, height, width, "ego_grid")
    c = rules.ego_size(height, width) // 2
    tail_value = np.float32(1 / state.length)
    for action, (d_row, d_col) in MOVE_ON_OBS.items():
        body, food, off_board = obs[:, c + d_row, c + d_col]
        env = SnakeEnv(height, width, obs_type="ego_grid")
        env.reset(seed=0)
        env.set_state(state)
        _, reward, terminated, _, _ = env.step(action)
        dies = off_board == 1.0 or (body > 0 and body != tail_value)
        assert (reward == -1.0) == dies and terminated >= dies
        assert (reward == 1.0) == (food == 1.0)


@settings(max_examples=40)
@given(height=st.integers(4, 12), width=st.integers(4, 12), seed=st.integers(0, 2**32 - 1))
def test_vec_snake_equals_the_rules_on_random_states(height, width, seed):
    rng = random.Random(seed)
    env = VecSnake(8, height, width, obs_type="ego_grid", seed=1)
    states = [random_state(rng, height, width, env.max_steps_without_food) for _ in range(8)]
    for i, state in enumerate(states):
        env.set_state(i, state)
    obs = env.observe().numpy()
    for i, state in enumerate(states):
        np.testing.assert_array_equal(obs[i], rules.observe(state, height, width, "ego_grid"))


@pytest.mark.parametrize("height, width", [(5, 8), (8, 4), (6, 6)])
def test_vec_snake_equals_snake_env_after_steps_deaths_truncations_and_restarts(height, width):
    """The lockstep run of ``test_vec_snake`` on non-square boards: every observation, final
    observations of finished games and first observations of restarted ones included."""
    seen = run_lockstep("ego_grid", height=height, width=width, num_envs=16, steps=250, seed=height + width)
    for kind in ("ate", "wall", "body", "truncated"):
        assert seen[kind] > 0, (kind, seen)


def test_a_step_makes_no_host_sync():
    env = VecSnake(64, 7, 5, obs_type="ego_grid", seed=0)
    actions = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(0))
    assert audit_syncs(lambda: env.step(actions), "cpu").total == 0
