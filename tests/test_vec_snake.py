"""VecSnake plays by the same rules as SnakeEnv, on tensors, without host synchronization."""

import dataclasses
import math
import random
import re

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.env import SnakeEnv
from rlgpu_helpers.snake.rules import SnakeState
from rlgpu_helpers.snake.vec import VecSnake, step_compile_options


def random_state(rng: random.Random, height: int, width: int, max_steps: int) -> SnakeState:
    """A random valid state: a self-avoiding walk of random length, food on an empty cell."""
    cells = height * width
    while True:
        length = rng.randint(3, max(3, cells * 2 // 3))
        body = [(rng.randrange(height), rng.randrange(width))]
        while len(body) < length:
            r, c = body[-1]
            options = [
                (r + dr, c + dc)
                for dr, dc in rules.DIRECTION_DELTAS
                if 0 <= r + dr < height and 0 <= c + dc < width and (r + dr, c + dc) not in body
            ]
            if not options:
                break
            body.append(rng.choice(options))
        if len(body) < 3:
            continue
        # The walk grew from the head to the tail; the heading points from the neck to the head.
        (hr, hc), (nr, nc) = body[0], body[1]
        direction = rules.DIRECTION_DELTAS.index((hr - nr, hc - nc))
        empty = [(r, c) for r in range(height) for c in range(width) if (r, c) not in body]
        if not empty:
            continue
        steps = rng.choice([0, rng.randrange(max_steps), max_steps - 1])
        return SnakeState(tuple(body), direction, rng.choice(empty), steps)


def test_spaces_and_conventions():
    env = VecSnake(5, 6, 7, obs_type="grid", seed=0)
    assert env.num_envs == 5
    assert env.single_observation_space.shape == (3, 6, 7)
    assert env.observation_space.shape == (5, 3, 6, 7)
    assert env.single_action_space.n == 3
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, info = env.reset(seed=1)
    assert obs.dtype == torch.float32 and obs.shape == (5, 3, 6, 7) and info == {}
    obs, reward, terminated, truncated, info = env.step(torch.zeros(5, dtype=torch.int64))
    assert reward.dtype == torch.float32 and terminated.dtype == torch.bool
    assert truncated.dtype == torch.bool and info["_final_obs"].dtype == torch.bool
    assert info["final_obs"].shape == obs.shape


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_reset_starts_every_game_by_the_rules(obs_type):
    env = VecSnake(8, 6, 9, obs_type=obs_type, seed=3)
    obs, _ = env.reset()
    for i in range(8):
        state = env.get_state(i)
        assert state.body == rules.start_body(6, 9)
        assert state.direction == rules.RIGHT and state.steps_since_food == 0
        assert state.food not in state.body
        np.testing.assert_array_equal(obs[i].numpy(), rules.observe(state, 6, 9, obs_type))


def run_lockstep(obs_type, height, width, num_envs, steps, seed, make_env=VecSnake):
    """Step SnakeEnv and a tensor Snake (``make_env(num_envs, height, width, obs_type=, seed=)``,
    VecSnake by default) side by side from random states; return counts of what happened."""
    rng = random.Random(seed)
    vec = make_env(num_envs, height, width, obs_type=obs_type, seed=seed)
    max_steps = vec.max_steps_without_food
    singles = [SnakeEnv(height, width, obs_type=obs_type) for _ in range(num_envs)]
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
        state = random_state(rng, height, width, max_steps)
        env.set_state(state)
        vec.set_state(i, state)
    seen = dict(ate=0, wall=0, body=0, truncated=0, tail_chase=0, steps=0)
    for _ in range(steps):
        before = [env.get_state() for env in singles]
        actions = [rng.randrange(3) for _ in range(num_envs)]
        obs, reward, terminated, truncated, info = vec.step(torch.tensor(actions))
        for i, env in enumerate(singles):
            s_obs, s_reward, s_term, s_trunc, s_info = env.step(actions[i])
            assert reward[i].item() == s_reward
            assert terminated[i].item() == s_term and truncated[i].item() == s_trunc
            seen["steps"] += 1
            if s_term or s_trunc:
                # The finished game's last observation and record are in info; the game
                # itself restarted in the same step.
                assert info["_final_obs"][i] and info["_episode"][i]
                np.testing.assert_array_equal(info["final_obs"][i].numpy(), s_obs)
                assert info["episode"]["score"][i].item() == s_info["score"]
                assert info["episode"]["won"][i].item() == s_info["won"]
                restarted = vec.get_state(i)
                assert restarted.body == rules.start_body(height, width)
                assert restarted.direction == rules.RIGHT and restarted.food not in restarted.body
                np.testing.assert_array_equal(
                    obs[i].numpy(), rules.observe(restarted, height, width, obs_type)
                )
                if s_trunc:
                    seen["truncated"] += 1
                elif s_reward < 0:
                    head = before[i].body[0]
                    d = rules.DIRECTION_DELTAS[rules.turn(before[i].direction, actions[i])]
                    r, c = head[0] + d[0], head[1] + d[1]
                    seen["wall" if not (0 <= r < height and 0 <= c < width) else "body"] += 1
                state = random_state(rng, height, width, max_steps)
                env.set_state(state)
                vec.set_state(i, state)
                continue
            assert not info["_final_obs"][i]
            single, batched = env.get_state(), vec.get_state(i)
            assert batched.body == single.body
            assert batched.direction == single.direction
            assert batched.steps_since_food == single.steps_since_food
            if s_reward > 0:
                seen["ate"] += 1
                assert batched.food not in batched.body
                # Food placement is random in both: copy the single env's choice across.
                vec.set_state(i, dataclasses.replace(batched, food=single.food))
                np.testing.assert_array_equal(
                    vec.observe()[i].numpy(), rules.observe(single, height, width, obs_type)
                )
            else:
                assert batched.food == single.food
                np.testing.assert_array_equal(obs[i].numpy(), s_obs)
                if single.body[0] == before[i].body[-1]:
                    seen["tail_chase"] += 1
    return seen


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_lockstep_with_snake_env(obs_type):
    seen = run_lockstep(obs_type, height=6, width=7, num_envs=16, steps=400, seed=11)
    assert seen["steps"] >= 6_400
    # Every kind of event the rules describe happened, so each was compared.
    for kind in ("ate", "wall", "body", "truncated", "tail_chase"):
        assert seen[kind] > 0, (kind, seen)


def test_lockstep_on_a_larger_grid():
    seen = run_lockstep("features", height=10, width=10, num_envs=16, steps=250, seed=5)
    assert seen["steps"] >= 4_000 and seen["ate"] > 0 and seen["body"] > 0


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_filling_the_board_wins_and_restarts(obs_type):
    # A 4x4 board with 15 snake cells in a serpentine; the last empty cell holds the food.
    path = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0),
            (2, 0), (2, 1), (2, 2), (2, 3), (3, 3), (3, 2), (3, 1), (3, 0)]
    body = tuple(reversed(path[:-1]))  # head at (3, 1), heading left
    state = SnakeState(body, rules.LEFT, food=(3, 0), steps_since_food=4)
    env = VecSnake(3, 4, 4, obs_type=obs_type, seed=0)
    env.set_state(1, state)
    obs, reward, terminated, truncated, info = env.step(torch.tensor([0, 0, 0]))
    assert reward[1].item() == 1.0 and terminated[1].item() and not truncated[1].item()
    assert info["episode"]["won"][1].item() and info["episode"]["score"][1].item() == 13
    won = SnakeState(tuple(reversed(path)), rules.LEFT, food=None, steps_since_food=0)
    np.testing.assert_array_equal(info["final_obs"][1].numpy(), rules.observe(won, 4, 4, obs_type))
    assert env.get_state(1).body == rules.start_body(4, 4)


