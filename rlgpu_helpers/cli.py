"""The one command line: ``python -m rlgpu_helpers bench | train | play | rank``.

Introduced in notebook 00 (``bench``); ``train`` and ``play`` come with notebook 11, ``train --nproc N``
(data-parallel, started by torchrun) with notebook 10: torchrun starts ``rank train`` on each
process, ``rank proof`` and ``rank measure`` for the notebook's proof and timings.

``bench`` runs a benchmark suite, prints its table and can store the records: ``--json`` in any
file, ``--save`` in this machine's reference file under ``data/reference/``, which the notebooks
show beside the student's own measurements. ``train`` trains PPO or DQN on ``VecSnake`` with a
time or step budget, checkpoints as it goes and can ``--resume``; ``play`` shows a trained agent
(an agent file or a checkpoint) playing, and saves the games as a GIF.

Extending it:

- a benchmark suite is one entry in :data:`~rlgpu_helpers.bench.suites.SUITES`: a name, a
  function ``(device, progress) -> list[Record]`` and whether it measures the CPU only;
- a subcommand is one function in :data:`SUBCOMMANDS` that adds its parser to the subparsers
  and sets ``run`` (a function ``(args) -> int`` returning the exit code) as a default, like
  :func:`add_bench`. It raises :class:`UsageError` for bad combinations of arguments.
"""

import argparse
import ast
import dataclasses
import datetime
import inspect
import json
import shlex
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .bench.suites import SUITES
from .core.args import (
    UsageError,
    device_argument,
    endpoint_argument,
    output_file,
    output_folder,
    positive,
    seed_argument,
    setting,
    typed_settings,
)
from .core.checks import SEED_LIMIT
from .core.config import is_quick
from .core.device import describe_device, device_report, get_device, machine_label
from .core.files import atomic_write
from .gpu.distributed import (
    BACKENDS,
    DEFAULT_TIMEOUT_S,
    check_backend,
    check_data_parallel_settings,
    check_same_settings,
    default_backend,
    parameters_agree,
    process_group,
    rank_device,
    torchrun_command,
    world_from_env,
)
from .learn.agents import load_agent, play_episode, save_agent
from .learn.checkpoint import CHECKPOINT_NAME, CheckpointError, has_checksum
from .learn.nets import DivergedError
from .learn.dqn import DQNConfig
from .learn.ppo import PPOConfig
from .learn.ppo_ddp import (
    PROOF_SETTINGS,
    gradient_check,
    measure_iterations,
    train_distributed,
)
from .learn.settings import DEFAULT_PRESET, ppo_settings, preset_names, preset_settings, settings_dict
from .learn.training import RunFolderError, make_learner, train
from .learn.tune import CAPSTONE_OBS, capstone_settings
from .measure.records import save_json, save_reference
from .measure.table import records_table
from .snake import rules
from .snake.render import save_animation


def run_bench(args: argparse.Namespace) -> int:
    """Run one suite, print its table, and write the records where asked."""
    if args.save and is_quick():
        raise UsageError("--save stores full-size reference results: unset RLGPU_QUICK first")
    suite = SUITES[args.suite]
    device = args.device
    if device is None:
        device = get_device("cpu") if suite.cpu_only else get_device()
    elif suite.cpu_only and device.type != "cpu":
        raise UsageError(f"--device {device}: the {args.suite} suite measures the CPU only "
                         "(leave --device out, or give --device cpu)")
    print(describe_device(device))
    records = suite.run(device, sys.stderr.isatty(), **suite_options(suite, args.set or []))
    report = device_report(device)
    print(records_table(records, this_machine=machine_label(report)))
    command = _command(args)
    if args.json is not None:
        print(f"Wrote {save_json(args.json, records, report, command)}")
    if args.save:
        print(f"Saved to {save_reference(records, report, command)}")
    return 0


