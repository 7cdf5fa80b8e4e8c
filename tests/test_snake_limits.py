"""Every env takes the same limits: the same seeds, truncation limits that no counter wraps, and a
num_envs that must fit in memory, refused before anything is allocated."""

import pytest
import torch

from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.env import SnakeEnv
from rlgpu_helpers.snake.naive_tensor import NaiveTensorSnake
from rlgpu_helpers.snake.rules import SnakeState
from rlgpu_helpers.snake.vec import VecSnake, bytes_per_game

ENVS = {"SnakeEnv": lambda **kw: SnakeEnv(**kw), "VecSnake": lambda **kw: VecSnake(2, **kw),
        "NaiveTensorSnake": lambda **kw: NaiveTensorSnake(2, **kw)}


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("seed, error, message", [
    (True, TypeError, "seed=True must be an int seed, not bool"),
    (2**64, ValueError, r"seed=18446744073709551616 must be a seed in \[0, 2\*\*64\)"),
    (-1, ValueError, r"seed=-1 must be a seed in \[0, 2\*\*64\)"),
    (1.0, TypeError, "seed=1.0 must be an int seed, not float"),
])
def test_every_env_refuses_the_same_seeds(env, seed, error, message):
    game = ENVS[env]()
    game.reset(seed=2**64 - 1)  # the largest seed is fine everywhere
    with pytest.raises(error, match=message):
        game.reset(seed=seed)


@pytest.mark.parametrize("env", ENVS)
def test_every_env_bounds_the_truncation_limit_alike(env):
    with pytest.raises(ValueError, match=r"max_steps_without_food=4294967301 must be an int in \[1, 2147483647\]"):
        ENVS[env](max_steps_without_food=2**32 + 5)
    assert ENVS[env](max_steps_without_food=rules.MAX_STEPS_LIMIT).max_steps_without_food == 2**31 - 1


def test_at_the_largest_limit_both_envs_truncate_at_the_same_step():
    """No int32 counter wraps: steps_since_food reaches the limit, episode steps pass 2**31."""
    limit = rules.MAX_STEPS_LIMIT
    state = SnakeState(rules.start_body(10, 10), rules.RIGHT, (0, 0), steps_since_food=limit - 2)
    single, vec = SnakeEnv(max_steps_without_food=limit), VecSnake(2, max_steps_without_food=limit)
    single.reset(seed=0)
    vec.reset(seed=0)
    single.set_state(state)
    vec.set_state(0, state)
    vec._episode_steps.fill_(2**31 - 1)  # an episode as long as int32 counts
    straight = torch.zeros(2, dtype=torch.int64)
    for truncated_now in (False, True):
        _, _, _, truncated, _ = single.step(0)
        _, _, _, vec_truncated, info = vec.step(straight)
        assert truncated == bool(vec_truncated[0]) == truncated_now
    assert int(info["episode"]["length"][0]) == 2**31 + 1


def test_a_state_saved_with_int32_episode_steps_still_loads():
    env = VecSnake(4, seed=1)
    for actions in torch.randint(0, 3, (30, 4), generator=torch.Generator().manual_seed(0)):
        env.step(actions)
    state = env.state_dict()
    state["episode_steps"] = state["episode_steps"].to(torch.int32)  # as older versions saved it
    other = VecSnake(4, seed=2)
    other.load_state_dict(state)
    assert other.state_dict()["episode_steps"].dtype == torch.int64
    assert torch.equal(other.state_dict()["episode_steps"], env.state_dict()["episode_steps"])


@pytest.mark.parametrize("env", [VecSnake, NaiveTensorSnake])
@pytest.mark.parametrize("obs_type", rules.FIRST_OBS_TYPES)
def test_a_num_envs_that_cannot_fit_is_refused_naming_the_bytes(env, obs_type):
    with pytest.raises(ValueError, match=r"num_envs=1000000000000 needs [\d,]+ bytes \([\d,.]+ GiB\) of cpu memory, "
                                         r"but [\d,]+ bytes \([\d,.]+ GiB\) are available"):
        env(10**12, obs_type=obs_type)


def test_the_estimate_covers_what_a_vec_snake_holds():
    env = VecSnake(256, obs_type="grid")
    held = sum(t.nbytes for t in env.state_dict().values()) + env.observe().nbytes
    assert held <= 256 * bytes_per_game(10, 10, "grid") <= 4 * held
