"""evaluate_wins counts games played to the end, and a win only where the board was filled."""

import numpy as np
import pytest
import torch

from rlgpu_helpers.learn.nets import ActorCritic
from rlgpu_helpers.learn.wins import WinRecord, evaluate_wins
from rlgpu_helpers.snake import rules

# A Hamiltonian cycle of the 4x4 board through the start body (2, 0) -> (2, 1) -> (2, 2): a snake
# that follows it never meets itself and reaches every food within 16 moves, so it always wins.
CYCLE = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (2, 3), (3, 3), (3, 2), (3, 1), (3, 0),
         (2, 0), (2, 1), (2, 2), (1, 2), (1, 1), (1, 0)]


def cycle_actions() -> torch.Tensor:
    """[head cell, row * 4 + col] -> the action that follows the cycle, for a snake already on it."""
    def heading(a, b):
        return rules.DIRECTION_DELTAS.index((b[0] - a[0], b[1] - a[1]))

    actions = torch.zeros(16, dtype=torch.int64)
    for i, cell in enumerate(CYCLE):
        came, goes = heading(CYCLE[i - 1], cell), heading(cell, CYCLE[(i + 1) % 16])
        actions[cell[0] * 4 + cell[1]] = rules.ACTION_TURNS.index((goes - came) % 4)
    return actions


def cycle_policy(obs: torch.Tensor) -> torch.Tensor:
    """Reads the head from a "grid" observation and plays the cycle's move, with certainty."""
    head = obs[:, 0].flatten(1).argmax(1)
    return torch.nn.functional.one_hot(cycle_actions()[head], 3).float() * 1e4


def constant_policy(action):
    def policy(obs):
        return torch.nn.functional.one_hot(torch.full((len(obs),), action), 3).float()
    return policy


@pytest.mark.parametrize("greedy", [True, False])
def test_a_policy_that_follows_a_hamiltonian_cycle_wins_every_game(greedy):
    record = evaluate_wins(cycle_policy, 24, height=4, width=4, obs_type="grid", seed=3, greedy=greedy)
    assert isinstance(record, WinRecord)
    assert record.games == 24 and record.wins == 24 and record.win_rate == 1.0
    np.testing.assert_array_equal(record.scores, np.full(24, 16 - rules.START_LENGTH))
    assert record.won.all() and not record.truncated.any()
    assert record.mean == record.median == 13.0


def test_a_recorded_slot_replays_its_won_game_from_the_start_to_the_last_state_before_the_end():
    record = evaluate_wins(cycle_policy, 6, height=4, width=4, obs_type="grid", seed=3, record_slot=4)
    states = record.states
    assert record.won[4] and len(states[-1].body) == 16 - 1  # one food left before the last step fills the board
    assert len(states[0].body) == rules.START_LENGTH and states[0].steps_since_food == 0
    for before, after in zip(states, states[1:]):  # one move apart: the head moved to a neighbouring cell
        (r0, c0), (r1, c1) = before.body[0], after.body[0]
        assert abs(r0 - r1) + abs(c0 - c1) == 1
    assert evaluate_wins(cycle_policy, 6, height=4, width=4, obs_type="grid", seed=3).states == ()
    with pytest.raises(ValueError, match="record_slot=6 must be an int in"):
        evaluate_wins(cycle_policy, 6, height=4, width=4, obs_type="grid", record_slot=6)


def test_a_policy_that_runs_into_the_wall_wins_nothing():
    # Straight on from the start: two cells to the wall of a 4x4 board (food on the way: 1 point).
    record = evaluate_wins(constant_policy(0), 50, height=4, width=4, obs_type="features", seed=0)
    assert record.games == 50 and record.wins == 0 and record.win_rate == 0.0
    assert set(record.scores.tolist()) <= {0, 1} and not record.truncated.any()


def test_truncated_games_are_games_but_not_wins():
    # Always right: the snake circles a 2x2 square after its tail until the step limit cuts it off.
    record = evaluate_wins(constant_policy(1), 40, height=4, width=4, obs_type="features", seed=1)
    assert record.games == 40 and record.truncated.all() and record.wins == 0
    # Following the cycle, but with at most 2 moves to each food: the games end truncated, unwon.
    cut = evaluate_wins(cycle_policy, 40, height=4, width=4, obs_type="grid", seed=1, max_steps_without_food=2)
    assert cut.games == 40 and cut.wins == (~cut.truncated).sum() and cut.truncated.sum() > 30
    assert (cut.scores[cut.truncated] < 13).all()


def test_the_record_adds_up():
    record = WinRecord(np.array([13, 4, 13, 0]), np.array([True, False, True, False]), np.zeros(4, bool))
    assert (record.games, record.wins, record.win_rate, record.mean, record.median) == (4, 2, 0.5, 7.5, 8.5)


def test_the_same_seed_gives_the_same_games_another_seed_others():
    torch.manual_seed(0)
    model = ActorCritic(rules.observation_shape("ego_grid", 5, 5), hidden=16)
    play = dict(height=5, width=5, obs_type="ego_grid", greedy=False)
    first, again = (evaluate_wins(model.logits, 32, seed=7, **play) for _ in range(2))
    other = evaluate_wins(model.logits, 32, seed=8, **play)
    np.testing.assert_array_equal(first.scores, again.scores)
    np.testing.assert_array_equal(first.truncated, again.truncated)
    assert not np.array_equal(first.scores, other.scores)
    assert first.games == 32 and first.wins == 0


@pytest.mark.parametrize("call, error, message", [
    (lambda: evaluate_wins(constant_policy(0), 0), ValueError, "games=0 must be an int >= 1"),
    (lambda: evaluate_wins(constant_policy(0), 4, seed=-1), ValueError, "seed=-1 must be a seed"),
    (lambda: evaluate_wins(constant_policy(0), 4, greedy="yes"), TypeError, "greedy='yes' must be True or False"),
    (lambda: evaluate_wins("policy", 4), TypeError, "policy='policy' must be callable"),
    (lambda: evaluate_wins(lambda obs: obs, 4), ValueError, r"policy returned \(4, 11\): .* shape \(4, 3\)"),
    (lambda: evaluate_wins(constant_policy(0), 4, obs_type="pixels"), ValueError, "obs_type='pixels'"),
])
def test_bad_input_raises_naming_the_parameter(call, error, message):
    with pytest.raises(error, match=message):
        call()