def test_food_is_uniform_over_the_empty_cells():
    # Every game eats on its first step from the same state; new food must be uniform over
    # the 16 - 4 = 12 empty cells.
    state = SnakeState(((1, 1), (1, 0), (0, 0)), rules.RIGHT, food=(1, 2), steps_since_food=0)
    n = 24_000
    env = VecSnake(n, 4, 4, seed=7)
    for i in range(n):
        env.set_state(i, state)
    env.step(torch.zeros(n, dtype=torch.int64))
    food = [env.get_state(i).food for i in range(n)]
    counts = np.bincount([r * 4 + c for r, c in food], minlength=16)
    occupied = [r * 4 + c for r, c in ((1, 2), (1, 1), (1, 0), (0, 0))]
    assert counts[occupied].sum() == 0
    empty = np.delete(counts, occupied)
    expected = n / 12
    chi2 = ((empty - expected) ** 2 / expected).sum()
    assert chi2 < 31.3  # the 99.9% point of chi-square with 11 degrees of freedom


@settings(max_examples=25)
@given(
    height=st.integers(4, 9),
    width=st.integers(4, 9),
    seed=st.integers(0, 2**32 - 1),
    obs_type=st.sampled_from(rules.OBS_TYPES),
    actions=st.lists(st.integers(0, 2), min_size=1, max_size=120),
)
def test_invariants_under_random_play(height, width, seed, obs_type, actions):
    num_envs = 6
    env = VecSnake(num_envs, height, width, obs_type=obs_type, seed=seed)
    obs, _ = env.reset()
    eaten = np.zeros(num_envs, dtype=int)
    mix = random.Random(seed)
    for a in actions:
        batch = torch.tensor([(a + mix.randrange(3) * (i % 2)) % 3 for i in range(num_envs)])
        obs, reward, terminated, truncated, info = env.step(batch)
        eaten += (reward > 0).numpy()
        done = (terminated | truncated).numpy()
        assert not (terminated & truncated).any()
        for i in range(num_envs):
            if done[i]:
                assert info["episode"]["score"][i].item() == eaten[i]
                eaten[i] = 0
            state = env.get_state(i)
            body = state.body
            assert len(body) == rules.START_LENGTH + eaten[i]
            assert len(set(body)) == len(body)
            assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(body, body[1:]))
            assert all(0 <= r < height and 0 <= c < width for r, c in body)
            assert state.food not in body and 0 <= state.food[0] < height and 0 <= state.food[1] < width
            np.testing.assert_array_equal(obs[i].numpy(), rules.observe(state, height, width, obs_type))


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_the_returned_observation_equals_one_built_from_the_state(obs_type):
    """The grid observation is patched from the last one (built once per step): it must equal
    the observation computed afresh from the state, after meals, deaths and restarts alike."""
    env = VecSnake(64, 5, 6, obs_type=obs_type, seed=3)
    actions = torch.randint(0, 3, (300, 64), generator=torch.Generator().manual_seed(5))
    restarts = 0
    for a in actions:
        obs, _, terminated, truncated, _ = env.step(a)
        assert torch.equal(obs, env.observe())
        restarts += int((terminated | truncated).sum())
    assert restarts > 50


