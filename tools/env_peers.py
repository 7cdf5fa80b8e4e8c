"""Snake steps/s of the CPU peers beside ``VecSnake``'s, on this machine in one run (issue 38).

Times, on the same 10 x 10 board with random actions and N games each:

* PufferLib's C Snake (``pufferlib/ocean/snake/snake.h`` of the installed wheel), built here with
  gcc into a small library (a stub ``raylib.h``: no rendering) and stepped from one process on one
  core. Configured as single-snake 10 x 10 games: a 12 x 12 map whose 1-cell border is wall
  (``vision=1``, so a 3 x 3 int8 observation), ``num_snakes=1``, ``num_food=1``, no corpses,
  ``max_snake_length=100``: one ``CSnake`` per game, all stepped by one C loop;
* jumanji's ``Snake-v1`` (``num_rows=num_cols=10``), auto-reset, ``jit(vmap(step))`` inside a
  ``lax.scan`` of ``--scan`` steps;
* ``VecSnake`` features and grid on 1 and 2 torch threads.

Prints steps/s and the ratios ours / PufferLib and ours / jumanji, and writes them with the machine,
date, versions and command to ``--json``. Installs nothing unless given ``--install`` (``pip install``
into this interpreter's environment, or ``--venv``'s): PufferLib 3.0 is an sdist whose build
downloads raylib from GitHub, so ``--install`` takes the newest PufferLib *wheel* (2.0.2 for
CPython 3.11), whose ``snake.h`` is the one built. What is missing is named, and its row skipped.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib.metadata as metadata
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAYLIB_STUB = """typedef struct { unsigned char r, g, b, a; } Color;
static inline void InitWindow(int w, int h, const char* t) {}
static inline void SetTargetFPS(int f) {}
static inline void BeginDrawing(void) {}
static inline void EndDrawing(void) {}
static inline void ClearBackground(Color c) {}
static inline void DrawRectangle(int x, int y, int w, int h, Color c) {}
static inline void CloseWindow(void) {}
"""

# Exported by name only: snake.h's step() and reset() would otherwise bind to any same-named
# global symbol already in the process (PufferLib 2.0.2's own Cython module steps nothing here).
DRIVER = """#include "snake.h"
#define EXPORT __attribute__((visibility("default")))
EXPORT CSnake* make_envs(int n, char* obs, int* actions, float* rewards, unsigned char* terminals,
                         int size, int vision, int max_len, unsigned int seed) {
    srand(seed);
    CSnake* envs = (CSnake*)calloc(n, sizeof(CSnake));
    LogBuffer* logs = allocate_logbuffer(LOG_BUFFER_SIZE);
    int obs_size = (2 * vision + 1) * (2 * vision + 1);
    for (int i = 0; i < n; i++) {
        CSnake* e = &envs[i];
        e->observations = obs + i * obs_size; e->actions = actions + i; e->rewards = rewards + i;
        e->terminals = terminals + i; e->log_buffer = logs; e->width = size; e->height = size;
        e->num_snakes = 1; e->food = 1; e->vision = vision; e->max_snake_length = max_len;
        e->leave_corpse_on_death = 0; e->reward_food = 1.0f; e->reward_corpse = 0.0f; e->reward_death = -1.0f;
        init_csnake(e);
        reset(e);
    }
    return envs;
}
EXPORT void step_envs(CSnake* envs, int n) { for (int i = 0; i < n; i++) step(&envs[i]); }
"""

BOARD = 10
PEERS = ("PufferLib C (1 core)", "jumanji (jit + vmap + scan)")


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def missing(packages=("pufferlib", "jax", "jumanji", "torch")) -> list[str]:
    """The packages of ``packages`` not installed in this interpreter's environment."""
    return [p for p in packages if version(p) is None]


def install(python: str) -> None:
    """pip install the peers into ``python``'s environment (see the module docstring)."""
    pip = [python, "-m", "pip", "install"]
    subprocess.run(pip + ["--only-binary", ":all:", "--no-deps", "pufferlib"], check=True)
    subprocess.run(pip + ["jax[cpu]", "jumanji"], check=True)


