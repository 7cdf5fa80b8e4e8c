"""Every GPU measurement of the course within short leases: run it first whenever a GPU is lent.

The sweep is the calls of ``sweep_calls``, in order of value, each one command of the device tool
of at most :data:`CALL_S` s: a lease of 15 minutes runs the first two back to back, the machine's
start included. Each step runs in a process of its own, interrupted at its limit or at its call's
deadline (SIGINT first, so that pytest prints the failures it has seen, then SIGKILL), and a step
that would not fit in what is left of the call is not started: a step that runs long loses its own
records only. ``sweep_log`` keeps what is on file, so that a call skips the steps done for this code.

Here, once, where pip reaches PyPI (the GPU machine has no network), and to see the plan:

    python tools/gpu_sweep.py --download-wheels .whl   # the packages the GPU image lacks
    python tools/gpu_sweep.py --plan --budget 900      # the calls, their steps, what fits in 15 min

On the GPU machine, one call per command of the device tool, carrying the folder ``.whl``; then,
here, what the calls brought back (their ``--out`` folders, in the order they ran) into ``data/``:

    python3 tools/gpu_sweep.py 1 --install-wheels .whl --out $OUT
    python tools/gpu_sweep.py --merge FOLDER_OF_CALL_1 FOLDER_OF_CALL_2

A dry run of every call on this CPU, quick sizes, into a temporary folder (never into ``data/``):
its test steps only collect the tests (CI runs them), and its steps have no GPU time limits.

    python tools/gpu_sweep.py all --device cpu [--data DIR]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing: python tools/gpu_sweep.py

import torch  # noqa: E402

# Only torch and the package's core here: the suites import gymnasium, which on the GPU machine
# exists only once --install-wheels has run, so they are imported in each step's own process.
from rlgpu_helpers.core.config import QUICK_ENV_VAR, is_quick  # noqa: E402
from rlgpu_helpers.core.device import device_report, get_device, machine_label  # noqa: E402
from rlgpu_helpers.core.files import DATA_ENV_VAR  # noqa: E402
from sweep_calls import CALLS, LIMIT_FACTOR, Step  # noqa: E402
from sweep_log import append_log, code_version, git_commit, merge, on_file, read_log  # noqa: E402

CALL_S = 400
"""Each call's share of the lease: two fit in 15 minutes with the machine's start (the device tool allows 10 per command)."""
CALL_OVERHEAD_S = 25
"""Of that share, what is not its steps': sending the tree and the wheels, installing them, copying the
files back, and the machine held (warm, counted) until the next call comes (about 10 s on the H200)."""
STEPS_S = CALL_S - CALL_OVERHEAD_S
"""The deadline of a call's steps: a step that would end past it is cut off, or not started."""
MACHINE_START_S = 60
"""A fresh device machine's start, counted once: about 30 s for the H200 (2026-11-26), up to two minutes
by the device tool's README."""
INTERRUPT_GRACE_S = 15
"""A step past its time gets SIGINT, then this long to end (pytest prints the failures it has seen) before SIGKILL."""
DRY_RUN_LIMIT_S = 600
"""A dry run checks that each step runs, not how long it takes on a GPU: its steps get 10 minutes each, no deadline."""

TEST_STALL_S = 240
"""A test still running after this long has every thread's stack printed (pytest's ``faulthandler_timeout``):
the longest GPU test, the preset compiled at full size, takes about 100 s."""
PYTEST = ("-p", "no:cacheprovider", "-o", "addopts=", "-o", f"faulthandler_timeout={TEST_STALL_S}", "-v", "-rfE",
          "--continue-on-collection-errors")
"""pytest's options in every test step: no cache, no ``--nbval`` (the notebooks are not run here),
one line per test as it ends, under workers too (what a step cut off had passed, and the name of each
failure), the stack of a test that stalls, and a module that cannot be collected (its tooling missing)
reported without stopping the others."""


