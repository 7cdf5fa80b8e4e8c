"""NaiveTensorSnake, the bad example of notebook 04: same rules as SnakeEnv with every sync switch,
and exactly the synchronizations each switch promises."""

import functools

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from test_vec_snake import run_lockstep

from rlgpu_helpers.gpu.sync import MULTINOMIAL, audit_syncs, multinomial_synchronizes
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.naive_tensor import (
    SYNC_FREE_CODE,
    SYNC_POINT_CODE,
    SYNC_POINTS,
    NaiveTensorSnake,
    agreement,
    check_syncs,
)
from rlgpu_helpers.snake.rules import SnakeState
from rlgpu_helpers.snake.vec import VecSnake

CONFIGS = [SYNC_POINTS, (), *((point,) for point in SYNC_POINTS)]
CONFIG_IDS = ["all four", "none", *SYNC_POINTS]


@pytest.mark.parametrize("obs_type", rules.FIRST_OBS_TYPES)
@pytest.mark.parametrize("syncs", [SYNC_POINTS, ()], ids=["all four", "none"])
def test_lockstep_with_snake_env(syncs, obs_type):
    seen = run_lockstep(obs_type, height=6, width=7, num_envs=16, steps=300, seed=11,
                        make_env=functools.partial(NaiveTensorSnake, syncs=syncs))
    assert seen["steps"] >= 4_800
    for kind in ("ate", "wall", "body", "truncated", "tail_chase"):
        assert seen[kind] > 0, (kind, seen)


@pytest.mark.parametrize("syncs", [(point,) for point in SYNC_POINTS], ids=SYNC_POINTS)
def test_lockstep_with_each_sync_point_alone(syncs):
    seen = run_lockstep("features", height=5, width=6, num_envs=12, steps=150, seed=3,
                        make_env=functools.partial(NaiveTensorSnake, syncs=syncs))
    assert seen["ate"] > 0 and seen["wall"] > 0 and seen["body"] > 0


def test_spaces_and_conventions_match_vec_snake():
    env = NaiveTensorSnake(5, 6, 7, obs_type="grid", seed=0)
    assert env.num_envs == 5 and env.single_observation_space.shape == (3, 6, 7)
    assert env.observation_space.shape == (5, 3, 6, 7) and env.single_action_space.n == 3
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, info = env.reset(seed=1)
    assert obs.dtype == torch.float32 and obs.shape == (5, 3, 6, 7) and info == {}
    obs, reward, terminated, truncated, info = env.step(torch.zeros(5, dtype=torch.int64))
    assert reward.dtype == torch.float32 and terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert info["final_obs"].shape == obs.shape and info["_final_obs"].dtype == torch.bool
    assert set(info["episode"]) == {"score", "length", "won"}


@pytest.mark.parametrize("syncs", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("obs_type", rules.FIRST_OBS_TYPES)
def test_every_observation_equals_one_built_from_the_state(syncs, obs_type):
    env = NaiveTensorSnake(24, 5, 5, obs_type=obs_type, seed=2, syncs=syncs)
    actions = torch.randint(0, 3, (150, 24), generator=torch.Generator().manual_seed(4))
    restarts = 0
    for a in actions:
        obs, _, terminated, truncated, _ = env.step(a)
        restarts += int((terminated | truncated).sum())
        for i in range(24):
            state = env.get_state(i)
            assert state.food not in state.body
            np.testing.assert_array_equal(obs[i].numpy(), rules.observe(state, 5, 5, obs_type))
    assert restarts > 30


@pytest.mark.parametrize("syncs", [SYNC_POINTS, ()], ids=["all four", "none"])
@pytest.mark.parametrize("obs_type", rules.FIRST_OBS_TYPES)
def test_filling_the_board_wins_and_restarts(syncs, obs_type):
    path = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0),
            (2, 0), (2, 1), (2, 2), (2, 3), (3, 3), (3, 2), (3, 1), (3, 0)]
    state = SnakeState(tuple(reversed(path[:-1])), rules.LEFT, food=(3, 0), steps_since_food=4)
    env = NaiveTensorSnake(3, 4, 4, obs_type=obs_type, seed=0, syncs=syncs)
    env.set_state(1, state)
    _, reward, terminated, truncated, info = env.step(torch.tensor([0, 0, 0]))
    assert reward[1].item() == 1.0 and terminated[1].item() and not truncated[1].item()
    assert info["episode"]["won"][1].item() and info["episode"]["score"][1].item() == 13
    won = SnakeState(tuple(reversed(path)), rules.LEFT, food=None, steps_since_food=0)
    np.testing.assert_array_equal(info["final_obs"][1].numpy(), rules.observe(won, 4, 4, obs_type))
    assert env.get_state(1).body == rules.start_body(4, 4)


