"""Pictures and animations of Snake games (introduced in notebook 01).

Everything draws from a ``SnakeState``, so frames can come from any env that exports one
(``SnakeEnv.get_state()``, ``VecSnake.get_state(i)``). The body fades from the head to the tail
and consecutive cells are joined, so the order of the body is visible in a single frame.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from io import BytesIO
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np

from ..core.checks import check_int, check_number
from . import rules
from .rules import SnakeState

BACKGROUND = np.array((24, 26, 33), dtype=np.uint8)
GRID_LINE = np.array((40, 43, 53), dtype=np.uint8)
HEAD = np.array((250, 220, 60), dtype=np.uint8)
BODY_NEAR_HEAD = np.array((60, 200, 90), dtype=np.float64)
BODY_AT_TAIL = np.array((20, 80, 50), dtype=np.float64)
FOOD = np.array((230, 60, 60), dtype=np.uint8)

_animation_ids = itertools.count()


def render_state(state: SnakeState, height: int, width: int, cell_px: int = 16) -> np.ndarray:
    """The board as a ``uint8`` RGB image of shape ``(height * cell_px, width * cell_px, 3)``."""
    height, width = rules.check_grid_size(height, width)
    _check_cell_px(cell_px)
    if not isinstance(state, SnakeState):
        raise TypeError(f"state must be a SnakeState, got {type(state).__name__}")
    cells = list(state.body) + ([state.food] if state.food is not None else [])
    for row, col in cells:
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(f"state cell {(row, col)} is off the {height}x{width} grid")

    image = np.empty((height * cell_px, width * cell_px, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    image[::cell_px, :] = GRID_LINE
    image[:, ::cell_px] = GRID_LINE
    margin = max(1, cell_px // 8)

    def fill(row0, col0, row1, col1, colour):
        """Colour the cells from (row0, col0) to (row1, col1) inclusive, inset by the margin."""
        top, bottom = min(row0, row1) * cell_px + margin, (max(row0, row1) + 1) * cell_px - margin
        left, right = min(col0, col1) * cell_px + margin, (max(col0, col1) + 1) * cell_px - margin
        image[top:bottom, left:right] = colour

    length = len(state.body)
    for i in range(length - 1, 0, -1):
        fraction = (i - 1) / max(1, length - 2)
        colour = np.round(BODY_NEAR_HEAD + fraction * (BODY_AT_TAIL - BODY_NEAR_HEAD)).astype(np.uint8)
        # Span the cell and the one before it (towards the head), joining the two.
        fill(*state.body[i], *state.body[i - 1], colour)
    fill(*state.body[0], *state.body[0], HEAD)
    if state.food is not None:
        fill(*state.food, *state.food, FOOD)
    return image


def animate_states(states, height: int, width: int, cell_px: int = 16, interval_ms: int = 100):
    """A ``matplotlib.animation.FuncAnimation`` with one frame per state, pixel for pixel.

    The figure is built without pyplot, so nothing is shown twice in a notebook; display it with
    ``show_animation`` or save it with ``save_animation``.
    """
    from matplotlib.animation import FuncAnimation
    from matplotlib.figure import Figure

    states = list(states)
    if not states:
        raise ValueError("states must hold at least one SnakeState, got none")
    check_number("interval_ms", interval_ms, above=0)
    frames = [render_state(state, height, width, cell_px) for state in states]
    dpi = 100
    figure = Figure(figsize=(frames[0].shape[1] / dpi, frames[0].shape[0] / dpi), dpi=dpi)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_axis_off()
    picture = axes.imshow(frames[0], interpolation="nearest")

    def draw(index):
        picture.set_data(frames[index])
        return (picture,)

    return FuncAnimation(figure, draw, frames=len(frames), interval=interval_ms)


def show_animation(states, height: int, width: int, cell_px: int = 16, interval_ms: int = 100):
    """An ``IPython.display.HTML`` player (play, pause, step) of the states, for notebooks.

    The HTML is the same on every run with the same states and library versions: frames carry no
    software-version stamp and the element id comes from the frames, not from a random uuid.
    """
    from IPython.display import HTML
    from matplotlib.animation import HTMLWriter

    animation = animate_states(states, height, width, cell_px, interval_ms)
    with TemporaryDirectory() as folder:
        path = Path(folder, "animation.html")
        writer = HTMLWriter(fps=1000 / interval_ms, embed_frames=True, default_mode="loop")
        animation.save(str(path), writer=writer, savefig_kwargs={"metadata": {"Software": None}})
        html = path.read_text()
    # matplotlib names the player's elements with uuid4().hex; swap in an id made from the
    # content and a per-process counter: stable across runs, still unique on the page.
    found = re.search(r"_anim_img([0-9a-f]{32})", html)
    if found:
        digest = hashlib.sha1(html.replace(found.group(1), "").encode()).hexdigest()[:24]
        html = html.replace(found.group(1), f"{digest}{next(_animation_ids):08x}")
    return HTML(html)


def save_animation(states, path, height: int, width: int, cell_px: int = 16, fps: float = 10):
    """Write the states as a looping GIF at ``path``, one frame per state, pixel for pixel.

    Writes the frames with Pillow directly (matplotlib requires Pillow, so it is always there),
    which keeps every pixel of ``render_state`` instead of redrawing them through a figure.
    """
    from PIL import Image

    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"path must end in .gif, got {str(path)!r}")
    check_number("fps", fps, above=0)
    states = list(states)
    if not states:
        raise ValueError("states must hold at least one SnakeState, got none")
    frames = [Image.fromarray(render_state(state, height, width, cell_px)) for state in states]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=round(1000 / fps),
                   loop=0)
    return path


def png_bytes(image: np.ndarray) -> bytes:
    """An RGB ``uint8`` image as PNG bytes (for widgets and HTML)."""
    from PIL import Image

    buffer = BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _check_cell_px(cell_px) -> None:
    check_int("cell_px", cell_px, 4)