def test_a_step_audited_for_syncs_makes_none():
    """The acceptance test of the issue: with default settings (action check on), one step
    makes no host-device synchronization, for both observation types."""
    for obs_type in rules.OBS_TYPES:
        env = VecSnake(256, 8, 8, obs_type=obs_type, seed=0)
        actions = torch.randint(0, 3, (256,), generator=torch.Generator().manual_seed(0))
        report = audit_syncs(lambda: env.step(actions), "cpu")
        assert report.total == 0, report


def play(seed, steps=200, obs_type="grid"):
    env = VecSnake(32, 8, 8, obs_type=obs_type, seed=seed)
    actions = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    frames = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(torch.randint(0, 3, (32,), generator=actions))
        frames += [obs, reward, terminated, truncated]
    return frames


def test_same_seed_same_games_different_seed_different_games():
    first, again, other = play(seed=123), play(seed=123), play(seed=124)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_reset_with_a_seed_replays_the_same_games():
    env = VecSnake(16, 8, 8, seed=9)
    actions = torch.randint(0, 3, (50, 16), generator=torch.Generator().manual_seed(1))
    runs = []
    for _ in range(2):
        obs, _ = env.reset(seed=42)
        runs.append([obs] + [env.step(a)[0] for a in actions])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_compiled_step_gives_the_same_results_as_the_eager_step(obs_type):
    """fullgraph=True fails on any graph break: a .item(), a Python branch on a tensor value,
    boolean-mask indexing or nonzero in the step would all break the graph."""
    eager = VecSnake(64, 6, 6, obs_type=obs_type, seed=4, check_action_values=False)
    compiled_env = VecSnake(64, 6, 6, obs_type=obs_type, seed=4, check_action_values=False)
    compiled_step = torch.compile(compiled_env.step_tensors, fullgraph=True, options=step_compile_options("cpu"))
    actions = torch.randint(0, 3, (60, 64), generator=torch.Generator().manual_seed(2))
    saw_done = False
    for a in actions:
        want = eager.step_tensors(a)
        got = compiled_step(a)
        for w, g in zip(want[:4], got[:4]):
            assert torch.equal(w, g)
        assert torch.equal(want[4]["final_obs"], got[4]["final_obs"])
        assert torch.equal(want[4]["episode"]["score"], got[4]["episode"]["score"])
        saw_done |= bool(want[2].any() | want[3].any())
    assert saw_done


