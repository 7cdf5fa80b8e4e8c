"""SnakePlayer: the buttons and the auto-play ticks move the snake by the rules."""

import ipywidgets
import pytest
from test_render import states_of_a_short_game

from rlgpu_helpers.snake.rules import DOWN, LEFT, RIGHT, UP, SnakeState
from rlgpu_helpers.snake.widgets import SnakePlayer


def click(player, label):
    player.buttons[label].click()


def test_a_new_player_shows_the_start_of_a_game():
    player = SnakePlayer(seed=0)
    assert player.state.body == ((5, 5), (5, 4), (5, 3)) and player.state.direction == RIGHT
    assert bytes(player.image.value).startswith(b"\x89PNG")
    assert player.status.value == "Score 0 | Length 3 | playing"
    assert isinstance(player.ui, ipywidgets.VBox)
    assert SnakePlayer(seed=0).state == player.state


@pytest.mark.parametrize("label, direction, head", [
    ("Straight", RIGHT, (5, 6)), ("Turn right", DOWN, (6, 5)), ("Turn left", UP, (4, 5)),
])
def test_each_button_is_one_step(label, direction, head):
    player = SnakePlayer(seed=0)
    player.set_state(SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (0, 0)))
    frame = bytes(player.image.value)
    click(player, label)
    assert player.state.direction == direction and player.state.body[0] == head
    assert player.state.body[1:] == ((5, 5), (5, 4))
    assert bytes(player.image.value) != frame


def test_eating_shows_in_the_score():
    player = SnakePlayer(seed=0)
    player.set_state(SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (5, 6)))
    click(player, "Straight")
    assert player.status.value == "Score 1 | Length 4 | playing"


def test_a_crash_ends_the_game_until_restart():
    player = SnakePlayer(seed=0)
    crash_state = SnakeState(((5, 9), (5, 8), (5, 7)), RIGHT, (0, 0))
    player.set_state(crash_state)
    player.play.playing = True
    player.play.value += 1  # a tick goes straight, into the wall
    assert player.status.value == "Score 0 | Length 3 | game over, crashed: press Restart"
    assert player.play.playing is False
    click(player, "Turn left")  # ignored: the game is over
    assert player.state == crash_state
    player.restart_button.click()
    assert player.state.body == ((5, 5), (5, 4), (5, 3))
    assert player.status.value == "Score 0 | Length 3 | playing"


def test_starving_ends_the_game():
    player = SnakePlayer(4, 4, seed=0)
    player.set_state(SnakeState(((1, 1), (1, 2), (1, 3)), LEFT, (3, 3), 15))
    click(player, "Straight")
    assert player.status.value.endswith("game over, starved: too long without food: press Restart")


def test_auto_play_goes_straight_and_applies_a_click_on_the_next_tick():
    player = SnakePlayer(seed=0)
    player.set_state(SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (0, 0)))
    player.play.playing = True
    player.play.value += 1
    assert player.state.body[0] == (5, 6)
    click(player, "Turn right")  # remembered, not applied yet
    assert player.state.body[0] == (5, 6)
    player.play.value += 1
    assert player.state.direction == DOWN and player.state.body[0] == (6, 6)
    player.play.value += 1  # straight again
    assert player.state.direction == DOWN and player.state.body[0] == (7, 6)


def test_speed_slider_sets_the_tick_interval():
    player = SnakePlayer(seed=0)
    player.speed.value = 100
    assert player.play.interval == 100


def test_display_text_is_fixed():
    player = SnakePlayer(6, 8, seed=3)
    bundle = player._repr_mimebundle_()
    assert repr(player) == bundle["text/plain"] == "SnakePlayer(height=6, width=8)"
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == player.ui.model_id


def test_set_state_restarts_play_from_a_hand_made_position():
    player = SnakePlayer(seed=0)
    player.set_state(SnakeState(((5, 9), (5, 8), (5, 7)), RIGHT, (0, 0)))
    click(player, "Straight")
    assert player.game_over
    player.set_state(SnakeState(((5, 5), (5, 4), (5, 3)), RIGHT, (5, 6)))
    assert not player.game_over and player.status.value == "Score 0 | Length 3 | playing"
    with pytest.raises(ValueError, match="not contiguous"):
        player.set_state(SnakeState(((5, 5), (5, 4), (5, 2)), RIGHT, (0, 0)))


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match=r"height=2 must be an int in \[4, 64\]"):
        SnakePlayer(2, 10)


def test_the_board_keeps_its_natural_size():
    """Pinned to width x cell_px pixels, so JupyterLab neither stretches nor blurs it, and the
    column does not stretch its children to the page width."""
    player = SnakePlayer(8, 12, cell_px=20)
    assert (player.image.width, player.image.height) == ("240", "160")
    assert (player.image.layout.width, player.image.layout.height) == ("240px", "160px")
    assert player.ui.layout.align_items == "flex-start"
    with pytest.raises(ValueError, match="cell_px=2 must be an int >= 4"):
        SnakePlayer(cell_px=2)


def test_the_replay_player_shows_each_frame_of_a_recorded_game():
    from rlgpu_helpers.snake.render import png_bytes, render_state
    from rlgpu_helpers.snake.widgets import ReplayPlayer

    states = states_of_a_short_game()
    player = ReplayPlayer(states, 6, 6, cell_px=10)
    assert (player.slider.max, player.play.max) == (len(states) - 1, len(states) - 1)
    assert bytes(player.image.value) == png_bytes(render_state(states[0], 6, 6, 10))
    player.slider.value = 3
    assert bytes(player.image.value) == png_bytes(render_state(states[3], 6, 6, 10))
    assert player.status.value == f"Frame 3 of {len(states) - 1} | Score {states[3].score} | Length {states[3].length}"
    assert repr(player) == f"ReplayPlayer({len(states)} frames, height=6, width=6)"
    with pytest.raises(ValueError, match="at least one SnakeState"):
        ReplayPlayer([], 6, 6)
    with pytest.raises(ValueError, match=r"frame=99 must be an int in \[0, 5\]"):
        player.show(99)
