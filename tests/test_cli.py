import json
import subprocess
import sys

import pytest
import torch

from rlgpu_helpers.measure import records
from rlgpu_helpers.measure.records import Record, load_json
from rlgpu_helpers.bench.suites import SUITES, Suite
from rlgpu_helpers.cli import main
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.learn.ppo import PPOConfig


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_bench_prints_a_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "out" / "ceilings.json"
    assert main(["bench", "--device", "cpu", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "throughput (TFLOP/s)" in out and "bandwidth (GB/s)" in out and f"Wrote {path}" in out
    records = load_json(path)
    assert {r.name for r in records} == {"matmul", "copy"}
    data = json.loads(path.read_text())
    assert data["records"][0]["command"] == (
        f"RLGPU_QUICK=1 python -m rlgpu_helpers bench --device cpu --json {path}")


def test_a_registered_suite_runs_and_saves(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RLGPU_QUICK", "0")
    label = machine_label(device_report("cpu"))
    seen = []

    def toy_suite(device, progress):
        seen.append((device, progress))
        return [Record("toy", "plain", "speed", 42.0, "steps/s", {"num_envs": 8}, None, label)]

    monkeypatch.setitem(SUITES, "toy", Suite(toy_suite, "a toy"))
    monkeypatch.setattr(records, "data_dir", lambda: tmp_path)
    assert main(["bench", "toy", "--device", "cpu", "--save"]) == 0
    assert seen == [(torch.device("cpu"), False)]
    assert f"Saved to {tmp_path / 'reference' / label}.json" in capsys.readouterr().out
    saved, = load_json(tmp_path / "reference" / f"{label}.json")
    assert (saved.name, saved.value, saved.unit) == ("toy", 42.0, "steps/s")


@pytest.mark.parametrize("argv, message", [
    ([], "required: COMMAND"),
    (["bench", "nope"], "invalid choice: 'nope'"),
    (["bench", "--device", "tpu"], "name='tpu' is not a device"),
    (["bench", "--save"], "--save stores full-size reference results"),
    (["bench", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cuda_without_cuda_is_an_argument_error(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "asks for CUDA" in capsys.readouterr().err


def test_bad_quick_mode_value_is_an_argument_error(monkeypatch, capsys):
    monkeypatch.setenv("RLGPU_QUICK", "sometimes")
    with pytest.raises(SystemExit) as exit_info:
        main(["bench"])
    assert exit_info.value.code == 2
    assert "RLGPU_QUICK='sometimes'" in capsys.readouterr().err


def test_python_dash_m_exits_2_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "rlgpu_helpers", "bench", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "invalid choice" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def a_gpu_machine(monkeypatch):
    """The command line as it behaves where CUDA is present: the best device is cuda:0."""
    from rlgpu_helpers import cli

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(cli, "get_device", lambda name=None: cuda if name in (None, "cuda") else torch.device(name))
    monkeypatch.setattr(cli, "device_argument", lambda text: cuda if text.startswith("cuda") else torch.device(text))
    monkeypatch.setattr(cli, "describe_device", lambda device: f"Using {device}")
    monkeypatch.setattr(cli, "device_report", lambda device: device_report("cpu"))


def test_a_cpu_only_suite_measures_the_cpu_of_a_gpu_machine(a_gpu_machine, monkeypatch, capsys):
    seen = []
    label = machine_label(device_report("cpu"))
    monkeypatch.setitem(SUITES, "loop", Suite(lambda device, progress: seen.append(device) or [
        Record("naive-dqn", "baseline", "throughput", 1.0, "steps/s", {}, None, label)], "02", cpu_only=True))
    assert main(["bench", "loop"]) == 0
    assert seen == [torch.device("cpu")]
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "loop", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "--device cuda:0: the loop suite measures the CPU only" in capsys.readouterr().err
    assert seen == [torch.device("cpu")]  # refused before running


def test_every_suite_names_its_lesson():
    assert set(SUITES) == {"ceilings", "loop", "envs", "env_floor", "syncs", "launch", "transfers", "replay", "batch_size",
                           "accumulation", "precision", "graphs", "ddp", "training", "wins", "win_speed", "capstone"}
    assert all(suite.lesson[:2].isdigit() for suite in SUITES.values())
    assert [name for name, suite in SUITES.items() if suite.cpu_only] == ["loop"]


def test_bench_set_passes_the_suites_own_options_as_python_literals(monkeypatch, capsys):
    seen = []

    def toy_suite(device, progress, *, seeds=(0,), budget_s=1.0):
        seen.append((seeds, budget_s))
        return [Record("toy", "plain", "speed", 42.0, "steps/s", {}, None, machine_label(device_report("cpu")))]

    monkeypatch.setitem(SUITES, "toy", Suite(toy_suite, "a toy"))
    assert main(["bench", "toy", "--device", "cpu", "--set", "seeds=(1, 2)", "--set", "budget_s=2.5"]) == 0
    assert seen == [((1, 2), 2.5)]
    for option, message in (("frames=3", "--set frames=3: the suite takes seeds, budget_s"),
                            ("seeds=range(3)", "--set seeds=range(3): not a Python literal")):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "toy", "--device", "cpu", "--set", option])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err



def test_bench_set_also_takes_the_settings_of_a_suite_with_a_config(monkeypatch, capsys):
    seen = []

    def toy_suite(device, progress, *, seeds=(0,), **overrides):
        seen.append((seeds, overrides))
        return [Record("toy", "plain", "speed", 42.0, "steps/s", {}, None, machine_label(device_report("cpu")))]

    monkeypatch.setitem(SUITES, "toy", Suite(toy_suite, "a toy", settings=PPOConfig))
    assert main(["bench", "toy", "--device", "cpu", "--set", "seeds=(1,)", "--set", "food_shaping=0.2",
                 "--set", "update_epochs=2", "--set", "mirror=false"]) == 0
    assert seen == [((1,), {"food_shaping": 0.2, "update_epochs": 2, "mirror": False})]
    assert isinstance(seen[0][1]["food_shaping"], float)  # typed as train --set types it
    for option, message in (("frames=3", "the suite takes seeds, or a setting of PPOConfig"),
                            ("update_epochs=2.5", "update_epochs")):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "toy", "--device", "cpu", "--set", option])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json"])
def test_an_output_path_whose_folder_cannot_be_made_is_refused_before_any_work(flag, capsys, monkeypatch):
    """/proc takes no new folder: the refusal comes from argparse, before a benchmark runs."""
    monkeypatch.setitem(SUITES, "ceilings", Suite(lambda device, progress: pytest.fail("the suite ran"), "00"))
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "ceilings", flag, "/proc/rlgpu-no-such-folder/records.json"])
    assert exit_info.value.code == 2
    assert "cannot be written: /proc/rlgpu-no-such-folder cannot hold a file" in capsys.readouterr().err


# ---------------------------------------------------------------------------- train's PPO settings, one way

@pytest.mark.parametrize("argv, expected", [
    (["--nproc", "2", "--preset", "win", "--size", "6", "--envs", "8", "--set", "num_steps=16"],
     dict(preset="win", size=6, envs=8, overrides={"num_steps": 16})),
    (["--nproc=2", "--seed", "3", "--obs", "grid", "--set", "hidden=8"],
     dict(obs="grid", overrides={"seed": 3, "hidden": 8})),
    (["--preset", "win", "--npr", "2", "--nnodes", "2", "--rdzv-endpoint", "node0:29400", "--rdzv-id=x"],
     dict(preset="win")),
    (["--nproc", "2", "--set", "learning_rate=1e-4", "--set", "num_minibatches=2"],
     dict(overrides={"learning_rate": 1e-4, "num_minibatches": 2})),
])
def test_train_and_every_rank_build_ppos_settings_the_same_one_way(argv, expected):
    """``train`` in one process or before torchrun starts the ranks, and ``rank train`` on each rank (the
    arguments torchrun passes it): one function, ``ppo_settings`` of the preset and the options."""
    from rlgpu_helpers.cli import _ppo_config, _rank_arguments, build_parser
    from rlgpu_helpers.learn.settings import ppo_settings

    args = build_parser().parse_args(["train", *argv])
    ranks = build_parser().parse_args(["rank", "train", *_rank_arguments(argv)])
    config = _ppo_config(args, torch.device("cpu"))
    assert _ppo_config(ranks, torch.device("cpu")) == config == ppo_settings("cpu", **expected)


def test_train_with_a_preset_in_one_process_trains_the_presets_config(tmp_path, capsys):
    from rlgpu_helpers.learn.settings import ppo_settings, settings_dict

    changes = ["--set", "compile=False", "--set", "num_steps=8", "--seed", "2"]
    assert main(["train", "--preset", "win", "--size", "6", "--envs", "8", *changes, "--steps", "64",
                 "--device", "cpu", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "run.json")]) == 0
    config = ppo_settings("cpu", "win", size=6, envs=8, overrides={"compile": False, "num_steps": 8, "seed": 2})
    assert json.loads((tmp_path / "run.json").read_text())["config"] == settings_dict(config)
    assert config.obs_type == "ego_grid" and "ppo: 64 env steps" in capsys.readouterr().out


def test_the_ranks_command_leaves_out_only_the_launcher_options():
    from rlgpu_helpers.cli import _rank_arguments

    argv = ["--nproc", "2", "--nnodes=2", "--rdzv-endpoint", "node0:29400", "--rdzv-id", "snake", "--preset", "win",
            "--npr", "2", "--set", "nproc=1", "--out", "runs/nnodes"]
    assert _rank_arguments(argv) == ["--preset", "win", "--set", "nproc=1", "--out", "runs/nnodes"]


@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "node0:29400"], "--nnodes 2 needs --nproc"),
    (["--rdzv-endpoint", "node0:29400"], "--rdzv-endpoint node0:29400 needs --nproc"),
    (["--nproc", "2", "--rdzv-id", "snake"], "--rdzv-id snake names a rendezvous: give --rdzv-endpoint"),
    (["--nproc", "2", "--rdzv-endpoint", "node0"], "expected HOST:PORT with a port in [1, 65535], got 'node0'"),
    (["--nproc", "2", "--rdzv-endpoint", "node0:0"], "got 'node0:0'"),
    (["--nnodes", "0"], "expected a positive int, got '0'"),
    (["--choose", "--seconds", "9", "--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", "node0:29400"],
     "--choose chooses a new PPO run's settings in one process: leave out --nproc"),
    (["--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", "node0:29400", "--algo", "dqn"],
     "data-parallel training is PPO only"),
    (["--nproc", "2", "--preset", "win", "--set", "precision=fp64"], "--nproc 2: precision='fp64' must be one of"),
    (["--nproc", "2", "--preset", "win", "--set", "hidden=2.5"], "--set hidden='2.5': expected a int"),
    (["--nproc", "2", "--resume", "--out", "runs/x", "--preset", "win"], "leave out --preset"),
    (["--preset", "nope"], "invalid choice: 'nope'"),
])
def test_bad_launches_of_train_exit_2_naming_the_option(argv, message, capsys, monkeypatch):
    from rlgpu_helpers import cli

    monkeypatch.setattr(cli.subprocess, "call", lambda command: pytest.fail(f"started {command}"))
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_preset_with_cuda_graphs_is_refused_by_nproc_naming_the_preset(a_gpu_machine, monkeypatch, capsys):
    """On a GPU the win preset captures CUDA graphs, which data-parallel PPO refuses: said, not silently changed."""
    from rlgpu_helpers import cli

    built = []

    def as_a_gpu_builds_it(args, device, chosen=None, *, where=""):
        built.append((args.preset, device))
        config = PPOConfig(num_envs=8, num_steps=4, hidden=8)
        config.cuda_graphs = True  # as ppo_settings("cuda", "win") gives it, past PPOConfig's own check (CUDA only)
        return config

    monkeypatch.setattr(cli, "_ppo_config", as_a_gpu_builds_it)
    monkeypatch.setattr(cli.subprocess, "call", lambda command: pytest.fail(f"started {command}"))
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--preset", "win", "--nproc", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and built == [("win", torch.device("cuda", 0))]
    assert "--nproc 2: cuda_graphs=True is not supported by data-parallel PPO" in err
    assert "The preset 'win' sets cuda_graphs=True on cuda: add --set cuda_graphs=False" in err
