"""``FusedStep``: ``VecSnake``'s "features" and "grid" steps as hand-written Triton kernels (notebook 04, section 5).

``torch.compile`` fuses the step into a few generated kernels; this is the step written as one, for
the floor's third column (eager, compiled, fused). In ``fused_step`` each lane steps one game: it
reads the game's numbers once, the stamps it looks at and the row counts it changes or places food
by, does the move, the restart and the food placement in registers, and writes back only what
changed. A lane never reads what it has written: where ``VecSnake`` reads a cell it has just
stamped (placing food after a restart), the kernel corrects the old value instead. Lanes wait for
one another once, at a barrier after the clock sweep's rebase of a game's stamps. A grid observation
is 3 x H x W floats a game, twice a step: one game a lane would scatter them, so "grid" launches a
second kernel, ``fused_grid_observe``, whose neighbouring lanes write neighbouring cells of a game.

The same games as ``VecSnake.step_tensors``, bit for bit, which the tests check step by step.
Triton runs on a GPU; on a CPU only in its interpreter (``TRITON_INTERPRET=1`` set before this
module is imported), which the tests use and which is far too slow to time. The tests also compile
it for an H100's sm_90 without a GPU (Triton's compiler needs none).
"""

from __future__ import annotations

import os

import torch

from ..gpu.graphs import COMPILER_HELP
from . import rules

try:
    import triton
    import triton.language as tl
except ImportError:  # no kernel to launch: ``triton_missing`` says why
    triton = tl = None

_jit = triton.jit if triton is not None else (lambda fn: fn)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # as Triton read it when the kernels below were defined


def has_triton() -> bool:
    """Whether Triton is installed (torch's Linux CUDA wheels bring it; its CPU wheels do not)."""
    return triton is not None


def triton_missing(device: str | torch.device) -> str | None:
    """Why ``FusedStep`` cannot run on ``device`` here, or None if it can."""
    if not has_triton():
        return f"the fused step needs Triton, which is not installed: {COMPILER_HELP['cuda']}"
    device_type = torch.device(device).type
    if device_type == "cpu" and not INTERPRETED:
        return ("Triton runs on a GPU; on a CPU only in its interpreter "
                "(TRITON_INTERPRET=1 set before rlgpu_helpers.snake.vec_fused is imported)")
    if device_type not in ("cpu", "cuda"):
        return f"the fused step runs on cuda (or a CPU, interpreted), not on {device_type}"
    return None


