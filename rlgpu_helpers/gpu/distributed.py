"""Data parallelism's machinery: the world torchrun describes, the process group, all-reduces (notebook 10).

Data parallelism runs W copies of a learner, one per process (rank); before every optimizer step
the gradients are averaged over the ranks (an *all-reduce*), so every rank takes the same step.
This module holds what any data-parallel learner needs, and nothing of PPO:

- :func:`world_from_env`: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
  and MASTER_PORT, checked by name;
- :func:`process_group`: join the group (gloo on CPUs, NCCL on GPUs: one GPU per process,
  ``cuda:LOCAL_RANK``) with a timeout, so a missing or mismatched rank fails with an error
  instead of hanging; :func:`check_same_settings` fails on every rank unless all got the same;
- :func:`gather`, :func:`parameters_agree`, :func:`count_allreduces`: what the ranks hold, and how
  many all-reduces DDP launched; :func:`global_mean_std`: a statistic of every rank's data together
  (PPO's advantage normalization), and :func:`check_global_mean_std`, which runs your own version
  of it on real ranks and says whether it is right (notebook 10's exercise);
- :func:`torchrun_command`, :func:`launch`, :func:`run_json`: start W ranks of
  ``python -m rlgpu_helpers rank ...`` (:data:`COMMAND`, the one command line's entry point for
  each rank), on one machine or several.

Data-parallel PPO itself (``DistributedPPO``, the proof against one process) is in
``learn/ppo_ddp.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import importlib.util
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.multiprocessing.spawn import ProcessException
from torch.nn.parallel import DistributedDataParallel

from ..core.checks import check_choice, check_int, check_number
from ..core.device import get_device
from ..core.logs import only_logs_from

COMMAND = ("-m", "rlgpu_helpers", "rank")
"""What torchrun starts on each rank, before the subcommand: the ``rank`` subcommand of the one command line."""
BACKENDS = ("gloo", "nccl")
WORLD_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
DEFAULT_TIMEOUT_S = 120.0
"""How long a collective (or joining the group) waits for the other ranks before failing."""


# ---------------------------------------------------------------------------- the world

@dataclasses.dataclass(frozen=True)
class World:
    """Where this process stands among the ranks, as torchrun describes it in the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def world_from_env(environ=None) -> World:
    """The :class:`World` from torchrun's environment variables; a clear error when run without torchrun."""
    environ = os.environ if environ is None else environ
    missing = [name for name in WORLD_VARIABLES if name not in environ]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not set: this is one of the processes torchrun starts, e.g. "
            f"`{shlex.join(torchrun_command(2, ['train']))}` (or `python -m rlgpu_helpers train --nproc 2`)")
    numbers = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        try:
            numbers[name] = int(environ[name])
        except ValueError:
            raise ValueError(f"{name}={environ[name]!r} must be an integer") from None
    world = World(numbers["RANK"], numbers["WORLD_SIZE"], numbers["LOCAL_RANK"], numbers["LOCAL_WORLD_SIZE"],
                  environ["MASTER_ADDR"], numbers["MASTER_PORT"])
    check_int("WORLD_SIZE", world.world_size)
    check_int("RANK", world.rank, 0, world.world_size - 1)
    check_int("LOCAL_WORLD_SIZE", world.local_world_size, 1, world.world_size)
    check_int("LOCAL_RANK", world.local_rank, 0, world.local_world_size - 1)
    check_int("MASTER_PORT", world.master_port, 1, 65535)
    return world


def default_backend(device) -> str:
    """NCCL for CUDA devices, gloo for CPUs."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def check_backend(backend: str, device) -> str:
    """``backend`` if this torch has it and it can serve ``device``; otherwise a clear error."""
    check_choice("backend", backend, BACKENDS)
    available = dist.is_available() and (dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available())
    if not available:
        hint = "NCCL comes with torch's CUDA builds on Linux; on CPUs use backend='gloo'" if backend == "nccl" else ""
        raise RuntimeError(f"backend={backend!r} is not available in this torch {torch.__version__}. {hint}".strip())
    if backend == "nccl" and torch.device(device).type != "cuda":
        raise ValueError(f"backend='nccl' runs on CUDA GPUs, not device={str(device)!r}: use backend='gloo' on CPUs")
    return backend


def rank_device(device, world: World) -> torch.device:
    """This rank's device: the CPU, or GPU ``LOCAL_RANK`` (NCCL needs one GPU per process)."""
    device = get_device(device, param="device")
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device={str(device)!r}: data-parallel training runs on 'cpu' (gloo) or 'cuda' (NCCL)")
    count = torch.cuda.device_count()
    if world.local_rank >= count:
        raise RuntimeError(f"LOCAL_RANK={world.local_rank} needs GPU {world.local_rank}, but this machine has {count}: "
                           f"start at most {count} processes per machine (one GPU per process)")
    return torch.device("cuda", world.local_rank)


