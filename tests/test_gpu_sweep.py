"""tools/gpu_sweep.py: every suite in one call, calls that fit the device tool, a log and copies."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from rlgpu_helpers.bench.records import Record, load_json
from rlgpu_helpers.bench.suites import SUITES, Suite
from rlgpu_helpers.core.device import device_report, machine_label

PATH = Path(__file__).resolve().parent.parent / "tools" / "gpu_sweep.py"
spec = importlib.util.spec_from_file_location("gpu_sweep", PATH)
sweep = importlib.util.module_from_spec(spec)
sys.modules["gpu_sweep"] = sweep  # dataclasses look their module up there
spec.loader.exec_module(sweep)


def test_every_suite_is_in_a_call_and_every_call_fits():
    steps = [step for call in sweep.CALLS for step in call.steps if step.kind == "suite"]
    assert {step.what for step in steps} == set(SUITES)
    for name in SUITES:
        options = [repr(sorted(step.options.items())) for step in steps if step.what == name]
        assert len(set(options)) == len(options), (name, options)  # a split suite runs another part in each call
    assert all(call.minutes <= sweep.LIMIT_MINUTES for call in sweep.CALLS)
    tests = [step.what for call in sweep.CALLS for step in call.steps if step.kind == "pytest"]
    assert "tests -m gpu" in tests


def test_the_list_shows_every_call(capsys):
    assert sweep.main(["--list"]) == 0
    shown = capsys.readouterr().out
    assert all(f"{n}. " in shown for n in range(1, len(sweep.CALLS) + 1))
    assert "bench training (setups=('ours',)" in shown and "pytest tests -m gpu" in shown


@pytest.mark.parametrize("argv, message", [
    (["99"], f"call='99': give one of {', '.join(str(n) for n in range(1, len(sweep.CALLS) + 1))}, all"),
    ([], "call=None: give one of"),
])
def test_bad_calls_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_call_needs_cuda_and_full_size(monkeypatch, capsys):
    monkeypatch.setenv("RLGPU_QUICK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["1"])
    assert exit_info.value.code == 2 and "the sweep measures a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setenv("RLGPU_QUICK", "1")
    with pytest.raises(SystemExit):
        sweep.main(["1"])
    assert "RLGPU_QUICK is set" in capsys.readouterr().err


def test_a_gpu_suite_s_cpu_records_go_into_the_cpu_s_file(monkeypatch, tmp_path):
    """``bench ddp`` on a GPU machine also measures CPU processes: each record goes to its own machine's file."""
    cpu = device_report("cpu")
    gpu = dict(cpu, gpu="NVIDIA H100 80GB HBM3")
    labels = {name: machine_label(report) for name, report in (("cpu", cpu), ("cuda", gpu))}
    toy = Suite(lambda device, progress: [
        Record("toy", name, "speed", 1.0, "steps/s", {}, None, label) for name, label in labels.items()], "00: a toy")
    monkeypatch.setitem(SUITES, "toy", toy)
    monkeypatch.setattr(sweep, "DATA", tmp_path)
    monkeypatch.setattr(sweep, "get_device", lambda name: torch.device(name))
    monkeypatch.setattr(sweep, "device_report", lambda device: gpu if torch.device(device).type == "cuda" else cpu)
    ok, _, paths = sweep.run_suite(sweep.Step("suite", "toy"), "python tools/gpu_sweep.py 1")
    assert ok and [path.stem for path in paths] == [labels["cpu"], labels["cuda"]]
    for name, label in labels.items():
        saved, = load_json(tmp_path / "reference" / f"{label}.json")
        assert saved.variant == name
    foreign = Suite(lambda device, progress: [Record("toy", "x", "speed", 1.0, "steps/s", {}, None, "gpu-other")],
                    "00: a toy")
    monkeypatch.setitem(SUITES, "toy", foreign)
    with pytest.raises(ValueError, match="'gpu-other', a machine other than this one"):
        sweep.run_suite(sweep.Step("suite", "toy"), "python tools/gpu_sweep.py 1")


def test_a_call_saves_records_logs_itself_and_copies_its_files(monkeypatch, tmp_path):
    """A call run end to end on the CPU, with a toy suite standing in for a real one."""
    label = machine_label(device_report("cpu"))
    toy = Suite(lambda device, progress, size=1: [
        Record("toy", "plain", "speed", float(size), "steps/s", {"size": size}, None, label)], "00: a toy")
    monkeypatch.setitem(SUITES, "toy", toy)
    monkeypatch.setattr(sweep, "CALLS", (sweep.Call("a toy", 0.1, (sweep.Step("suite", "toy", {"size": 3}),)),))
    monkeypatch.setattr(sweep, "DATA", tmp_path / "data")
    monkeypatch.setattr(sweep, "get_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(sweep, "device_report", lambda device: device_report("cpu"))
    assert sweep.run_call(1, tmp_path / "out") is True
    saved, = load_json(tmp_path / "data" / "reference" / f"{label}.json")
    assert (saved.name, saved.value) == ("toy", 3.0)
    log = json.loads((tmp_path / "data" / "sweeps" / f"{label}.json").read_text())
    assert log[0]["command"] == "python tools/gpu_sweep.py 1" and log[0]["steps"][0]["ok"] is True
    assert log[0]["machine"]["torch"] == torch.__version__
    assert (tmp_path / "out" / "reference" / f"{label}.json").exists()
    assert (tmp_path / "out" / "sweeps" / f"{label}.json").exists()
