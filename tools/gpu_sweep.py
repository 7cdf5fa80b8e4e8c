"""Every GPU measurement of the course in a few commands: run it first whenever a GPU is lent.

    python tools/gpu_sweep.py --list          # the calls: what each runs and how long it takes
    python tools/gpu_sweep.py 1               # one call; each fits in 8 minutes on one H100
    python tools/gpu_sweep.py 2 --out DIR     # ... and copy the files it wrote into DIR
    python tools/gpu_sweep.py all             # every call, one after another

Call 1 runs the GPU tests (``pytest -m gpu``) and then the unit tests with CUDA present. The
other calls run every benchmark suite of ``rlgpu_helpers.bench.suites`` at full size and merge
the records into ``data/reference/<machine>.json``: the GPU's file, or for a suite that measures
the CPU (``loop``) the file of this machine's CPU. Each call also appends an entry to
``data/sweeps/<gpu>.json``: the call, the command, the machine (GPU, driver, CUDA and torch
versions), the date, how long each step took and how it ended. Commit the files it wrote.

A later lesson adds its suite to ``SUITES`` and to a call here (a test checks that every suite
is in a call, and a suite split over several calls runs a different part in each). Calls 10 to
12 use the settings call 9 chose: run them after it, with call 9's files in place.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
sys.path.insert(0, str(ROOT))  # run from a checkout without installing: python tools/gpu_sweep.py

from rlgpu_helpers.bench.records import save_reference  # noqa: E402
from rlgpu_helpers.bench.report import records_table  # noqa: E402
from rlgpu_helpers.bench.suites import SUITES  # noqa: E402
from rlgpu_helpers.core.config import is_quick  # noqa: E402
from rlgpu_helpers.core.device import device_report, get_device, machine_label  # noqa: E402
from rlgpu_helpers.core.files import atomic_write  # noqa: E402

LIMIT_MINUTES = 8


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing a call does: ``pytest`` with arguments, or a benchmark suite with options."""

    kind: str  # "pytest" or "suite"
    what: str  # pytest's arguments, or the suite's name
    options: dict = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "pytest":
            return f"pytest {self.what}"
        options = ", ".join(f"{key}={value!r}" for key, value in self.options.items())
        return f"bench {self.what}" + (f" ({options})" if options else "")


@dataclasses.dataclass(frozen=True)
class Call:
    """Steps that fit together in one call of the device tool (at most 8 minutes)."""

    about: str
    minutes: float  # estimated on one H100, start-up of the Python process included
    steps: tuple[Step, ...]


CALLS = (
    Call("the GPU tests, then the unit tests with CUDA present", 4.0,
         (Step("pytest", "tests -m gpu"),
          # The notebook tooling (nbformat, ipywidgets) is not on a bare GPU machine, and nothing
          # in its tests depends on the device.
          Step("pytest", "tests -m 'not gpu' --ignore=tests/test_notebooks.py --ignore=tests/test_widgets.py"))),
    Call("the ceilings, the env steps/s and the naive loop (on this machine's CPU)", 6.0,
         (Step("suite", "ceilings"), Step("suite", "envs"), Step("suite", "loop"))),
    Call("notebook 04: the cost of each sync point, and the two ceilings of a step", 4.0,
         (Step("suite", "syncs"), Step("suite", "launch"))),
    Call("notebook 05: host-device copies, then every replay buffer", 7.0,
         (Step("suite", "transfers"), Step("suite", "replay"))),
    Call("notebook 06: samples/s and peak memory against batch size, the largest batch that fits", 4.0,
         (Step("suite", "batch_size"),)),
    Call("notebooks 07 and 08: accumulation steps, then precisions by width and PPO in bf16", 5.0,
         (Step("suite", "accumulation"), Step("suite", "precision"))),
    Call("notebook 09: time per step eager, compiled, reduce-overhead and graph-captured; launches per step", 8.0,
         (Step("suite", "graphs"),)),
    Call("notebook 10: data-parallel PPO by processes, on the CPU's cores (gloo) and one GPU (NCCL)", 3.0,
         (Step("suite", "ddp"),)),
    Call("notebook 11: the capstone's settings chosen on the GPU (games, precision, compile and graphs)", 5.0,
         (Step("suite", "capstone", {"parts": ("choice",)}),)),
    Call("time to a mean score: PPO on the GPU with the settings of call 9, three seeds of 120 s", 7.0,
         (Step("suite", "training", {"setups": ("ours",), "seeds": (0, 1, 2), "budget_s": 120.0}),)),
    Call("notebook 11's ablation on the GPU: the settings of call 9, fewer games, the CPU, the starting games",
         7.0, (Step("suite", "capstone", {"parts": ("ablation",), "arms": ("all lessons", "03", "04", "06")}),)),
    Call("notebook 11's ablation on the GPU: fp32, eager, and the 11 features instead of the chosen ones", 6.0,
         (Step("suite", "capstone", {"parts": ("ablation",), "arms": ("08", "09", "11")}),)),
)


