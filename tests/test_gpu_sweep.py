"""tools/gpu_sweep.py: calls in order of value that fit the lease, steps in processes of their own
under time limits, records on file as each step ends, a log to resume from, and the wheels the
GPU image lacks."""

import importlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rlgpu_helpers.measure.records import Record, load_json, save_reference
from rlgpu_helpers.bench.suites import SUITES, Suite
from rlgpu_helpers.core.device import device_report, machine_label

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # gpu_sweep.py imports its sibling modules, as when run as a script
import gpu_sweep as sweep  # noqa: E402
from sweep_calls import CHOICE, GRAPHS, HELD_OUT_SEED, Call, Step  # noqa: E402
STEPS = [step for call in sweep.CALLS for step in call.steps]
find_step = sweep.find_step
LABEL = machine_label(device_report("cpu"))


def test_every_suite_is_in_a_call_and_every_step_takes_its_options():
    assert {step.suite for step in STEPS if step.suite is not None} == set(SUITES)
    assert len({step.name for step in STEPS}) == len({step.describe() for step in STEPS}) == len(STEPS)
    for step in STEPS:
        if step.suite is None:
            continue
        if step.part is None:
            function, arguments = SUITES[step.suite].run, ("cpu", False)
        else:
            module, _, name = step.part.partition(":")
            assert module == SUITES[step.suite].run.__module__, step.name  # a part of that suite
            function, arguments = getattr(importlib.import_module(module), name), ("cpu",)
        inspect.signature(function).bind(*arguments, **step.options, **step.sizes)
    assert {step.needs for step in STEPS if step.needs} == {CHOICE}
    names = [step.name for step in STEPS]
    assert all(names.index(step.needs) < names.index(step.name) for step in STEPS if step.needs)


def test_the_env_floor_steps_are_the_parts_measure_env_floor_runs(monkeypatch):
    """The sweep runs the env floor suite as steps, each part in its own process; the suite's own
    ``measure_env_floor`` runs the same parts in one: the two splits must agree, in order."""
    from rlgpu_helpers.bench import env_floor

    ran = []
    for name in ("floor_throughput", "step_op_shares"):
        def part(device, name=name, progress=True, **options):
            ran.append((f"{env_floor.__name__}:{name}", options))
            return []

        monkeypatch.setattr(env_floor, name, part)
    env_floor.measure_env_floor("cpu", progress=False)
    steps = [(step.part, step.options) for step in STEPS if step.suite == "env_floor"]
    assert len(ran) == 3 and steps == ran


def test_the_calls_go_by_issue_34s_order_and_two_fit_a_quarter_hour():
    """The env step against its floor (issue 38) and the GPU tests (the first call), the time to win on seed 0,
    then seeds 1, 2 and a held-out one, the preset's launch settings, the launch comparison, the calls that never
    ran on a GPU, and last those on file for earlier code."""
    names = [[step.name for step in call.steps] for call in sweep.CALLS]
    assert names[0] == ["env step floor: eager and compiled", "env step floor: fused",
                        "env step floor: where an eager step's time goes", "GPU tests", "GPU tests, the GPU alone"]
    assert names[2] == ["time to win: seed 1", "win speed: eager"]
    shared, alone = STEPS[3], STEPS[4]
    assert shared.workers > 1 and "not gpu_alone" in shared.tests and alone.workers == 1
    assert [call[0] for call in names[1:5]] == ["time to win: seed 0", "time to win: seed 1", "time to win: seed 2",
                                                f"time to win: seed {HELD_OUT_SEED} (held out)"]
    assert HELD_OUT_SEED not in (0, 1, 2)
    assert "win speed: the shapes" in names[1] and names[5][0] == "win speed: the launches"
    assert all(name.startswith("launch comparison: ") for name in names[6]) and len(names[6]) == 4
    never_ran = {"batch size", "time to score", "unit tests", "transfers", "replay", "sync costs", "ddp",
                 "ablation: lessons 03 04 06", "ablation: lessons 08 09 11"}
    on_file = {"env steps/s", "precision", "graphs: a PPO iteration", "graphs: the env step"}
    position = {name: number for number, call in enumerate(names) for name in call}
    assert max(position[name] for name in never_ran) < min(position[name] for name in on_file)
    assert min(position[name] for name in never_ran) >= 3  # after the tuning and the time to win on seed 0
    for call in names:  # a step that never ran fills a call only after that call's time to win
        assert not any(name.startswith("time to win") for name in call[1:]), call
    assert sweep.CALL_S <= 8 * 60 and sweep.STEPS_S + sweep.CALL_OVERHEAD_S == sweep.CALL_S
    for call in sweep.CALLS:
        assert call.estimate_s <= sweep.STEPS_S, call.about
    assert sweep.fitting_calls(900) == [1, 2]  # a lease of 15 minutes
    text = sweep.plan(900)
    assert "calls 1, 2 fit" in text and "left out: calls 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 (time to win: seed 1;" in text
    assert "Budget 50 s: calls none fit" in sweep.plan(50)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint default", "sigint ignored"])