def fitting_calls(budget_s: float) -> list[int]:
    """The calls, by number, that end within ``budget_s`` seconds of the lease, in order."""
    return [number for number in range(1, len(CALLS) + 1) if MACHINE_START_S + CALL_S * number <= budget_s]


def plan(budget_s: float | None = None) -> str:
    """The calls in order, each step with its estimate and limit; with ``budget_s``, which calls fit in it."""
    lines = [f"GPU sweep: {len(CALLS)} calls in order of value, each at most {CALL_S} s: {STEPS_S} s for its "
             f"steps and {CALL_OVERHEAD_S} s for the tree, the wheels, the copies and the wait for the next call.",
             f"A step is killed at {LIMIT_FACTOR}x its estimate or at the call's deadline; one that would not fit "
             "is not started."]
    spent, fitting = MACHINE_START_S, fitting_calls(budget_s) if budget_s is not None else []
    for number, call in enumerate(CALLS, start=1):
        spent += CALL_S
        done_by = "" if budget_s is None else f"; done by {spent:,} s of the lease" + (
            "" if number in fitting else ", beyond the budget")
        lines.append(f"\n{number}. {call.about} (steps' estimates {call.estimate_s} s of {STEPS_S}{done_by})")
        for step in call.steps:
            needs = f"; needs '{step.needs}' on file" if step.needs else ""
            lines.append(f"   {step.estimate_s:4d} s (killed at {step.limit_s:3d})  {step.name}: "
                         f"{step.describe()}{needs}")
    total = MACHINE_START_S + CALL_S * len(CALLS)
    lines.append(f"\nAll calls: at most {total:,} s ({total / 60:.1f} min), the machine's start "
                 f"({MACHINE_START_S} s) included.")
    if budget_s is not None:
        left_out = [n for n in range(1, len(CALLS) + 1) if n not in fitting]
        if not left_out:
            lines.append(f"Budget {budget_s:,.0f} s: every call fits, {budget_s - total:,.0f} s to spare.")
        else:
            steps = [step.name for n in left_out for step in CALLS[n - 1].steps]
            lines.append(f"Budget {budget_s:,.0f} s: calls {', '.join(map(str, fitting)) or 'none'} fit, "
                         f"{budget_s - MACHINE_START_S - CALL_S * len(fitting):,.0f} s to spare; left out: "
                         f"call{'s' if len(left_out) > 1 else ''} {', '.join(map(str, left_out))} "
                         f"({'; '.join(steps)}).")
    return "\n".join(lines)


def find_step(name: str) -> Step:
    return next(step for call in CALLS for step in call.steps if step.name == name)


# ---------------------------------------------------------------------------- one step in its own process

def measure(spec: dict) -> None:
    """Inside a step's process: run its suite or part and save its records by the machine that made them.

    A suite that measures the CPU (``loop``; ``ddp``'s CPU processes) makes records labelled with
    the CPU: they go into the CPU's reference file, with the CPU's report.
    """
    from rlgpu_helpers.measure.records import save_reference
    from rlgpu_helpers.measure.table import records_table
    from rlgpu_helpers.bench.suites import SUITES

    suite = SUITES[spec["suite"]]
    device = get_device("cpu" if suite.cpu_only else spec["device"])
    options = {key: tuple(value) if isinstance(value, list) else value for key, value in spec["options"].items()}
    reports = {machine_label(report): report for report in (device_report(device), device_report("cpu"))}

    def save(records) -> list[str]:
        """Merge ``records`` into the reference files of the machines that made them (and ``out``); their paths."""
        files = []
        for label in dict.fromkeys(record.machine for record in records):
            if label not in reports:
                raise ValueError(f"suite {spec['suite']!r} made records labelled {label!r}, a machine other than "
                                 f"this one ({', '.join(reports)})")
            mine = [record for record in records if record.machine == label]
            path = save_reference(mine, reports[label], spec["command"], directory=Path(spec["data"]) / "reference")
            files.append(str(path))
            if spec.get("out") is not None:  # this call's records alone, for --merge
                save_reference(mine, reports[label], spec["command"], directory=Path(spec["out"]) / "records")
        return files

    function = suite.run
    if spec["part"] is not None:
        module, _, name = spec["part"].partition(":")
        function = getattr(importlib.import_module(module), name)
    parameters = inspect.signature(function).parameters
    if "progress" in parameters:
        options["progress"] = False
    if "save" in parameters:  # a suite that hands over its records as it makes them: a step cut off keeps them
        options["save"] = save
    records = function(device, **options)
    print(records_table(records, this_machine=machine_label(device_report(device))), flush=True)
    files = save(records)
    Path(spec["result"]).write_text(json.dumps({"records": len(records), "files": files}))


