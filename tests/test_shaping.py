"""Potential-based shaping (learn.shaping): the food's distance read from the observation, the telescoping sum
that leaves every policy's ranking as it was, and PPO's use of it."""

import pytest
import torch

from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.shaping import food_distance, food_potential, shaping_rewards
from rlgpu_helpers.snake.vec import VecSnake


@pytest.mark.parametrize("obs_type", ["ego_grid", "grid"])
def test_the_distance_read_from_the_image_is_the_head_to_food_distance_of_the_state(obs_type):
    env = VecSnake(64, 6, 7, obs_type=obs_type, seed=3)
    env.reset(seed=3)
    moves = torch.randint(0, 3, (12, 64), generator=torch.Generator().manual_seed(3))
    for step in range(12):
        obs, *_ = env.step(moves[step])
        distance, has_food = food_distance(obs, obs_type)
        for game in range(0, 64, 7):
            state = env.get_state(game)
            (head_row, head_col), (food_row, food_col) = state.body[0], state.food
            assert has_food[game] and distance[game] == abs(head_row - food_row) + abs(head_col - food_col)
    no_food = obs.clone()
    no_food[:, 1 if obs_type == "ego_grid" else 2] = 0.0  # a full board has no food: potential 0
    assert not food_distance(no_food, obs_type)[1].any() and torch.equal(food_potential(no_food, obs_type, 6, 7),
                                                                         torch.zeros(64))


def test_the_shaping_of_a_whole_game_adds_up_to_minus_the_start_potential():
    """sum_t gamma^t F_t = -phi(s_0) for every game that ended: the shaping cannot change which policy is best."""
    gamma, games = 0.9, 128
    env = VecSnake(games, 5, 5, obs_type="ego_grid", seed=1)
    obs, _ = env.reset(seed=1)
    start = food_potential(obs, "ego_grid", 5, 5)
    total, discount = torch.zeros(games, dtype=torch.float64), torch.ones(games, dtype=torch.float64)
    over = torch.zeros(games, dtype=torch.bool)
    moves = torch.randint(0, 3, (200, games), generator=torch.Generator().manual_seed(1))
    for step in range(200):
        next_obs, _, terminated, truncated, info = env.step(moves[step])
        ended = terminated | truncated
        reached = torch.where(ended[:, None, None, None], info["final_obs"], next_obs)
        shaped = shaping_rewards(obs, reached, ended, gamma, "ego_grid", 5, 5).double()
        total += torch.where(over, 0.0, discount * shaped)
        discount *= gamma
        over |= ended
        obs = next_obs
    assert over.all()
    torch.testing.assert_close(total, -start.double(), rtol=0, atol=1e-6)


def test_ppo_adds_the_shaping_before_it_scales_the_rewards_and_refuses_an_observation_without_a_board():
    config = dict(obs_type="ego_grid", height=6, width=6, num_envs=32, num_steps=8, hidden=8, net="mlp",
                  bootstrap_truncated=False, reward_scale=0.5, gamma=0.9)
    plain = PPO(PPOConfig(**config))  # each learner seeds torch as it starts: the same first step
    plain.collect()
    shaped = PPO(PPOConfig(**config, food_shaping=0.3))
    shaped.collect()
    assert torch.equal(plain.actions[0], shaped.actions[0])
    alive = ~plain.dones[0].bool()  # their step 0 led to step 1's observation
    step0 = shaping_rewards(plain.obs[0], plain.obs[1], torch.zeros_like(alive), 0.9, "ego_grid", 6, 6)
    torch.testing.assert_close(shaped.rewards[0][alive], plain.rewards[0][alive] + 0.5 * 0.3 * step0[alive])
    with pytest.raises(ValueError, match="food_shaping=0.3 reads the food's distance from an image: it needs obs_type"):
        PPOConfig(food_shaping=0.3)
    with pytest.raises(ValueError, match="food_shaping=-1.0 must be a finite number >= 0"):
        PPOConfig(obs_type="grid", food_shaping=-1.0)
