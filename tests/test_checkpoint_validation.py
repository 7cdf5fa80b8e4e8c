"""Checkpoints that refuse what they cannot resume, whole and before anything changes (issue 21)."""

import copy
import math

import pytest
import torch

from rlgpu_helpers.learn.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from rlgpu_helpers.learn.nets import DivergedError
from rlgpu_helpers.learn.training import for_device, load_learner, make_learner, train

PPO_SMALL = {"height": 6, "width": 6, "num_envs": 16, "num_steps": 8, "hidden": 16}
DQN_SMALL = {"height": 6, "width": 6, "num_envs": 8, "steps_per_iteration": 8, "learning_starts": 32,
             "buffer_size": 500, "batch_size": 16, "hidden": 16}
ITERATION = 16 * 8


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A PPO run's checkpoint, as loaded: each test edits a copy."""
    out = tmp_path_factory.mktemp("run")
    train(make_learner("ppo", **PPO_SMALL), steps=2 * ITERATION, out_dir=out, progress=False)
    return load_checkpoint(out)


def _without(key):
    return lambda state: state.pop(key)


def _set(path, value):
    def edit(state):
        *parents, last = path
        for key in parents:
            state = state[key]
        state[last] = value
    return edit


def _nan_weight(state):
    state["learner"]["model"]["actor.0.0.weight"][0, 0] = math.nan


@pytest.mark.parametrize("edit, message", [
    (_without("config"), "config is missing"),
    (_without("learner"), "learner is missing"),
    (_without("rng"), "rng is missing"),
    (_set(["format"], "rlgpu-train/0"), "format is 'rlgpu-train/0'"),
    (_set(["algorithm"], "a2c"), "algorithm is 'a2c'"),
    (_set(["config"], [1, 2]), "config is a list, not a dict"),
    (_set(["seconds"], "12"), "seconds is a str"),
    (_set(["config", "batch_size"], 64), r"config has unknown \['batch_size'\]: saved by another version"),
    (lambda state: state["config"].pop("precision"), r"config lacks \['precision'\]"),
    (_set(["config", "hidden"], "16"), "config cannot build a learner here: hidden='16' must be an int"),
    (_set(["config", "hidden"], 32),
     r"learner: state\['model'\]\['actor.0.0.weight'\] has shape \(16, 11\), expected \(32, 11\)"),
    (_set(["config", "obs_type"], "grid"), r"learner: state\['model'\] does not fit the network"),
    (_set(["config", "num_envs"], 8), r"learner: state\['env'\]"),
    (lambda state: state["learner"].pop("optimizer"), r"learner: state is missing \['optimizer'\]"),
    (_set(["learner", "env_steps"], -1), r"learner: state\['env_steps'\]=-1 must be an int >= 0"),
    (_set(["learner", "next_obs"], "obs"), r"learner: state\['next_obs'\] must be a tensor"),
    (_nan_weight, r"learner: state\['model'\]\['actor.0.0.weight'\] holds values that are not finite"),
    (_set(["rng", "torch"], torch.zeros(3, dtype=torch.uint8)), r"rng\['torch'\] is not a CPU random state"),
    (_set(["curve"], [{"seconds": 1}]), r"curve\[0\] is"),
])
def test_a_bad_checkpoint_is_a_checkpoint_error_naming_the_field(saved, tmp_path, edit, message):
    state = copy.deepcopy(saved)
    edit(state)
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    rng = torch.get_rng_state()
    with pytest.raises(CheckpointError, match=message):
        train(steps=4 * ITERATION, out_dir=tmp_path, resume=True, progress=False)
    with pytest.raises(CheckpointError, match=message):
        load_learner(tmp_path)
    if "learner:" not in message and "config cannot" not in message:  # refused before a learner is built
        assert torch.equal(torch.get_rng_state(), rng)


def _snapshot(learner):
    """Everything a load could change, copied."""
    return copy.deepcopy({**learner.state_dict(), "counters": (learner.env_steps, getattr(learner, "iterations", 0))})