@contextlib.contextmanager
def process_group(world: World, backend: str, device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S):
    """Join the process group for the ``with`` block, and leave it after, even on an error.

    Every collective, and joining itself, fails after ``timeout_s`` seconds instead of waiting
    forever for a rank that never comes (or called a different collective). A block that ends
    well ends at a barrier: no rank destroys the group (rank 0 hosts its store) while another still
    uses it, and while it waits, without the GIL, gloo's threads can release the last collectives'
    tensors, which needs the GIL (torch 2.6 deadlocked, destroying a group just after an all-reduce:
    see ``_check_rank``).
    """
    timeout_s = check_number("timeout_s", timeout_s, above=0)
    check_backend(backend, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend, rank=world.rank, world_size=world.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as error:  # the store raises several types; all mean the group did not form
        raise RuntimeError(f"rank {world.rank}: the {world.world_size} processes did not meet at "
                           f"{world.master_addr}:{world.master_port} within {timeout_s:g} s ({error})") from error
    try:
        yield
        dist.barrier()  # not after an error: the other ranks may be gone
    finally:
        gc.collect()  # free DDP's reducers (in reference cycles) while their group still exists
        dist.destroy_process_group()


def check_same_settings(settings: dict) -> None:
    """Fail, on every rank, unless every rank was given the same ``settings`` (compared as JSON)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, json.dumps(settings, sort_keys=True, default=str))
    for rank, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            mine, other = json.loads(everyone[0]), json.loads(theirs)
            diff = {key: (mine.get(key), other.get(key)) for key in sorted(set(mine) | set(other))
                    if mine.get(key) != other.get(key)}
            # Every rank sees the same difference and leaves; none may leave before all have their copy
            # (rank 0 hosts the group's store; on torch 2.6 a rank left behind hung, 1 run in about 100).
            dist.barrier()
            raise ValueError(f"rank {rank} was started with other settings than rank 0 (rank 0's, rank {rank}'s): "
                             f"{diff}; every rank needs the same ones")


def gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` from every rank (same shape on each), in rank order."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return parts


def parameters_agree(model: torch.nn.Module) -> bool:
    """Whether every rank holds exactly the same parameters (bit for bit); the same answer on every rank."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return all(torch.equal(flat, other) for other in gather(flat))


def global_mean_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of every rank's ``x`` together (two small all-reduces), on every rank.

    Sum and count give the mean; then the sum of squared deviations from it gives the std, as
    ``Tensor.std`` of the concatenation does. Two passes, not sum and sum of squares in one: with
    a mean large against the spread, ``squares - count * mean**2`` cancels to rounding noise.
    """
    sums = torch.stack([x.sum(), x.new_full((), x.numel())])
    dist.all_reduce(sums)
    mean = sums[0] / sums[1]
    squares = (x - mean).pow(2).sum()
    dist.all_reduce(squares)
    return mean, (squares / (sums[1] - 1)).sqrt()


def check_data_parallel_settings(cuda_graphs: bool) -> None:
    """Refuse the ``PPOConfig`` launch settings that data-parallel PPO cannot run, before any rank starts."""
    if cuda_graphs:
        raise ValueError(
            "cuda_graphs=True is not supported by data-parallel PPO: DDP all-reduces inside the update, and "
            "capturing that needs DDP built and warmed up on the capture's stream with NCCL's graph support, "
            "which this learner does not do. Use compile=True, or cuda_graphs=True in one process")


@dataclasses.dataclass
class AllreduceCounter:
    """How many gradient all-reduces a DDP model launched (one per bucket per synchronized backward)."""

    calls: int = 0


def count_allreduces(model: DistributedDataParallel) -> AllreduceCounter:
    """Count ``model``'s gradient all-reduces from now on: DDP's own all-reduce, through a comm hook
    that counts each call. Register it before the model's first backward."""
    if not isinstance(model, DistributedDataParallel):
        raise TypeError(f"model must be a DistributedDataParallel, not {type(model).__name__}")
    counter = AllreduceCounter()

    def hook(state, bucket):
        counter.calls += 1
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    return counter


# ---------------------------------------------------------------------------- launching

def torchrun_command(nproc: int, arguments, *, nnodes: int = 1, rdzv_endpoint: str | None = None,
                     rdzv_id: str = "rlgpu") -> list[str]:
    """The torchrun command that starts ``nproc`` ranks of :data:`COMMAND` per machine with ``arguments``.

    One machine: ``--standalone`` (torchrun picks a free port on localhost). Several machines, or
    to go through the rendezvous explicitly: ``rdzv_endpoint="HOST:PORT"`` (c10d rendezvous, hosted
    by the torchrun on HOST), the same command on every machine. torchrun is started as
    ``python -m torch.distributed.run`` with this Python, so no ``torchrun`` on PATH is needed.
    """
    nproc, nnodes = check_int("nproc", nproc), check_int("nnodes", nnodes)
    command = [sys.executable, "-m", "torch.distributed.run"]
    if rdzv_endpoint is None:
        if nnodes > 1:
            raise ValueError(f"nnodes={nnodes} needs rdzv_endpoint, the HOST:PORT every machine can reach")
        command.append("--standalone")
    else:
        command += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                    "--rdzv-id", rdzv_id]
    return command + ["--nproc-per-node", str(nproc), *COMMAND, *map(str, arguments)]