@pytest.mark.parametrize("syncs", [("nonzero_food",), ()], ids=["multinomial", "argmax"])
def test_food_is_uniform_over_the_empty_cells(syncs):
    state = SnakeState(((1, 1), (1, 0), (0, 0)), rules.RIGHT, food=(1, 2), steps_since_food=0)
    n = 12_000
    env = NaiveTensorSnake(n, 4, 4, seed=7, syncs=syncs)
    for i in range(n):
        env.set_state(i, state)
    env.step(torch.zeros(n, dtype=torch.int64))
    food = env._food.numpy()
    counts = np.bincount(food[:, 0] * 4 + food[:, 1], minlength=16)
    occupied = [r * 4 + c for r, c in ((1, 2), (1, 1), (1, 0), (0, 0))]
    assert counts[occupied].sum() == 0
    empty = np.delete(counts, occupied)
    expected = n / 12
    assert ((empty - expected) ** 2 / expected).sum() < 31.3  # chi-square, 11 degrees of freedom, 99.9%


@pytest.mark.parametrize("syncs", CONFIGS, ids=CONFIG_IDS)
def test_the_same_seed_gives_the_same_games(syncs):
    def play(seed):
        env = NaiveTensorSnake(16, 6, 6, seed=seed, syncs=syncs)
        actions = torch.randint(0, 3, (80, 16), generator=torch.Generator().manual_seed(0))
        return [env.step(a)[0] for a in actions] + [env.reset(seed=seed)[0]]
    first, again, other = play(5), play(5), play(6)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


EXPECTED = {
    (): set(),
    ("mask_reset",): {"boolean-mask assignment x[mask] = tensor"},
    ("if_any",): {"bool(tensor), e.g. an if on a tensor"},
    ("nonzero_food",): {"nonzero (its output size depends on the data)"} | (
        {MULTINOMIAL} if multinomial_synchronizes() else set()),
    ("item_logging",): {"Tensor.item()"},
}


@pytest.mark.parametrize("syncs", CONFIGS, ids=CONFIG_IDS)
def test_each_switch_makes_exactly_its_own_synchronizations(syncs):
    env = NaiveTensorSnake(128, 6, 6, seed=0, syncs=syncs)
    actions = torch.randint(0, 3, (10, 128), generator=torch.Generator().manual_seed(1))
    env.step(actions[0])
    report = audit_syncs(lambda: [env.step(a) for a in actions[1:]], "cpu")
    expected = set().union(*(EXPECTED[(point,)] for point in syncs)) if syncs else set()
    assert {row.operator for row in report.rows} == expected, report
    assert all("naive_tensor.py" in row.where for row in report.rows)
    if syncs in ((("item_logging",)), ("if_any",), ("mask_reset",)):
        assert report.total == 2 * 9  # two per step, on every step (128 games: some always end)


def test_the_logging_counters_agree_on_the_host_and_on_the_device():
    actions = torch.randint(0, 3, (60, 32), generator=torch.Generator().manual_seed(2))
    logged, quiet = (NaiveTensorSnake(32, 5, 5, seed=3, syncs=syncs) for syncs in (("item_logging",), ()))
    for a in actions:
        logged.step(a)
        quiet.step(a)
    assert logged.stats() == quiet.stats()
    assert logged.stats()["finished"] > 0 and logged.stats()["total_reward"] != 0