def step_environment(site: list[str], dry: bool) -> dict:
    """The environment of the steps' processes: this checkout and the installed wheels first on the path."""
    path = [str(ROOT), *site, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop(DATA_ENV_VAR, None)  # only a suite step reads another data folder: the unit tests check the real one
    if dry:
        env[QUICK_ENV_VAR] = "1"
    return env


def interruptible() -> None:
    """In a step's process, before its program starts: SIGINT back to its default action.

    A background job of a non-interactive shell (a CI script's ``&``) starts with SIGINT ignored,
    and an ignored signal stays ignored in every process it starts: Python would then never raise
    KeyboardInterrupt, and :func:`stop` could only kill the step. With the default action at its
    start, Python installs its own handler and an interrupted pytest prints its summary.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(process: subprocess.Popen) -> None:
    """End ``process`` and its group (torchrun's ranks, pytest's workers, compile workers): SIGINT, then
    SIGKILL after :data:`INTERRUPT_GRACE_S`. Interrupted, pytest still prints its summary: the failures it has seen,
    which a step killed outright would lose."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # what is left of the group, the leader too if it is still there
    except ProcessLookupError:
        pass
    process.wait()


def run_step(step: Step, *, device: str, data: Path, command: str, log: Path, env: dict,
             seconds: float, out: Path | None = None) -> tuple[str, str, list[Path]]:
    """Run ``step`` in a process of its own, killed with its children after ``seconds``.

    Returns how it ended ("ok", "failed", or "timed out" when killed), a one-line summary and the
    files it wrote. Its output goes to ``log``; with ``out``, its records also go into
    ``out/records/`` (see :func:`merge`), and the time to win's trained agents (each with its
    curve) into ``out/agents/<the step's name>/``. A dry run (``device`` "cpu") leaves the step's
    sizes to the suites' quick ones, and only collects the tests.
    """
    dry = device == "cpu"
    with tempfile.TemporaryDirectory(prefix="rlgpu-sweep-step-") as scratch:
        result = Path(scratch) / "result.json"
        if step.tests is not None:
            arguments = ["-m", "pytest", *shlex.split(step.tests), *PYTEST]
            if dry:
                arguments += ["--collect-only", "-q"]
            elif step.workers > 1 and importlib.util.find_spec("xdist") is not None:
                arguments += ["-n", str(step.workers)]
        else:
            options = {**step.options, **({} if dry else step.sizes)}
            if step.suite == "wins" and out is not None:  # each seed's agent, its curve inside, comes back too
                options["agents"] = str(out / "agents" / re.sub(r"\W+", "-", step.name))
            spec = {"suite": step.suite, "part": step.part, "options": options, "device": device,
                    "data": str(data), "command": command, "result": str(result),
                    "out": None if out is None else str(out)}
            arguments = [str(Path(__file__).resolve()), "--measure", json.dumps(spec)]
            env = {**env, DATA_ENV_VAR: str(data)}  # load_reference() then reads this run's files (the choice)
        with log.open("a") as output:
            output.write(f"\n===== {step.name}: {step.describe()} (killed after {seconds:.0f} s)\n")
            output.flush()
            start = output.tell()
            process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT, env=env, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=interruptible)
            try:
                code = process.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                stop(process)
                code = None
        text = log.read_bytes()[start:].decode(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        files = []
        if step.tests is not None:
            counts = {word: len(re.findall(rf" {word}\b", text)) for word in ("PASSED", "FAILED", "ERROR")}
            summary = lines[-1].strip("= ") if lines and code is not None else (
                ", ".join(f"{count} {word.lower()}" for word, count in counts.items()) + " so far")
        elif result.exists():
            done = json.loads(result.read_text())
            files = [Path(path) for path in done["files"]]
            summary = f"{done['records']} records into {', '.join(path.name for path in files) or 'no file'}"
        else:
            errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)]
            summary = "no records" + (f"; {(errors or lines)[-1][:300]}" if lines else "")
    if code is None:
        return "timed out", f"killed after {seconds:.0f} s: {summary}", files
    return ("ok" if code == 0 else "failed"), summary, files