def launch(nproc: int, arguments, *, timeout_s: float = 300.0, threads: int | None = 1, capture: bool = True,
           **rendezvous) -> subprocess.CompletedProcess:
    """Run :func:`torchrun_command` and wait; kill torchrun and every rank if it runs past ``timeout_s``.

    ``threads`` sets OMP_NUM_THREADS of each rank (None: leave it to torchrun, which sets 1).
    ``capture`` keeps the output in the result instead of showing it. A failed run raises
    ``RuntimeError`` with the end of its output.
    """
    timeout_s = check_number("timeout_s", timeout_s, above=0)
    command = torchrun_command(nproc, arguments, **rendezvous)
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(check_int("threads", threads))
    pipe = subprocess.PIPE if capture else None
    process = subprocess.Popen(command, stdout=pipe, stderr=subprocess.STDOUT if capture else None, text=True,
                               env=env, start_new_session=True)  # its own group: a timeout kills every rank
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise RuntimeError(f"`{shlex.join(command)}` ran past timeout_s={timeout_s:g} s and was killed") from None
    if process.returncode:
        lines = (output or "").splitlines()
        ranks = [line for line in lines if line.startswith("[rank")]  # the ranks' own tracebacks, not torchrun's
        tail = "\n".join(ranks[-15:] if ranks else lines[-25:])
        raise RuntimeError(f"`{shlex.join(command)}` failed (exit {process.returncode}):\n{tail}")
    return subprocess.CompletedProcess(command, process.returncode, output, None)


def run_json(nproc: int, arguments, **kwargs) -> dict:
    """:func:`launch` a subcommand that writes rank 0's result with ``--json``, and return that result."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "result.json"
        launch(nproc, [*arguments, "--json", str(path)], **kwargs)
        return json.loads(path.read_text())


# ---------------------------------------------------------------------------- checking your own all-reduce

CHECK_ROWS = (5, 11, 8, 3)
"""Rows of each rank's data in :func:`check_global_mean_std` (rank r: ``CHECK_ROWS[r % 4]``): unequal on purpose."""


def _check_data(rank: int, dtype=torch.float64) -> torch.Tensor:
    """Rank ``rank``'s seeded data for :func:`check_global_mean_std`: its own size, scale and offset."""
    g = torch.Generator().manual_seed(1000 + rank)
    return (1 + rank) * torch.randn(CHECK_ROWS[rank % len(CHECK_ROWS)], generator=g, dtype=dtype) + 3 * rank