@pytest.mark.parametrize("obs_type", ["features", "grid"])
def test_the_compiled_step_writes_the_state_in_place(obs_type):
    """Compiled with ``step_compile_options``, no loop of the step's code runs over a whole state tensor,
    nor over the whole grid observation after it is built.

    Inductor copies a mutated graph input it cannot write in place (a ``scatter_``, a write through a
    view, or a ring write moved before the ring's read), and a new tensor written in a way it does not
    do in place (see the next test): a copy is a flat loop over every element. N = 1,000 makes each
    size a number no other loop has.
    (Before the state was flat and written by ``index_copy_``, and without the options, this found
    2 to 3 loops each; with ``scatter_`` into the grid observation, 5.)
    """
    from torch._inductor.utils import run_and_get_code

    env = VecSnake(1000, 10, 10, obs_type=obs_type, seed=0, check_action_values=False)
    sizes = {name: getattr(env, f"_{name}").numel() for name in ("stamp", "ring", "row_free")}
    sizes["observation"] = 1000 * 3 * 10 * 10
    assert len(set(sizes.values()) | {env.num_envs, 3 * env.num_envs}) == 6
    step = torch.compile(env.step_tensors, fullgraph=True, dynamic=False, options=step_compile_options("cpu"))
    _, code = run_and_get_code(step, torch.zeros(1000, dtype=torch.int64))
    loops = {name: "".join(code).count(f"<static_cast<int64_t>({size}L)") for name, size in sizes.items()}
    # row_free's one: the restarts' torch.where over every game's rows
    assert loops == {"stamp": 0, "ring": 0, "row_free": 1, "observation": 0}


@pytest.mark.parametrize("obs_type", ["grid", "ego_grid"])
def test_the_compiled_step_allocates_its_two_observations_and_no_temporary_of_their_size(obs_type):
    """Compiled with ``step_compile_options``, a board observation's step allocates no temporary of one
    channel's size, and nothing of an observation's size but the last observation and the next.

    Slice assignments into an empty tensor made temporaries; on torch 2.11 (the GPU machines' and
    Colab's), ``index_fill_`` into a padded observation or two into the restarted one made a copy each."""
    from torch._inductor.utils import run_and_get_code

    env = VecSnake(1000, 10, 10, obs_type=obs_type, seed=0, check_action_values=False)
    step = torch.compile(env.step_tensors, fullgraph=True, dynamic=False, options=step_compile_options("cpu"))
    _, code = run_and_get_code(step, torch.zeros(1000, dtype=torch.int64))
    shapes = re.findall(r"empty_strided_cpu\(\(([\d, ]*)\)", "".join(code))
    sizes = [math.prod(int(d) for d in shape.split(",") if d.strip()) for shape in shapes]
    observation = 1000 * math.prod(rules.observation_shape(obs_type, 10, 10))
    assert len(sizes) > 10 and sizes.count(observation // 3) == 0 and sizes.count(observation) == 2


# ---------------------------------------------------------------- bad input


def snapshot(env):
    return {name: value.clone() for name, value in vars(env).items() if isinstance(value, torch.Tensor)}


def assert_unchanged(env, before):
    after = snapshot(env)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "actions, error, message",
    [
        (torch.tensor([0, 1, 3, 0]), ValueError, r"actions\[2\] = 3"),
        (torch.tensor([0, -1, 0, 0]), ValueError, r"actions\[1\] = -1"),
        (torch.tensor([0, 1, 2]), ValueError, r"shape \(4,\), got \(3,\)"),
        (torch.zeros(4, 1, dtype=torch.int64), ValueError, r"shape \(4,\), got \(4, 1\)"),
        (torch.zeros(4), TypeError, "integer tensor, got dtype torch.float32"),
        (torch.zeros(4, dtype=torch.bool), TypeError, "torch.bool"),
        (np.zeros(4, dtype=np.int64), TypeError, "torch.Tensor"),
        ([0, 0, 0, 0], TypeError, "torch.Tensor"),
        (torch.zeros(4, dtype=torch.int64, device="meta"), ValueError, "must be on cpu, got meta"),
    ],
)
def test_bad_actions_raise_and_leave_the_env_unchanged(actions, error, message):
    env = VecSnake(4, 5, 5, seed=0)
    before = snapshot(env)
    with pytest.raises(error, match=message):
        env.step(actions)
    assert_unchanged(env, before)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_envs=0), ValueError, "num_envs=0 must be an int >= 1"),
        (dict(num_envs=2.5), TypeError, "num_envs=2.5 must be an int"),
        (dict(height=3), ValueError, r"height=3 must be an int in \[4, 64\]"),
        (dict(width=65), ValueError, r"width=65 must be an int in \[4, 64\]"),
        (dict(obs_type="pixels"), ValueError, "obs_type='pixels' must be one of"),
        (dict(max_steps_without_food=0), ValueError, r"max_steps_without_food=0 must be an int in \[1, 2147483647\]"),
        (dict(seed=-1), ValueError, "seed=-1 must be a seed in"),
        (dict(seed=2**64), ValueError, "seed=18446744073709551616 must be a seed in"),
        (dict(seed=1.0), TypeError, "seed=1.0 must be an int seed"),
        (dict(check_action_values="yes"), TypeError, "check_action_values='yes' must be True or False"),
        (dict(device="gpu"), ValueError, "device='gpu' is not a device"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, error, message):
    args = dict(num_envs=4) | kwargs
    with pytest.raises(error, match=message):
        VecSnake(**args)


