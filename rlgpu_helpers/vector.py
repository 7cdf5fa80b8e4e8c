"""CPU vector envs: many ``SnakeEnv`` games through gymnasium's own vector envs (notebook 03).

``SyncVectorEnv`` steps the games one after another in this process; ``AsyncVectorEnv`` steps
each in its own subprocess. Where subprocesses cannot start (some sandboxes, notebooks in a
browser), asking for ``"async"`` falls back to ``"sync"`` and says why once.

``BusyWaitWrapper`` makes each step artificially expensive, so notebook 03 can show where
subprocesses start to pay off: the cost is spent burning a CPU, like a heavy simulator would.
"""

from __future__ import annotations

import functools
import numbers
import time

import gymnasium
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.utils import seeding

from .snake.env import SnakeEnv

VECTOR_KINDS = ("sync", "async")

_async_fallback_reported = False


class BusyWaitWrapper(gymnasium.Wrapper):
    """Spend ``step_cost_s`` seconds of CPU (a busy loop, not a sleep) in every ``step``.

    A sleeping process frees its core, which would make subprocess envs look faster than they
    would be with a real, compute-heavy simulator.
    """

    def __init__(self, env: gymnasium.Env, step_cost_s: float):
        super().__init__(env)
        self.step_cost_s = _check_step_cost(step_cost_s)

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
        as calling ``reset(seed=seed)`` first. ``None`` leaves the games unseeded.
    step_cost_s: extra CPU seconds per step and game (``BusyWaitWrapper``), 0 for none.
    snake_kwargs: passed to every ``SnakeEnv`` (``height``, ``width``, ``obs_type``, ...).
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral):
        raise TypeError(f"num_envs must be an int, got {num_envs!r}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    if kind not in VECTOR_KINDS:
        raise ValueError(f"kind must be one of {VECTOR_KINDS}, got {kind!r}")
    if not isinstance(autoreset_mode, AutoresetMode):
        raise ValueError(f"autoreset_mode must be a gymnasium AutoresetMode, got {autoreset_mode!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"seed must be None or an int, got {seed!r}")
    if seed is not None and seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    step_cost_s = _check_step_cost(step_cost_s)
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


def _check_step_cost(step_cost_s) -> float:
    if isinstance(step_cost_s, bool) or not isinstance(step_cost_s, numbers.Real):
        raise TypeError(f"step_cost_s must be a number of seconds, got {step_cost_s!r}")
    if not step_cost_s >= 0:  # also rejects NaN
        raise ValueError(f"step_cost_s must be >= 0, got {step_cost_s}")
    return float(step_cost_s)