def _assert_same(before, after):
    flat_before, flat_after = _flatten(before), _flatten(after)
    assert flat_before.keys() == flat_after.keys()
    for key, value in flat_before.items():
        other = flat_after[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), key
        else:
            assert value == other, key


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flatten(value, f"{prefix}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, value in enumerate(tree) for k, v in _flatten(value, f"{prefix}/{i}").items()}
    return {prefix: tree}


@pytest.mark.parametrize("algorithm, settings, steps", [("ppo", PPO_SMALL, 2 * ITERATION),
                                                        ("dqn", DQN_SMALL, 3 * 64)])
def test_a_refused_load_leaves_the_learner_exactly_as_it_was(algorithm, settings, steps):
    learner = train(make_learner(algorithm, **settings), steps=steps, progress=False).learner
    other = train(make_learner(algorithm, **{**settings, "num_envs": 4, "seed": 1}), steps=steps,
                  progress=False).learner  # another env size: every other part fits
    before = _snapshot(learner)
    with pytest.raises(ValueError, match=r"state\['env'\]"):
        learner.load_state_dict(other.state_dict())
    _assert_same(before, _snapshot(learner))
    broken = copy.deepcopy(learner.state_dict())
    broken["model"][next(iter(broken["model"]))].fill_(math.inf)
    with pytest.raises(ValueError, match="not finite"):
        learner.load_state_dict(broken)
    _assert_same(before, _snapshot(learner))
    learner.load_state_dict(learner.state_dict())  # a state that fits loads
    _assert_same(before, _snapshot(learner))


@pytest.mark.parametrize("algorithm, settings, iteration", [("ppo", PPO_SMALL, ITERATION), ("dqn", DQN_SMALL, 64)])
def test_training_stops_on_non_finite_weights_and_keeps_the_last_good_checkpoint(tmp_path, algorithm, settings,
                                                                                 iteration):
    learner = make_learner(algorithm, **{**settings, "learning_starts": 0} if algorithm == "dqn" else settings)
    iterate = learner.iterate

    def poisoned_after_two(budget_used):
        if learner.env_steps == 2 * iteration:
            with torch.no_grad():
                next(learner.model.parameters())[0].fill_(math.nan)  # as a diverged update leaves them
        return iterate(budget_used)

    learner.iterate = poisoned_after_two
    with pytest.raises(DivergedError, match=f"not finite .*the last good checkpoint, {tmp_path}.* is kept"):
        train(learner, steps=10 * iteration, out_dir=tmp_path, checkpoint_every_s=1e-9, progress=False)
    kept = load_checkpoint(tmp_path)
    assert kept["learner"]["env_steps"] == 2 * iteration
    assert all(bool(t.isfinite().all()) for t in kept["learner"]["model"].values())


def test_a_non_finite_loss_stops_ppo_in_that_iteration():
    learner = make_learner("ppo", **PPO_SMALL)
    learner.iterate()
    learner.rewards.fill_(math.nan)  # a NaN reward reaches the loss through the returns
    collect = learner.collect
    learner.collect = lambda: (collect(), learner.returns.fill_(math.nan))
    with pytest.raises(DivergedError, match="PPO diverged in iteration 2"):
        learner.iterate()
    assert learner.iterations == 1


def test_resuming_off_a_gpu_translates_the_cuda_only_settings_and_says_so(saved, tmp_path, capsys):
    state = copy.deepcopy(saved)
    state["config"].update(device="cuda", cuda_graphs=True, precision="tf32")  # as a GPU run saves it
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    resumed = train(steps=3 * ITERATION, out_dir=tmp_path, resume=True, device="cpu", progress=False)
    out = capsys.readouterr().out
    assert "Resuming on cpu: cuda_graphs=True -> False" in out and "precision='tf32' -> 'fp32'" in out
    config = resumed.learner.config
    assert (config.device, config.cuda_graphs, config.precision) == ("cpu", False, "fp32")
    assert resumed.env_steps == 3 * ITERATION


def test_for_device_keeps_what_runs_everywhere():
    config = {"device": "cuda", "cuda_graphs": True, "precision": "bf16", "compile": True}
    assert for_device(config, "cpu") == ({"device": "cpu", "cuda_graphs": False, "precision": "bf16",
                                          "compile": True}, ["cuda_graphs=True -> False (CUDA graphs need a CUDA GPU)"])
    assert for_device({"precision": "fp32"}, "cpu") == ({"precision": "fp32", "device": "cpu"}, [])
