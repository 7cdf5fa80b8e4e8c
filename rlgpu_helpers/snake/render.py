"""Pictures and animations of Snake games (introduced in notebook 01).

Everything draws from a ``SnakeState``, so frames can come from any env that exports one
(``SnakeEnv.get_state()``, ``VecSnake.get_state(i)``). The body fades from the head to the tail
and consecutive cells are joined, so the order of the body is visible in a single frame.
Animations are GIFs: ``show_animation`` for a notebook, ``save_animation`` for a file.
"""

from __future__ import annotations

import base64
from io import BytesIO
from pathlib import Path

import numpy as np

from ..core.checks import check_int, check_number
from ..core.files import atomic_write
from . import rules
from .rules import SnakeState

BACKGROUND = np.array((24, 26, 33), dtype=np.uint8)
GRID_LINE = np.array((40, 43, 53), dtype=np.uint8)
HEAD = np.array((250, 220, 60), dtype=np.uint8)
BODY_NEAR_HEAD = np.array((60, 200, 90), dtype=np.float64)
BODY_AT_TAIL = np.array((20, 80, 50), dtype=np.float64)
FOOD = np.array((230, 60, 60), dtype=np.uint8)

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


def gif_bytes(states, height: int, width: int, cell_px: int = 16, interval_ms: float = 100) -> bytes:
    """The states as a looping GIF, one frame per state, pixel for pixel (``render_state``).

    Frames are written with Pillow directly (matplotlib requires Pillow, so it is always there),
    so every pixel of ``render_state`` is kept. The same states give the same bytes.
    """
    from PIL import Image

    check_number("interval_ms", interval_ms, above=0)
    states = list(states)
    if not states:
        raise ValueError("states must hold at least one SnakeState, got none")
    frames = [Image.fromarray(render_state(state, height, width, cell_px)) for state in states]
    buffer = BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:],
                   duration=round(interval_ms), loop=0)
    return buffer.getvalue()


class Animation:
    """A looping GIF of a game that a notebook shows as ``image/gif``.

    A GIF renders everywhere, also in a notebook opened without trusting it (every fresh clone),
    needs no script and no external asset, and is stored in the notebook as it was shown. To
    step through a game frame by frame in a live session, use ``widgets.ReplayPlayer``.
    """

    def __init__(self, states, height: int, width: int, cell_px: int = 16, interval_ms: float = 100):
        states = list(states)
        self.data = gif_bytes(states, height, width, cell_px, interval_ms)
        self.frames = len(states)
        self.size = (width * cell_px, height * cell_px)

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = f"<Snake animation: {self.frames} frames, {self.size[0]}x{self.size[1]} px>"
        return {"image/gif": base64.b64encode(self.data).decode("ascii"), "text/plain": text}

    def __repr__(self) -> str:
        return f"Animation(frames={self.frames}, size={self.size})"


def show_animation(states, height: int, width: int, cell_px: int = 16, interval_ms: float = 100) -> Animation:
    """An :class:`Animation` of the states for a notebook cell to show (a looping GIF)."""
    return Animation(states, height, width, cell_px, interval_ms)


def save_animation(states, path, height: int, width: int, cell_px: int = 16, fps: float = 10):
    """Write the states as a looping GIF at ``path``, one frame per state, pixel for pixel."""
    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"path={str(path)!r} must end in .gif")
    check_number("fps", fps, above=0)
    data = gif_bytes(states, height, width, cell_px, 1000 / fps)
    return atomic_write(path, data)


def png_bytes(image: np.ndarray) -> bytes:
    """An RGB ``uint8`` image as PNG bytes (for widgets and HTML)."""
    from PIL import Image

    buffer = BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _check_cell_px(cell_px) -> None:
    check_int("cell_px", cell_px, 4)