@pytest.mark.parametrize(
    "state, message",
    [
        (SnakeState(((2, 2), (2, 1), (0, 1)), rules.RIGHT, (4, 4)), "not contiguous"),
        (SnakeState(((2, 5), (2, 4), (2, 3)), rules.RIGHT, (4, 4)), "off the 5x5 grid"),
        (SnakeState(((2, 2), (2, 1), (2, 0)), rules.RIGHT, (2, 1)), "food .* is on the body"),
        (SnakeState(((2, 2), (2, 1), (2, 0)), rules.LEFT, (4, 4)), "does not match the body"),
        (SnakeState(((2, 2), (2, 1), (2, 0)), rules.RIGHT, None), "board is not full"),
        (SnakeState(((2, 2), (2, 1), (2, 0)), rules.RIGHT, (4, 4), 25), "steps_since_food"),
    ],
)
def test_invalid_states_raise_and_leave_the_env_unchanged(state, message):
    env = VecSnake(4, 5, 5, seed=0)
    before = snapshot(env)
    with pytest.raises(ValueError, match=message):
        env.set_state(2, state)
    assert_unchanged(env, before)


@pytest.mark.parametrize("index, error", [(4, ValueError), (-1, ValueError), (1.0, TypeError)])
def test_bad_game_index_raises(index, error):
    env = VecSnake(4, 5, 5, seed=0)
    with pytest.raises(error, match="index"):
        env.get_state(index)
    state = env.get_state(0)
    with pytest.raises(error, match="index"):
        env.set_state(index, state)


def twin_envs(obs_type="features"):
    return [VecSnake(8, 6, 6, obs_type=obs_type, seed=11) for _ in range(2)]


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_after_a_bad_action_the_env_goes_on_as_if_it_never_happened(obs_type):
    env, twin = twin_envs(obs_type)
    actions = torch.randint(0, 3, (40, 8), generator=torch.Generator().manual_seed(3))
    for a in actions[:20]:
        env.step(a), twin.step(a)
    bad = actions[20].clone()
    bad[5] = 7
    with pytest.raises(ValueError, match=r"actions\[5\] = 7 is not a valid action .*this step was given it"):
        env.step(bad)
    for a in actions[20:]:  # the random stream did not move either: the same food follows
        for got, want in zip(env.step(a)[:4], twin.step(a)[:4]):
            assert torch.equal(got, want)


class LateEvent:
    """Stands in for a CUDA event whose device work has not finished until ``done`` is set."""

    done = False

    def record(self):
        pass

    def query(self):
        return self.done