def plan() -> str:
    """The calls, one block each, as ``--list`` prints them."""
    lines = []
    for number, call in enumerate(CALLS, start=1):
        lines.append(f"{number}. {call.about} (about {call.minutes:g} min)")
        lines += [f"     {step.describe()}" for step in call.steps]
    return "\n".join(lines)


def run_pytest(arguments: str) -> tuple[bool, str]:
    """Run pytest in a fresh process; whether it passed, and its summary line.

    ``-o addopts=`` drops the project's ``--nbval`` options: the notebooks are not run here.
    """
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           *shlex.split(arguments)], cwd=ROOT, text=True, capture_output=True)
    print(done.stdout[-6000:], done.stderr[-2000:], sep="\n", flush=True)
    summary = next((line for line in reversed(done.stdout.splitlines()) if line.strip()), "")
    return done.returncode == 0, summary.strip("= ")


def run_suite(step: Step, command: str) -> tuple[bool, str, list[Path]]:
    """Run a suite at full size and merge its records into the reference file of the device that made them.

    A GPU suite may also measure the machine's CPU (``bench ddp`` runs CPU processes too): those
    records carry the CPU's label and go into the CPU's file, with the CPU's report.
    """
    suite = SUITES[step.what]
    device = get_device("cpu") if suite.cpu_only else get_device("cuda")
    records = suite.run(device, True, **step.options)
    reports = {machine_label(report): report for report in (device_report(device), device_report(get_device("cpu")))}
    print(records_table(records, this_machine=machine_label(device_report(device))), flush=True)
    paths = []
    for label in dict.fromkeys(record.machine for record in records):
        if label not in reports:
            raise ValueError(f"suite {step.what!r} made records labelled {label!r}, a machine other than "
                             f"this one ({', '.join(reports)})")
        mine = [record for record in records if record.machine == label]
        paths.append(save_reference(mine, reports[label], command, directory=DATA / "reference"))
    return True, f"{len(records)} records in {', '.join(str(path) for path in paths)}", paths


def run_call(number: int, out: Path | None) -> bool:
    """Run call ``number``; log it in data/sweeps/; copy what it wrote into ``out``."""
    call = CALLS[number - 1]
    command = shlex.join(["python", "tools/gpu_sweep.py", str(number)])
    gpu = device_report("cuda")
    print(f"Call {number}: {call.about}, on {gpu['gpu']} (driver {gpu['driver']}, CUDA {gpu['cuda']}, "
          f"torch {gpu['torch']})", flush=True)
    entry = {"call": number, "about": call.about, "command": command, "machine": gpu,
             "date": datetime.date.today().isoformat(), "steps": []}
    written, passed = [], True
    for step in call.steps:
        started = time.perf_counter()
        if step.kind == "pytest":
            ok, outcome = run_pytest(step.what)
        else:
            ok, outcome, paths = run_suite(step, command)
            written += paths
        seconds = round(time.perf_counter() - started, 1)
        entry["steps"].append({"step": step.describe(), "ok": ok, "outcome": outcome, "seconds": seconds})
        print(f"{step.describe()}: {'ok' if ok else 'FAILED'}, {outcome} ({seconds} s)", flush=True)
        passed &= ok
    log = DATA / "sweeps" / f"{machine_label(gpu)}.json"
    entries = json.loads(log.read_text()) if log.exists() else []
    text = json.dumps(entries + [entry], indent=1) + "\n"
    atomic_write(log, lambda f: f.write(text.encode()))
    written.append(log)
    if out is not None:
        for path in written:
            target = out / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            print(f"Copied {path} to {target}")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=plan())
    parser.add_argument("call", nargs="?", help=f"1 to {len(CALLS)}, or all")
    parser.add_argument("--list", action="store_true", help="print the calls and exit")
    parser.add_argument("--out", type=Path, default=None, help="also copy the files each call wrote here")
    args = parser.parse_args(argv)
    if args.list:
        print(plan())
        return 0
    choices = [str(n) for n in range(1, len(CALLS) + 1)] + ["all"]
    if args.call not in choices:
        parser.error(f"call={args.call!r}: give one of {', '.join(choices)} (or --list)")
    try:
        if is_quick():
            parser.error("RLGPU_QUICK is set: the sweep records full-size figures; unset it first")
        get_device("cuda")
    except (ValueError, RuntimeError) as error:
        parser.error(f"the sweep measures a CUDA GPU: {error}")
    numbers = range(1, len(CALLS) + 1) if args.call == "all" else [int(args.call)]
    return 0 if all([run_call(number, args.out) for number in numbers]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
