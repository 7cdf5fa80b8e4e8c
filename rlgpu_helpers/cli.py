"""The command line: ``python -m rlgpu_helpers bench | train | play``.

Introduced in notebook 00 (``bench``); ``train`` and ``play`` come with notebook 11, ``train --nproc N``
(data-parallel, started by torchrun) with notebook 10.

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
import dataclasses
import datetime
import json
import shlex
import sys
from pathlib import Path

from .bench.suites import SUITES
from .core.checks import SEED_LIMIT, check_seed
from .core.config import is_quick
from .core.device import describe_device, device_report, get_device, machine_label
from .learn.tune import CAPSTONE_OBS
from .measure.records import save_json, save_reference
from .measure.table import records_table
from .snake import rules


class UsageError(Exception):
    """Arguments that parse but do not make sense together: reported like an argparse error (exit 2)."""


def _seed_argument(text: str) -> int:
    try:
        return check_seed("--seed", int(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error) if "seed" in str(error) else
                                         f"expected an int seed, got {text!r}") from None


def _device_argument(text: str):
    try:
        return get_device(text)
    except (ValueError, RuntimeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
    records = suite.run(device, sys.stderr.isatty())
    report = device_report(device)
    print(records_table(records, this_machine=machine_label(report)))
    command = _command(args)
    if args.json is not None:
        print(f"Wrote {save_json(args.json, records, report, command)}")
    if args.save:
        print(f"Saved to {save_reference(records, report, command)}")
    return 0


def add_bench(subparsers) -> None:
    """The ``bench`` subcommand."""
    parser = subparsers.add_parser("bench", help="measure this machine and show or save the results",
                                   description="Run a benchmark suite on this machine and print a table.")
    parser.add_argument("suite", nargs="?", default="ceilings", choices=sorted(SUITES),
                        help="which benchmarks to run (default: %(default)s)")
    parser.add_argument("--device", type=_device_argument, default=None,
                        help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the records to this JSON file")
    parser.add_argument("--save", action="store_true",
                        help="merge the records into data/reference/<this machine>.json")
    parser.set_defaults(run=run_bench)


def _command(args) -> str:
    command = shlex.join(["python", "-m", "rlgpu_helpers", *args.argv])
    return "RLGPU_QUICK=1 " + command if is_quick() else command


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set takes NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _typed_settings(algorithm: str, pairs) -> dict:
    """Turn ``--set name=value`` pairs into the config's field types."""
    from .learn.training import ALGORITHMS

    fields = {f.name: f for f in dataclasses.fields(ALGORITHMS[algorithm][0])}
    settings = {}
    for name, text in pairs:
        if name not in fields:
            raise UsageError(f"--set {name}: {algorithm} has no setting {name!r}; it has {sorted(fields)}")
        kind = type(fields[name].default) if fields[name].default is not None else float  # None: an optional float
        try:
            if kind is bool:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                settings[name] = text.lower() in ("true", "1")
            else:
                settings[name] = kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except ValueError:
            raise UsageError(f"--set {name}={text!r}: expected a {kind.__name__}") from None
    return settings


# The learner's settings: a new run takes them from the command line (these defaults), a resumed
# run from its checkpoint, so --resume refuses them.
_LEARNER_OPTIONS = {"algo": "ppo", "obs": "features", "size": 10, "envs": None, "seed": 0, "set": []}


def run_train(args: argparse.Namespace) -> int:
    """Train, print a summary, and write the learning curve where asked."""
    from .learn.checkpoint import CheckpointError
    from .learn.training import make_learner, train

    if args.choose:
        if args.resume or args.nproc > 1 or args.algo == "dqn":
            raise UsageError("--choose chooses a new PPO run's settings in one process: leave out "
                             + ("--resume" if args.resume else "--nproc" if args.nproc > 1 else "--algo dqn"))
        if args.seconds is None and args.steps is not None:
            raise UsageError("--choose chooses for a time budget: give --seconds, not only --steps")
    if args.nproc > 1:
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
    for name, default in _LEARNER_OPTIONS.items():
        if getattr(args, name) is None:
            setattr(args, name, CAPSTONE_OBS if name == "obs" and args.choose else default)
    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{args.algo}-{args.obs}-{stamp}"
    device = args.device if args.device is not None else get_device()
    learner = None
    if not args.resume:
        from .learn.tune import suggested_settings

        settings = suggested_settings(device) if args.algo == "ppo" else {}
        settings.update(obs_type=args.obs, height=args.size, width=args.size)
        if args.choose:
            from .learn.tune import capstone_settings

            settings = dict(capstone_settings(device, budget_s=args.seconds, start=settings).settings)
        settings.update(seed=args.seed, device=str(device))
        if args.envs is not None:
            settings["num_envs"] = args.envs
        settings.update(_typed_settings(args.algo, args.set))
        try:
            learner = make_learner(args.algo, **settings)
        except (TypeError, ValueError) as error:
            raise UsageError(str(error)) from None
    print(describe_device(device))
    try:
        result = train(learner, seconds=args.seconds, steps=args.steps, out_dir=out, resume=args.resume,
                       device=str(device) if args.resume else None,
                       checkpoint_every_s=args.checkpoint_every, progress=True)
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    score = "no game finished" if result.mean_score is None else f"{result.mean_score:.2f}"
    print(f"{result.algorithm}: {result.env_steps:,} env steps in {result.seconds:,.1f} s "
          f"({result.steps_per_second:,.0f} steps/s), {result.episodes:,} games, "
          f"mean score of the last 100: {score}")
    print(f"Checkpoint: {result.checkpoint}")
    if args.agent is not None:
        from .learn.agents import save_agent

        save_agent(args.agent, result.learner, extra={
            "command": _command(args), "machine": device_report(device), "seconds": result.seconds,
            "env_steps": result.env_steps, "mean_score": result.mean_score,
        })
        print(f"Agent: {args.agent}")
    if args.json is not None:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        summary = {
            "format": "rlgpu-curve/1", "command": _command(args), "machine": device_report(device),
            "date": datetime.date.today().isoformat(), "algorithm": result.algorithm, "config": result.config,
            "seconds": result.seconds, "env_steps": result.env_steps, "episodes": result.episodes,
            "mean_score": result.mean_score, "curve": result.curve,
        }
        path.write_text(json.dumps(summary, indent=1))
        print(f"Wrote {path}")
    return 0