def test_a_test_step_past_its_time_is_interrupted_and_still_prints_its_failures(tmp_path, monkeypatch, sigint):
    """SIGINT before SIGKILL: pytest, interrupted, prints the tracebacks of the failures it has seen, also
    where the sweep itself runs with SIGINT ignored (a background job of a shell script, as in CI); and a test
    that stalls has its stack printed before then, naming it."""
    previous = signal.signal(signal.SIGINT, sigint)  # what the step's process would inherit
    monkeypatch.setattr(sweep, "INTERRUPT_GRACE_S", 60)  # a step that ends only at SIGKILL would print nothing
    stall = f"faulthandler_timeout={sweep.TEST_STALL_S}"
    assert stall in sweep.PYTEST
    monkeypatch.setattr(sweep, "PYTEST", tuple("faulthandler_timeout=2" if o == stall else o for o in sweep.PYTEST))
    (tmp_path / "test_stub_slow.py").write_text(textwrap.dedent("""
        import time

        def test_a_fails():
            assert 1 == 2, "the failure a killed step would lose"

        def test_b_sleeps():
            time.sleep(300)
    """))
    log = tmp_path / "step.log"
    step = Step("stub tests", 5, tests=str(tmp_path / "test_stub_slow.py"))
    try:
        outcome, summary, _ = sweep.run_step(step, device="cuda", data=tmp_path / "data", command="test", log=log,
                                             env=dict(os.environ), seconds=8)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert outcome == "timed out" and summary == "killed after 8 s: 0 passed, 1 failed, 0 error so far"
    text = log.read_text()
    assert "KeyboardInterrupt" in text and "the failure a killed step would lose" in text
    assert re.search(r"Timeout \(0:00:02\)!.*in test_b_sleeps", text, re.S)


@pytest.mark.parametrize("argv, message", [
    (["99"], "call='99': give one of 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, all"),
    ([], "call=None: give one of"),
    (["--plan", "--budget", "-5"], "--budget=-5: give a number of seconds above 0"),
    (["1", "--budget", "100"], "--budget=100: give a number of seconds above 0, with --plan"),
    (["--plan", "1"], "call='1': --plan and --download-wheels run no call"),
    (["1", "--device", "tpu"], "--device='tpu': give cuda, or cpu for a dry run"),
    (["1", "--device", "cpu", "--data", str(ROOT / "data")], "--data="),
])
def test_bad_arguments_exit_2_naming_the_parameter(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_wheels_from_a_folder_that_lacks_them_are_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["1", "--device", "cpu", "--data", str(tmp_path / "data"), "--install-wheels", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--install-wheels: wheels=" in capsys.readouterr().err


def test_a_gpu_run_needs_full_size_and_cuda(monkeypatch, capsys):
    monkeypatch.setenv("RLGPU_QUICK", "1")
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["1"])
    assert exit_info.value.code == 2 and "RLGPU_QUICK is set" in capsys.readouterr().err
    monkeypatch.setenv("RLGPU_QUICK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["1"])
    assert exit_info.value.code == 2
    assert "--device='cuda': torch.cuda.is_available() is False" in capsys.readouterr().err


def test_a_step_s_records_go_into_the_file_of_the_machine_that_made_them(monkeypatch, tmp_path):
    """``bench ddp`` on a GPU machine also measures CPU processes: each record goes to its own machine's file."""
    cpu = device_report("cpu")
    gpu = dict(cpu, gpu="NVIDIA H100 80GB HBM3")
    labels = {name: machine_label(report) for name, report in (("cpu", cpu), ("cuda", gpu))}
    toy = Suite(lambda device, progress: [
        Record("toy", name, "speed", 1.0, "steps/s", {}, None, label) for name, label in labels.items()], "00: a toy")
    monkeypatch.setitem(SUITES, "toy", toy)
    monkeypatch.setattr(sweep, "get_device", lambda name: torch.device(name))
    monkeypatch.setattr(sweep, "device_report", lambda device: gpu if torch.device(device).type == "cuda" else cpu)
    spec = {"suite": "toy", "part": None, "options": {}, "device": "cuda", "data": str(tmp_path),
            "command": "python tools/gpu_sweep.py 1", "result": str(tmp_path / "result.json")}
    sweep.measure(spec)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["records"] == 2 and [Path(f).stem for f in result["files"]] == [labels["cpu"], labels["cuda"]]
    for name, label in labels.items():
        saved, = load_json(tmp_path / "reference" / f"{label}.json")
        assert saved.variant == name
    foreign = Suite(lambda device, progress: [Record("toy", "x", "speed", 1.0, "steps/s", {}, None, "gpu-other")],
                    "00: a toy")
    monkeypatch.setitem(SUITES, "toy", foreign)
    with pytest.raises(ValueError, match="'gpu-other', a machine other than this one"):
        sweep.measure(spec)


STUB = '''
import time

from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.core.device import device_report, machine_label


def toy(device, value=1.0):
    return [Record("toy", "plain", "speed", value, "steps/s", {"value": value}, None,
                   machine_label(device_report(device)))]


def same(device, value=1.0):
    return [Record("toy", "same figure", "speed", value, "steps/s", {}, None, machine_label(device_report(device)))]


def slow(device):
    time.sleep(600)


def saves_then_hangs(device, save=None):
    save(toy(device, 4.0))
    time.sleep(600)


def broken(device):
    raise RuntimeError("a broken step")
'''


@pytest.fixture
def stubs(tmp_path, monkeypatch):
    """Steps that run the functions of a stub module, in processes of their own like real steps.

    The stub's folder goes before the path the tests run with: on the GPU image that path holds the
    wheels the image lacks (gymnasium), which the steps import."""
    (tmp_path / "sweep_stub.py").write_text(STUB)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path), prepend=os.pathsep)
    return sweep.step_environment([], dry=True)