@pytest.mark.parametrize("actions, message", [
    (torch.tensor([0, 3, 1, 0]), r"actions\[1\] = 3 is not a valid action"),
    (torch.tensor([0, 1, -1, 0]), r"actions\[2\] = -1 is not a valid action"),
])
def test_a_bad_action_raises_and_nothing_moves(actions, message):
    env = NaiveTensorSnake(4, 6, 6, seed=0)
    before = [env.get_state(i) for i in range(4)]
    with pytest.raises(ValueError, match=message):
        env.step(actions)
    assert [env.get_state(i) for i in range(4)] == before


@pytest.mark.parametrize("call, error, message", [
    (lambda: NaiveTensorSnake(0), ValueError, "num_envs=0"),
    (lambda: NaiveTensorSnake(2, syncs=("mask_reset", "bogus")), ValueError, "'bogus' is not one of"),
    (lambda: NaiveTensorSnake(2, syncs=3), TypeError, "syncs=3"),
    (lambda: NaiveTensorSnake(2, obs_type="rgb"), ValueError, "obs_type"),
    (lambda: NaiveTensorSnake(2, obs_type="features_reach"), ValueError, "obs_type='features_reach' must be one of"),
    (lambda: NaiveTensorSnake(2, height=3), ValueError, "height=3"),
    (lambda: NaiveTensorSnake(2).step([0, 1]), TypeError, "actions must be a torch.Tensor"),
    (lambda: NaiveTensorSnake(2).step(torch.zeros(3, dtype=torch.int64)), ValueError, r"shape \(2,\)"),
    (lambda: NaiveTensorSnake(2).step(torch.zeros(2)), TypeError, "integer tensor"),
    (lambda: NaiveTensorSnake(2).get_state(2), ValueError, "index=2"),
    (lambda: NaiveTensorSnake(2).reset(options={"x": 1}), ValueError, "takes no options"),
])
def test_bad_arguments_raise_naming_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_an_invalid_state_raises_and_leaves_the_game_as_it_was():
    env = NaiveTensorSnake(2, 5, 5, seed=0)
    before = env.get_state(1)
    with pytest.raises(ValueError, match="is on the body"):
        env.set_state(1, SnakeState(((2, 2), (2, 1), (2, 0)), rules.RIGHT, (2, 1)))
    assert env.get_state(1) == before


def test_check_syncs_keeps_the_canonical_order_and_accepts_none():
    assert check_syncs(("item_logging", "mask_reset")) == ("mask_reset", "item_logging")
    assert check_syncs("if_any") == ("if_any",)
    assert check_syncs(()) == () and check_syncs([]) == ()
    assert set(SYNC_POINT_CODE) == set(SYNC_FREE_CODE) == set(SYNC_POINTS)


@pytest.mark.parametrize("obs_type", rules.FIRST_OBS_TYPES)
def test_agreement_with_vec_snake_finds_none_and_a_broken_env_is_caught(obs_type):
    found = agreement(NaiveTensorSnake(16, 5, 6, obs_type=obs_type), VecSnake(16, 5, 6, obs_type=obs_type),
                      steps=120, seed=1)
    assert found["disagreements"] == 0 and found["game_steps"] == 16 * 120
    assert found["meals"] > 0 and found["deaths"] > 0
    assert "disagreements: 0" in str(found)

    class Blind(NaiveTensorSnake):  # never sees danger straight ahead
        def _observe(self, no_food=None):
            obs = super()._observe(no_food)
            if self.obs_type == "features":
                obs[:, 0] = 0.0
            else:
                obs[:, 1] = 0.0
            return obs

    assert agreement(Blind(16, 5, 6, obs_type=obs_type), VecSnake(16, 5, 6, obs_type=obs_type),
                     steps=40)["disagreements"] > 0
    with pytest.raises(ValueError, match="compare envs of one size"):
        agreement(NaiveTensorSnake(3), VecSnake(4), steps=1)
