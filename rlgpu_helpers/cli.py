"""The command line: ``python -m rlgpu_helpers bench [SUITE] [--device D] [--json PATH] [--save]``.

Introduced in notebook 00.

``bench`` runs a benchmark suite, prints its table and can store the records: ``--json`` in any
file, ``--save`` in this machine's reference file under ``data/reference/``, which the notebooks
show beside the student's own measurements.

Extending it:

- a benchmark suite is one entry in :data:`BENCH_SUITES`: a name and a function
  ``(device, progress) -> list[Record]``;
- a subcommand is one function in :data:`SUBCOMMANDS` that adds its parser to the subparsers
  and sets ``run`` (a function ``(args) -> int`` returning the exit code) as a default, like
  :func:`add_bench`. It raises :class:`UsageError` for bad combinations of arguments.
"""

import argparse
import shlex
import sys

from .bench import records_table, save_json, save_reference
from .ceilings import measure_ceilings
from .config import is_quick
from .device import describe_device, device_report, get_device, machine_label


class UsageError(Exception):
    """Arguments that parse but do not make sense together: reported like an argparse error (exit 2)."""


# name -> function(device: torch.device, progress: bool) -> list[Record]; one line per suite
BENCH_SUITES = {
    "ceilings": measure_ceilings,
}


def _device_argument(text: str):
    try:
        return get_device(text)
    except (ValueError, RuntimeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def run_bench(args: argparse.Namespace) -> int:
    """Run one suite, print its table, and write the records where asked."""
    if args.save and is_quick():
        raise UsageError("--save stores full-size reference results: unset RLGPU_QUICK first")
    device = args.device if args.device is not None else get_device()
    print(describe_device(device))
    records = BENCH_SUITES[args.suite](device, sys.stderr.isatty())
    report = device_report(device)
    print(records_table(records, this_machine=machine_label(report)))
    command = shlex.join(["python", "-m", "rlgpu_helpers", *args.argv])
    if is_quick():
        command = "RLGPU_QUICK=1 " + command
    if args.json is not None:
        print(f"Wrote {save_json(args.json, records, report, command)}")
    if args.save:
        print(f"Saved to {save_reference(records, report, command)}")
    return 0


def add_bench(subparsers) -> None:
    """The ``bench`` subcommand."""
    parser = subparsers.add_parser("bench", help="measure this machine and show or save the results",
                                   description="Run a benchmark suite on this machine and print a table.")
    parser.add_argument("suite", nargs="?", default="ceilings", choices=sorted(BENCH_SUITES),
                        help="which benchmarks to run (default: %(default)s)")
    parser.add_argument("--device", type=_device_argument, default=None,
                        help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the records to this JSON file")
    parser.add_argument("--save", action="store_true",
                        help="merge the records into data/reference/<this machine>.json")
    parser.set_defaults(run=run_bench)


SUBCOMMANDS = [add_bench]


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
