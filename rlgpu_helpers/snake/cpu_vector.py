"""CPU vector envs: many ``SnakeEnv`` games through gymnasium's own vector envs (notebook 03).

``SyncVectorEnv`` steps the games one after another in this process; ``AsyncVectorEnv`` steps
each in its own subprocess. Where subprocesses cannot start (some sandboxes, notebooks in a
browser), asking for ``"async"`` falls back to ``"sync"`` and says why once.

``BusyWaitWrapper`` makes each step artificially expensive, so notebook 03 can show where
subprocesses start to pay off: the cost is spent burning a CPU, like a heavy simulator would.
"""

from __future__ import annotations

import functools
import time

import gymnasium
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from ..core.checks import check_choice, check_int, check_number, check_seed
from .env import SnakeEnv

VECTOR_KINDS = ("sync", "async")

_async_fallback_reported = False


class BusyWaitWrapper(gymnasium.Wrapper):
    """Spend ``step_cost_s`` seconds of CPU (a busy loop, not a sleep) in every ``step``.

    A sleeping process frees its core, which would make subprocess envs look faster than they
    would be with a real, compute-heavy simulator.
    """

    def __init__(self, env: gymnasium.Env, step_cost_s: float):
        super().__init__(env)
        self.step_cost_s = check_number("step_cost_s", step_cost_s, at_least=0)

    def step(self, action):
        deadline = time.perf_counter() + self.step_cost_s
        while time.perf_counter() < deadline:
            pass
        return self.env.step(action)


def make_cpu_vector_env(num_envs: int, kind: str = "sync",
                        autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP, seed=None,
                        step_cost_s: float = 0.0, **snake_kwargs) -> gymnasium.vector.VectorEnv:
    """``num_envs`` ``SnakeEnv`` games as a gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv``.

    autoreset_mode: ``SAME_STEP`` by default, the convention ``VecSnake`` and SB3 use: a finished
        game restarts inside the step that ended it, so every returned observation is one to act
        on and no transition has to be masked (the last observation is in ``info["final_obs"]``).
    seed: game ``i`` draws its food from ``seed + i``, so ``reset()`` is reproducible; the same
        as calling ``reset(seed=seed)`` first. ``None`` leaves the games unseeded. A seed is an
        int in ``[0, 2**64)``.
    step_cost_s: extra CPU seconds per step and game (``BusyWaitWrapper``), 0 for none.
    snake_kwargs: passed to every ``SnakeEnv`` (``height``, ``width``, ``obs_type``, ...).
    """
    num_envs = check_int("num_envs", num_envs)
    check_choice("kind", kind, VECTOR_KINDS)
    if not isinstance(autoreset_mode, AutoresetMode):
        raise TypeError(f"autoreset_mode={autoreset_mode!r} must be a gymnasium AutoresetMode")
    if seed is not None:
        seed = check_seed("seed", seed)
    step_cost_s = check_number("step_cost_s", step_cost_s, at_least=0)
    env_fns = [
        functools.partial(_make_snake_env, None if seed is None else seed + i, step_cost_s, snake_kwargs)
        for i in range(num_envs)
    ]
    # Both vector envs build the first game in this process, so bad snake_kwargs raise here.
    if kind == "async":
        try:
            return gymnasium.vector.AsyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
        except (OSError, EOFError, RuntimeError, NotImplementedError, ImportError) as exc:
            _report_async_fallback(exc)
    return SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)


def _make_snake_env(seed, step_cost_s: float, snake_kwargs: dict) -> gymnasium.Env:
    """One game for a vector env; module-level so subprocesses can unpickle it."""
    env = SnakeEnv(**snake_kwargs)
    if seed is not None:
        env.np_random, _ = seeding.np_random(seed)
    return BusyWaitWrapper(env, step_cost_s) if step_cost_s > 0 else env


def _report_async_fallback(exc: BaseException) -> None:
    """Say once per process why ``"async"`` became ``"sync"`` (stdout: notebooks keep stderr clean)."""
    global _async_fallback_reported
    if not _async_fallback_reported:
        _async_fallback_reported = True
        print(f"AsyncVectorEnv could not start subprocesses here ({type(exc).__name__}: {exc}); "
              "using SyncVectorEnv instead.")
