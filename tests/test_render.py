"""Rendering: frames show head, body order and food; animations and GIFs build cleanly."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from rlgpu_helpers.snake import render
from rlgpu_helpers.snake.env import SnakeEnv
from rlgpu_helpers.snake.render import (
    gif_bytes,
    render_state,
    save_animation,
    show_animation,
)
from rlgpu_helpers.snake.rules import LEFT, SnakeState

# Head (1, 1) heading left; the body bends down and right; (2, 1) is the tail.
STATE = SnakeState(((1, 1), (1, 2), (2, 2), (3, 2), (3, 1), (2, 1)), LEFT, (0, 4))
PX = 10


def centre(image, cell):
    return tuple(image[cell[0] * PX + PX // 2, cell[1] * PX + PX // 2])


def between(image, cell_a, cell_b):
    """The pixel on the border between two neighbouring cells, halfway along it."""
    row = (cell_a[0] + cell_b[0] + 1) * PX // 2
    col = (cell_a[1] + cell_b[1] + 1) * PX // 2
    return tuple(image[row, col])


def states_of_a_short_game():
    env = SnakeEnv(6, 6)
    env.reset(seed=1)
    states = [env.get_state()]
    for action in (0, 1, 1, 0, 2):
        env.step(action)
        states.append(env.get_state())
    return states


def test_render_state_shape_and_colours():
    image = render_state(STATE, 5, 6, cell_px=PX)
    assert image.dtype == np.uint8 and image.shape == (5 * PX, 6 * PX, 3)
    assert centre(image, (1, 1)) == tuple(render.HEAD)
    assert centre(image, (0, 4)) == tuple(render.FOOD)
    assert centre(image, (4, 4)) == tuple(render.BACKGROUND)
    assert tuple(image[4 * PX, 4 * PX + PX // 2]) == tuple(render.GRID_LINE)
    body = [centre(image, cell) for cell in STATE.body[1:]]
    colours = {tuple(render.HEAD), tuple(render.FOOD), tuple(render.BACKGROUND), tuple(render.GRID_LINE)}
    assert not colours & set(body)
    brightness = [sum(map(int, colour)) for colour in body]
    assert brightness == sorted(brightness, reverse=True) and len(set(brightness)) == len(body)


def test_consecutive_cells_are_joined_neighbours_that_are_not_are_apart():
    image = render_state(STATE, 5, 6, cell_px=PX)
    board = {tuple(render.BACKGROUND), tuple(render.GRID_LINE)}
    for a, b in zip(STATE.body, STATE.body[1:]):
        assert between(image, a, b) not in board, (a, b)
    # The head (1, 1) and the tail (2, 1) touch on the board but not in the snake.
    assert between(image, (1, 1), (2, 1)) in board


def test_render_state_of_a_won_game_has_no_food():
    path = [(r, c if r % 2 == 0 else 3 - c) for r in range(4) for c in range(4)]
    image = render_state(SnakeState(tuple(reversed(path)), LEFT, None), 4, 4, cell_px=PX)
    assert not (image == render.FOOD).all(axis=-1).any()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"state": ((1, 1), (1, 2), (1, 3))}, TypeError, "state must be a SnakeState, got tuple"),
    ({"state": SnakeState(((1, 1), (1, 2), (1, 3)), LEFT, (9, 9))}, ValueError, r"\(9, 9\) is off"),
    ({"cell_px": 2}, ValueError, "cell_px=2 must be an int >= 4"),
    ({"cell_px": 8.0}, TypeError, "cell_px=8.0 must be an int"),
    ({"height": 3}, ValueError, "height=3 must be"),
])
def test_render_state_rejects_bad_input(kwargs, error, message):
    arguments = {"state": STATE, "height": 5, "width": 6, "cell_px": PX, **kwargs}
    with pytest.raises(error, match=message):
        render_state(**arguments)


def test_show_animation_is_a_gif_that_renders_without_scripts(capfd):
    """A notebook stores the GIF itself (image/gif): it shows in an untrusted notebook, loads
    nothing from the network, and is the same on every run with the same states."""
    states = states_of_a_short_game()
    shown = show_animation(states, 6, 6, cell_px=PX, interval_ms=150)
    bundle = shown._repr_mimebundle_()
    assert set(bundle) == {"image/gif", "text/plain"}
    assert bundle["text/plain"] == f"<Snake animation: {len(states)} frames, {6 * PX}x{6 * PX} px>"
    data = base64.b64decode(bundle["image/gif"])
    assert data == show_animation(states, 6, 6, cell_px=PX, interval_ms=150).data
    with Image.open(io.BytesIO(data)) as gif:
        assert gif.n_frames == len(states) and gif.info["duration"] == 150
        gif.seek(len(states) - 1)
        np.testing.assert_array_equal(np.asarray(gif.convert("RGB")), render_state(states[-1], 6, 6, PX))
    assert capfd.readouterr().err == ""


def test_gif_bytes_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one SnakeState"):
        gif_bytes([], 6, 6)
    with pytest.raises(ValueError, match="interval_ms=0 must be a finite number > 0"):
        gif_bytes(states_of_a_short_game(), 6, 6, interval_ms=0)


def test_save_animation_writes_a_gif(tmp_path, capfd):
    states = states_of_a_short_game()
    path = save_animation(states, tmp_path / "game.gif", 6, 6, cell_px=PX, fps=5)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.size == (6 * PX, 6 * PX)
        assert gif.n_frames == len(states)
        assert gif.info["duration"] == 200
        np.testing.assert_array_equal(np.asarray(gif.convert("RGB")), render_state(states[0], 6, 6, PX))
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("kwargs, message", [
    ({"path": "game.png"}, "path='.*game.png' must end in .gif"),
    ({"fps": 0}, "fps=0 must be a finite number > 0"),
    ({"states": []}, "at least one SnakeState"),
])
def test_save_animation_rejects_bad_input(tmp_path, kwargs, message):
    arguments = {"states": states_of_a_short_game(), "path": "game.gif", **kwargs}
    arguments["path"] = tmp_path / arguments["path"]
    with pytest.raises(ValueError, match=message):
        save_animation(height=6, width=6, **arguments)
