"""SnakeEnv follows the rules of COURSE_DESIGN.md exactly, and gymnasium's API."""

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.env import SNAKE_ENV_ID, SnakeEnv
from rlgpu_helpers.snake.render import render_state
from rlgpu_helpers.snake.rules import DOWN, LEFT, RIGHT, UP, SnakeState

# The rules written out once more, independently of rules.py, so the env is checked against the
# text of the design rather than against code it shares.
DELTAS = {UP: (-1, 0), RIGHT: (0, 1), DOWN: (1, 0), LEFT: (0, -1)}
TURNS = {0: 0, 1: 1, 2: 3}  # straight, right, left


def expected_step(state, action, height, width, max_steps):
    """(body, direction, steps_since_food, reward, terminated, truncated, ate) by the rules."""
    direction = (state.direction + TURNS[action]) % 4
    head = (state.body[0][0] + DELTAS[direction][0], state.body[0][1] + DELTAS[direction][1])
    dead = (state.body, state.direction, state.steps_since_food, -1.0, True, False, False)
    if not (0 <= head[0] < height and 0 <= head[1] < width):
        return dead
    ate = head == state.food
    remaining = state.body if ate else state.body[:-1]  # without a meal the tail moves first
    if head in remaining:
        return dead
    body = (head,) + remaining
    steps = 0 if ate else state.steps_since_food + 1
    won = len(body) == height * width
    return body, direction, steps, 1.0 if ate else 0.0, won, not won and steps >= max_steps, ate


def greedy_action(state, height, width):
    """A safe move towards the food if there is one, so random play also grows long snakes."""
    scored = []
    for action in range(3):
        direction = (state.direction + TURNS[action]) % 4
        head = (state.body[0][0] + DELTAS[direction][0], state.body[0][1] + DELTAS[direction][1])
        safe = 0 <= head[0] < height and 0 <= head[1] < width and head not in state.body[:-1]
        distance = abs(head[0] - state.food[0]) + abs(head[1] - state.food[1]) if state.food else 0
        scored.append((not safe, distance, action))
    return min(scored)[2]


def assert_invariants(env, obs, info):
    """Everything that must hold after every reset and step."""
    height, width = env.height, env.width
    state = env.get_state()
    body = state.body
    assert info["length"] == len(body) == rules.START_LENGTH + info["score"]
    assert len(set(body)) == len(body)
    assert all(0 <= r < height and 0 <= c < width for r, c in body)
    assert all(abs(r0 - r1) + abs(c0 - c1) == 1 for (r0, c0), (r1, c1) in zip(body, body[1:]))
    if state.food is None:
        assert info["won"] and len(body) == height * width
    else:
        assert not info["won"]
        assert state.food not in body and 0 <= state.food[0] < height and 0 <= state.food[1] < width
    assert 0 <= state.steps_since_food <= env.max_steps_without_food
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs, rules.observe(state, height, width, env.obs_type))


def snake_env(height=5, width=5, state=None, **kwargs):
    env = SnakeEnv(height, width, **kwargs)
    env.reset(seed=0)
    if state is not None:
        env.set_state(state)
    return env


# -- gymnasium API --------------------------------------------------------------------------------

@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_check_env_passes_without_warnings(obs_type, render_mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(SnakeEnv(6, 7, obs_type=obs_type, render_mode=render_mode))
        check_env(gymnasium.make(SNAKE_ENV_ID, obs_type=obs_type).unwrapped)


def test_spaces():
    features = SnakeEnv(6, 7)
    grid = SnakeEnv(6, 7, obs_type="grid")
    assert features.observation_space == gymnasium.spaces.Box(0, 1, (11,), np.float32)
    assert grid.observation_space == gymnasium.spaces.Box(0, 1, (3, 6, 7), np.float32)
    assert features.action_space == gymnasium.spaces.Discrete(3)
    assert gymnasium.make(SNAKE_ENV_ID, height=8, obs_type="grid").observation_space.shape == (3, 8, 10)


@pytest.mark.parametrize("height, width", [(4, 4), (10, 10), (7, 12), (64, 64)])
def test_reset_starts_by_the_rules(height, width):
    env = SnakeEnv(height, width)
    obs, info = env.reset(seed=3)
    state = env.get_state()
    assert state.body == ((height // 2, width // 2), (height // 2, width // 2 - 1), (height // 2, width // 2 - 2))
    assert state.direction == RIGHT and state.steps_since_food == 0
    assert info == {"score": 0, "length": 3, "won": False}
    assert env.max_steps_without_food == height * width
    assert_invariants(env, obs, info)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"height": 3}, ValueError, r"height=3 must be an int in \[4, 64\]"),
    ({"width": 65}, ValueError, r"width=65 must be an int in \[4, 64\]"),
    ({"height": 10.5}, TypeError, "height=10.5 must be an int"),
    ({"width": "10"}, TypeError, "width='10' must be an int"),
    ({"obs_type": "pixels"}, ValueError, "obs_type='pixels' must be one of"),
    ({"max_steps_without_food": 0}, ValueError, r"max_steps_without_food=0 must be an int in \[1, 2147483647\]"),
    ({"render_mode": "human"}, ValueError, "render_mode .*'human'"),
])
def test_constructor_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        SnakeEnv(**kwargs)


