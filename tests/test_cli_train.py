"""``python -m rlgpu_helpers train`` and ``play``: they work, and bad arguments fail cleanly."""

import json
import re
import subprocess
import sys

import pytest
import torch

from rlgpu_helpers.cli import main
from rlgpu_helpers.core.device import get_device
from rlgpu_helpers.learn.agents import load_agent


def test_train_then_play(tmp_path, capsys):
    out, agent, curve, gif = tmp_path / "run", tmp_path / "agent.pt", tmp_path / "curve.json", tmp_path / "games.gif"
    code = main(["train", "--size", "5", "--envs", "16", "--steps", "1024", "--set", "num_steps=16",
                 "--set", "hidden=8", "--device", "cpu", "--out", str(out), "--agent", str(agent),
                 "--json", str(curve)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "ppo: 1,024 env steps" in printed and f"Checkpoint: {out / 'checkpoint.pt'}" in printed
    summary = json.loads(curve.read_text())
    assert summary["env_steps"] == 1024 and summary["config"]["hidden"] == 8
    assert summary["machine"]["device"] == "cpu" and summary["curve"][-1]["env_steps"] == 1024
    assert load_agent(agent).config["num_envs"] == 16
    assert main(["play", str(agent), "--games", "2", "--gif", str(gif)]) == 0
    printed = capsys.readouterr().out
    assert "game 1: score" in printed and "game 2: score" in printed and gif.stat().st_size > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--algo", "a2c"], "invalid choice: 'a2c'"),
        (["train", "--envs", "0"], "expected a positive int, got '0'"),
        (["train", "--seconds", "-1"], "expected a positive float, got '-1'"),
        (["train", "--seconds", "inf"], "expected a finite float, got 'inf'"),
        (["train", "--set", "hidden=2.9e0"], "--set hidden='2.9e0': expected a int"),
        (["train", "--set", "hidden=inf"], "--set hidden='inf': expected a int"),
        (["train", "--nproc", "2", "--set", "precision=fp64"], "--nproc 2: precision='fp64' must be one of"),
        (["train", "--nproc", "2", "--set", "hidden=2.5"], "--set hidden='2.5': expected a int"),
        (["train", "--nproc", "2", "--resume", "--out", "runs/x", "--set", "gamma=0.9"], "leave out --set"),
        (["train", "--nproc", "2", "--resume"], "--resume needs --out"),
        (["play", "x.pt", "--gif", "games.png"], "--gif games.png: the file name must end in .gif"),
        (["train", "--resume"], "--resume needs --out"),
        (["train", "--set", "nope=1"], "ppo has no setting 'nope'"),
        (["train", "--set", "learning_rate=fast"], "expected a float"),
        (["train", "--set", "gamma"], "--set takes NAME=VALUE"),
        (["train", "--set", "gamma=2", "--steps", "1"], "gamma=2.0 must be a finite number >= 0 and <= 1"),
        (["play", "/nonexistent/agent.pt"], "no checkpoint at /nonexistent/agent.pt"),
        (["play", "x.pt", "--games", "0"], "expected a positive int"),
        (["train", "--seed", "-1"], "--seed=-1 must be a seed in [0, 2**64)"),
        (["train", "--seed", "two"], "expected an int seed, got 'two'"),
        (["train", "--resume", "--out", "runs/x", "--obs", "grid", "--set", "gamma=0.9"],
         "leave out --obs, --set (--device moves it to another device)"),
        (["train", "--set", "anneal_lr=maybe", "--steps", "1"], "--set anneal_lr='maybe': expected a bool"),
        (["train", "--choose", "--steps", "100"], "--choose chooses for a time budget: give --seconds"),
        (["train", "--choose", "--algo", "dqn"], "leave out --algo dqn"),
        (["train", "--choose", "--resume", "--out", "runs/x"], "leave out --resume"),
        (["train", "--set", "device=tpu", "--steps", "1"], "--set device='tpu': name='tpu' is not a device"),
        (["train", "--envs", "1000000000", "--steps", "1", "--device", "cpu"],  # a CPU's 64 steps of 85 bytes
         "num_envs=1000000000 needs 5,440,000,000,000 bytes"),
        (["train", "--algo", "dqn", "--set", "buffer_size=1000000000000", "--steps", "1"],
         "buffer_size=1000000000000 (buffer='tensor'): capacity=1000000000000 needs"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_resume_takes_the_device_and_keeps_the_saved_settings(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--size", "5", "--envs", "16", "--steps", "256", "--set", "num_steps=16",
                 "--set", "hidden=8", "--device", "cpu", "--out", str(out)]) == 0
    assert main(["train", "--resume", "--out", str(out), "--steps", "512", "--device", "cpu"]) == 0
    assert "ppo: 512 env steps" in capsys.readouterr().out
    assert load_agent(out).config["hidden"] == 8 and load_agent(out).config["num_envs"] == 16


def test_play_refuses_seeds_past_the_last_one(tmp_path, capsys):
    out = tmp_path / "run"
    main(["train", "--size", "5", "--envs", "16", "--steps", "16", "--set", "num_steps=1", "--set", "hidden=8",
          "--device", "cpu", "--out", str(out)])
    with pytest.raises(SystemExit) as exit_info:
        main(["play", str(out), "--seed", str(2**64 - 1), "--games", "2"])
    assert exit_info.value.code == 2 and "must stay below 2**64" in capsys.readouterr().err


def test_resume_of_a_folder_without_checkpoint_is_a_clean_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "rlgpu_helpers", "train", "--resume", "--out", str(tmp_path),
                             "--steps", "10"], check=False, capture_output=True, text=True)
    assert result.returncode == 2 and "no checkpoint at" in result.stderr and "Traceback" not in result.stderr