def run(number, tmp_path, env, data="data", out="out", **options):
    return sweep.run_call(number, device="cpu", report=device_report("cpu"), data=tmp_path / data,
                          out=tmp_path / out, env=env, **options)


def log_of(tmp_path):
    return json.loads((tmp_path / "data" / "sweeps" / f"{LABEL}.json").read_text())


def test_a_step_that_fails_or_runs_too_long_keeps_the_records_of_the_steps_before(stubs, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CALLS", (Call("stubs", (
        Step("first", 30, "ceilings", "sweep_stub:toy", {"value": 2.0}),
        Step("slow", 8, "ceilings", "sweep_stub:slow"),
        Step("broken", 30, "ceilings", "sweep_stub:broken"),
        Step("after", 30, "ceilings", "sweep_stub:toy", {"value": 3.0}, needs="first"),
    )),))
    assert run(1, tmp_path, stubs) is False
    saved = load_json(tmp_path / "data" / "reference" / f"{LABEL}.json")
    assert sorted(r.value for r in saved) == [2.0, 3.0]
    first, slow, broken, after = log_of(tmp_path)
    assert (first["outcome"], first["summary"]) == ("ok", f"1 records into {LABEL}.json")
    assert slow["outcome"] == "timed out" and slow["summary"].startswith("killed after 16 s: no records")
    assert broken["outcome"] == "failed" and "RuntimeError: a broken step" in broken["summary"]
    assert after["outcome"] == "ok" and first["code"] == sweep.code_version() and first["machine"]["cpu"]
    out = tmp_path / "out"
    assert load_json(out / "records" / f"{LABEL}.json") == saved
    assert json.loads((out / "log" / f"{LABEL}.json").read_text()) == log_of(tmp_path)
    assert "===== broken" in (out / "call-1.log").read_text()
    assert run(1, tmp_path, stubs) is False  # everything on file: nothing runs again
    assert len(log_of(tmp_path)) == 4


