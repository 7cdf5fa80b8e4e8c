"""Play Snake by hand, and step through a recorded game, in a notebook (introduced in notebook 01).

``SnakePlayer`` wraps a ``SnakeEnv`` in ipywidgets: turn buttons, a restart button and an
auto-play control. Without auto-play every click is one step. With auto-play the snake moves
straight on every tick, and a click on a turn is remembered and applied on the next tick.

``ReplayPlayer`` shows a recorded game (a list of ``SnakeState``) frame by frame, with a play
button and a slider: the live counterpart of ``render.show_animation``'s GIF.

Both draw the board at its natural size (``cell_px`` per cell), so it is neither stretched to the
width of the page nor blurred, and the board and its buttons fit a laptop screen together.
"""

from __future__ import annotations

import ipywidgets as widgets

from ..core.checks import check_int
from . import rules
from .env import SnakeEnv
from .render import png_bytes, render_state

# Button label -> action (relative to the heading).
BUTTON_ACTIONS = {"Turn left": 2, "Straight": 0, "Turn right": 1}


class SnakePlayer:
    """An ipywidgets app to play one game of Snake; show it with ``display(player)``.

    ``player.ui`` is the widget tree. Displaying the player itself gives the same widget with a
    fixed text form (``SnakePlayer(height=10, width=10)``), so notebook checks that compare text
    outputs see the same thing on every run.
    """

    def __init__(self, height=10, width=10, seed=None, cell_px=24):
        self.env = SnakeEnv(height, width)
        self.cell_px = check_int("cell_px", cell_px, 4)
        self.image = board_image(height, width, cell_px)
        self.buttons = {label: widgets.Button(description=label) for label in BUTTON_ACTIONS}
        for label, button in self.buttons.items():
            button.on_click(lambda _, action=BUTTON_ACTIONS[label]: self._on_turn(action))
        self.restart_button = widgets.Button(description="Restart", button_style="warning")
        self.restart_button.on_click(lambda _: self.restart())
        self.play = widgets.Play(value=0, min=0, max=10**9, step=1, interval=300,
                                 description="Auto-play", show_repeat=False)
        self.play.observe(lambda _: self._on_tick(), names="value")
        self.speed = widgets.IntSlider(value=300, min=50, max=1000, step=50,
                                       description="ms per step")
        widgets.link((self.speed, "value"), (self.play, "interval"))
        self.status = widgets.Label()
        self.ui = widgets.VBox([
            self.image,
            widgets.HBox(list(self.buttons.values()) + [self.restart_button]),
            widgets.HBox([self.play, self.speed]),
            self.status,
        ], layout=widgets.Layout(align_items="flex-start"))  # children keep their own width
        self._pending_action = 0
        self.restart(seed=seed)

    def restart(self, seed=None) -> None:
        """A new game (``seed`` only for the first one: restarts continue the same random stream)."""
        self.env.reset(seed=seed)
        self._pending_action = 0
        self._outcome = "playing"
        self._draw()

    def set_state(self, state: rules.SnakeState) -> None:
        """Continue from a hand-made position (validated by ``SnakeEnv.set_state``)."""
        self.env.set_state(state)
        self._pending_action = 0
        self._outcome = "playing"
        self._draw()

    @property
    def state(self) -> rules.SnakeState:
        return self.env.get_state()

    @property
    def game_over(self) -> bool:
        return self._outcome != "playing"

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.ui._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self):
        return f"SnakePlayer(height={self.env.height}, width={self.env.width})"

    def _on_turn(self, action: int) -> None:
        if self.play.playing:
            self._pending_action = action
        else:
            self._step(action)

    def _on_tick(self) -> None:
        action, self._pending_action = self._pending_action, 0
        self._step(action)

    def _step(self, action: int) -> None:
        if self.game_over:
            return
        _, _, terminated, truncated, info = self.env.step(action)
        if info["won"]:
            self._outcome = "won, the board is full"
        elif terminated:
            self._outcome = "crashed"
        elif truncated:
            self._outcome = "starved: too long without food"
        if self.game_over:
            self.play.playing = False
        self._draw()

    def _draw(self) -> None:
        state = self.env.get_state()
        self.image.value = png_bytes(render_state(state, self.env.height, self.env.width, self.cell_px))
        status = self._outcome if not self.game_over else f"game over, {self._outcome}: press Restart"
        self.status.value = f"Score {state.score} | Length {state.length} | {status}"


def board_image(height: int, width: int, cell_px: int) -> widgets.Image:
    """An image widget pinned to the board's natural size in pixels (no stretching, no blur)."""
    px_wide, px_high = width * cell_px, height * cell_px
    return widgets.Image(format="png", width=px_wide, height=px_high,
                         layout=widgets.Layout(width=f"{px_wide}px", height=f"{px_high}px"))


class ReplayPlayer:
    """Step through a recorded game frame by frame; show it with ``display(player)``.

    ``states`` are the game's ``SnakeState`` from start to end (``learn.agents.play_episode``
    returns them). The play button runs the frames at ``interval_ms``; the slider picks one.
    """

    def __init__(self, states, height: int, width: int, cell_px: int = 16, interval_ms: int = 100):
        self.states = list(states)
        if not self.states:
            raise ValueError("states must hold at least one SnakeState, got none")
        self.height, self.width = rules.check_grid_size(height, width)
        self.cell_px = check_int("cell_px", cell_px, 4)
        interval_ms = check_int("interval_ms", interval_ms, 1)
        self.image = board_image(height, width, cell_px)
        last = len(self.states) - 1
        self.play = widgets.Play(value=0, min=0, max=last, step=1, interval=interval_ms, description="Play")
        self.slider = widgets.IntSlider(value=0, min=0, max=last, description="frame")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.status = widgets.Label()
        self.slider.observe(lambda change: self.show(change["new"]), names="value")
        self.ui = widgets.VBox([self.image, widgets.HBox([self.play, self.slider]), self.status],
                               layout=widgets.Layout(align_items="flex-start"))
        self.show(0)

    def show(self, frame: int) -> None:
        """Draw frame ``frame`` (0 is the start)."""
        frame = check_int("frame", frame, 0, len(self.states) - 1)
        state = self.states[frame]
        self.image.value = png_bytes(render_state(state, self.height, self.width, self.cell_px))
        self.status.value = f"Frame {frame} of {len(self.states) - 1} | Score {state.score} | Length {state.length}"

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.ui._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self):
        return f"ReplayPlayer({len(self.states)} frames, height={self.height}, width={self.width})"
