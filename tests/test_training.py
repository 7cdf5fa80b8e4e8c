"""The shared training loop: budgets, learning curve, exact resume, and surviving a kill."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rlgpu_helpers.learn.checkpoint import load_checkpoint
from rlgpu_helpers.learn.training import load_learner, make_learner, train

SMALL = dict(height=6, width=6, num_envs=32, num_steps=16, hidden=16)
ITERATION = 32 * 16  # env steps in one PPO iteration with SMALL


def test_a_step_budget_runs_whole_iterations_and_records_a_curve():
    result = train(make_learner("ppo", **SMALL), steps=3 * ITERATION, progress=False)
    assert result.env_steps == 3 * ITERATION
    assert result.curve[-1]["env_steps"] == 3 * ITERATION
    assert result.seconds > 0 and result.steps_per_second > 0
    assert [p["env_steps"] for p in result.curve] == sorted(p["env_steps"] for p in result.curve)


@pytest.mark.parametrize("launch", [{}, {"compile": True}], ids=["eager", "compiled, graph-safe Adam"])
def test_resuming_gives_exactly_the_same_run_as_not_stopping(tmp_path, launch):
    budget = 4 * ITERATION
    straight = train(make_learner("ppo", **SMALL, **launch), steps=budget, progress=False)

    interrupted = make_learner("ppo", **SMALL, **launch)
    iterate = interrupted.iterate

    def stops_after_two(budget_used=0.0):
        if interrupted.iterations == 2:
            raise KeyboardInterrupt  # the run is stopped here, like a Ctrl-C or a lost session
        return iterate(budget_used)

    interrupted.iterate = stops_after_two
    with pytest.raises(KeyboardInterrupt):
        train(interrupted, steps=budget, out_dir=tmp_path, checkpoint_every_s=1e-9, progress=False)
    assert load_checkpoint(tmp_path)["learner"]["iterations"] == 2
    resumed = train(steps=budget, out_dir=tmp_path, resume=True, progress=False)
    assert resumed.env_steps == straight.env_steps and resumed.episodes == straight.episodes
    for (name, a), b in zip(straight.learner.model.state_dict().items(), resumed.learner.model.state_dict().values()):
        assert torch.equal(a, b), name
    lr, resumed_lr = (run.learner.optimizer.param_groups[0]["lr"] for run in (straight, resumed))
    assert isinstance(resumed_lr, torch.Tensor) == bool(launch) and float(resumed_lr) == float(lr)


def test_dqn_resumes_with_its_replay_buffer(tmp_path):
    settings = dict(height=6, width=6, num_envs=8, steps_per_iteration=8, learning_starts=64, buffer_size=1000)
    train(make_learner("dqn", **settings), steps=3 * 64, out_dir=tmp_path, progress=False)
    learner = load_learner(tmp_path)
    assert learner.buffer.size == 3 * 64 and learner.env_steps == 3 * 64 and learner.updates > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "give a budget"),
        (dict(seconds=0), "seconds=0 must be a finite number > 0"),
        (dict(steps=-5), "steps=-5 must be a finite number > 0"),
        (dict(steps=10, resume=True), "resume=True continues the learner saved in out_dir"),
        (dict(steps=10, device="cpu"), "device='cpu' is for resume=True"),
        (dict(steps=10, checkpoint_every_s=0), "checkpoint_every_s=0 must be a finite number > 0"),
    ],
)
def test_bad_budgets_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        train(make_learner("ppo", **SMALL), progress=False, **kwargs)


def test_resume_needs_out_dir_and_takes_a_device(tmp_path):
    with pytest.raises(ValueError, match="resume=True needs out_dir"):
        train(steps=10, resume=True, progress=False)
    train(make_learner("ppo", **SMALL), steps=ITERATION, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="device='tpu' is not a device"):
        train(steps=2 * ITERATION, out_dir=tmp_path, resume=True, device="tpu", progress=False)
    resumed = train(steps=2 * ITERATION, out_dir=tmp_path, resume=True, device="cpu", progress=False)
    assert resumed.env_steps == 2 * ITERATION and resumed.learner.config.device == "cpu"


def test_unknown_algorithm_or_setting_raises():
    with pytest.raises(ValueError, match="algorithm='a2c' must be one of"):
        make_learner("a2c")
    with pytest.raises(ValueError, match=r"unknown ppo settings \['batch_size'\]"):
        make_learner("ppo", batch_size=3)


def test_a_training_process_killed_mid_run_resumes_from_its_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "rlgpu_helpers", "train", "--size", "6", "--envs", "32",
               "--set", "num_steps=16", "--set", "hidden=16", "--seconds", "120",
               "--checkpoint-every", "0.3", "--out", str(out)]
    env = dict(os.environ, RLGPU_QUICK="1")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        saved = 0
        while time.monotonic() < deadline:  # wait for a few checkpoints, then kill at once
            path = out / "checkpoint.pt"
            if path.exists():
                saved = max(saved, load_checkpoint(path)["learner"]["iterations"])
                if saved >= 3:
                    break
            time.sleep(0.05)
        assert saved >= 3, "the training process wrote no checkpoints in time"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    before = load_checkpoint(out / "checkpoint.pt")  # never corrupt, whatever the kill hit
    resumed = train(seconds=before["seconds"] + 1.0, out_dir=out, resume=True, progress=False)
    assert resumed.env_steps > before["learner"]["env_steps"]
    assert resumed.seconds >= before["seconds"] + 1.0
    assert resumed.curve[: len(before["curve"])] == before["curve"]  # the curve continues
    assert load_checkpoint(out)["learner"]["env_steps"] == resumed.env_steps
