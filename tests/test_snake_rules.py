"""The rules module: argument checks, state validation and the reference observations."""

import numpy as np
import pytest

from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.rules import DOWN, LEFT, RIGHT, UP, SnakeState

# A 5x5 board: the head at (1, 1) heading left, the body bending down behind it.
#   . . . . F
#   . H 1 . .
#   . T 2 . .      (T = tail of the 4-cell snake)
SQUARE_BODY = ((1, 1), (1, 2), (2, 2), (2, 1))


# -- argument checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("height, width", [(4, 4), (64, 64), (10, 7), (np.int64(5), 6)])
def test_check_grid_size_accepts_4_to_64(height, width):
    assert rules.check_grid_size(height, width) == (int(height), int(width))


@pytest.mark.parametrize("height, width, name, value", [
    (3, 10, "height", "3"), (10, 65, "width", "65"), (0, 10, "height", "0"), (10, -4, "width", "-4"),
])
def test_check_grid_size_rejects_out_of_range_naming_the_value(height, width, name, value):
    with pytest.raises(ValueError, match=f"{name}={value} must be an int in"):
        rules.check_grid_size(height, width)


@pytest.mark.parametrize("bad", [10.0, "10", True, None])
def test_check_grid_size_rejects_non_ints(bad):
    with pytest.raises(TypeError, match="height"):
        rules.check_grid_size(bad, 10)


def test_check_obs_type():
    assert rules.check_obs_type("grid") == "grid"
    with pytest.raises(ValueError, match="'pixels'"):
        rules.check_obs_type("pixels")


def test_check_max_steps_without_food():
    assert rules.check_max_steps_without_food(None, 6, 7) == 42
    assert rules.check_max_steps_without_food(5, 6, 7) == 5
    with pytest.raises(ValueError, match="max_steps_without_food.*0"):
        rules.check_max_steps_without_food(0, 6, 7)
    for bad in (2.5, True, "5"):
        with pytest.raises(TypeError, match="max_steps_without_food"):
            rules.check_max_steps_without_food(bad, 6, 7)


@pytest.mark.parametrize("action", [0, 1, 2, np.int64(2), np.array(1)])
def test_check_action_accepts_ints(action):
    assert rules.check_action(action) == int(action)
    assert type(rules.check_action(action)) is int


@pytest.mark.parametrize("bad", [3, -1, 100])
def test_check_action_rejects_out_of_range_naming_the_value(bad):
    with pytest.raises(ValueError, match=rf"action={bad} must be an int in \[0, 2\]"):
        rules.check_action(bad)


@pytest.mark.parametrize("bad", [1.0, "1", True, None, np.array([1]), np.float32(1)])
def test_check_action_rejects_non_ints(bad):
    with pytest.raises(TypeError, match="action"):
        rules.check_action(bad)


def test_turn_and_start_body():
    assert [rules.turn(UP, a) for a in range(3)] == [UP, RIGHT, LEFT]
    assert [rules.turn(LEFT, a) for a in range(3)] == [LEFT, UP, DOWN]
    assert rules.start_body(10, 10) == ((5, 5), (5, 4), (5, 3))
    assert rules.start_body(5, 4) == ((2, 2), (2, 1), (2, 0))


def test_snake_state_normalizes_its_fields():
    plain = SnakeState(((1, 1), (1, 2), (2, 2)), LEFT, (0, 4), 3)
    from_arrays = SnakeState(np.array([[1, 1], [1, 2], [2, 2]]), LEFT, np.array([0, 4]), 3)
    assert plain == from_arrays
    assert plain.length == 3 and plain.score == 0
    with pytest.raises(TypeError, match="body"):
        SnakeState([1, 2, 3], LEFT, (0, 4))
    with pytest.raises(TypeError, match="food"):
        SnakeState(SQUARE_BODY, LEFT, 7)


# -- validate_state -------------------------------------------------------------------------------

def test_validate_state_accepts_valid_states():
    rules.validate_state(SnakeState(SQUARE_BODY, LEFT, (0, 4), 24), 5, 5, 25)
    full = tuple((r, c if r % 2 == 0 else 3 - c) for r in range(4) for c in range(4))[::-1]
    # The serpentine fills a 4x4 board; the head (3, 0) came from (3, 1), heading left.
    rules.validate_state(SnakeState(full, LEFT, None), 4, 4, 16)