def test_reset_rejects_options():
    with pytest.raises(ValueError, match="options.*'state'"):
        SnakeEnv().reset(options={"state": None})


# -- the rules, on hand-set states ----------------------------------------------------------------

@pytest.mark.parametrize("body, direction", [
    (((0, 2), (1, 2), (2, 2)), UP),
    (((2, 4), (2, 3), (2, 2)), RIGHT),
    (((4, 2), (3, 2), (2, 2)), DOWN),
    (((2, 0), (2, 1), (2, 2)), LEFT),
])
def test_wall_death_leaves_the_state_unchanged(body, direction):
    state = SnakeState(body, direction, (0, 0), 7)
    env = snake_env(state=state)
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert env.get_state() == state
    np.testing.assert_array_equal(obs, rules.observe(state, 5, 5, "features"))
    assert info == {"score": 0, "length": 3, "won": False}


def test_turning_into_a_wall_is_death_and_keeps_the_heading():
    state = SnakeState(((0, 4), (0, 3), (0, 2)), RIGHT, (3, 3))
    env = snake_env(state=state)
    assert env.step(2)[1:3] == (-1.0, True)  # a left turn heads up, off the grid
    assert env.get_state() == state


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_body_death_leaves_the_state_unchanged(obs_type):
    # Head (1, 1) heading left; turning left (down) leads to (2, 1), which is not the tail.
    state = SnakeState(((1, 1), (1, 2), (2, 2), (2, 1), (3, 1)), LEFT, (0, 4), 2)
    env = snake_env(state=state, obs_type=obs_type)
    obs, reward, terminated, truncated, _ = env.step(2)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert env.get_state() == state
    np.testing.assert_array_equal(obs, rules.observe(state, 5, 5, obs_type))


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_moving_into_the_cell_the_tail_just_left_is_legal(obs_type):
    state = SnakeState(((1, 1), (1, 2), (2, 2), (2, 1)), LEFT, (0, 4), 2)
    env = snake_env(state=state, obs_type=obs_type)
    obs, reward, terminated, truncated, _ = env.step(2)  # down, into the tail's cell
    assert (reward, terminated, truncated) == (0.0, False, False)
    after = env.get_state()
    assert after == SnakeState(((2, 1), (1, 1), (1, 2), (2, 2)), DOWN, (0, 4), 3)
    np.testing.assert_array_equal(obs, rules.observe(after, 5, 5, obs_type))


def test_circling_after_the_tail_is_legal_until_truncation():
    # A 3-cell snake turning right forever chases its tail round a 2x2 square; it never eats,
    # so the default limit (height * width steps without food) truncates it.
    env = snake_env(10, 10, state=SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (0, 0)))
    for step in range(1, 100):
        _, reward, terminated, truncated, _ = env.step(1)
        assert (reward, terminated, truncated) == (0.0, False, False), step
    _, reward, terminated, truncated, _ = env.step(1)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert env.get_state().steps_since_food == 100


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_eating_grows_the_snake_and_the_tail_stays(obs_type):
    state = SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (5, 6), 7)
    env = snake_env(10, 10, state=state, obs_type=obs_type)
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated) == (1.0, False, False)
    after = env.get_state()
    assert after.body == ((5, 6), (5, 5), (5, 4), (5, 3))
    assert after.steps_since_food == 0 and after.direction == RIGHT
    assert after.food not in after.body
    assert info == {"score": 1, "length": 4, "won": False}
    assert_invariants(env, obs, info)


def test_truncation_at_the_limit():
    state = SnakeState(((2, 2), (2, 1), (2, 0)), RIGHT, (0, 0), 4)
    env = snake_env(state=state, max_steps_without_food=5)
    _, reward, terminated, truncated, _ = env.step(0)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert env.get_state().steps_since_food == 5


def test_death_at_the_limit_is_termination_not_truncation():
    state = SnakeState(((2, 4), (2, 3), (2, 2)), RIGHT, (0, 0), 4)
    env = snake_env(state=state, max_steps_without_food=5)
    assert env.step(0)[1:4] == (-1.0, True, False)


