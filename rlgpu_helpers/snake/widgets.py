"""Play Snake by hand in a notebook (introduced in notebook 01).

``SnakePlayer`` wraps a ``SnakeEnv`` in ipywidgets: turn buttons, a restart button and an
auto-play control. Without auto-play every click is one step. With auto-play the snake moves
straight on every tick, and a click on a turn is remembered and applied on the next tick.
"""

from __future__ import annotations

import ipywidgets as widgets

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
        self.cell_px = cell_px
        self.image = widgets.Image(format="png")
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
        ])
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
