"""Snake steps/s of the CPU peers beside ``VecSnake``'s, on this machine in one run (issue 38).

Times, with random actions and N games each:

* PufferLib 3.0's C Snake (``pufferlib/ocean/snake/snake.h`` of its sdist on PyPI, whose own build
  downloads raylib: this script takes the header alone and builds it with gcc against a stub
  ``raylib.h``, no rendering), stepped from one process on one core, in two configurations:

  - ``default``: its ``snake.ini`` (4 maps of 640 x 360 a core, 256 snakes and 4,096 food each,
    vision 5, corpses); steps/s counts snake steps, as PufferLib does;
  - ``10 x 10``: the course's game, N single-snake maps of 12 x 12 with a 1-cell wall (vision 1);
* jumanji's ``Snake-v1`` (``num_rows=num_cols=10``), auto-reset, ``jit(vmap(step))`` inside a
  ``lax.scan`` of ``--scan`` steps;
* ``VecSnake`` features and grid, 10 x 10: eager on 1 and 2 torch threads, and compiled with
  ``snake.vec.step_compile_options`` on 2.

Prints steps/s and each of ours over each peer, and writes them with the machine, date, versions
and command to ``--json``. The garbage collector is off while a figure is timed (as ``timeit`` does).
Installs nothing unless given ``--install``: jax[cpu] and jumanji with pip (into this interpreter's
environment, or ``--venv``'s), and PufferLib's sdist into ``--cache``. What is missing is named, and
its rows skipped.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import importlib.metadata as metadata
import io
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

PUFFERLIB = "3.0.0"
CACHE = Path.home() / ".cache" / "rlgpu_helpers" / f"pufferlib-{PUFFERLIB}"
SDIST_FILES = {"pufferlib/ocean/snake/snake.h": "snake.h", "pufferlib/config/ocean/snake.ini": "snake.ini"}

RAYLIB_STUB = """typedef struct { unsigned char r, g, b, a; } Color;
#define KEY_ESCAPE 256
static inline void InitWindow(int w, int h, const char* t) {}
static inline void SetTargetFPS(int f) {}
static inline void BeginDrawing(void) {}
static inline void EndDrawing(void) {}
static inline void ClearBackground(Color c) {}
static inline void DrawRectangle(int x, int y, int w, int h, Color c) {}
static inline void CloseWindow(void) {}
static inline int IsKeyDown(int key) { return 0; }
"""

# Exported by name only: nothing of snake.h binds to a same-named symbol already in the process.
DRIVER = """#include "snake.h"
#define EXPORT __attribute__((visibility("default")))
EXPORT CSnake* make_envs(int n, int snakes, char* obs, int* actions, float* rewards, unsigned char* terminals,
                         int width, int height, int food, int vision, int corpses, int max_len,
                         float reward_food, float reward_corpse, float reward_death, unsigned int seed) {
    srand(seed);
    CSnake* envs = (CSnake*)calloc(n, sizeof(CSnake));
    int obs_size = (2 * vision + 1) * (2 * vision + 1);
    for (int i = 0; i < n; i++) {
        CSnake* e = &envs[i];
        e->observations = obs + i * snakes * obs_size; e->actions = actions + i * snakes;
        e->rewards = rewards + i * snakes; e->terminals = terminals + i * snakes;
        e->width = width; e->height = height; e->num_snakes = snakes; e->food = food; e->vision = vision;
        e->max_snake_length = max_len; e->leave_corpse_on_death = corpses;
        e->reward_food = reward_food; e->reward_corpse = reward_corpse; e->reward_death = reward_death;
        init_csnake(e);
        c_reset(e);
    }
    return envs;
}
EXPORT void step_envs(CSnake* envs, int n) { for (int i = 0; i < n; i++) c_step(&envs[i]); }
"""

BOARD = 10
PUFFER_DEFAULT, PUFFER_BOARD = "PufferLib C default (1 core)", "PufferLib C 10 x 10 (1 core)"
PEERS = (PUFFER_DEFAULT, PUFFER_BOARD, "jumanji (jit + vmap + scan)")
COLUMNS = ("/ Puffer default", "/ Puffer 10x10", "/ jumanji")  # the table's ratio columns, one per peer


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def missing(packages=("jax", "jumanji", "torch")) -> list[str]:
    """The packages of ``packages`` not installed in this interpreter's environment."""
    return [p for p in packages if version(p) is None]