def machine_report(device: str, env: dict) -> dict:
    """``device_report(device)``, made in a process of its own: this one then holds no CUDA context,
    and the GPU's memory is the steps' alone (the batch size suite finds the card's limit)."""
    code = ("import json, sys; from rlgpu_helpers.core.device import device_report; "
            "print(json.dumps(device_report(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, device], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
    return json.loads(done.stdout)


def run_call(number: int, *, device: str, report: dict, data: Path, out: Path | None, env: dict, redo: bool = False,
             time_limits: bool = True) -> bool:
    """Run the steps of call ``number`` that are not on file, each logged as soon as it ends.

    A step starts only if its estimate fits in what is left of the call's :data:`STEPS_S`, and is
    killed at its limit or at that deadline; without ``time_limits`` (a dry run: the limits are
    a GPU's) it is killed at :data:`DRY_RUN_LIMIT_S` alone. Returns whether every step of the call
    is on file as "ok" afterwards. With ``out``, the records this call made go into
    ``out/records/``, its log entries into ``out/log/`` and its steps' output into ``out/call-N.log``,
    as each step ends: what :func:`merge` puts into ``data/``.
    """
    call = CALLS[number - 1]
    deadline = time.perf_counter() + (STEPS_S if time_limits else math.inf)
    label = machine_label(report)
    code, commit = code_version(), git_commit()
    sweep_log = data / "sweeps" / f"{label}.json"
    log = (out if out is not None else Path(tempfile.mkdtemp(prefix="rlgpu-sweep-"))) / f"call-{number}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "tools/gpu_sweep.py", str(number)])
    machine = (f"{report['gpu']} (driver {report['driver']}, CUDA {report['cuda']}" if report["gpu"]
               else f"{report['cpu']} ({report['logical_cores']} cores") + f", torch {report['torch']})"
    print(f"Call {number}: {call.about}\n  on {machine}, code {code}; the steps' output goes to {log}", flush=True)
    passed = True
    for step in call.steps:
        entries = read_log(sweep_log)
        done = on_file(entries, step, code)
        if done is not None and not redo:
            print(f"  {step.name}: on file ({done['outcome']}, {done['date']}), skipped", flush=True)
            passed &= done["outcome"] == "ok"
            continue
        needed = find_step(step.needs) if step.needs is not None else None
        if needed is not None and (on_file(entries, needed, code) or {}).get("outcome") != "ok":
            print(f"  {step.name}: not started, it needs '{step.needs}' on file for this code first "
                  f"(the files of its call in {data})", flush=True)
            passed = False
            continue
        left = max(0.0, deadline - time.perf_counter())
        if left < step.estimate_s:
            print(f"  {step.name}: not started, {left:.0f} s of the call left for about {step.estimate_s} s: "
                  f"run call {number} again", flush=True)
            passed = False
            continue
        seconds = min(step.limit_s, left) if time_limits else DRY_RUN_LIMIT_S
        started = time.perf_counter()
        outcome, summary, _ = run_step(step, device=device, data=data, command=command, log=log, env=env,
                                       seconds=seconds, out=out)
        if outcome == "timed out" and time_limits and seconds < step.limit_s:
            outcome = "cut off"  # by the call's deadline, not at its own limit: not on file, it runs again
        took = round(time.perf_counter() - started, 1)
        entry = {"call": number, "step": step.describe(), "name": step.name, "outcome": outcome,
                               "summary": summary, "seconds": took, "estimate_s": step.estimate_s,
                               "limit_s": step.limit_s, "code": code, "commit": commit, "command": command,
                               "machine": report, "date": datetime.date.today().isoformat()}
        append_log(sweep_log, entry)
        if out is not None:
            append_log(out / "log" / sweep_log.name, entry)
        print(f"  {step.name}: {outcome}, {summary} ({took} s, estimate {step.estimate_s})", flush=True)
        if outcome != "ok":
            passed = False
            print("    " + "\n    ".join(log.read_text(errors="replace").splitlines()[-25:]), flush=True)
    return passed


# ---------------------------------------------------------------------------- wheels for the GPU image

NEEDED_ON_IMAGE = ("gymnasium", "ipywidgets")
"""The package's dependencies that the GPU image lacks (the device tool's KINDS.md lists what it has).
ipywidgets is imported by ``snake.widgets`` alone, but the unit tests import every module."""
ON_IMAGE = frozenset({"numpy", "cloudpickle", "typing-extensions", "pygments", "psutil"})
"""What those need that the image has already: not carried, so that the image's own copy is used."""
GPU_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def project_name(wheel: Path) -> str:
    """A wheel's project, normalized as pip compares names: ``typing_extensions-4.12-...`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's requirement of each of :data:`NEEDED_ON_IMAGE`, as it states it (``gymnasium>=1.1``)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [next(d for d in dependencies if re.match(rf"{name}\b", d)) for name in NEEDED_ON_IMAGE]


def fits_the_image(wheel: Path) -> bool:
    """Whether a wheel installs on the GPU image: pure Python, or CPython's stable ABI on x86-64 Linux."""
    tags = wheel.name.removesuffix(".whl").split("-")[-3:]  # python, abi, platform
    return tags[1:] == ["none", "any"] or (tags[1] == "abi3" and "linux" in tags[2] and "x86_64" in tags[2])


def check_wheels(folder: Path) -> list[Path]:
    """The wheels in ``folder``, checked: each fits the image, one version of each project, every needed one there."""
    wheels = sorted(Path(folder).glob("*.whl"))
    names = [project_name(wheel) for wheel in wheels]
    problems = [f"{wheel.name} is for another platform" for wheel in wheels if not fits_the_image(wheel)]
    problems += [f"{name} comes in {names.count(name)} versions" for name in sorted(set(names))
                 if names.count(name) > 1]
    problems += [f"no wheel of {name}" for name in NEEDED_ON_IMAGE if name not in names]
    if problems:
        raise ValueError(f"wheels={str(folder)!r}: {'; '.join(problems)} "
                         "(python tools/gpu_sweep.py --download-wheels DIR makes the folder)")
    return wheels


def download_wheels(folder: Path) -> list[Path]:
    """Download what :data:`NEEDED_ON_IMAGE` needs for the GPU image's Python into ``folder``, less :data:`ON_IMAGE`.

    pip resolves their requirements for Python 3.12 on x86-64 Linux; the wheels of the projects
    the image has already are dropped. All but one are pure Python (wcwidth, which prompt_toolkit
    needs, comes built for CPython's stable ABI). The folder's old wheels are replaced.
    """
    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="rlgpu-wheels-") as scratch:
        platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", scratch, "--only-binary=:all:",
                        "--python-version", GPU_PYTHON, "--implementation", "cp", *platforms, *requirements()],
                       check=True)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.whl"):
            old.unlink()
        for wheel in Path(scratch).glob("*.whl"):
            if project_name(wheel) not in ON_IMAGE:
                shutil.move(wheel, folder / wheel.name)
    return check_wheels(folder)