def _check_rank(rank: int, world_size: int, folder: str, path: str, name: str, timeout_s: float) -> None:
    """One spawned rank of :func:`check_global_mean_std`: join, run ``name`` from ``path``, write what it returned.

    The rank's own output (gloo's and torch's messages) goes to ``rank<r>.log`` in ``folder``, not to the
    notebook; ``rank<r>.joined`` marks that the group formed, so a failure before it is told apart from yours.
    """
    log = os.open(Path(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    Path(folder, f"rank{rank}.joined").touch()
    try:
        spec = importlib.util.spec_from_file_location("yours", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        mean, std = getattr(module, name)(_check_data(rank))
        Path(folder, f"rank{rank}.json").write_text(json.dumps([float(mean), float(std)]))
    except BaseException:
        dist.destroy_process_group()
        raise
    # Leave without destroying the group, once every rank has written its answer. torch 2.6's gloo
    # group can deadlock in its destructor: it joins its worker threads holding the GIL, while a
    # worker waits for the GIL to free a tensor of the last collective (seen in gdb, issue 36).
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


CHECK_ATTEMPTS = 3
"""How many times :func:`check_global_mean_std` starts its ranks when their process group fails to form."""

_NO_GROUP = "not checked: the ranks' process group failed to form"


def check_global_mean_std(path, name: str = "global_mean_std", *, world_size: int = 2,
                          timeout_s: float = 30.0) -> str:
    """Run your ``name(x)`` from the file ``path`` on ``world_size`` real gloo ranks, and say whether it is right.

    Every rank gets its own seeded ``x`` (:data:`CHECK_ROWS`: unequal sizes, scales and offsets,
    so a mean of the ranks' means, or a std around each rank's own mean, is caught), and must
    return the mean and unbiased std of all ranks' ``x`` together, as one process computes them
    on the concatenation. Returns the verdict as a sentence: a wrong answer, an error or a rank
    left waiting (after ``timeout_s``) is reported, not raised, so a notebook runs on.

    The ranks' own messages go to a log, not to the screen. A group that fails to form before your
    function is called (on a loaded machine gloo can drop a connection while the ranks meet) is
    started again, up to :data:`CHECK_ATTEMPTS` times in all.
    """
    world_size = check_int("world_size", world_size, 2)
    timeout_s = check_number("timeout_s", timeout_s, above=0)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r} is not a file: write your function there first")
    everything = torch.cat([_check_data(rank) for rank in range(world_size)])
    expected = (float(everything.mean()), float(everything.std()))
    for _ in range(CHECK_ATTEMPTS):
        got = _check_on_ranks(str(path.resolve()), name, world_size, timeout_s)
        if not (isinstance(got, str) and got.startswith(_NO_GROUP)):
            break
    if isinstance(got, str):
        return got if not got.startswith(_NO_GROUP) else f"{got}, {CHECK_ATTEMPTS} times"
    wrong = [f"rank {rank} got mean {mean:.4f}, std {std:.4f}" for rank, (mean, std) in enumerate(got)
             if not all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip((mean, std), expected))]
    if wrong:
        return (f"not yet: {'; '.join(wrong)}; all {everything.numel()} values together have mean "
                f"{expected[0]:.4f}, std {expected[1]:.4f}")
    return (f"right: all {world_size} ranks got the mean ({expected[0]:.4f}) and std ({expected[1]:.4f}) "
            f"of the {everything.numel()} values of every rank together")


def _check_on_ranks(path: str, name: str, world_size: int, timeout_s: float):
    """One start of :func:`check_global_mean_std`'s ranks: each rank's (mean, std), or a verdict as a sentence."""
    # torch's spawn warns that it stops the other ranks once one failed: the verdict says so
    with tempfile.TemporaryDirectory() as folder, only_logs_from("torch.multiprocessing.spawn", logging.ERROR):
        ranks = mp.spawn(_check_rank, args=(world_size, folder, path, name, timeout_s),
                         nprocs=world_size, join=False)
        deadline = time.monotonic() + 4 * timeout_s  # the collectives' own timeout, then some: never hang
        try:
            while not ranks.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in ranks.processes:
                        process.kill()
                    return (f"not yet: a rank was still running after {4 * timeout_s:.0f} s, waiting for a "
                            "collective another rank never called")
        except ProcessException as error:  # a rank's exception, as text: a wrong answer is no crash here
            last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            if not all(Path(folder, f"rank{rank}.joined").exists() for rank in range(world_size)):
                return f"{_NO_GROUP} ({last[:160]})"
            return (f"not yet: a rank raised, or waited for a collective another rank never called "
                    f"({last[:160]})")
        return [tuple(json.loads(Path(folder, f"rank{rank}.json").read_text())) for rank in range(world_size)]