def test_eating_at_the_limit_is_not_truncation():
    state = SnakeState(((2, 2), (2, 1), (2, 0)), RIGHT, (2, 3), 4)
    env = snake_env(state=state, max_steps_without_food=5)
    assert env.step(0)[1:4] == (1.0, False, False)
    assert env.get_state().steps_since_food == 0


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_filling_the_board_wins(obs_type):
    # A serpentine over the 4x4 board; the snake covers all but its last cell, (3, 0), the food.
    path = [(r, c if r % 2 == 0 else 3 - c) for r in range(4) for c in range(4)]
    state = SnakeState(tuple(reversed(path[:-1])), LEFT, path[-1], 3)
    env = snake_env(4, 4, state=state, obs_type=obs_type, render_mode="rgb_array")
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info == {"score": 13, "length": 16, "won": True}
    after = env.get_state()
    assert after.food is None and after.body == tuple(reversed(path))
    assert_invariants(env, obs, info)
    assert env.render().shape == (64, 64, 3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_step_after_the_end_raises_until_reset_or_set_state():
    state = SnakeState(((2, 4), (2, 3), (2, 2)), RIGHT, (0, 0))
    env = snake_env(state=state)
    env.step(0)
    with pytest.raises(RuntimeError, match="episode ended"):
        env.step(1)
    assert env.get_state() == state
    env.set_state(state)
    assert env.step(1)[2] is False
    env.step(0)  # down to the bottom row; the next step leaves the grid
    assert env.step(0)[2] is True
    env.reset()
    assert env.step(0)[2] is False


def test_step_before_the_first_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        SnakeEnv().step(0)


# -- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("action, error, message", [
    (3, ValueError, "action=3 must be"), (-1, ValueError, "action=-1 must be"), (1.0, TypeError, "action=1.0 must be"),
    ("0", TypeError, "action='0' must be"), (None, TypeError, "action=None must be"), (True, TypeError, "action=True must be"),
])
def test_bad_actions_raise_and_leave_the_state_unchanged(action, error, message):
    env = snake_env(10, 10)
    twin = snake_env(10, 10)
    before = env.get_state()
    with pytest.raises(error, match=message):
        env.step(action)
    assert env.get_state() == before
    for step_action in (1, 1, 0, 2, 0, 0):
        step, twin_step = env.step(step_action), twin.step(step_action)
        np.testing.assert_array_equal(step[0], twin_step[0])
        assert step[1:] == twin_step[1:]


@pytest.mark.parametrize("state, message", [
    (SnakeState(((1, 1), (1, 2), (3, 2)), LEFT, (0, 4)), "not contiguous"),
    (SnakeState(((0, 5), (0, 4), (0, 3)), RIGHT, (3, 3)), r"\(0, 5\) is off"),
    (SnakeState(((1, 1), (1, 2), (2, 2)), LEFT, (2, 2)), r"food \(2, 2\) is on the body"),
    (SnakeState(((1, 1), (1, 2), (1, 1)), LEFT, (0, 4)), "repeated cells"),
    (SnakeState(((1, 1), (1, 2), (2, 2)), RIGHT, (0, 4)), "direction 1 does not match"),
    (SnakeState(((1, 1), (1, 2), (2, 2)), LEFT, (0, 4), 25), "steps_since_food=25 must be"),
])
@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_invalid_states_raise_and_leave_the_env_unchanged(state, message, obs_type):
    env = snake_env(obs_type=obs_type)
    twin = snake_env(obs_type=obs_type)
    with pytest.raises(ValueError, match=message):
        env.set_state(state)
    assert env.get_state() == twin.get_state()
    for action in (1, 0, 0, 2, 2, 0, 1):
        step, twin_step = env.step(action), twin.step(action)
        np.testing.assert_array_equal(step[0], twin_step[0])
        assert step[1:] == twin_step[1:]
        if step[2] or step[3]:
            break


def test_set_state_rejects_non_states():
    with pytest.raises(TypeError, match="SnakeState, got tuple"):
        snake_env().set_state(((1, 1), (1, 2), (2, 2)))


# -- random play ----------------------------------------------------------------------------------

@settings(max_examples=80)
@given(
    height=st.integers(4, 12), width=st.integers(4, 12), seed=st.integers(0, 2**32 - 1),
    obs_type=st.sampled_from(rules.OBS_TYPES), max_steps=st.one_of(st.none(), st.integers(1, 30)),
    moves_seed=st.integers(0, 2**32 - 1), num_moves=st.integers(1, 600),
    greedy_share=st.floats(0, 1),
)
def test_random_play_follows_the_rules(height, width, seed, obs_type, max_steps, moves_seed,
                                       num_moves, greedy_share):
    # Moves are random actions mixed with safe moves towards the food, so snakes also grow long.
    moves = np.random.default_rng(moves_seed)
    env = SnakeEnv(height, width, obs_type, max_steps)
    obs, info = env.reset(seed=seed)
    assert_invariants(env, obs, info)
    for _ in range(num_moves):
        before = env.get_state()
        greedy = moves.random() < greedy_share
        action = greedy_action(before, height, width) if greedy else int(moves.integers(3))
        obs, reward, terminated, truncated, info = env.step(action)
        body, direction, steps, *outcome, ate = expected_step(
            before, action, height, width, env.max_steps_without_food)
        after = env.get_state()
        assert (after.body, after.direction, after.steps_since_food) == (body, direction, steps)
        assert [reward, terminated, truncated] == outcome
        assert type(reward) is float
        if not ate:
            assert after.food == before.food
        assert_invariants(env, obs, info)
        if terminated or truncated:
            obs, info = env.reset()
            assert_invariants(env, obs, info)


