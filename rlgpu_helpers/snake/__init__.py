"""Snake: the rules, the NumPy env, the batched tensor env and rendering (introduced in notebook 01)."""

from .env import SNAKE_ENV_ID, SnakeEnv
from .render import animate_states, render_state, save_animation, show_animation
from .rules import (
    ACTION_NAMES,
    DIRECTION_DELTAS,
    DOWN,
    LEFT,
    MAX_SIZE,
    MIN_SIZE,
    NUM_ACTIONS,
    NUM_FEATURES,
    OBS_TYPES,
    RIGHT,
    START_LENGTH,
    UP,
    SnakeState,
    observe,
    validate_state,
)

from .vec import VecSnake