@pytest.mark.parametrize("state, error, message", [
    (SnakeState(((1, 1), (1, 2)), LEFT, (0, 4)), ValueError, "at least 3 cells, got 2"),
    (SnakeState(((0, 5), (0, 4), (0, 3)), RIGHT, (3, 3)), ValueError, r"\(0, 5\) is off"),
    (SnakeState(((-1, 1), (0, 1), (1, 1)), UP, (3, 3)), ValueError, r"\(-1, 1\) is off"),
    (SnakeState(((1, 1), (1, 2), (1, 1)), LEFT, (0, 4)), ValueError, "repeated cells"),
    (SnakeState(((1, 1), (1, 2), (3, 2)), LEFT, (0, 4)), ValueError, r"not contiguous: \(1, 2\)"),
    (SnakeState(SQUARE_BODY, RIGHT, (0, 4)), ValueError, "direction 1 does not match"),
    (SnakeState(SQUARE_BODY, 4, (0, 4)), ValueError, r"state.direction=4 must be an int in \[0, 3\]"),
    (SnakeState(SQUARE_BODY, 3.0, (0, 4)), TypeError, "state.direction=3.0 must be an int"),
    (SnakeState(SQUARE_BODY, LEFT, (2, 2)), ValueError, r"food \(2, 2\) is on the body"),
    (SnakeState(SQUARE_BODY, LEFT, (5, 0)), ValueError, r"food \(5, 0\) is off"),
    (SnakeState(SQUARE_BODY, LEFT, None), ValueError, "food is None but the board is not full"),
    (SnakeState(SQUARE_BODY, LEFT, (0, 4), 25), ValueError, r"state.steps_since_food=25 must be an int in \[0, 24\]"),
    (SnakeState(SQUARE_BODY, LEFT, (0, 4), -1), ValueError, "state.steps_since_food=-1 must be"),
    (SnakeState(SQUARE_BODY, LEFT, (0, 4), 1.5), TypeError, "state.steps_since_food=1.5 must be an int"),
])
def test_validate_state_names_what_is_wrong(state, error, message):
    with pytest.raises(error, match=message):
        rules.validate_state(state, 5, 5, 25)


def test_validate_state_rejects_non_states():
    with pytest.raises(TypeError, match="SnakeState, got dict"):
        rules.validate_state({"body": SQUARE_BODY}, 5, 5, 25)


# -- reference observations on hand-made states ---------------------------------------------------

def test_features_by_hand():
    # Heading left at the left wall: danger straight only; food below and to the right.
    state = SnakeState(((1, 0), (1, 1), (1, 2)), LEFT, (4, 4))
    expected = [1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0]
    np.testing.assert_array_equal(rules.observe(state, 6, 6, "features"), expected)


def test_features_tail_is_not_a_danger_but_other_body_cells_are():
    # Turning left (down) from (1, 1) leads to (2, 1): the tail of the 4-cell snake, which moves
    # away, so no danger; with one more cell behind it, (2, 1) stays put and is a danger.
    short = SnakeState(SQUARE_BODY, LEFT, (0, 4))
    longer = SnakeState(SQUARE_BODY + ((3, 1),), LEFT, (0, 4))
    np.testing.assert_array_equal(rules.observe(short, 5, 5, "features"), [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(rules.observe(longer, 5, 5, "features"), [0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0])


def test_features_food_in_line_sets_one_flag():
    state = SnakeState(((2, 2), (3, 2), (4, 2)), UP, (0, 2))
    obs = rules.observe(state, 5, 5, "features")
    np.testing.assert_array_equal(obs, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0])
    assert obs.dtype == np.float32 and obs.shape == (rules.NUM_FEATURES,)


def test_grid_by_hand():
    state = SnakeState(SQUARE_BODY, LEFT, (0, 4))
    obs = rules.observe(state, 5, 5, "grid")
    assert obs.shape == (3, 5, 5) and obs.dtype == np.float32
    head, body, food = np.zeros((3, 5, 5), dtype=np.float32)
    head[1, 1] = 1.0
    body[1, 1], body[1, 2], body[2, 2], body[2, 1] = 1.0, 0.75, 0.5, 0.25
    food[0, 4] = 1.0
    np.testing.assert_array_equal(obs, np.stack([head, body, food]))


def test_won_state_has_no_food_in_either_observation():
    full = tuple((r, c if r % 2 == 0 else 3 - c) for r in range(4) for c in range(4))[::-1]
    state = SnakeState(full, LEFT, None)
    assert rules.observe(state, 4, 4, "grid")[2].sum() == 0
    assert rules.observe(state, 4, 4, "features")[7:].sum() == 0
    assert rules.observe(state, 4, 4, "grid")[1].min() == pytest.approx(1 / 16)


def test_feature_names_match_the_observation():
    assert len(rules.FEATURE_NAMES) == rules.NUM_FEATURES
    # Start of a game heading right, food straight below the head: heading right, food down.
    state = SnakeState(rules.start_body(10, 10), RIGHT, (8, 5))
    obs = rules.observe(state, 10, 10, "features")
    on = [name for name, value in zip(rules.FEATURE_NAMES, obs) if value]
    assert on == ["heading right", "food down"]


def test_space_of_each_move_by_hand():
    """4x4, heading left at (1, 0): straight is the wall, up is a one-cell pocket, down is the rest.

        . B B .      B: body (the tail T is free, as for danger)
        H B T .      free cells: 16 - 4 blocked = 12
        . . . .      up: {(0, 0)}, walled in by the body and the head: 1 / 12
        . . . .      down: every free cell but the pocket: 11 / 12
    """
    state = SnakeState(((1, 0), (1, 1), (0, 1), (0, 2), (1, 2)), LEFT, (3, 3))
    np.testing.assert_allclose(rules.space_shares(state, 4, 4), [0.0, 1 / 12, 11 / 12], rtol=1e-6)
    obs = rules.observe(state, 4, 4, "features_reach")
    assert obs.shape == (15,) == rules.observation_shape("features_reach", 4, 4)
    np.testing.assert_array_equal(obs[:11], rules.observe(state, 4, 4, "features"))
    assert obs[14] == pytest.approx(5 / 16)
    assert len(rules.REACH_FEATURE_NAMES) == 15