def play(seed, steps=300, obs_type="grid"):
    """A fixed sequence of actions from ``seed``; every reset after the first continues the stream."""
    env = SnakeEnv(8, 8, obs_type=obs_type)
    actions = np.random.default_rng(12345).integers(0, 3, steps)
    obs, _ = env.reset(seed=seed)
    trajectory = [obs.tobytes()]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        trajectory.append((obs.tobytes(), reward, terminated, truncated, env.get_state()))
        if terminated or truncated:
            trajectory.append(env.reset()[0].tobytes())
    return trajectory


def test_same_seed_same_trajectory_different_seeds_differ():
    assert play(7) == play(7)
    assert play(7) != play(8)
    foods = set()
    for seed in range(20):
        env = SnakeEnv(8, 8)
        env.reset(seed=seed)
        foods.add(env.get_state().food)
    assert len(foods) > 5


def test_new_food_is_uniform_over_the_empty_cells():
    # The snake eats from the same crafted state again and again; the new food must land on each
    # of the 21 empty cells of the 5x5 board about equally often.
    state = SnakeState(((2, 2), (2, 1), (2, 0)), RIGHT, (2, 3))
    env = snake_env(state=state)
    env.reset(seed=2024)
    counts = {}
    draws_per_cell = 200
    for _ in range(21 * draws_per_cell):
        env.set_state(state)
        env.step(0)
        food = env.get_state().food
        counts[food] = counts.get(food, 0) + 1
    grown_body = {(2, 3), (2, 2), (2, 1), (2, 0)}
    assert set(counts) == {(r, c) for r in range(5) for c in range(5)} - grown_body
    chi_square = sum((n - draws_per_cell) ** 2 / draws_per_cell for n in counts.values())
    assert chi_square < 45.31  # the 0.999 quantile of chi-square with 20 degrees of freedom


# -- rendering ------------------------------------------------------------------------------------

def test_render_gives_the_frame_of_the_current_state():
    env = SnakeEnv(6, 8, render_mode="rgb_array")
    env.reset(seed=0)
    env.step(1)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (6 * 16, 8 * 16, 3)
    np.testing.assert_array_equal(frame, render_state(env.get_state(), 6, 8))


def test_render_without_render_mode_raises():
    env = SnakeEnv()
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="render_mode='rgb_array'.*None"):
        env.render()


def random_long_states(count, height, width, seed=0):
    """Valid states with long, winding bodies (random self-avoiding walks): pockets and corridors."""
    rng = np.random.default_rng(seed)
    states = []
    while len(states) < count:
        body = [(int(rng.integers(height)), int(rng.integers(width)))]
        for _ in range(int(rng.integers(3, height * width // 2))):
            row, col = body[-1]
            steps = [(row + r, col + c) for r, c in rules.DIRECTION_DELTAS
                     if 0 <= row + r < height and 0 <= col + c < width and (row + r, col + c) not in body]
            if not steps:
                break
            body.append(steps[int(rng.integers(len(steps)))])
        if len(body) < 3:
            continue
        (head_row, head_col), (neck_row, neck_col) = body[:2]
        direction = rules.DIRECTION_DELTAS.index((head_row - neck_row, head_col - neck_col))
        empty = [(r, c) for r in range(height) for c in range(width) if (r, c) not in body]
        states.append(SnakeState(tuple(body), direction, empty[int(rng.integers(len(empty)))]))
    return states


@pytest.mark.parametrize("height, width", [(6, 6), (7, 9), (10, 10)])
def test_the_reach_observation_is_the_rules_flood_fill_on_long_winding_bodies(height, width):
    """The bitboard flood fill of "features_reach" against ``rules.space_shares``, where it matters:
    long bodies that cut the board into pockets, the move's cell being the tail, grids not square."""
    for state in random_long_states(150, height, width):
        env = snake_env(height, width, state=state, obs_type="features_reach")
        for action in range(rules.NUM_ACTIONS):
            env.set_state(state)
            obs, *_ = env.step(action)
            np.testing.assert_array_equal(obs, rules.observe(env.get_state(), height, width, "features_reach"))