def install(python: str, cache: Path = CACHE) -> None:
    """pip install jax[cpu] and jumanji into ``python``'s environment; PufferLib's snake files into ``cache``."""
    subprocess.run([python, "-m", "pip", "install", "jax[cpu]", "jumanji"], check=True)
    with urllib.request.urlopen("https://pypi.org/pypi/pufferlib/json", timeout=60) as answer:
        files = json.load(answer)["releases"][PUFFERLIB]
    url = next(f["url"] for f in files if f["packagetype"] == "sdist")
    with urllib.request.urlopen(url, timeout=600) as answer:
        sdist = tarfile.open(fileobj=io.BytesIO(answer.read()), mode="r:gz")
    cache.mkdir(parents=True, exist_ok=True)
    for member in sdist.getmembers():
        inside = member.name.split("/", 1)[-1]
        if inside in SDIST_FILES:
            (cache / SDIST_FILES[inside]).write_bytes(sdist.extractfile(member).read())


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
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(per_run):
                call()
            rates.append(per_run * games_per_call / (time.perf_counter() - start))
        finally:
            gc.enable()
    q = statistics.quantiles(rates, n=4) if len(rates) > 1 else [rates[0]] * 3
    return statistics.median(rates), q[2] - q[0]


def puffer_settings(cache: Path, config: str, num_envs: int) -> dict:
    """``make_envs``'s settings for ``config``: ``"default"`` (``snake.ini``'s [env]) or ``"10 x 10"``."""
    if config == "10 x 10":
        return dict(n=num_envs, snakes=1, width=BOARD + 2, height=BOARD + 2, food=1, vision=1, corpses=0,
                    max_len=BOARD * BOARD, reward_food=1.0, reward_corpse=0.0, reward_death=-1.0)
    import configparser

    ini = configparser.ConfigParser()
    ini.read(cache / "snake.ini")
    env = ini["env"]
    width, height = env.getint("width"), env.getint("height")
    return dict(n=env.getint("num_envs"), snakes=env.getint("num_snakes"), width=width, height=height,
                food=env.getint("num_food"), vision=env.getint("vision"),
                corpses=int(env.getboolean("leave_corpse_on_death")), max_len=min(1024, width * height),
                reward_food=env.getfloat("reward_food"), reward_corpse=env.getfloat("reward_corpse"),
                reward_death=env.getfloat("reward_death"))


def pufferlib_rate(cache: Path, config: str, num_envs: int, seconds: float, repeats: int) -> tuple[float, float]:
    """Snake steps/s of PufferLib's C Snake in ``config`` (see ``puffer_settings``), one process, one core."""
    import numpy as np

    if not (cache / "snake.h").exists():
        raise RuntimeError(f"PufferLib {PUFFERLIB}'s snake.h is not in {cache}: run with --install")
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is not on PATH: PufferLib's snake.h is compiled here")
    build = Path(tempfile.mkdtemp(prefix="puffer_snake_"))
    shutil.copy(cache / "snake.h", build / "snake.h")
    (build / "raylib.h").write_text(RAYLIB_STUB)
    (build / "driver.c").write_text(DRIVER)
    library = build / "libsnake.so"
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", "-fvisibility=hidden", "-I", str(build),
                    str(build / "driver.c"), "-o", str(library), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    pointer, integer, real = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.make_envs.restype = pointer
    lib.make_envs.argtypes = [integer, integer, pointer, pointer, pointer, pointer, *[integer] * 6, *[real] * 3,
                              ctypes.c_uint]
    lib.step_envs.argtypes = [pointer, integer]
    s = puffer_settings(cache, config, num_envs)
    agents, window = s["n"] * s["snakes"], 2 * s["vision"] + 1
    obs = np.zeros((agents, window, window), np.int8)
    actions = np.zeros(agents, np.int32)
    rewards = np.zeros(agents, np.float32)
    terminals = np.zeros(agents, np.uint8)
    at = [a.ctypes.data_as(pointer) for a in (obs, actions, rewards, terminals)]
    envs = lib.make_envs(s["n"], s["snakes"], *at, *(s[k] for k in ("width", "height", "food", "vision", "corpses",
                         "max_len", "reward_food", "reward_corpse", "reward_death")), 0)
    drawn = np.random.default_rng(0).integers(0, 4, (16, agents)).astype(np.int32)
    state = {"i": 0}

    def call():
        state["i"] += 1
        actions[:] = drawn[state["i"] % 16]
        lib.step_envs(envs, s["n"])

    return rate(call, agents, seconds, repeats)


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


def vec_snake_rate(obs_type: str, num_envs: int, threads: int, compiled: bool, seconds: float,
                   repeats: int) -> tuple[float, float]:
    """Steps/s of ``VecSnake`` (10 x 10, ``obs_type``) on the CPU with ``threads`` torch threads, its
    step eager or compiled with ``step_compile_options``."""
    import torch

    from rlgpu_helpers.snake.vec import VecSnake, step_compile_options

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        env = VecSnake(num_envs, BOARD, BOARD, obs_type=obs_type, seed=0, check_action_values=False)
        step = env.step_tensors
        if compiled:
            step = torch.compile(step, fullgraph=True, options=step_compile_options("cpu"))
        generator = torch.Generator().manual_seed(0)
        drawn = [torch.randint(0, 3, (num_envs,), generator=generator) for _ in range(16)]
        state = {"i": 0}

        def call():
            state["i"] += 1
            step(drawn[state["i"] % 16])

        return rate(call, num_envs, seconds, repeats)
    finally:
        torch.set_num_threads(before)