def test_choose_measures_the_settings_first_and_the_command_line_still_wins(tmp_path, capsys, monkeypatch):
    from rlgpu_helpers import cli
    from rlgpu_helpers.learn.tune import CapstoneSettings

    seen = {}

    def fake_choice(device, *, budget_s, start):
        seen.update(budget_s=budget_s, start=dict(start))
        chosen = {**start, "num_envs": 16, "num_steps": 4, "hidden": 8}
        return CapstoneSettings("cpu", start, chosen, ())

    monkeypatch.setattr(cli, "capstone_settings", fake_choice)
    out = tmp_path / "run"
    assert main(["train", "--choose", "--seconds", "1", "--size", "6", "--set", "hidden=4", "--device", "cpu",
                 "--out", str(out)]) == 0
    assert seen["budget_s"] == 1.0 and seen["start"]["obs_type"] == "features_reach" and seen["start"]["height"] == 6
    config = load_agent(out).config
    assert config["num_envs"] == 16 and config["hidden"] == 4 and config["obs_type"] == "features_reach"


TINY_RUN = ["train", "--size", "5", "--envs", "16", "--set", "num_steps=16", "--set", "hidden=8", "--device", "cpu"]


def test_two_runs_on_one_folder_cannot_both_run(tmp_path):
    """The second is refused with the first one's pid, before it trains; the first finishes untouched."""
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "rlgpu_helpers", *TINY_RUN, "--seconds", "600", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / "train.lock"
        for _ in range(600):  # the first run holds the folder once its lock file names it
            if lock.exists() and lock.read_text().strip() == str(first.pid):
                break
            first.poll()
            assert first.returncode is None, first.stderr.read()
            subprocess.run(["sleep", "0.1"], check=True)
        second = subprocess.run([sys.executable, "-m", "rlgpu_helpers", *TINY_RUN, "--steps", "64",
                                 "--out", str(out)], check=False, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"is in use: {lock} is held by process {first.pid}" in second.stderr
        assert "env steps" not in second.stdout  # refused before training
    finally:
        first.kill()
        first.communicate()


@pytest.mark.parametrize("make_out", ["a file", "a folder inside a file"])
def test_train_refuses_a_run_folder_that_cannot_be_written_before_training(tmp_path, make_out):
    from rlgpu_helpers.learn.training import RunFolderError, make_learner, train

    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" if make_out == "a file" else tmp_path / "file" / "run"
    learner = make_learner("ppo", num_envs=4, num_steps=4, hidden=4, height=5, width=5)
    with pytest.raises(RunFolderError, match=f"out_dir={str(out)!r} cannot hold a run"):
        train(learner, steps=10**9, out_dir=out, progress=False)
    assert learner.env_steps == 0


@pytest.mark.parametrize("option", ["--json", "--agent", "--out"])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys, option):
    (tmp_path / "file").write_text("not a folder")
    bad = {"--json": tmp_path, "--agent": tmp_path / "file" / "agent.pt", "--out": tmp_path / "file"}[option]
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY_RUN, "--steps", "100000000", option, str(bad)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and "env steps" not in captured.out
    assert {"--json": "is a folder: give a file name", "--agent": "is a file, not a folder",
            "--out": "is a file, not a folder"}[option] in captured.err


def test_the_curve_json_is_written_atomically(tmp_path, monkeypatch):
    from rlgpu_helpers import cli

    written = []
    real = cli.atomic_write
    monkeypatch.setattr(cli, "atomic_write", lambda path, write: written.append(path) or real(path, write))
    curve = tmp_path / "deep" / "curve.json"
    assert main([*TINY_RUN, "--steps", "256", "--json", str(curve)]) == 0
    assert written == [curve] and json.loads(curve.read_text())["env_steps"] == 256


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_set_device_cuda_on_a_cpu_machine_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY_RUN, "--steps", "1", "--set", "device=cuda"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--set device='cuda':" in err and "Traceback" not in err


def test_memory_errors_name_the_bytes_needed_and_available(capsys):
    """On the default device: a GPU host's error names the GPU's memory."""
    with pytest.raises(SystemExit):
        main(["train", "--envs", "1000000000", "--steps", "1"])
    memory = re.escape(f"of {get_device()} memory")
    assert re.search(rf"needs [0-9,]+ bytes \(.* GiB\) {memory} .*, but [0-9,]+ bytes \(.* GiB\) are available",
                     capsys.readouterr().err)


def test_a_diverged_run_stops_with_exit_1_and_checkpoints_no_nan(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY_RUN, "--steps", "100000", "--set", "learning_rate=1e30", "--checkpoint-every", "1e-9",
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "Training stopped: PPO diverged in iteration 1: a loss or the weights are not finite" in err
    assert not (out / "checkpoint.pt").exists()


def test_resume_moves_a_gpu_run_to_this_cpu_translating_its_cuda_only_settings(tmp_path, capsys):
    from rlgpu_helpers.learn.checkpoint import load_checkpoint, save_checkpoint

    out = tmp_path / "run"
    assert main([*TINY_RUN, "--steps", "256", "--out", str(out)]) == 0
    state = load_checkpoint(out)
    state["config"].update(device="cuda", cuda_graphs=True, precision="tf32")  # as a GPU run saves it
    save_checkpoint(out / "checkpoint.pt", state)
    assert main(["train", "--resume", "--out", str(out), "--steps", "512", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "Resuming on cpu: cuda_graphs=True -> False" in printed and "ppo: 512 env steps" in printed
    assert load_checkpoint(out)["config"]["precision"] == "fp32"
