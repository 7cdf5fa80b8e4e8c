"""CPU vector envs of SnakeEnv: seeding, same-step autoreset, async with its sync fallback."""

import gc
import math
import multiprocessing.process
import pickle
import time

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rlgpu_helpers.snake import cpu_vector as vector
from rlgpu_helpers.snake.cpu_vector import BusyWaitWrapper, make_cpu_vector_env
from rlgpu_helpers.snake.env import SnakeEnv


def rollout(envs, steps=60, seed=None):
    """Observations, rewards and ends of a fixed random action sequence."""
    actions = np.random.default_rng(0).integers(0, 3, (steps, envs.num_envs))
    obs, _ = envs.reset(seed=seed)
    record = [obs]
    for action in actions:
        obs, reward, terminated, truncated, _ = envs.step(action)
        record += [obs, reward, terminated, truncated]
    envs.close()
    return record


def assert_same(record_a, record_b):
    assert len(record_a) == len(record_b)
    for a, b in zip(record_a, record_b):
        np.testing.assert_array_equal(a, b)


def test_sync_vector_env_spaces_and_metadata():
    envs = make_cpu_vector_env(3, height=6, width=7, obs_type="grid")
    assert isinstance(envs, SyncVectorEnv) and envs.num_envs == 3
    assert envs.single_observation_space == SnakeEnv(6, 7, obs_type="grid").observation_space
    assert envs.observation_space.shape == (3, 3, 6, 7)
    assert envs.action_space.shape == (3,)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    next_step = make_cpu_vector_env(2, autoreset_mode=AutoresetMode.NEXT_STEP)
    assert next_step.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP


def test_seed_argument_equals_seeding_the_first_reset():
    seeded = rollout(make_cpu_vector_env(4, seed=11, height=6, width=6))
    assert_same(seeded, rollout(make_cpu_vector_env(4, height=6, width=6), seed=11))
    other = rollout(make_cpu_vector_env(4, seed=12, height=6, width=6))
    assert any(not np.array_equal(a, b) for a, b in zip(seeded, other))


def test_same_step_autoreset_returns_the_next_episode_and_the_final_observation():
    envs = make_cpu_vector_env(2, seed=0, height=4, width=4)
    envs.reset()
    for _ in range(50):
        obs, reward, terminated, truncated, info = envs.step(np.zeros(2, dtype=np.int64))
        if terminated.any():
            break
    ended = np.flatnonzero(terminated)[0]  # going straight hits a wall within a few steps
    assert reward[ended] == -1.0
    assert info["_final_obs"][ended] and info["final_info"]["length"][ended] == 3
    assert info["length"][ended] == 3 and info["score"][ended] == 0
    start = envs.envs[ended].get_state()
    assert start.body == ((2, 2), (2, 1), (2, 0)) and start.steps_since_food == 0
    assert not np.array_equal(info["final_obs"][ended], obs[ended])
    envs.close()


def test_async_steps_the_same_games_in_subprocesses():
    envs = make_cpu_vector_env(2, kind="async", seed=5, obs_type="grid", height=5, width=5)
    assert isinstance(envs, AsyncVectorEnv)
    assert_same(rollout(envs), rollout(make_cpu_vector_env(2, seed=5, obs_type="grid", height=5, width=5)))


def test_async_falls_back_to_sync_and_says_why_once(monkeypatch, capfd):
    def refuse_to_start(process):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse_to_start)
    monkeypatch.setattr(vector, "_async_fallback_reported", False)
    first = make_cpu_vector_env(2, kind="async", seed=1)
    second = make_cpu_vector_env(2, kind="async", seed=1)
    assert isinstance(first, SyncVectorEnv) and isinstance(second, SyncVectorEnv)
    gc.collect()  # the half-built AsyncVectorEnv must go quietly too
    out, err = capfd.readouterr()
    assert out.count("using SyncVectorEnv instead") == 1
    assert "[Errno 11] Resource temporarily unavailable" in out
    assert err == ""
    assert_same(rollout(first), rollout(make_cpu_vector_env(2, seed=1)))


def test_env_factories_pickle_for_subprocesses():
    envs = make_cpu_vector_env(2, seed=3, step_cost_s=1e-6, height=6, width=6)
    env = pickle.loads(pickle.dumps(envs.env_fns[1]))()
    assert isinstance(env, BusyWaitWrapper) and env.unwrapped.height == 6


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_envs": 0}, ValueError, "num_envs=0 must be an int >= 1"),
    ({"num_envs": 2.0}, TypeError, "num_envs=2.0 must be an int"),
    ({"num_envs": True}, TypeError, "num_envs=True must be an int"),
    ({"kind": "threads"}, ValueError, "kind='threads' must be one of"),
    ({"autoreset_mode": "same"}, TypeError, "autoreset_mode='same' must be a gymnasium AutoresetMode"),
    ({"seed": -1}, ValueError, "seed=-1 must be a seed in"),
    ({"seed": 2**64}, ValueError, "seed=18446744073709551616 must be a seed in"),
    ({"seed": 1.5}, TypeError, "seed=1.5 must be an int seed"),
    ({"step_cost_s": -0.1}, ValueError, "step_cost_s=-0.1 must be a finite number >= 0"),
    ({"step_cost_s": math.nan}, ValueError, "step_cost_s=nan must be a finite number >= 0"),
    ({"step_cost_s": "1ms"}, TypeError, "step_cost_s='1ms' must be a number"),
    ({"height": 3}, ValueError, r"height=3 must be an int in \[4, 64\]"),
    ({"kind": "async", "obs_type": "rgb"}, ValueError, "obs_type='rgb' must be one of"),
])
def test_bad_arguments_raise_naming_the_value(kwargs, error, message):
    arguments = {"num_envs": 2, **kwargs}
    with pytest.raises(error, match=message):
        make_cpu_vector_env(**arguments)


def test_busy_wait_spends_cpu_time_and_changes_nothing_else():
    cost = 0.01
    wrapped = BusyWaitWrapper(SnakeEnv(6, 6), cost)
    plain = SnakeEnv(6, 6)
    wrapped.reset(seed=4), plain.reset(seed=4)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for action in (0, 1, 0):
        step, plain_step = wrapped.step(action), plain.step(action)
        np.testing.assert_array_equal(step[0], plain_step[0])
        assert step[1:] == plain_step[1:]
    assert time.perf_counter() - wall_start >= 3 * cost
    # Burnt, not slept: a sleep takes well under a millisecond of CPU time. The wait spins on the wall clock,
    # so on a busy machine the process gets only its share of the 3 * cost (a third of it, once, under CI's load).
    assert time.process_time() - cpu_start >= 0.5 * cost