def rate(call, games_per_call: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Median steps/s of ``repeats`` runs of about ``seconds`` each, and their IQR."""
    call()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 4:
        call()
        calls += 1
    per_run = max(1, int(calls * 4 * seconds / max(time.perf_counter() - start, 1e-9)))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(per_run):
            call()
        rates.append(per_run * games_per_call / (time.perf_counter() - start))
    q = statistics.quantiles(rates, n=4) if len(rates) > 1 else [rates[0]] * 3
    return statistics.median(rates), q[2] - q[0]


def snake_header() -> Path | None:
    """``snake.h`` of the installed PufferLib (found without importing pufferlib), or None."""
    try:
        dist = metadata.distribution("pufferlib")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).replace("\\", "/").endswith("ocean/snake/snake.h"):
            return Path(dist.locate_file(file))
    return None


def pufferlib_rate(num_envs: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Steps/s of PufferLib's C Snake, ``num_envs`` 10 x 10 single-snake games, one core."""
    import numpy as np

    header = snake_header()
    if header is None:
        raise RuntimeError("pufferlib (a wheel with ocean/snake/snake.h) is not installed: run with --install")
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is not on PATH: PufferLib's snake.h is compiled here")
    build = Path(tempfile.mkdtemp(prefix="puffer_snake_"))
    shutil.copy(header, build / "snake.h")
    (build / "raylib.h").write_text(RAYLIB_STUB)
    (build / "driver.c").write_text(DRIVER)
    library = build / "libsnake.so"
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", "-fvisibility=hidden", "-I", str(build),
                    str(build / "driver.c"), "-o", str(library), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    lib.make_envs.restype = pointer
    lib.make_envs.argtypes = [integer, pointer, pointer, pointer, pointer, integer, integer, integer, ctypes.c_uint]
    lib.step_envs.argtypes = [pointer, integer]
    vision = 1
    obs = np.zeros((num_envs, 2 * vision + 1, 2 * vision + 1), np.int8)
    actions = np.zeros(num_envs, np.int32)
    rewards = np.zeros(num_envs, np.float32)
    terminals = np.zeros(num_envs, np.uint8)
    at = [a.ctypes.data_as(pointer) for a in (obs, actions, rewards, terminals)]
    envs = lib.make_envs(num_envs, *at, BOARD + 2 * vision, vision, BOARD * BOARD, 0)
    drawn = np.random.default_rng(0).integers(0, 4, (16, num_envs)).astype(np.int32)
    state = {"i": 0}

    def call():
        state["i"] += 1
        actions[:] = drawn[state["i"] % 16]
        lib.step_envs(envs, num_envs)

    return rate(call, num_envs, seconds, repeats)


def jumanji_rate(num_envs: int, scan: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Steps/s of jumanji's Snake-v1 on 10 x 10: ``jit`` of a ``lax.scan`` of ``vmap(step)``."""
    import jax
    import jumanji
    from jumanji.wrappers import AutoResetWrapper

    env = AutoResetWrapper(jumanji.make("Snake-v1", num_rows=BOARD, num_cols=BOARD))
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    state, _ = jax.jit(jax.vmap(env.reset))(keys)
    actions = jax.random.randint(jax.random.PRNGKey(1), (scan, num_envs), 0, 4)

    @jax.jit
    def run(state):
        def one(state, action):
            state, timestep = jax.vmap(env.step)(state, action)
            return state, timestep.reward.sum()
        return jax.lax.scan(one, state, actions)

    held = {"state": state}

    def call():
        held["state"], rewards = run(held["state"])
        rewards.block_until_ready()

    return rate(call, num_envs * scan, seconds, repeats)


def vec_snake_rate(obs_type: str, num_envs: int, threads: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Steps/s of ``VecSnake`` (10 x 10, ``obs_type``) on the CPU with ``threads`` torch threads."""
    import torch

    from rlgpu_helpers.snake.vec import VecSnake

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        env = VecSnake(num_envs, BOARD, BOARD, obs_type=obs_type, seed=0, check_action_values=False)
        generator = torch.Generator().manual_seed(0)
        drawn = [torch.randint(0, 3, (num_envs,), generator=generator) for _ in range(16)]
        state = {"i": 0}

        def call():
            state["i"] += 1
            env.step(drawn[state["i"] % 16])

        return rate(call, num_envs, seconds, repeats)
    finally:
        torch.set_num_threads(before)


def ratios(results: dict) -> dict:
    """``{ours: {peer: ours / peer}}`` for every measured pair (``results``: name -> steps/s or None)."""
    ours = [name for name in results if name.startswith("VecSnake") and results[name]]
    return {name: {peer: results[name] / results[peer] for peer in PEERS if results.get(peer)} for name in ours}


def table(results: dict, spreads: dict) -> str:
    """The steps/s of each row, and each of ours over each peer."""
    lines = [f"{'env (10 x 10, random actions)':44} {'steps/s':>14} {'IQR':>12}  " + "  ".join(
        f"{'/ ' + peer.split(' ')[0]:>10}" for peer in PEERS)]
    versus = ratios(results)
    for name, value in results.items():
        if value is None:
            lines.append(f"{name:44} {'not measured':>14}")
            continue
        cells = "  ".join(f"{versus[name][p]:>9.2f}x" if p in versus.get(name, {}) else f"{'':>10}" for p in PEERS)
        lines.append(f"{name:44} {value:>14,.0f} {spreads.get(name, 0):>12,.0f}  {cells}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="pip install pufferlib, jax[cpu] and jumanji first")
    parser.add_argument("--venv", type=Path, help="with --install: the virtualenv to install into (and to run in)")
    parser.add_argument("--num-envs", type=int, default=4096, help="games stepped together by each env (default 4096)")
    parser.add_argument("--scan", type=int, default=64, help="jumanji's steps per lax.scan call (default 64)")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed run (default 0.5)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure; the median is kept")
    parser.add_argument("--json", type=Path, help="write the figures, machine, date, versions and command here")
    args = parser.parse_args(argv)
    if args.install:
        python = str(args.venv / "bin" / "python") if args.venv else sys.executable
        install(python)
        if args.venv and Path(python).resolve() != Path(sys.executable).resolve():
            rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--install"]
            return subprocess.run([python, __file__, *rest]).returncode
    absent = missing()
    if absent:
        print(f"Not installed here: {', '.join(absent)} (run with --install); their rows are skipped.")
    import torch

    results, spreads, errors = {}, {}, {}
    jobs = {PEERS[0]: lambda: pufferlib_rate(args.num_envs, args.seconds, args.repeats),
            PEERS[1]: lambda: jumanji_rate(args.num_envs, args.scan, args.seconds, args.repeats)}
    for obs_type in ("features", "grid"):
        for threads in (1, 2):
            jobs[f"VecSnake {obs_type} ({threads} thread{'s' * (threads > 1)})"] = (
                lambda o=obs_type, t=threads: vec_snake_rate(o, args.num_envs, t, args.seconds, args.repeats))
    for name, job in jobs.items():
        try:
            results[name], spreads[name] = job()
        except Exception as error:  # a peer that cannot run is reported, not fatal
            results[name], errors[name] = None, f"{type(error).__name__}: {error}"
            print(f"{name}: not measured ({errors[name]})")
    print(f"N = {args.num_envs:,} games each, 10 x 10; this machine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads available (the IQR column shows each figure's spread)")
    print(table(results, spreads))
    if args.json:
        from rlgpu_helpers.core.device import device_report

        record = {
            "machine": device_report("cpu"), "date": datetime.date.today().isoformat(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "versions": {p: version(p) for p in ("pufferlib", "jax", "jaxlib", "jumanji", "torch", "numpy")}
            | {"python": platform.python_version()},
            "config": {"num_envs": args.num_envs, "board": [BOARD, BOARD], "jumanji_scan": args.scan,
                       "pufferlib": "one CSnake per game: 12 x 12 map with a 1-cell wall border (vision=1), "
                                    "num_snakes=1, num_food=1, no corpses, max_snake_length=100; one process, one core"},
            "steps_per_s": results, "iqr": spreads, "ratios": ratios(results), "errors": errors,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
