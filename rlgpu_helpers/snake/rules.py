"""The rules of Snake, shared by every env in the package (introduced in notebook 01).

One place says what a valid game looks like: grid sizes, actions, the start position, the
``SnakeState`` every env can export and import, and the observation types computed from a
state. ``SnakeEnv`` (NumPy) and ``VecSnake`` (torch) both follow these rules, and the tests run
them side by side to prove it.

Coordinates are ``(row, col)`` with row 0 at the top. Directions: 0 up, 1 right, 2 down, 3 left.
Actions are relative to the heading: 0 straight, 1 turn right, 2 turn left.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import check_choice, check_int

MIN_SIZE, MAX_SIZE = 4, 64
START_LENGTH = 3
def winning_score(height: int, width: int) -> int:
    """The score of a won game: the food eaten once the snake fills the board (97 on 10x10)."""
    return height * width - START_LENGTH


OBS_TYPES = ("features", "grid", "features_reach", "ego_grid")
"""``"features"`` (11 numbers), ``"grid"`` (3 x H x W), ``"features_reach"`` (the 11, plus the free space
each move leads to and the length: 15 numbers; notebook 11's capstone) and ``"ego_grid"`` (the board
seen from the head, heading up: 3 x S x S with ``S = ego_size(H, W)``)."""
FIRST_OBS_TYPES = ("features", "grid")
"""The observations notebooks 01-04 measure the envs with."""
NUM_ACTIONS = 3
NUM_FEATURES = 11
NUM_REACH_FEATURES = NUM_FEATURES + NUM_ACTIONS + 1
MAX_STEPS_LIMIT = 2**31 - 1
"""The largest ``max_steps_without_food``: the tensor envs count steps in int32 (cheap on a GPU)."""

FEATURE_NAMES = ("danger straight", "danger right", "danger left",
                 "heading up", "heading right", "heading down", "heading left",
                 "food up", "food right", "food down", "food left")
"""What each of the 11 numbers of a "features" observation says, in order."""
REACH_FEATURE_NAMES = FEATURE_NAMES + ("space straight", "space right", "space left", "length")
"""What each of the 15 numbers of a "features_reach" observation says, in order."""

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
# Row and column change of one step in each direction.
DIRECTION_DELTAS = ((-1, 0), (0, 1), (1, 0), (0, -1))
# Heading change of each action: straight, turn right (clockwise), turn left.
ACTION_TURNS = (0, 1, 3)
ACTION_NAMES = ("straight", "right", "left")
MIRRORED_ACTIONS = (0, 2, 1)
"""The action that plays ``a`` in the mirror image of a game (board reflected left-right):
straight stays straight, right becomes left and left right."""


@dataclass(frozen=True)
class SnakeState:
    """Everything that decides the future of one game (besides the random food placement).

    body: cells ``(row, col)``, head first, tail last.
    direction: heading, 0 up, 1 right, 2 down, 3 left.
    food: the food cell, or ``None`` once the board is full (a won game).
    steps_since_food: steps made since the snake last ate (or since the start).
    """

    body: tuple[tuple[int, int], ...]
    direction: int
    food: tuple[int, int] | None
    steps_since_food: int = 0

    def __post_init__(self):
        # Accept any sequence of pairs (lists from JSON, NumPy rows) but store plain tuples of
        # ints, so states compare equal whatever they were built from.
        try:
            body = tuple((int(r), int(c)) for r, c in self.body)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"body must be a sequence of (row, col) pairs, got {self.body!r}") from exc
        object.__setattr__(self, "body", body)
        if self.food is not None:
            try:
                row, col = self.food
                food = (int(row), int(col))
            except (TypeError, ValueError) as exc:
                raise TypeError(f"food must be a (row, col) pair or None, got {self.food!r}") from exc
            object.__setattr__(self, "food", food)

    @property
    def length(self) -> int:
        return len(self.body)

    @property
    def score(self) -> int:
        """Food eaten so far: the length gained since the start."""
        return len(self.body) - START_LENGTH


def check_grid_size(height, width) -> tuple[int, int]:
    """Return ``(height, width)`` as ints, or raise naming the bad parameter."""
    return check_int("height", height, MIN_SIZE, MAX_SIZE), check_int("width", width, MIN_SIZE, MAX_SIZE)


def check_obs_type(obs_type) -> str:
    return check_choice("obs_type", obs_type, OBS_TYPES)


def check_max_steps_without_food(max_steps_without_food, height: int, width: int) -> int:
    """The truncation limit, 1..:data:`MAX_STEPS_LIMIT`; ``None`` means the default ``height * width``.

    Bounded so that every env counts the same steps: a larger limit would wrap the tensor envs'
    int32 counters (truncating early) while ``SnakeEnv``'s Python ints ran on.
    """
    if max_steps_without_food is None:
        return height * width
    return check_int("max_steps_without_food", max_steps_without_food, 1, MAX_STEPS_LIMIT)


def check_action(action) -> int:
    """Return a single action as an int, or raise naming the bad value. Never clamps."""
    if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
        action = action.item()  # a 0-d integer array, as gymnasium's spaces sample
    return check_int("action", action, 0, NUM_ACTIONS - 1)


def turn(direction: int, action: int) -> int:
    """The heading after taking ``action`` while heading ``direction``."""
    return (direction + ACTION_TURNS[action]) % 4


def start_body(height: int, width: int) -> tuple[tuple[int, int], ...]:
    """Head at the centre, two body cells to its left; the snake faces right."""
    row, col = height // 2, width // 2
    return tuple((row, col - k) for k in range(START_LENGTH))


def validate_state(state: SnakeState, height: int, width: int, max_steps_without_food: int) -> None:
    """Raise ``ValueError`` (``TypeError`` for a wrong type) naming what is wrong with ``state``.

    A valid state: at least 3 cells, all inside the grid and distinct, each adjacent to the next;
    the heading an int in 0..3 that does not point back into the neck; food on an empty cell, or
    ``None`` only when the board is full; ``steps_since_food`` in ``0..max_steps_without_food - 1``
    (a state at the limit would already have been truncated).
    """
    if not isinstance(state, SnakeState):
        raise TypeError(f"state must be a SnakeState, got {type(state).__name__}")
    body = state.body
    if len(body) < START_LENGTH:
        raise ValueError(f"state.body must have at least {START_LENGTH} cells, got {len(body)}")
    for row, col in body:
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(f"state.body cell {(row, col)} is off the {height}x{width} grid")
    if len(set(body)) != len(body):
        raise ValueError(f"state.body has repeated cells: {body}")
    for (r0, c0), (r1, c1) in zip(body, body[1:]):
        if abs(r0 - r1) + abs(c0 - c1) != 1:
            raise ValueError(f"state.body is not contiguous: {(r0, c0)} is not next to {(r1, c1)}")
    direction = check_int("state.direction", state.direction, 0, 3)
    dr, dc = DIRECTION_DELTAS[direction]
    if (body[0][0] - dr, body[0][1] - dc) != body[1]:
        # The neck must be behind the head: the head moved into its cell heading `direction`.
        raise ValueError(
            f"state.direction {direction} does not match the body: the cell behind the head "
            f"{body[0]} should be {(body[0][0] - dr, body[0][1] - dc)}, got {body[1]}"
        )
    full = len(body) == height * width
    if state.food is None:
        if not full:
            raise ValueError("state.food is None but the board is not full")
    else:
        row, col = state.food
        if not (0 <= row < height and 0 <= col < width):
            raise ValueError(f"state.food {state.food} is off the {height}x{width} grid")
        if state.food in set(body):
            raise ValueError(f"state.food {state.food} is on the body")
    check_int("state.steps_since_food", state.steps_since_food, 0, max_steps_without_food - 1)


def mirror_state(state: SnakeState, height: int, width: int) -> SnakeState:
    """The mirror image of ``state``: every column ``c`` becomes ``width - 1 - c``, right and left swap.

    Snake is symmetric under this reflection: the mirrored game, played with the mirrored actions
    (:data:`MIRRORED_ACTIONS`), goes through the mirrored states and earns the same rewards.
    """
    def mirror(cell):
        return cell[0], width - 1 - cell[1]

    return SnakeState(tuple(mirror(cell) for cell in state.body), (4 - state.direction) % 4,
                      None if state.food is None else mirror(state.food), state.steps_since_food)


def ego_size(height: int, width: int) -> int:
    """Side of an ``"ego_grid"`` observation: ``2 * max(height, width) - 1``.

    The head sits at the centre; the side must hold the whole board whichever way the snake
    faces (a non-square board turned by 90 degrees swaps its height and width).
    """
    return 2 * max(height, width) - 1


def ego_cell(direction: int, head: tuple[int, int], cell: tuple[int, int], size: int) -> tuple[int, int]:
    """Where board ``cell`` appears in the ``size x size`` egocentric window of a head heading ``direction``.

    The window's centre is the head; a cell ``k`` steps ahead is ``k`` rows above the centre, a
    cell ``k`` steps to the snake's right is ``k`` columns right of it. So the actions straight,
    right and left move the head up, right and left on the observation.
    """
    d_row, d_col = cell[0] - head[0], cell[1] - head[1]
    ahead_row, ahead_col = DIRECTION_DELTAS[direction]
    right_row, right_col = DIRECTION_DELTAS[(direction + 1) % 4]
    centre = size // 2
    return centre - (d_row * ahead_row + d_col * ahead_col), centre + d_row * right_row + d_col * right_col


def observation_shape(obs_type: str, height: int, width: int) -> tuple[int, ...]:
    if obs_type == "ego_grid":
        return (3, ego_size(height, width), ego_size(height, width))
    return {"features": (NUM_FEATURES,), "features_reach": (NUM_REACH_FEATURES,)}.get(obs_type, (3, height, width))


def observe(state: SnakeState, height: int, width: int, obs_type: str) -> np.ndarray:
    """The observation of ``state``, computed plainly from the rules (the reference for tests)."""
    if obs_type == "grid":
        return _observe_grid(state, height, width)
    if obs_type == "ego_grid":
        return _observe_ego_grid(state, height, width)
    if obs_type == "features_reach":
        return _observe_features_reach(state, height, width)
    return _observe_features(state, height, width)


def _observe_grid(state: SnakeState, height: int, width: int) -> np.ndarray:
    """Channels: 0 head, 1 body (remaining lifetime / length: head 1.0, tail 1/length), 2 food."""
    obs = np.zeros((3, height, width), dtype=np.float32)
    length = len(state.body)
    obs[0][state.body[0]] = 1.0
    for i, cell in enumerate(state.body):
        obs[1][cell] = (length - i) / length
    if state.food is not None:
        obs[2][state.food] = 1.0
    return obs


def _observe_ego_grid(state: SnakeState, height: int, width: int) -> np.ndarray:
    """The board seen from the head, heading up (:func:`ego_cell`); the head is at the centre.

    Channels: 0 body (remaining lifetime / length, as in ``"grid"``: head 1.0), 1 food, 2 off the
    board (1.0 on every cell of the window that is not a cell of the board).
    """
    size = ego_size(height, width)
    obs = np.zeros((3, size, size), dtype=np.float32)
    obs[2] = 1.0
    head = state.body[0]

    def at(cell):
        return ego_cell(state.direction, head, cell, size)

    for row in range(height):
        for col in range(width):
            obs[2][at((row, col))] = 0.0
    length = len(state.body)
    for i, cell in enumerate(state.body):
        obs[0][at(cell)] = (length - i) / length
    if state.food is not None:
        obs[1][at(state.food)] = 1.0
    return obs


def _observe_features(state: SnakeState, height: int, width: int) -> np.ndarray:
    """danger straight/right/left, heading one-hot (4), food up/right/down/left of the head (4).

    Danger: the cell one step ahead after that turn is a wall or a body cell other than the tail
    (the tail moves away on the next step, unless the snake eats; the feature ignores that case).
    """
    obs = np.zeros(NUM_FEATURES, dtype=np.float32)
    head_row, head_col = state.body[0]
    blocked = set(state.body[:-1])
    for i, action in enumerate(range(NUM_ACTIONS)):
        dr, dc = DIRECTION_DELTAS[turn(state.direction, action)]
        row, col = head_row + dr, head_col + dc
        off_grid = not (0 <= row < height and 0 <= col < width)
        obs[i] = float(off_grid or (row, col) in blocked)
    obs[3 + state.direction] = 1.0
    if state.food is not None:
        food_row, food_col = state.food
        obs[7] = float(food_row < head_row)
        obs[8] = float(food_col > head_col)
        obs[9] = float(food_row > head_row)
        obs[10] = float(food_col < head_col)
    return obs


def reach_moves(height: int, width: int) -> int:
    """How far the space of a ``"features_reach"`` observation looks: ``height + width`` moves."""
    return height + width


def _observe_features_reach(state: SnakeState, height: int, width: int) -> np.ndarray:
    """The 11 features, then :func:`space_shares` straight / right / left, then ``length / (height * width)``."""
    return np.concatenate([_observe_features(state, height, width), space_shares(state, height, width),
                           [len(state.body) / (height * width)]]).astype(np.float32)


def space_shares(state: SnakeState, height: int, width: int) -> np.ndarray:
    """How much room each move (straight, right, left) leads to, as a share of the free cells.

    Space after a move: the share of the free cells the snake could reach within
    ``reach_moves`` moves through free cells (4-neighbours), starting from the cell the move
    leads to (counted); 0 for a move into danger. Free cells are the cells of the grid that are
    not blocked, and blocked is what danger calls body: every body cell but the tail. So the share
    is the cells reached over ``height * width - (length - 1)``. It tells a trap from an open
    corridor, which the danger bits, one cell ahead, cannot.
    """
    shares = np.zeros(NUM_ACTIONS, dtype=np.float32)
    blocked = set(state.body[:-1])
    head_row, head_col = state.body[0]
    for action in range(NUM_ACTIONS):
        dr, dc = DIRECTION_DELTAS[turn(state.direction, action)]
        start = (head_row + dr, head_col + dc)
        if not (0 <= start[0] < height and 0 <= start[1] < width) or start in blocked:
            continue  # danger: the move leads nowhere
        reached = frontier = {start}
        for _ in range(reach_moves(height, width)):
            frontier = {(row + r, col + c) for row, col in frontier for r, c in DIRECTION_DELTAS
                        if 0 <= row + r < height and 0 <= col + c < width} - blocked - reached
            reached = reached | frontier
        shares[action] = len(reached) / (height * width - len(blocked))
    return shares
