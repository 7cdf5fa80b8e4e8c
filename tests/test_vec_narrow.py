"""VecSnake's int32 stamps: clocks near 2**31 and old int64 states play exactly the same games."""

import pytest
import torch
from test_vec_snake import run_lockstep

from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.vec import VecSnake, bytes_per_game
from rlgpu_helpers.snake.vec_state import OLD_WALL_STAMP, WALL_STAMP

NEAR = 2**31 - 3_000  # a clock this high overflows int32 stamps within ~750 steps unless rebased
EDGE = 2**31 - 200  # within ~60 steps


def push_times(env, game: int, to: int):
    """Shift every time of ``game`` up so its clock is ``to``: the same game, far later."""
    shift = to - int(env._clock[game])
    inside = env._shaped("stamp")[game, 1 : env.height + 1, : env.width]
    inside += shift
    env._clock[game] += shift
    # keep ring slots aligned: only a multiple of the ring's size moves no slot
    assert shift % env._ring_size == 0


def aligned(env, game: int, to: int) -> int:
    return to - ((to - int(env._clock[game])) % env._ring_size)


class LateSnake(VecSnake):
    """A VecSnake whose every game set by ``set_state`` continues with its clock near 2**31."""

    def set_state(self, index, state):
        super().set_state(index, state)
        push_times(self, index, aligned(self, index, EDGE))


def old_style(state: dict, offset: int = 0) -> dict:
    """``state`` as an int64 state_dict from before issue 38: int64 times, 1 << 62 on the walls."""
    old = {name: value.clone() for name, value in state.items()}
    stamp = state["stamp"].to(torch.int64)
    walls = stamp == WALL_STAMP
    old["stamp"] = torch.where(walls, OLD_WALL_STAMP, stamp + offset)
    old["clock"] = state["clock"].to(torch.int64) + offset
    return old


def test_state_dtypes_and_bytes_per_game():
    env = VecSnake(4)
    assert env._stamp.dtype == torch.int32 and env._clock.dtype == torch.int64
    assert env._ring.dtype == torch.int32 and env.state_dict()["stamp"].dtype == torch.int32
    assert bytes_per_game(10, 10, "features") == 12 * 11 * 4 + 128 * 4 + 10 * 4 * 2 + 84 + 2 * 4 * 11 + 64


@pytest.mark.parametrize("obs_type", ["features", "grid"])
def test_lockstep_with_snake_env_with_clocks_near_the_int32_limit(obs_type):
    seen = run_lockstep(obs_type, height=6, width=7, num_envs=16, steps=300, seed=5, make_env=LateSnake)
    assert seen["steps"] >= 4_800 and seen["ate"] > 0 and seen["truncated"] + seen["wall"] + seen["body"] > 0


@pytest.mark.parametrize("obs_type", ["features", "grid", "ego_grid", "features_reach"])
def test_the_sweep_rebases_every_game_and_changes_no_result(obs_type):
    env, twin = (VecSnake(8, 6, 6, obs_type=obs_type, seed=3, check_action_values=False) for _ in range(2))
    for game in range(8):
        push_times(env, game, aligned(env, game, NEAR))
    for a in torch.randint(0, 3, (900, 8), generator=torch.Generator().manual_seed(4)):
        got, want = env.step_tensors(a), twin.step_tensors(a)
        for g, w in zip(got[:4], want[:4]):
            assert torch.equal(g, w)
        assert torch.equal(got[4]["final_obs"], want[4]["final_obs"])
    assert int(env._clock.max()) < 4 * env._ring_size + 2 * env._cells
    for game in range(8):
        assert env.get_state(game) == twin.get_state(game)


@pytest.mark.parametrize("offset", [0, 2**31 - 5_000, 2**40])
def test_an_old_int64_state_dict_loads_and_continues_the_same_games(offset):
    env = VecSnake(8, 6, 7, obs_type="grid", seed=2, check_action_values=False)
    for a in torch.randint(0, 3, (60, 8), generator=torch.Generator().manual_seed(8)):
        env.step_tensors(a)
    offset -= offset % env._ring_size
    twin = VecSnake(8, 6, 7, obs_type="grid", seed=9, check_action_values=False)
    twin.load_state_dict(old_style(env.state_dict(), offset))
    assert twin._stamp.dtype == torch.int32 and int(twin._clock.max()) < 2**30
    assert torch.equal(twin.observe(), env.observe())
    for a in torch.randint(0, 3, (200, 8), generator=torch.Generator().manual_seed(9)):
        got, want = twin.step_tensors(a), env.step_tensors(a)
        for g, w in zip(got[:4], want[:4]):
            assert torch.equal(g, w)
    assert [twin.get_state(i) for i in range(8)] == [env.get_state(i) for i in range(8)]


def test_repeated_set_state_cannot_overflow_the_clock():
    env = VecSnake(2, 4, 4, seed=0)
    push_times(env, 1, aligned(env, 1, 2**31 - 100))
    state = rules.SnakeState(((0, 3), (0, 2), (0, 1), (0, 0), (1, 0)), rules.RIGHT, (3, 3))
    for _ in range(100):
        env.set_state(1, state)
    assert int(env._clock[1]) < 2 * env._ring_size + 2 * env._cells and env.get_state(1) == state
    env.load_state_dict(env.state_dict())  # still a valid state