def test_a_step_that_hands_over_its_records_as_it_goes_keeps_them_when_it_is_killed(stubs, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CALLS", (Call("stubs", (Step("parts", 8, "ceilings", "sweep_stub:saves_then_hangs"),)),))
    assert run(1, tmp_path, stubs) is False
    parts, = log_of(tmp_path)
    assert parts["outcome"] == "timed out"
    for folder in (tmp_path / "data" / "reference", tmp_path / "out" / "records"):
        saved, = load_json(folder / f"{LABEL}.json")
        assert saved.value == 4.0


def test_merging_two_calls_of_one_lease_keeps_both_calls_records_in_the_order_they_ran(stubs, tmp_path,
                                                                                       monkeypatch, capsys):
    """Each call starts from the committed tree: the second call's files lack the first's records, so
    copying them over would lose those; merging the calls' own records in order keeps everything."""
    monkeypatch.setattr(sweep, "CALLS", (
        Call("one", (Step("a", 30, "ceilings", "sweep_stub:toy", {"value": 2.0}),
                     Step("same, first", 30, "ceilings", "sweep_stub:same", {"value": 5.0}))),
        Call("two", (Step("b", 30, "ceilings", "sweep_stub:toy", {"value": 3.0}),
                     Step("same, again", 30, "ceilings", "sweep_stub:same", {"value": 7.0}))),
    ))
    here = tmp_path / "here"
    committed = Record("toy", "plain", "speed", 1.0, "steps/s", {"value": 1.0}, None, LABEL)
    save_reference([committed], device_report("cpu"), "an earlier run", directory=here / "reference")
    (here / "sweeps").mkdir()
    (here / "sweeps" / f"{LABEL}.json").write_text(json.dumps([{"step": "an earlier step"}]))
    assert run(1, tmp_path, stubs, data="device-1", out="out-1") is True
    assert run(2, tmp_path, stubs, data="device-2", out="out-2") is True  # a fresh copy of the tree
    assert load_json(tmp_path / "out-2" / "records" / f"{LABEL}.json") == load_json(
        tmp_path / "device-2" / "reference" / f"{LABEL}.json")  # the second call never saw the first's
    folders = [str(tmp_path / "out-1"), str(tmp_path / "out-2")]
    for _ in range(2):  # merging again changes nothing
        assert sweep.main(["--merge", *folders, "--data", str(here)]) == 0
        merged = load_json(here / "reference" / f"{LABEL}.json")
        assert sorted((r.variant, r.value) for r in merged) == [
            ("plain", 1.0), ("plain", 2.0), ("plain", 3.0), ("same figure", 7.0)]
        log = json.loads((here / "sweeps" / f"{LABEL}.json").read_text())
        assert [entry["step"] for entry in log[:1]] == ["an earlier step"]
        assert [entry["name"] for entry in log[1:]] == ["a", "same, first", "b", "same, again"]
    assert "2 records of" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["--merge", str(here), "--data", str(here)])
    assert exit_info.value.code == 2
    assert f"--merge: {here}: not a call's --out folder (no log/ in it)" in capsys.readouterr().err


def test_the_log_resumes_a_call_for_the_same_code_and_redo_or_new_code_runs_it_again(stubs, tmp_path, monkeypatch,
                                                                                    capsys):
    monkeypatch.setattr(sweep, "CALLS", (
        Call("first", (Step("first", 30, "ceilings", "sweep_stub:toy"),)),
        Call("waits", (Step("after", 30, "ceilings", "sweep_stub:toy", needs="first"),)),
    ))
    assert run(2, tmp_path, stubs) is False
    assert "after: not started, it needs 'first' on file for this code first" in capsys.readouterr().out
    assert run(1, tmp_path, stubs) is True and len(log_of(tmp_path)) == 1
    assert run(1, tmp_path, stubs) is True and len(log_of(tmp_path)) == 1
    assert "first: on file (ok, " in capsys.readouterr().out
    assert run(1, tmp_path, stubs, redo=True) is True and len(log_of(tmp_path)) == 2
    monkeypatch.setattr(sweep, "code_version", lambda: "changed-code")
    assert run(1, tmp_path, stubs) is True
    assert [entry["code"] for entry in log_of(tmp_path)][-1] == "changed-code"


def test_the_call_s_deadline_cuts_a_step_off_to_run_again_and_starts_none_that_would_not_fit(
        stubs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep, "STEPS_S", 10)
    monkeypatch.setattr(sweep, "CALLS", (Call("stubs", (
        Step("slow", 8, "ceilings", "sweep_stub:slow"),
        Step("first", 30, "ceilings", "sweep_stub:toy"),
    )),))
    assert run(1, tmp_path, stubs) is False
    slow, = log_of(tmp_path)
    assert slow["outcome"] == "cut off" and sweep.on_file([slow], sweep.CALLS[0].steps[0], slow["code"]) is None
    assert "first: not started, 0 s of the call left for about 30 s: run call 1 again" in capsys.readouterr().out


def test_a_dry_run_of_real_steps_uses_quick_sizes_and_only_collects_the_tests(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CALLS", (Call("real steps", (
        Step("collect", 60, tests="tests/test_core_config.py"),
        # 2**34 elements would not fit in memory: a dry run leaves the sizes to quick mode
        Step("graphs: op", 60, "graphs", f"{GRAPHS}:op_time_by_size", sizes={"sizes": (2**34,)}),
    )),))
    data = tmp_path / "data"
    assert sweep.main(["all", "--device", "cpu", "--data", str(data)]) == 0
    collect, op = log_of(tmp_path)
    assert collect["outcome"] == "ok" and re.fullmatch(r"\d+ tests collected in [\d.]+s", collect["summary"])
    records = load_json(data / "reference" / f"{LABEL}.json")
    assert {r.params["elements"] for r in records} == {1, 2**10, 2**16}  # graphs' quick sizes