def test_on_a_gpu_the_error_comes_when_the_note_arrives_and_nothing_moves_until_then():
    """The CUDA path of the deferred check, on a CPU: the note is copied into a separate host
    buffer, and the 'event' says when the copy has landed."""
    env, twin = twin_envs()
    check = env._bad_actions
    check._host = torch.zeros(4, dtype=torch.int64)
    check._host_view, check._event = check._host.numpy(), LateEvent()
    good = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    bad = good.clone()
    bad[3] = -2
    env.step(bad)  # the note has not arrived: no error yet ...
    before = snapshot(env)
    for _ in range(3):
        obs, reward, terminated, truncated, _ = env.step(good)
        assert not (reward.any() or terminated.any() or truncated.any())
    assert_unchanged(env, before)  # ... but no game moves while the error is pending
    check._event.done = True
    with pytest.raises(ValueError, match=r"actions\[3\] = -2 .*the step 3 call\(s\) before this one"):
        env.step(good)
    for _ in range(5):  # reported once; then the env goes on from where it stopped
        for got, want in zip(env.step(good)[:4], twin.step(good)[:4]):
            assert torch.equal(got, want)


def test_value_check_can_be_switched_off_for_fast_loops():
    env = VecSnake(4, 5, 5, seed=0, check_action_values=False)
    env.step(torch.tensor([0, 1, 2, 0]))  # valid actions still work
    with pytest.raises(TypeError):  # shape, dtype and device are always checked
        env.step(torch.zeros(4))


def test_a_state_dict_round_trip_continues_the_same_games():
    env = VecSnake(32, 6, 7, seed=1)
    actions = torch.randint(0, 3, (120, 32), generator=torch.Generator().manual_seed(4))
    for a in actions[:60]:
        env.step(a)
    other = VecSnake(32, 6, 7, seed=99)
    other.load_state_dict(env.state_dict())
    for a in actions[60:]:
        for got, want in zip(other.step(a)[:4], env.step(a)[:4]):
            assert torch.equal(got, want)


def corrupt(field, change):
    def apply(state):
        state[field] = state[field].clone()
        change(state[field])
    return apply


@pytest.mark.parametrize("change, message", [
    (corrupt("length", lambda t: t.__setitem__(3, 2)), r"state\['length'\] of game 3 is 2: must be in \[3, 42\]"),
    (corrupt("head", lambda t: t.__setitem__(0, 0)), r"state\['head'\] of game 0 is 0: must be a cell of the grid"),
    (corrupt("food", lambda t: t.__setitem__(1, 7)), r"state\['food'\] of game 1 is 7: must be a cell of the grid"),
    (corrupt("direction", lambda t: t.__setitem__(2, 5)), r"state\['direction'\] of game 2 is 5"),
    (corrupt("direction", lambda t: t.__setitem__(2, (t[2] + 2) % 4)), "must point from the neck to the head"),
    (corrupt("stamp", lambda t: t[1].view(-1).__setitem__(0, 5)), "walls must keep their wall stamp"),
    (corrupt("stamp", lambda t: t[1].view(-1).__setitem__(9, 10**9)), r"must be in \[0, clock\]"),
    (corrupt("ring", lambda t: t[4].fill_(9)), "must match the ring's body cells"),
    (corrupt("row_free", lambda t: t.__setitem__((5, 2), 0)), "must count the empty cells of each row"),
    (corrupt("steps_since_food", lambda t: t.__setitem__(7, 42)), r"of game 7 is 42: must be in \[0, 41\]"),
    (corrupt("env_keys", lambda t: t.__setitem__(7, -1)), r"must be in \[0, 2\*\*32\)"),
    (corrupt("counter", lambda t: t.fill_(-3)), "counter'\\] is -3"),
    (corrupt("clock", lambda t: t.__setitem__(3, 1)), "must be at least the snake's length"),
    (lambda state: None, None),  # the state as saved loads
    (lambda state: state.__setitem__("clock", state["clock"].float()), "expected \\(8,\\) torch.int64"),
    (lambda state: state.pop("ring"), r"missing \['ring'\]"),
])
def test_bad_state_dicts_raise_naming_the_field_and_leave_the_env_unchanged(change, message):
    env = VecSnake(8, 6, 7, seed=2)
    for a in torch.randint(0, 3, (80, 8), generator=torch.Generator().manual_seed(8)):
        env.step(a)
    state = env.state_dict()
    change(state)
    target = VecSnake(8, 6, 7, seed=5)
    before = snapshot(target)
    if message is None:
        target.load_state_dict(state)
        assert all(torch.equal(target.state_dict()[name], value) for name, value in state.items())
        return
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(state)
    assert_unchanged(target, before)
