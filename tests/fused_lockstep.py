"""The fused step (``snake.vec_fused``) against ``VecSnake.step_tensors``, step by step, bit for bit.

Imported by the GPU tests; run as a script (``python tests/fused_lockstep.py``) by the CPU tests, in
a fresh process with ``TRITON_INTERPRET=1`` (Triton reads it when a kernel is defined, so it cannot
be switched on inside a test process that has imported the kernel). Prints one JSON line of what the
games did, for the test to check that every kind of event was compared.
"""

import json
import sys
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlgpu_helpers.snake import rules  # noqa: E402
from rlgpu_helpers.snake.rules import SnakeState  # noqa: E402
from rlgpu_helpers.snake.vec import VecSnake  # noqa: E402
from rlgpu_helpers.snake.vec_fused import FusedStep  # noqa: E402
from test_vec_narrow import EDGE, aligned, push_times  # noqa: E402


def near_win() -> SnakeState:
    """A 4x4 board with 15 snake cells in a serpentine and the food in the last empty cell, straight ahead."""
    path = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0),
            (2, 0), (2, 1), (2, 2), (2, 3), (3, 3), (3, 2), (3, 1), (3, 0)]
    return SnakeState(tuple(reversed(path[:-1])), rules.LEFT, food=(3, 0), steps_since_food=4)


def assert_same_step(eager, fused, where: str) -> None:
    """Every output of two steps equal, dtype and values, ``info`` included."""
    names = ("obs", "reward", "terminated", "truncated")
    pairs = list(zip(names, eager[:4], fused[:4]))
    pairs += [(key, eager[4][key], fused[4][key]) for key in ("final_obs", "_final_obs", "_episode")]
    pairs += [(key, eager[4]["episode"][key], fused[4]["episode"][key]) for key in ("score", "length", "won")]
    for name, want, got in pairs:
        assert want.dtype == got.dtype and want.shape == got.shape, f"{where}: {name} {got.dtype} {got.shape}"
        assert torch.equal(want, got), f"{where}: {name} differs in games {(want != got).nonzero().flatten().tolist()}"


def lockstep(height: int, width: int, num_envs: int, steps: int, seed: int, device: str = "cpu",
             max_steps_without_food: int | None = None, near_wins: tuple[int, ...] = (),
             obs_type: str = "features", late_clocks: bool = False) -> dict:
    """Step an eager and a fused env of the same seed with the same random actions; compare every
    output and the whole state after every step. ``near_wins``: games set one move from filling a 4x4
    board; ``late_clocks``: every game's times pushed near 2**31, for the clock sweep to bring down."""
    envs = [VecSnake(num_envs, height, width, obs_type=obs_type, max_steps_without_food=max_steps_without_food,
                     device=device, seed=seed, check_action_values=False) for _ in range(2)]
    for env in envs:
        for game in near_wins:
            env.set_state(game, near_win())
        for game in range(num_envs) if late_clocks else ():
            push_times(env, game, aligned(env, game, EDGE))
    eager, fused = envs[0].step_tensors, FusedStep(envs[1])
    generator = torch.Generator().manual_seed(seed)
    seen = dict.fromkeys(("steps", "ate", "died", "truncated", "won"), 0)
    for step in range(steps):
        actions = torch.randint(0, rules.NUM_ACTIONS, (num_envs,), generator=generator).to(device)
        if step == 0 and near_wins:
            actions[list(near_wins)] = 0  # straight into the food
        want, got = eager(actions), fused(actions)
        where = f"{obs_type} {height}x{width}, N={num_envs}, seed {seed}, step {step}"
        assert_same_step(want, got, where)
        theirs = envs[1].state_dict()
        for name, mine in envs[0].state_dict().items():
            assert torch.equal(mine, theirs[name]), f"{where}: state {name!r} differs"
        seen["steps"] += num_envs
        seen["ate"] += int((want[1] > 0).sum())
        seen["died"] += int((want[1] < 0).sum())
        seen["truncated"] += int(want[3].sum())
        seen["won"] += int(want[4]["episode"]["won"].sum())
    return seen


BOARDS = {
    "10x10, two programs": dict(height=10, width=10, num_envs=200, steps=60, seed=3),
    "4x4 wins": dict(height=4, width=4, num_envs=9, steps=40, seed=5, near_wins=(1, 4)),
    "5x7 truncations": dict(height=5, width=7, num_envs=37, steps=120, seed=7, max_steps_without_food=6),
    "64x64": dict(height=64, width=64, num_envs=40, steps=25, seed=9),
    "6x7 late clocks": dict(height=6, width=7, num_envs=16, steps=40, seed=13, late_clocks=True),
}
LIGHTER_GRID = {"10x10, two programs": dict(steps=30), "64x64": dict(num_envs=12)}  # Triton's interpreter is slow
CASES = {**{f"features {name}": dict(board, obs_type="features") for name, board in BOARDS.items()},
         **{f"grid {name}": dict(board, obs_type="grid", **LIGHTER_GRID.get(name, {})) for name, board in BOARDS.items()}}


@settings(max_examples=12, deadline=None, database=None)
@given(height=st.integers(4, 12), width=st.integers(4, 12), num_envs=st.integers(1, 300),
       seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40), obs_type=st.sampled_from(FusedStep.OBS_TYPES))
def any_board(height, width, num_envs, seed, steps, obs_type):
    lockstep(height, width, num_envs, steps, seed, obs_type=obs_type)


if __name__ == "__main__":
    results = {name: lockstep(**case) for name, case in CASES.items()}
    any_board()
    print(json.dumps(results))