def _without_nproc(argv: list[str]) -> list[str]:
    """``argv`` less its ``--nproc N`` (or ``--nproc=N``)."""
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--nproc":
            skip = True
        elif not token.startswith("--nproc="):
            kept.append(token)
    return kept


def _run_data_parallel(args: argparse.Namespace) -> int:
    """``train --nproc N``: the same training, data-parallel on N processes started by torchrun (notebook 10)."""
    import subprocess

    from .gpu.distributed import check_data_parallel_settings, torchrun_command

    if args.algo not in (None, "ppo"):
        raise UsageError(f"--nproc {args.nproc}: data-parallel training is PPO only, not --algo {args.algo}")
    try:
        check_data_parallel_settings(_typed_settings("ppo", args.set or []).get("cuda_graphs", False))
    except ValueError as error:
        raise UsageError(f"--nproc {args.nproc}: {error}") from None
    if args.agent is not None:
        raise UsageError(f"--nproc {args.nproc} does not write --agent: play the checkpoint in --out instead")
    command = torchrun_command(args.nproc, _without_nproc(args.argv) + ["--no-progress"] * (not sys.stderr.isatty()))
    print(f"Starting {args.nproc} processes: {shlex.join(command)}", flush=True)
    return subprocess.call(command)


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value
    return parse


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
    parser.add_argument("--size", type=_positive(int), default=None, help="grid height and width (default: 10)")
    parser.add_argument("--envs", type=_positive(int), default=None, help="games stepped together")
    parser.add_argument("--device", type=_device_argument, default=None,
                        help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--seconds", type=_positive(float), default=None, help="training time budget")
    parser.add_argument("--steps", type=_positive(int), default=None, help="env step budget")
    parser.add_argument("--seed", type=_seed_argument, default=None,
                        help="seed of the learner and the games, in [0, 2**64) (default: 0)")
    parser.add_argument("--set", type=_setting, action="append", default=None, metavar="NAME=VALUE",
                        help="any other setting of the learner's config, e.g. --set learning_rate=3e-4")
    parser.add_argument("--out", default=None, help="run folder for checkpoints (default: runs/ALGO-OBS-TIME)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its checkpoint, with its saved settings "
                             "(--device may move it)")
    parser.add_argument("--checkpoint-every", type=_positive(float), default=120.0, metavar="SECONDS",
                        help="seconds between checkpoints (default: %(default)s)")
    parser.add_argument("--agent", default=None, metavar="PATH", help="also save the trained agent (network only)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the learning curve and summary")
    parser.add_argument("--choose", action="store_true",
                        help="PPO: first measure and choose the number of games, the precision and compile / "
                             "CUDA graphs for this device and --seconds (notebook 11; a minute or two), and the "
                             "features_reach observation unless --obs says otherwise")
    parser.add_argument("--nproc", type=_positive(int), default=1,
                        help="data-parallel PPO on this many processes, started by torchrun: gloo on CPUs, "
                             "one GPU each with NCCL (notebook 10; default: %(default)s, no torchrun)")
    parser.set_defaults(run=run_train)


def run_play(args: argparse.Namespace) -> int:
    """Play games with a trained agent and save them as an animation."""
    from .learn.agents import load_agent, play_episode
    from .learn.checkpoint import CheckpointError
    from .snake.render import save_animation

    try:
        agent = load_agent(args.agent, device=args.device if args.device is not None else "cpu")
    except CheckpointError as error:
        raise UsageError(str(error)) from None
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
    parser.add_argument("--games", type=_positive(int), default=1, help="games to play (default: 1)")
    parser.add_argument("--seed", type=_seed_argument, default=0,
                        help="seed of the first game's food placement (game k uses seed + k)")
    parser.add_argument("--gif", default=None, metavar="PATH", help="save the games as an animated GIF")
    parser.add_argument("--fps", type=_positive(int), default=10, help="frames per second of the GIF")
    parser.add_argument("--device", type=_device_argument, default=None, help="device to run the network on")
    parser.set_defaults(run=run_play)


SUBCOMMANDS = [add_bench, add_train, add_play]


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