def test_each_time_to_win_brings_back_its_own_agent_with_the_curve(tmp_path, monkeypatch):
    from rlgpu_helpers.learn.checkpoint import load_checkpoint
    from rlgpu_helpers.learn.settings import preset_settings

    steps = (find_step("time to win: seed 0"), find_step("launch comparison: eager, fp32"))
    monkeypatch.setattr(sweep, "CALLS", (Call("win", steps),))
    out = tmp_path / "out"
    assert sweep.main(["1", "--device", "cpu", "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    # one folder per step: neither overwrites the other (quick mode: 6 x 6, the steps' own seeds)
    preset = load_checkpoint(out / "agents" / "time-to-win-seed-0" / "win-6x6-seed0.pt")
    eager = load_checkpoint(out / "agents" / "launch-comparison-eager-fp32" / "win-6x6-seed0.pt")
    for agent in (preset, eager):
        assert agent["extra"]["curve"] and agent["extra"]["curve"][-1]["seconds"] > 0
    assert (eager["config"]["precision"], eager["config"]["compile"]) == ("fp32", False)
    assert preset["config"]["compile"] and preset["extra"]["warmup_seconds"] > 0  # its compile, apart
    records = load_json(out / "records" / f"{LABEL}.json")
    assert {r.name for r in records} == {"time to win"}
    changes = {r.params["precision"]: r.params["changes"] for r in records}
    assert "compile=False" in changes["fp32"] and "compile" not in changes[preset_settings("win", "cpu")["precision"]]


def test_the_code_version_follows_the_sources_only(tmp_path):
    for path in ("rlgpu_helpers/a.py", "tests/test_a.py", "conftest.py", "pyproject.toml", "tools/x.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x = 1\n")
    version = sweep.code_version(tmp_path)
    (tmp_path / "tools" / "x.py").write_text("x = 2\n")
    (tmp_path / "rlgpu_helpers" / "a.pyc").write_text("cache")
    assert sweep.code_version(tmp_path) == version
    (tmp_path / "rlgpu_helpers" / "a.py").write_text("x = 2\n")
    assert sweep.code_version(tmp_path) != version


def test_the_wheels_are_checked_for_the_image_one_version_each_and_complete(tmp_path):
    assert sweep.requirements() == ["gymnasium>=1.1", "ipywidgets>=8.0"]
    for name in ("gymnasium-1.4.0-py3-none-any.whl", "ipywidgets-8.1.9-py3-none-any.whl"):
        (tmp_path / name).touch()
    assert [w.name for w in sweep.check_wheels(tmp_path)] == ["gymnasium-1.4.0-py3-none-any.whl",
                                                              "ipywidgets-8.1.9-py3-none-any.whl"]
    (tmp_path / "Farama_Notifications-0.0.5-py3-none-any.whl").touch()
    (tmp_path / "farama_notifications-0.0.6-py3-none-any.whl").touch()
    (tmp_path / "numpy-2.5.0-cp312-cp312-manylinux_2_28_x86_64.whl").touch()
    (tmp_path / "wcwidth-0.9.4-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl").touch()  # fits
    (tmp_path / "ipywidgets-8.1.9-py3-none-any.whl").unlink()
    with pytest.raises(ValueError) as error:
        sweep.check_wheels(tmp_path)
    message = str(error.value)
    assert message.count("for another platform") == 1
    assert "numpy-2.5.0-cp312-cp312-manylinux_2_28_x86_64.whl is for another platform" in message
    assert "farama-notifications comes in 2 versions" in message and "no wheel of ipywidgets" in message


WHEELS = os.environ.get("RLGPU_SWEEP_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="RLGPU_SWEEP_WHEELS names no folder of wheels (.ci/run makes one with "
                                       "python tools/gpu_sweep.py --download-wheels .whl)")
def test_the_wheels_install_without_an_index_and_what_the_gpu_image_lacks_imports_from_them(tmp_path):
    site = sweep.install_wheels(Path(WHEELS), tmp_path / "site")
    code = "import gymnasium, ipywidgets, rlgpu_helpers.snake.widgets; print(gymnasium.__file__, ipywidgets.__file__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])})
    assert all(Path(path).is_relative_to(site) for path in done.stdout.split())
    assert not list(Path(site).glob("numpy*"))  # the image's own numpy is used