@_jit
def _hash32(x):
    """``vec._hash32``, on int64 values below 2**32 (products stay below 2**63)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


@_jit
def _inside(c, W: tl.constexpr, P: tl.constexpr):
    """The bordered layout's index of the board's ``c``-th cell, counting row by row (``vec_state._inside_cells``)."""
    return (c // W + 1) * P + c % W


@_jit
def _offset(direction, P: tl.constexpr):
    """One step up, right, down or left in the bordered layout of row pitch ``P``."""
    return tl.where(direction == 0, -P, tl.where(direction == 1, 1, tl.where(direction == 2, P, -1)))


@_jit
def _sign(x):
    return (x > 0).to(tl.int32) - (x < 0).to(tl.int32)


@_jit
def _store_features(out, games, mask, danger, direction, head, food, no_food, P: tl.constexpr):
    """The 11 features of ``rules.observe``: danger straight/right/left, heading one-hot, food up/right/down/left."""
    d_row = _sign(food // P - head // P)
    d_col = _sign(food % P - head % P)
    has_food = no_food == 0
    row = out + games * 11
    for k in tl.static_range(3):
        tl.store(row + k, ((danger >> k) & 1).to(tl.float32), mask=mask)
    for k in tl.static_range(4):
        tl.store(row + 3 + k, (direction == k).to(tl.float32), mask=mask)
    tl.store(row + 7, ((d_row < 0) & has_food).to(tl.float32), mask=mask)
    tl.store(row + 8, ((d_col > 0) & has_food).to(tl.float32), mask=mask)
    tl.store(row + 9, ((d_row > 0) & has_food).to(tl.float32), mask=mask)
    tl.store(row + 10, ((d_col < 0) & has_food).to(tl.float32), mask=mask)


@_jit
def fused_step(
    # the state, read and written in place (``VecSnakeState``)
    stamp, ring, row_free, clock, length, head, direction, food, steps_since_food, episode_steps, counter, env_keys,
    sweep, actions,
    # outputs
    obs, final_obs, last, reward, terminated, truncated, done_out, score, episode_length, won_out,
    N, MAX_STEPS,
    H: tl.constexpr, W: tl.constexpr, P: tl.constexpr, RING: tl.constexpr, START_HEAD: tl.constexpr,
    SWEEP_GAMES: tl.constexpr, GRID: tl.constexpr, BLOCK: tl.constexpr,
):
    """One step of N games of Snake, one game per lane; ``counter`` and ``sweep`` must already be advanced.

    "features" (``GRID`` false): writes ``obs`` and ``final_obs``. "grid": leaves them, and a
    restarted game's three start stamps, to ``fused_grid_observe``, and writes ``last`` (N, 4) for it:
    the last position's body base (a stamp above it is body), length, head and food (-1 if won).
    """
    g = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = g < N
    games = g.to(tl.int64)
    at = games * ((H + 2) * P)  # each game's block of stamps
    ring_at = games * RING
    # Per-game numbers in int32: cells, lengths and counts are small, clocks stay below 2**31
    # (``vec_state``'s rebase); only the episode's steps and the random stream need int64.
    d = tl.load(direction + games, mask=m, other=0).to(tl.int32)
    old_direction = d
    a = tl.load(actions + games, mask=m, other=0).to(tl.int32)
    hd = tl.load(head + games, mask=m, other=P).to(tl.int32)
    fd = tl.load(food + games, mask=m, other=P).to(tl.int32)
    ck = tl.load(clock + games, mask=m, other=0).to(tl.int32)
    ln = tl.load(length + games, mask=m, other=3).to(tl.int32)

    # The clock sweep first (``VecSnakeState._sweep_rebase``): the ``SWEEP_GAMES`` games after the
    # last sweep's shift their times down by ``clock - length`` rounded down to the ring's size. The
    # program that holds such a game rewrites its stamps, all its lanes a cell each, and waits at a
    # barrier for them before any lane reads a stamp: the one place where lanes read others' writes.
    first = ((tl.load(sweep) - 1) * SWEEP_GAMES) % N
    for k in tl.static_range(SWEEP_GAMES):  # one game below 2**24 games
        game = (first + k) % N
        if (game >= tl.program_id(0) * BLOCK) & (game < (tl.program_id(0) + 1) * BLOCK):
            game_shift = (tl.load(clock + game) - tl.load(length + game)) & -RING
            for c0 in range(0, H * W, BLOCK):
                c = c0 + tl.arange(0, BLOCK)
                cell = game * ((H + 2) * P) + _inside(c, W, P)
                old = tl.load(stamp + cell, mask=c < H * W, other=0)
                tl.store(stamp + cell, tl.maximum(old - game_shift, 0).to(stamp.dtype.element_ty), mask=c < H * W)
    tl.debug_barrier()
    swept = m & ((games - first + N) % N < SWEEP_GAMES)
    ck = ck - tl.where(swept, (ck - ln) & -RING, 0)
    sf = tl.load(steps_since_food + games, mask=m, other=0).to(tl.int32)
    ep = tl.load(episode_steps + games, mask=m, other=0).to(tl.int64)
    key = tl.load(env_keys + games, mask=m, other=0).to(tl.int64)

    # The move (``VecSnake.step_tensors``): turn, look at the cell ahead, die or move.
    nd = (d + tl.where(a == 1, 1, tl.where(a == 2, 3, 0))) % 4
    new_head = hd + _offset(nd, P)
    ate = new_head == fd
    there = tl.load(stamp + at + new_head, mask=m, other=0)
    dead = there > ck + 1 - (ln + ate.to(tl.int32))
    alive = (dead == 0) & m
    tail = tl.load(ring + ring_at + ((ck - ln + 1) & (RING - 1)), mask=m, other=P).to(tl.int32)
    ck = ck + alive.to(tl.int32)
    ln = ln + ate.to(tl.int32)
    hd = tl.where(alive, new_head, hd)
    d = tl.where(alive, nd, d)
    sf = tl.where(ate, 0, sf + alive.to(tl.int32))
    ep = ep + 1
    won = ate & (ln == H * W)
    term = dead | won
    trunc = (sf >= MAX_STEPS) & (term == 0)
    done = term | trunc

    if GRID:  # what the last observation is drawn from
        tl.store(last + games * 4, ck - ln, mask=m)
        tl.store(last + games * 4 + 1, ln, mask=m)
        tl.store(last + games * 4 + 2, hd, mask=m)
        tl.store(last + games * 4 + 3, tl.where(won, -1, fd), mask=m)
    else:  # the last observation: danger straight, right and left of the head (a wall, or body but the tail)
        tail_time = ck - ln + 1
        danger = (tl.load(stamp + at + hd + _offset(d, P), mask=m, other=0) > tail_time).to(tl.int32)
        danger += 2 * (tl.load(stamp + at + hd + _offset((d + 1) % 4, P), mask=m, other=0) > tail_time).to(tl.int32)
        danger += 4 * (tl.load(stamp + at + hd + _offset((d + 3) % 4, P), mask=m, other=0) > tail_time).to(tl.int32)
        _store_features(final_obs, games, m, danger, d, hd, fd, won, P)
    tl.store(score + games, (ln - 3).to(score.dtype.element_ty), mask=m)
    tl.store(episode_length + games, ep, mask=m)

    # Restart the finished games (``VecSnake._restart``): the clock jumps by 3, the start snake.
    head_row = hd // P - 1  # the row the head entered, and the row the tail left
    tail_row = tl.where(alive & (ate == 0), tail // P - 1, -1)
    old_head = hd
    ck = ck + 3 * done.to(tl.int32)
    ln = tl.where(done, 3, ln)
    hd = tl.where(done, START_HEAD, hd)
    d = tl.where(done, 1, d)
    sf = tl.where(done, 0, sf)
    ep = tl.where(done, 0, ep)

    # Empty cells per row, and new food (``VecSnake._place_food``) for the restarted games and those
    # that ate: the r-th empty cell, r uniform below the empty cells' count. Each row's count is read
    # where it changes or where food is placed, and written where it changes; the food's row is the
    # number of rows whose running count is <= r, and ``before`` the count of the rows above it.
    need = (done | (ate & (won == 0))) & m
    c = tl.load(counter).to(tl.int64)
    bits = _hash32(key ^ _hash32(c & 0xFFFFFFFF))
    r = ((bits * (H * W - ln).to(tl.int64)) >> 32).to(tl.int32)
    running = tl.zeros([BLOCK], dtype=tl.int32)
    row = tl.zeros([BLOCK], dtype=tl.int32)
    before = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(H):
        entered = alive & (head_row == i)
        left = tail_row == i
        changed = m & (entered | left | done)
        count = tl.load(row_free + games * H + i, mask=changed | need, other=0).to(tl.int32)
        count = count - entered.to(tl.int32) + left.to(tl.int32)
        count = tl.where(done, tl.where(i == H // 2, W - 3, W), count)  # the start body's row
        tl.store(row_free + games * H + i, count.to(row_free.dtype.element_ty), mask=changed)
        running += count
        below = running <= r
        row += below.to(tl.int32)
        before = tl.where(below, running, before)
    row = tl.minimum(row, H - 1)
    k = r - before
    # Then the k-th empty cell of that row: the number of its cells whose running count of empty
    # cells is <= k. Its stamps as the step leaves them: the old stamps, but the head just stamped
    # (a game going on) or the three start cells (a restarted one).
    threshold = ck - ln
    empties = tl.zeros([BLOCK], dtype=tl.int32)
    col = tl.zeros([BLOCK], dtype=tl.int32)
    for j in range(P):
        cell = (row + 1) * P + j
        old = tl.load(stamp + at + cell, mask=need, other=2**31 - 1)
        stamped = tl.where(done, (cell <= START_HEAD) & (cell > START_HEAD - 3), cell == old_head)
        empties += ((old <= threshold) & (stamped == 0)).to(tl.int32)
        col += (empties <= k).to(tl.int32)
    col = tl.minimum(col, W - 1)
    fd = tl.where(need, (row + 1) * P + col, fd)

    if not GRID:  # the next observation: a restarted snake sees no danger; food is never missing after a restart
        _store_features(obs, games, m, tl.where(done, 0, danger), d, hd, fd, tl.zeros([BLOCK], dtype=tl.int32), P)
    tl.store(reward + games, ate.to(tl.float32) - dead.to(tl.float32), mask=m)
    tl.store(terminated + games, term, mask=m)
    tl.store(truncated + games, trunc, mask=m)
    tl.store(done_out + games, done, mask=m)
    tl.store(won_out + games, won, mask=m)

    # Write the state back: the head's stamp and ring slot, and a restarted snake's two other cells
    # (the start body runs left from its head: head - 1, head - 2 in the bordered layout). For "grid",
    # a restarted game's stamps wait: ``fused_grid_observe`` reads the old ones for its last observation.
    for age in tl.static_range(3):
        write = m if age == 0 else m & done
        stamp_write = write & (done == 0) if GRID else write
        tl.store(stamp + at + hd - age, (ck - age).to(stamp.dtype.element_ty), mask=stamp_write)
        tl.store(ring + ring_at + ((ck - age) & (RING - 1)), (hd - age).to(ring.dtype.element_ty), mask=write)
    # The numbers that change every step, then those that change only when the snake turns, eats or restarts.
    tl.store(clock + games, ck.to(clock.dtype.element_ty), mask=m)
    tl.store(head + games, hd.to(head.dtype.element_ty), mask=m)
    tl.store(steps_since_food + games, sf.to(steps_since_food.dtype.element_ty), mask=m)
    tl.store(episode_steps + games, ep, mask=m)
    tl.store(direction + games, d.to(direction.dtype.element_ty), mask=m & (d != old_direction))
    tl.store(length + games, ln.to(length.dtype.element_ty), mask=m & (ate | done))
    tl.store(food + games, fd.to(food.dtype.element_ty), mask=need)


@_jit
def fused_grid_observe(
    stamp, last, done, head, food,  # after ``fused_step``: the state, its ``last`` and ``done_out``
    obs, final_obs, N,
    H: tl.constexpr, W: tl.constexpr, P: tl.constexpr, START_HEAD: tl.constexpr,
    GAMES: tl.constexpr, CELLS: tl.constexpr,
):
    """The "grid" observations (N, 3, H, W) of a step, ``GAMES`` games a program and ``CELLS`` cells
    at a time, so neighbouring lanes write neighbouring floats; and a restarted game's start stamps.

    Each cell: its head, body (the remaining lifetime over the length) and food channels, as
    ``VecSnake._observe_grid`` and ``_next_grid`` give them. A lane writes a start stamp only
    after reading the old one there, for the last observation.
    """
    g = tl.program_id(0) * GAMES + tl.arange(0, GAMES)[:, None]
    gm = g < N
    games = g.to(tl.int64)
    base = tl.load(last + games * 4, mask=gm, other=0)
    ln = tl.load(last + games * 4 + 1, mask=gm, other=1)
    last_head = tl.load(last + games * 4 + 2, mask=gm, other=-1)
    last_food = tl.load(last + games * 4 + 3, mask=gm, other=-1)
    restarted = tl.load(done + games, mask=gm, other=0) != 0
    hd = tl.load(head + games, mask=gm, other=-1).to(tl.int32)
    fd = tl.load(food + games, mask=gm, other=-1).to(tl.int32)
    clock = base + ln + 3  # a restarted game's clock: the last one jumped by 3
    at = games * ((H + 2) * P)
    out_at = games * (3 * H * W)
    for first in range(0, H * W, CELLS):
        c = first + tl.arange(0, CELLS)[None, :]
        cm = gm & (c < H * W)
        cell = _inside(c, W, P)
        s = tl.load(stamp + at + cell, mask=cm, other=0)
        # Division, not a reciprocal multiply: the correctly rounded (length - i) / length of the rules.
        life = tl.math.div_rn(tl.maximum(s - base, 0).to(tl.float32), ln.to(tl.float32))
        body = tl.where(cell == last_head, 1.0, life)  # a restarted game's last head was never stamped
        tl.store(final_obs + out_at + c, (cell == last_head).to(tl.float32), mask=cm)
        tl.store(final_obs + out_at + H * W + c, body, mask=cm)
        tl.store(final_obs + out_at + 2 * H * W + c, (cell == last_food).to(tl.float32), mask=cm)
        # The next: a game going on shows the same head and body; a restarted one the start snake.
        age = START_HEAD - cell
        start = restarted & (age >= 0) & (age < 3)
        start_life = tl.where(start, tl.math.div_rn((3 - age).to(tl.float32), 3.0), 0.0)
        tl.store(obs + out_at + c, (cell == hd).to(tl.float32), mask=cm)
        tl.store(obs + out_at + H * W + c, tl.where(restarted, start_life, body), mask=cm)
        tl.store(obs + out_at + 2 * H * W + c, (cell == fd).to(tl.float32), mask=cm)
        tl.store(stamp + at + cell, (clock - age).to(stamp.dtype.element_ty), mask=cm & start)


GAMES_PER_PROGRAM = 128
"""Games ``fused_step``'s program steps, one per lane: Triton's default 4 warps of 32 lanes."""

GRID_TILE = 1024
"""Cells of observation (games x cells) ``fused_grid_observe``'s program writes at a time: 8 a lane."""