def install_wheels(folder: Path, target: Path) -> Path:
    """Install the wheels of ``folder`` into ``target`` without an index or their dependencies; ``target``."""
    wheels = check_wheels(folder)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, wheels)], check=True)
    return Path(target)


# ---------------------------------------------------------------------------- the command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=plan())
    parser.add_argument("call", nargs="?", help=f"1 to {len(CALLS)}, or all")
    parser.add_argument("--plan", action="store_true", help="print the calls in order, their limits, and exit")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="with --plan: which calls fit in this much device time, the machine's start included")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default), or cpu: a dry run with quick sizes into a temporary folder")
    parser.add_argument("--data", type=Path, metavar="DIR",
                        help="where reference/ and sweeps/ go (default: data/; a temporary folder with --device cpu)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="also copy the files each step wrote, and the steps' output, here")
    parser.add_argument("--install-wheels", type=Path, metavar="DIR",
                        help="first install the wheels of DIR (no index, no network) for the steps")
    parser.add_argument("--download-wheels", type=Path, metavar="DIR",
                        help="download the wheels the GPU image lacks into DIR, and exit")
    parser.add_argument("--redo", action="store_true", help="run steps already on file for this GPU and code")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                        help="here, after the calls: put what they brought back (their --out folders, in the order "
                             "they ran) into data/ (or --data), and exit")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # inside a step's own process
    args = parser.parse_args(argv)
    if args.measure is not None:
        measure(json.loads(args.measure))
        return 0
    if args.budget is not None and not (args.budget > 0 and args.plan):
        parser.error(f"--budget={args.budget:g}: give a number of seconds above 0, with --plan")
    if args.merge is not None:
        if args.call is not None:
            parser.error(f"call={args.call!r}: --merge runs no call")
        try:
            print("\n".join(merge(args.merge, args.data if args.data is not None else ROOT / "data")))
        except ValueError as error:
            parser.error(f"--merge: {error}")
        return 0
    if args.plan or args.download_wheels is not None:
        if args.call is not None:
            parser.error(f"call={args.call!r}: --plan and --download-wheels run no call")
        if args.plan:
            print(plan(args.budget))
        else:
            wheels = download_wheels(args.download_wheels)
            size = sum(wheel.stat().st_size for wheel in wheels) / 2**20
            print(f"{len(wheels)} wheels, {size:.1f} MiB, in {args.download_wheels}:",
                  ", ".join(wheel.name for wheel in wheels))
        return 0
    choices = [str(n) for n in range(1, len(CALLS) + 1)] + ["all"]
    if args.call not in choices:
        parser.error(f"call={args.call!r}: give one of {', '.join(choices)} (or --plan)")
    if args.device not in ("cuda", "cpu"):
        parser.error(f"--device={args.device!r}: give cuda, or cpu for a dry run")
    dry = args.device == "cpu"
    data = args.data if args.data is not None else (
        Path(tempfile.mkdtemp(prefix="rlgpu-sweep-dry-")) if dry else ROOT / "data")
    if dry and data.resolve() == (ROOT / "data").resolve():
        parser.error(f"--data={str(args.data)!r}: a dry run's quick figures must not go into the course's data/")
    if not dry and is_quick():
        parser.error(f"{QUICK_ENV_VAR} is set: the sweep records full-size figures on a GPU; unset it, "
                     "or give --device cpu for a dry run")
    if not dry and not torch.cuda.is_available():
        parser.error(f"--device='cuda': torch.cuda.is_available() is False (torch {torch.__version__}); "
                     "--device cpu makes a dry run")
    site = []
    if args.install_wheels is not None:
        try:
            site = [str(install_wheels(args.install_wheels, Path(tempfile.mkdtemp(prefix="rlgpu-sweep-site-"))))]
        except ValueError as error:
            parser.error(f"--install-wheels: {error}")
    env = step_environment(site, dry)
    try:
        report = machine_report(args.device, env)
    except RuntimeError as error:
        parser.error(f"--device={args.device!r}: {error}")
    if dry:
        print(f"Dry run on the CPU with quick sizes, into {data}")
    numbers = range(1, len(CALLS) + 1) if args.call == "all" else [int(args.call)]
    results = [run_call(number, device=args.device, report=report, data=data, out=args.out, env=env, redo=args.redo,
                        time_limits=not dry) for number in numbers]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