def suite_options(suite, settings) -> dict:
    """``bench --set NAME=VALUE`` as keyword arguments of the suite's function: Python literals, names checked.

    A suite with ``settings`` (a config dataclass) also takes that config's fields, typed as
    ``train --set`` types them.
    """
    accepted = [name for name, p in inspect.signature(suite.run).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    fields = [] if suite.settings is None else [f.name for f in dataclasses.fields(suite.settings)]
    options, config = {}, []
    for name, text in settings:
        if name in fields and name not in accepted:
            config.append((name, text))
            continue
        if name not in accepted:
            also = f", or a setting of {suite.settings.__name__}" if fields else ""
            raise UsageError(f"--set {name}={text}: the suite takes {', '.join(accepted) or 'no options'}{also}")
        try:
            options[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise UsageError(f"--set {name}={text}: not a Python literal (a number, a string in quotes, a tuple)") from None
    if config:
        options.update(typed_settings(suite.settings, config, suite.settings.__name__))
    return options


def add_bench(subparsers) -> None:
    """The ``bench`` subcommand."""
    parser = subparsers.add_parser("bench", help="measure this machine and show or save the results",
                                   description="Run a benchmark suite on this machine and print a table.")
    parser.add_argument("suite", nargs="?", default="ceilings", choices=sorted(SUITES),
                        help="which benchmarks to run (default: %(default)s)")
    parser.add_argument("--device", type=device_argument, default=None,
                        help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--json", type=output_file, metavar="PATH", default=None,
                        help="also write the records to this JSON file")
    parser.add_argument("--save", action="store_true",
                        help="merge the records into data/reference/<this machine>.json")
    parser.add_argument("--set", type=setting, action="append", default=None, metavar="NAME=VALUE",
                        help="an option of the suite's function, as a Python literal, e.g. --set seeds=(0,) "
                             "--set budget_s=600")
    parser.set_defaults(run=run_bench)


def _command(args) -> str:
    command = shlex.join(["python", "-m", "rlgpu_helpers", *args.argv])
    return "RLGPU_QUICK=1 " + command if is_quick() else command


# The learner's settings: a new run takes them from the command line, a resumed run from its
# checkpoint, so --resume refuses them (data-parallel runs are PPO's: no --algo).
_PPO_OPTIONS = ("preset", "obs", "size", "envs", "seed", "set")
_LEARNER_OPTIONS = ("algo", *_PPO_OPTIONS)


def _ppo_config(args, device, chosen: dict | None = None, *, where: str = "") -> PPOConfig:
    """PPO's settings from ``train``'s options: :func:`ppo_settings` of ``--preset`` on ``device``.

    The one way the command line builds them: ``train`` in one process, ``train --nproc N`` (to
    check them before torchrun starts the ranks) and ``rank train`` (on every rank) all call it,
    so they cannot disagree. ``chosen``: the settings ``--choose`` measured; ``--envs``, ``--seed``
    and ``--set`` win over them. A bad setting is a :class:`UsageError` (``where``: its prefix).
    """
    changes = {key: value for key, value in (chosen or {}).items() if not (key == "num_envs" and args.envs is not None)}
    if args.seed is not None:
        changes["seed"] = args.seed
    changes.update(typed_settings(PPOConfig, args.set or [], "ppo"))
    try:
        return ppo_settings(device, args.preset, obs=args.obs, size=args.size, envs=args.envs, overrides=changes)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{where}{error}") from None


def _chosen_config(args, device) -> PPOConfig:
    """``train --choose``: :func:`capstone_settings` measured from the command line's config, then applied to it."""
    config = _ppo_config(args, device)
    start = settings_dict(config, without=("device", "seed"))
    chosen = capstone_settings(device, budget_s=args.seconds, start=start).settings
    return _ppo_config(args, device, {key: value for key, value in chosen.items() if start.get(key) != value})


def _dqn_settings(args, device) -> dict:
    """``train --algo dqn``'s ``DQNConfig`` settings: the options given, then ``--set`` (no presets)."""
    given = {"obs_type": args.obs, "height": args.size, "width": args.size, "num_envs": args.envs, "seed": args.seed}
    settings = {key: value for key, value in given.items() if value is not None}
    settings["device"] = str(device)
    settings.update(typed_settings(DQNConfig, args.set or [], "dqn"))
    return settings


def run_train(args: argparse.Namespace) -> int:
    """Train, print a summary, and write the learning curve where asked."""
    parallel = _starts_torchrun(args)
    if args.choose:
        if args.resume or parallel or args.algo == "dqn":
            raise UsageError("--choose chooses a new PPO run's settings in one process: leave out "
                             + ("--resume" if args.resume else "--nproc" if parallel else "--algo dqn"))
        if args.seconds is None and args.steps is not None:
            raise UsageError("--choose chooses for a time budget: give --seconds, not only --steps")
    if parallel:
        return _run_data_parallel(args)
    if args.seconds is None and args.steps is None:
        args.seconds = 300.0
    given = [f"--{name}" for name in _LEARNER_OPTIONS if getattr(args, name) not in (None, [])]
    if args.resume:
        if args.out is None:
            raise UsageError("--resume needs --out, the folder of the run to continue")
        if given:
            raise UsageError(f"--resume continues the run in --out with the settings it was started with; "
                             f"leave out {', '.join(given)} (--device moves it to another device)")
    if args.preset is not None and args.algo == "dqn":
        raise UsageError(f"--preset {args.preset} is a set of PPO settings: leave out --algo dqn")
    algo = args.algo or "ppo"
    device = args.device if args.device is not None else get_device()
    learner = None
    if not args.resume:
        if args.choose and args.obs is None:  # the capstone's observation, unless the preset names one
            args.obs = preset_settings(args.preset or DEFAULT_PRESET, device).get("obs_type", CAPSTONE_OBS)
        if algo == "dqn":
            settings = _dqn_settings(args, device)
        else:
            settings = settings_dict(_chosen_config(args, device) if args.choose else _ppo_config(args, device))
        try:
            learner = make_learner(algo, **settings)
        except (TypeError, ValueError) as error:
            raise UsageError(str(error)) from None
    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{algo}-{learner.config.obs_type}-{stamp}"
    print(describe_device(device))
    if args.resume and (Path(out) / CHECKPOINT_NAME).is_file():
        say_if_unchecked(out)
    try:
        result = train(learner, seconds=args.seconds, steps=args.steps, out_dir=out, resume=args.resume,
                       device=str(device) if args.resume else None,
                       checkpoint_every_s=args.checkpoint_every, progress=True)
    except (CheckpointError, RunFolderError) as error:
        raise UsageError(str(error)) from None
    except DivergedError as error:
        print(f"Training stopped: {error}", file=sys.stderr)
        return 1
    score = "no game finished" if result.mean_score is None else f"{result.mean_score:.2f}"
    print(f"{result.algorithm}: {result.env_steps:,} env steps in {result.seconds:,.1f} s "
          f"({result.steps_per_second:,.0f} steps/s), {result.episodes:,} games, "
          f"mean score of the last 100: {score}")
    if result.warmup_seconds:
        print(f"Before that, compiling{' and capturing' if result.config['cuda_graphs'] else ''} took "
              f"{result.warmup_seconds:,.1f} s (on iterations then undone: not in the time or the steps above)")
    print(f"Checkpoint: {result.checkpoint}")
    if args.agent is not None:
        save_agent(args.agent, result.learner, extra={
            "command": _command(args), "machine": device_report(device), "seconds": result.seconds,
            "env_steps": result.env_steps, "mean_score": result.mean_score,
        })
        print(f"Agent: {args.agent}")
    if args.json is not None:
        summary = {
            "format": "rlgpu-curve/1", "command": _command(args), "machine": device_report(device),
            "date": datetime.date.today().isoformat(), "algorithm": result.algorithm, "config": result.config,
            "seconds": result.seconds, "env_steps": result.env_steps, "episodes": result.episodes,
            "mean_score": result.mean_score, "curve": result.curve,
        }
        print(f"Wrote {write_json(args.json, summary)}")
    return 0


def say_if_unchecked(path) -> None:
    """Print a line when the checkpoint or agent at ``path`` is older than checksums: its damage would go unseen."""
    if not has_checksum(path):
        print(f"{path} was saved before checkpoints carried a checksum: it could not be checked for damage")


def write_json(path: Path, data) -> Path:
    """Write ``data`` as JSON, atomically: a kill leaves the old file or the new one, never half."""
    text = json.dumps(data, indent=1) + "\n"
    return atomic_write(path, text.encode())


_LAUNCHER_OPTIONS = ("--nproc", "--nnodes", "--rdzv-endpoint", "--rdzv-id")
"""``train``'s options that start torchrun: the ranks' own command (``rank train``) leaves them out."""


def _rank_arguments(argv: list[str]) -> list[str]:
    """``argv`` less the :data:`_LAUNCHER_OPTIONS` and their values (``--nproc 2``, ``--nproc=2``, ``--npr 2``)."""
    kept, skip = [], False
    for token in argv:
        name, sep, _ = token.partition("=")
        launcher = token.startswith("--") and len(name) > 2 and any(o.startswith(name) for o in _LAUNCHER_OPTIONS)
        if skip:
            skip = False
        elif launcher:
            skip = not sep
        else:
            kept.append(token)
    return kept


def _starts_torchrun(args: argparse.Namespace) -> bool:
    """Whether ``train`` starts its ranks with torchrun: ``--nproc`` above 1, or a rendezvous of machines.

    ``--nnodes N`` above 1 needs ``--rdzv-endpoint`` (where the machines meet), and a rendezvous
    needs ``--nproc`` (the processes of this machine): a :class:`UsageError` names what is missing.
    """
    if args.nnodes > 1 and args.rdzv_endpoint is None:
        raise UsageError(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT, where the machines meet: "
                         "the first machine's address and a free port, the same on every machine")
    if args.rdzv_id is not None and args.rdzv_endpoint is None:
        raise UsageError(f"--rdzv-id {args.rdzv_id} names a rendezvous: give --rdzv-endpoint HOST:PORT too")
    if args.rdzv_endpoint is not None and args.nproc is None:
        given = f"--nnodes {args.nnodes}" if args.nnodes > 1 else f"--rdzv-endpoint {args.rdzv_endpoint}"
        raise UsageError(f"{given} needs --nproc, the number of processes to start on this machine (one per GPU)")
    return (args.nproc or 1) > 1 or args.rdzv_endpoint is not None


def _run_data_parallel(args: argparse.Namespace) -> int:
    """``train --nproc N``: the same training, data-parallel on N processes started by torchrun (notebook 10).

    With ``--nnodes M --rdzv-endpoint HOST:PORT``, the same command on each of M machines starts
    its N processes, and the machines' torchruns meet at HOST:PORT.
    """
    if args.algo not in (None, "ppo"):
        raise UsageError(f"--nproc {args.nproc}: data-parallel training is PPO only, not --algo {args.algo}")
    if args.agent is not None:
        raise UsageError(f"--nproc {args.nproc} does not write --agent: play the checkpoint in --out instead")
    given = [f"--{name}" for name in _PPO_OPTIONS if getattr(args, name) not in (None, [])]
    if args.resume and given:
        raise UsageError(f"--resume continues the run in --out with its own settings; leave out {', '.join(given)}")
    if args.resume and args.out is None:
        raise UsageError("--resume needs --out, the folder of the run to continue")
    if not args.resume:  # every rank builds this config: check it here, once, before torchrun starts them
        device = args.device if args.device is not None else get_device()
        config = _ppo_config(args, device, where=f"--nproc {args.nproc}: ")
        try:
            check_data_parallel_settings(config.cuda_graphs)
        except ValueError as error:
            preset = args.preset or DEFAULT_PRESET
            if "cuda_graphs" not in dict(args.set or []) and preset_settings(preset, device).get("cuda_graphs"):
                error = (f"{error}. The preset {preset!r} sets cuda_graphs=True on {device.type}: "
                         "add --set cuda_graphs=False")
            raise UsageError(f"--nproc {args.nproc}: {error}") from None
    rendezvous = {}
    if args.rdzv_endpoint is not None:
        rendezvous = {"nnodes": args.nnodes, "rdzv_endpoint": args.rdzv_endpoint}
        rendezvous.update({"rdzv_id": args.rdzv_id} if args.rdzv_id is not None else {})
    command = torchrun_command(args.nproc, _rank_arguments(args.argv) + ["--no-progress"] * (not sys.stderr.isatty()),
                               **rendezvous)
    where = f" on this machine, one of {args.nnodes} machines meeting at {args.rdzv_endpoint}" if rendezvous else ""
    print(f"Starting {args.nproc} process{'es' * (args.nproc > 1)}{where}: {shlex.join(command)}", flush=True)
    return subprocess.call(command)


def add_train(subparsers) -> None:
    """The ``train`` subcommand."""
    parser = subparsers.add_parser(
        "train", help="train PPO or DQN on VecSnake",
        description="Train an agent on VecSnake within a time or step budget (default: 300 seconds), "
                    "checkpointing to --out every --checkpoint-every seconds and at the end.")
    parser.add_argument("--algo", choices=["ppo", "dqn"], default=None, help="learner (default: ppo)")
    parser.add_argument("--obs", choices=list(rules.OBS_TYPES), default=None,
                        help="observation type (default: features, or features_reach with --choose; features_reach "
                             "learns fastest, notebook 11)")
    parser.add_argument("--size", type=positive(int), default=None, help="grid height and width (default: 10)")
    parser.add_argument("--preset", choices=preset_names(), default=None,
                        help=f"PPO: start from these settings (learn/presets/NAME.toml; default: {DEFAULT_PRESET}); "
                             "'win' learns to fill the board (the board seen from the head, mirrored games, a long "
                             "horizon; notebook 12). --choose, --obs, --size, --envs and --set then change them")
    parser.add_argument("--envs", type=positive(int), default=None, help="games stepped together")
    parser.add_argument("--device", type=device_argument, default=None,
                        help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--seconds", type=positive(float), default=None, help="training time budget")
    parser.add_argument("--steps", type=positive(int), default=None, help="env step budget")
    parser.add_argument("--seed", type=seed_argument, default=None,
                        help="seed of the learner and the games, in [0, 2**64) (default: 0)")
    parser.add_argument("--set", type=setting, action="append", default=None, metavar="NAME=VALUE",
                        help="any other setting of the learner's config, e.g. --set learning_rate=3e-4")
    parser.add_argument("--out", type=output_folder, default=None,
                        help="run folder for checkpoints (default: runs/ALGO-OBS-TIME)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its checkpoint, with its saved settings "
                             "(--device may move it)")
    parser.add_argument("--checkpoint-every", type=positive(float), default=120.0, metavar="SECONDS",
                        help="seconds between checkpoints (default: %(default)s)")
    parser.add_argument("--agent", type=output_file, default=None, metavar="PATH",
                        help="also save the trained agent (network only)")
    parser.add_argument("--json", type=output_file, default=None, metavar="PATH",
                        help="write the learning curve and summary")
    parser.add_argument("--choose", action="store_true",
                        help="PPO: first measure and choose the number of games, the precision and compile / "
                             "CUDA graphs for this device and --seconds (notebook 11; a minute or two), and the "
                             "features_reach observation unless --obs says otherwise")
    parser.add_argument("--nproc", type=positive(int), default=None,
                        help="data-parallel PPO on this many processes (per machine), started by torchrun: gloo on "
                             "CPUs, one GPU each with NCCL (notebook 10; default: 1, no torchrun)")
    parser.add_argument("--nnodes", type=positive(int), default=1,
                        help="machines of a multi-node run: the same command on each one, with --nproc and "
                             "--rdzv-endpoint (default: %(default)s)")
    parser.add_argument("--rdzv-endpoint", type=endpoint_argument, default=None, metavar="HOST:PORT",
                        help="where the machines' torchruns meet: the first machine's address and a free port")
    parser.add_argument("--rdzv-id", default=None, metavar="ID",
                        help="the run's name at the rendezvous, the same on every machine (default: rlgpu)")
    parser.set_defaults(run=run_train)


def run_play(args: argparse.Namespace) -> int:
    """Play games with a trained agent and save them as an animation."""
    if args.gif is not None and args.gif.suffix.lower() != ".gif":
        raise UsageError(f"--gif {args.gif}: the file name must end in .gif")
    try:
        agent = load_agent(args.agent, device=args.device if args.device is not None else "cpu")
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    say_if_unchecked(args.agent)
    if args.seed + args.games > SEED_LIMIT:
        raise UsageError(f"--seed {args.seed} with --games {args.games}: game k plays with seed + k, "
                         "which must stay below 2**64")
    c = agent.config
    states = []
    for game in range(args.games):
        played, score, won = play_episode(agent, seed=args.seed + game)
        print(f"game {game + 1}: score {score}{' (won: board full)' if won else ''}, {len(played) - 1} steps")
        states += played
    if args.gif is not None:
        print(f"Wrote {save_animation(states, args.gif, c['height'], c['width'], fps=args.fps)}")
    return 0


def add_play(subparsers) -> None:
    """The ``play`` subcommand."""
    parser = subparsers.add_parser("play", help="watch a trained agent play",
                                   description="Play games with a trained agent (greedy policy) and save a GIF.")
    parser.add_argument("agent", help="an agent file (train --agent) or a run folder / checkpoint.pt")
    parser.add_argument("--games", type=positive(int), default=1, help="games to play (default: 1)")
    parser.add_argument("--seed", type=seed_argument, default=0,
                        help="seed of the first game's food placement (game k uses seed + k)")
    parser.add_argument("--gif", type=output_file, default=None, metavar="PATH",
                        help="save the games as an animated GIF")
    parser.add_argument("--fps", type=positive(int), default=10, help="frames per second of the GIF")
    parser.add_argument("--device", type=device_argument, default=None, help="device to run the network on")
    parser.set_defaults(run=run_play)


def _rank_train(args, world, device: torch.device) -> dict:
    """``rank train``: this rank's part of a data-parallel PPO run; rank 0 reports and checkpoints."""
    if args.resume:
        given = [f"--{name}" for name in _PPO_OPTIONS if getattr(args, name) not in (None, [])]
        if given:
            raise UsageError(f"--resume continues the run in --out with its own settings; leave out {', '.join(given)}")
        config = None
    else:
        config = _ppo_config(args, device)
    check_same_settings({key: value for key, value in vars(args).items() if key not in ("run", "rank_run", "json")})
    result = train_distributed(config, seconds=args.seconds, steps=args.steps, out_dir=args.out, resume=args.resume,
                               device=device, checkpoint_every_s=args.checkpoint_every, progress=args.progress)
    agree = parameters_agree(result.learner.model)
    if world.rank == 0:
        score = "no game finished" if result.mean_score is None else f"{result.mean_score:.2f}"
        print(f"ppo on {world.world_size} processes ({dist.get_backend()}): {result.env_steps:,} env steps in "
              f"{result.seconds:,.1f} s ({result.steps_per_second:,.0f} steps/s), mean score of rank 0's last "
              f"100 games: {score}; parameters identical on every rank: {agree}", flush=True)
        if result.checkpoint is not None:
            print(f"Checkpoint: {result.checkpoint}", flush=True)
    return {"world_size": world.world_size, "backend": dist.get_backend(), "config": result.config,
            "seconds": result.seconds, "env_steps": result.env_steps, "episodes": result.episodes,
            "mean_score": result.mean_score, "iterations": result.learner.iterations,
            "parameters_agree": agree, "curve": result.curve}


def _rank_proof(args, world, device: torch.device) -> dict | None:
    """``rank proof``: DDP's gradient against one process's on the concatenated batch (float64, gloo)."""
    if device.type != "cpu":
        raise UsageError("the proof runs in float64 on CPUs (gloo): give --device cpu")
    config = {key: getattr(args, key) for key in PROOF_SETTINGS if getattr(args, key) is not None}
    check_same_settings({"accumulation_steps": args.accumulation_steps, **config})
    return gradient_check(args.accumulation_steps, **config)


def _rank_measure(args, world, device: torch.device) -> dict | None:
    """``rank measure``: time PPO's iteration, rollout and update on every rank."""
    config = PPOConfig(num_envs=args.num_envs, num_steps=args.num_steps, hidden=args.hidden, device=str(device),
                       seed=args.seed)
    check_same_settings(dataclasses.asdict(config) | {"repeats": args.repeats})
    return measure_iterations(config, repeats=args.repeats)


def run_rank(args: argparse.Namespace) -> int:
    """One rank of a data-parallel run: read torchrun's world, join the group, run, leave the group."""
    try:
        world = world_from_env()
        default = "cpu" if args.rank_run is _rank_proof else None  # the proof is float64 on CPUs, on any machine
        device = rank_device(args.device if args.device is not None else get_device(default), world)
        backend = check_backend(args.backend or default_backend(device), device)
    except (RuntimeError, ValueError) as error:
        raise UsageError(str(error)) from None
    if args.rank_command == "train" and args.seconds is None and args.steps is None:
        args.seconds = 300.0
    with process_group(world, backend, device, args.timeout):
        result = args.rank_run(args, world, device)
        if world.rank == 0 and args.json is not None:
            write_json(args.json, result)
    return 0


def add_rank(subparsers) -> None:
    """The ``rank`` subcommand: what ``torchrun`` starts on each process (``train --nproc N`` builds it)."""
    parser = subparsers.add_parser(
        "rank", help="one process of a data-parallel run, as torchrun starts it (notebook 10)",
        description="One rank of data-parallel PPO: reads torchrun's RANK, WORLD_SIZE, LOCAL_RANK, "
                    "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, joins the process group and runs.")
    ranks = parser.add_subparsers(dest="rank_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default=None,
                        help="cpu or cuda (default: cuda if there is one, else cpu; proof: cpu)")
    common.add_argument("--backend", choices=BACKENDS, default=None, help="default: nccl on cuda, gloo on cpu")
    common.add_argument("--timeout", type=positive(float), default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long a collective waits for the other ranks (default: %(default)s)")
    common.add_argument("--json", type=output_file, default=None, metavar="PATH", help="rank 0 writes its result here")

    train = ranks.add_parser("train", parents=[common], help="train PPO, data-parallel")
    train.add_argument("--algo", choices=["ppo"], default=None, help="data-parallel training is PPO only")
    train.add_argument("--preset", choices=preset_names(), default=None)
    train.add_argument("--obs", choices=list(rules.OBS_TYPES), default=None)
    train.add_argument("--size", type=positive(int), default=None)
    train.add_argument("--envs", type=positive(int), default=None, help="games stepped together on each rank")
    train.add_argument("--seed", type=seed_argument, default=None, help="rank r's games use seed + r")
    train.add_argument("--set", type=setting, action="append", default=None, metavar="NAME=VALUE")
    train.add_argument("--seconds", type=positive(float), default=None)
    train.add_argument("--steps", type=positive(int), default=None, help="env step budget, all ranks together")
    train.add_argument("--out", type=output_folder, default=None)
    train.add_argument("--resume", action="store_true")
    train.add_argument("--checkpoint-every", type=positive(float), default=120.0, metavar="SECONDS")
    train.add_argument("--no-progress", dest="progress", action="store_false")
    train.set_defaults(rank_run=_rank_train)

    proof = ranks.add_parser("proof", parents=[common], help="DDP's gradient against one process's (float64)")
    proof.add_argument("--accumulation-steps", type=positive(int), default=4)
    for key in PROOF_SETTINGS:
        proof.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    proof.set_defaults(rank_run=_rank_proof)

    measure = ranks.add_parser("measure", parents=[common], help="time PPO's iteration, rollout and update")
    measure.add_argument("--num-envs", type=positive(int), default=512)
    measure.add_argument("--num-steps", type=positive(int), default=64)
    measure.add_argument("--hidden", type=positive(int), default=64)
    measure.add_argument("--repeats", type=positive(int), default=5)
    measure.add_argument("--seed", type=seed_argument, default=0)
    measure.set_defaults(rank_run=_rank_measure)
    parser.set_defaults(run=run_rank)


SUBCOMMANDS = [add_bench, add_train, add_play, add_rank]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rlgpu_helpers",
                                     description="Tools of the course 'Making reinforcement learning use a GPU well'.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process arguments) and run the subcommand; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        is_quick()  # a bad RLGPU_QUICK value is reported before any work starts
    except ValueError as error:
        parser.error(str(error))
    try:
        return args.run(args)
    except UsageError as error:
        parser.error(str(error))