class FusedStep:
    """``env.step_tensors`` of a ``"features"`` or ``"grid"`` ``VecSnake`` as one kernel launch, two
    for "grid" (after one small launch that advances the env's two step counters).

    Call it with actions as ``step_tensors`` takes them (an integer tensor (N,) of 0..2 on the env's
    device, not checked: ``check_action_values`` has no fused form) and it returns the same
    ``(obs, reward, terminated, truncated, info)``, stepping the env's own state.
    """

    OBS_TYPES = ("features", "grid")

    def __init__(self, env):
        if env.obs_type not in self.OBS_TYPES:
            raise ValueError(f"env.obs_type={env.obs_type!r}: the fused step is written for {self.OBS_TYPES} only")
        why = triton_missing(env.device)
        if why is not None:
            raise RuntimeError(why)
        self.env = env

    def __call__(self, actions: torch.Tensor):
        env = self.env
        # The random stream's step (``_random_below``) and the clock sweep's, in one launch; the
        # kernel rebases the sweep's games itself.
        torch._foreach_add_([env._counter, env._sweep], 1)
        launches, out = self.launches(actions)
        for kernel, grid, arguments, constants in launches:
            kernel[grid](*arguments, **constants)
        info = {"final_obs": out["final_obs"], "_final_obs": out["done"], "_episode": out["done"],
                "episode": {"score": out["score"], "length": out["length"], "won": out["won"]}}
        return out["obs"], out["reward"], out["terminated"], out["truncated"], info

    def launches(self, actions: torch.Tensor):
        """The kernels to launch in order, each as (kernel, grid, arguments, compile-time constants),
        and the fresh outputs they write, by name."""
        env = self.env
        N, dev, grid_obs = env.num_envs, env.device, env.obs_type == "grid"
        flag = dict(dtype=torch.bool, device=dev)
        obs_shape = (N, 3, env.height, env.width) if grid_obs else (N, rules.NUM_FEATURES)
        out = {"obs": torch.empty(obs_shape, device=dev), "final_obs": torch.empty(obs_shape, device=dev),
               "last": torch.empty((N, 4) if grid_obs else 0, dtype=torch.int32, device=dev),
               "reward": torch.empty(N, device=dev), "terminated": torch.empty(N, **flag),
               "truncated": torch.empty(N, **flag), "done": torch.empty(N, **flag),
               "score": torch.empty(N, dtype=env._length.dtype, device=dev),
               "length": torch.empty(N, dtype=torch.int64, device=dev), "won": torch.empty(N, **flag)}  # the kernel's order
        board = dict(H=env.height, W=env.width, P=env._pitch, START_HEAD=env._start_head)
        step = (fused_step, (-(-N // GAMES_PER_PROGRAM),),
                [env._stamp, env._ring, env._row_free, env._clock, env._length, env._head, env._direction, env._food,
                 env._steps_since_food, env._episode_steps, env._counter, env._env_keys, env._sweep, actions,
                 *out.values(), N, env.max_steps_without_food],
                dict(board, RING=env._ring_size, SWEEP_GAMES=env._sweep_games, GRID=grid_obs, BLOCK=GAMES_PER_PROGRAM))
        if not grid_obs:
            return [step], out
        cells = min(triton.next_power_of_2(env.height * env.width), GRID_TILE // 4)
        games = GRID_TILE // cells
        observe = (fused_grid_observe, (-(-N // games),),
                   [env._stamp, out["last"], out["done"], env._head, env._food, out["obs"], out["final_obs"], N],
                   dict(board, GAMES=games, CELLS=cells))
        return [step, observe], out