def ratios(results: dict) -> dict:
    """``{ours: {peer: ours / peer}}`` for every measured pair (``results``: name -> steps/s or None)."""
    ours = [name for name in results if name.startswith("VecSnake") and results[name]]
    return {name: {peer: results[name] / results[peer] for peer in PEERS if results.get(peer)} for name in ours}


def table(results: dict, spreads: dict) -> str:
    """The steps/s of each row, and each of ours over each peer."""
    lines = [f"{'env (random actions)':44} {'steps/s':>14} {'IQR':>12}  " + "  ".join(
        f"{column:>16}" for column in COLUMNS)]
    versus = ratios(results)
    for name, value in results.items():
        if value is None:
            lines.append(f"{name:44} {'not measured':>14}")
            continue
        cells = "  ".join(f"{versus[name][p]:>15.2f}x" if p in versus.get(name, {}) else f"{'':>16}" for p in PEERS)
        lines.append(f"{name:44} {value:>14,.0f} {spreads.get(name, 0):>12,.0f}  {cells}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true",
                        help=f"pip install jax[cpu] and jumanji, and fetch PufferLib {PUFFERLIB}'s snake.h, first")
    parser.add_argument("--venv", type=Path, help="with --install: the virtualenv to install into (and to run in)")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"where PufferLib's snake files are (default {CACHE})")
    parser.add_argument("--num-envs", type=int, default=16384,
                        help="10 x 10 games stepped together by each env (default 16384)")
    parser.add_argument("--scan", type=int, default=64, help="jumanji's steps per lax.scan call (default 64)")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed run (default 0.5)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure; the median is kept")
    parser.add_argument("--json", type=Path, help="write the figures, machine, date, versions and command here")
    args = parser.parse_args(argv)
    if args.install:
        python = str(args.venv / "bin" / "python") if args.venv else sys.executable
        install(python, args.cache)
        if args.venv and Path(python).resolve() != Path(sys.executable).resolve():
            rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--install"]
            return subprocess.run([python, __file__, *rest]).returncode
    absent = missing()
    if absent:
        print(f"Not installed here: {', '.join(absent)} (run with --install); their rows are skipped.")
    import torch

    results, spreads, errors = {}, {}, {}
    jobs = {PUFFER_DEFAULT: lambda: pufferlib_rate(args.cache, "default", args.num_envs, args.seconds, args.repeats),
            PUFFER_BOARD: lambda: pufferlib_rate(args.cache, "10 x 10", args.num_envs, args.seconds, args.repeats),
            PEERS[2]: lambda: jumanji_rate(args.num_envs, args.scan, args.seconds, args.repeats)}
    for obs_type in ("features", "grid"):
        for threads, compiled in ((1, False), (2, False), (2, True)):
            name = f"VecSnake {obs_type} {'compiled' if compiled else 'eager'} ({threads} thread{'s' * (threads > 1)})"
            jobs[name] = lambda o=obs_type, t=threads, c=compiled: vec_snake_rate(
                o, args.num_envs, t, c, args.seconds, args.repeats)
    for name, job in jobs.items():
        try:
            results[name], spreads[name] = job()
        except Exception as error:  # a peer that cannot run is reported, not fatal
            results[name], errors[name] = None, f"{type(error).__name__}: {error}"
            print(f"{name}: not measured ({errors[name]})")
    print(f"N = {args.num_envs:,} games of 10 x 10 each (PufferLib's default: its own maps); this machine: "
          f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads available "
          "(the IQR column shows each figure's spread)")
    print(table(results, spreads))
    if args.json:
        from rlgpu_helpers.core.device import device_report

        record = {
            "machine": device_report("cpu"), "date": datetime.date.today().isoformat(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "versions": {p: version(p) for p in ("jax", "jaxlib", "jumanji", "torch", "numpy")}
            | {"pufferlib": f"{PUFFERLIB} (sdist's snake.h)", "python": platform.python_version()},
            "config": {"num_envs": args.num_envs, "board": [BOARD, BOARD], "jumanji_scan": args.scan,
                       PUFFER_DEFAULT: puffer_settings(args.cache, "default", 0)
                       if (args.cache / "snake.ini").exists() else None,
                       PUFFER_BOARD: "one CSnake per game: 12 x 12 map with a 1-cell wall border (vision=1), "
                                     "num_snakes=1, num_food=1, no corpses, max_snake_length=100",
                       "VecSnake compiled": "torch.compile(step_tensors, fullgraph=True, "
                                            "options=step_compile_options('cpu'))"},
            "steps_per_s": results, "iqr": spreads, "ratios": ratios(results), "errors": errors,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
