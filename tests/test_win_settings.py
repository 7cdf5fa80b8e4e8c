"""Issue 22's learner settings: the shared trunks, mirrored games, long-game PPO settings, the "win" preset,
and old runs and agents that still load."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from rlgpu_helpers.cli import main
from rlgpu_helpers.core.files import data_dir
from rlgpu_helpers.learn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rlgpu_helpers.gpu.precision import DeviceTraits
from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.learn.agents import load_agent
from rlgpu_helpers.learn.nets import ActorCritic, EgoCNN, init_layer, make_encoder
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.symmetry import mirror_actions, mirror_observation
from rlgpu_helpers.learn.training import ADDED_FIELDS, train
from rlgpu_helpers.learn import settings
from rlgpu_helpers.learn.settings import ppo_settings, preset_settings
from rlgpu_helpers.snake import rules

EGO = dict(obs_type="ego_grid", height=6, width=6)


# ---------------------------------------------------------------------------- networks

def test_the_lessons_network_is_built_as_before_weight_for_weight():
    """net="auto" draws its initial weights in the same order as before the shared trunks existed."""
    torch.manual_seed(3)
    new = ActorCritic((11,), hidden=16)
    torch.manual_seed(3)
    actor = nn.Sequential(make_encoder((11,), 16), init_layer(nn.Linear(16, 3), 0.01))
    critic = nn.Sequential(make_encoder((11,), 16), init_layer(nn.Linear(16, 1), 1.0))
    old = {**{f"actor.{k}": v for k, v in actor.state_dict().items()},
           **{f"critic.{k}": v for k, v in critic.state_dict().items()}}
    assert new.state_dict().keys() == old.keys()
    assert all(torch.equal(new.state_dict()[k], old[k]) for k in old)


@pytest.mark.parametrize("net", ["mlp", "ego_cnn"])
def test_a_shared_trunk_runs_once_in_forward_and_gives_what_the_heads_give_alone(net):
    model = ActorCritic((3, 11, 11), hidden=32, net=net)
    calls = []
    model.trunk.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    obs = torch.rand(5, 3, 11, 11)
    logits, value = model(obs)
    assert calls == [(5, 32)] and logits.shape == (5, 3) and value.shape == (5,)
    torch.testing.assert_close(logits, model.logits(obs))
    torch.testing.assert_close(value, model.value(obs))


def test_the_ego_cnn_reads_the_cells_around_the_head_as_they_are():
    """Its 5x5 crop is centred on the head: a change there reaches the features even with the convolutions off."""
    cnn = EgoCNN((3, 11, 11), hidden=8)
    for p in cnn.convs.parameters():
        nn.init.zeros_(p)
    near, far = torch.zeros(1, 3, 11, 11), torch.zeros(1, 3, 11, 11)
    near[0, 1, 5 + 2, 5 - 2] = 1.0  # food two rows below, two columns left of the head: in the crop
    far[0, 1, 5 + 3, 5] = 1.0  # three rows below: outside it
    assert not torch.equal(cnn(near), cnn(torch.zeros(1, 3, 11, 11)))
    assert torch.equal(cnn(far), cnn(torch.zeros(1, 3, 11, 11)))


@pytest.mark.parametrize("shape", [(3, 10, 10), (3, 9, 11), (3, 3, 3), (11,)])
def test_the_ego_cnn_refuses_a_window_not_centred_on_a_cell(shape):
    with pytest.raises(ValueError, match=r"obs_shape=.*(EgoCNN needs a square window|must be \(features,\))"):
        EgoCNN(shape)


# ---------------------------------------------------------------------------- settings

@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(net="resnet"), ValueError, "net='resnet' must be one of"),
        (dict(net="ego_cnn"), ValueError, "net='ego_cnn' reads the board seen from the head: it needs "
                                          "obs_type='ego_grid', not 'features'"),
        (dict(reward_scale=0.0), ValueError, "reward_scale=0.0 must be a finite number > 0"),
        (dict(ent_coef_final=-1.0), ValueError, "ent_coef_final=-1.0 must be a finite number >= 0"),
        (dict(max_steps_without_food=0), ValueError, "max_steps_without_food=0"),
        (dict(mirror="yes"), TypeError, "mirror='yes' must be True or False"),
        (dict(bootstrap_truncated=1), TypeError, "bootstrap_truncated=1 must be True or False"),
    ],
)
def test_bad_new_settings_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        PPOConfig(**kwargs)


def spy_on_env(ppo):
    """Record what ``ppo.env.step`` was given and gave back, with the mirror flags before and after."""
    calls, step = [], ppo.env.step

    def spy(action):
        before = ppo.flipped.clone()
        out = step(action)
        calls.append({"action": action.clone(), "flipped": before, "out": out})
        return out

    ppo.env.step = spy
    return calls


def test_mirrored_games_show_the_policy_the_mirror_image_and_play_its_action_mirrored():
    ppo = PPO(PPOConfig(**EGO, num_envs=64, num_steps=24, hidden=16, mirror=True, max_steps_without_food=8))
    calls = spy_on_env(ppo)
    first_obs = ppo.next_obs.clone()
    ppo.collect()
    assert 0 < int(calls[0]["flipped"].sum()) < 64
    for t, call in enumerate(calls):
        flipped, (obs, _, terminated, truncated, _) = call["flipped"], call["out"]
        # the env got the policy's action, mirrored in the mirrored games
        assert torch.equal(call["action"], torch.where(flipped, mirror_actions(ppo.actions[t]), ppo.actions[t]))
        # the flags changed only where a game ended
        after = calls[t + 1]["flipped"] if t + 1 < len(calls) else ppo.flipped
        assert not (after != flipped)[~(terminated | truncated)].any()
        # what the policy saw next: the env's observation, mirrored where the (new) flag says so
        want = torch.where(after[:, None, None, None], mirror_observation(obs, "ego_grid"), obs)
        assert torch.equal(ppo.obs[t + 1] if t + 1 < len(calls) else ppo.next_obs, want)
    assert torch.equal(ppo.obs[0], first_obs)
    ended = sum(int((c["out"][2] | c["out"][3]).sum()) for c in calls)
    assert ended > 20, "the test needs games that end"


def test_a_new_game_is_mirrored_with_probability_one_half():
    """Every game that ends draws its flag again: a binomial test over the draws at many game ends."""
    ppo = PPO(PPOConfig(**EGO, num_envs=256, num_steps=64, hidden=8, mirror=True, max_steps_without_food=4))
    calls = spy_on_env(ppo)
    ppo.collect()
    draws = flipped = 0
    for t, call in enumerate(calls):
        ended = call["out"][2] | call["out"][3]
        after = calls[t + 1]["flipped"] if t + 1 < len(calls) else ppo.flipped
        draws += int(ended.sum())
        flipped += int(after[ended].sum())
    assert draws > 2000
    z = (flipped - draws / 2) / math.sqrt(draws / 4)
    assert abs(z) < 3.9, (flipped, draws)  # two-sided p = 1e-4


@pytest.mark.parametrize("obs_type", ["features", "features_reach", "grid"])
def test_every_observation_type_can_be_mirrored_in_training_without_a_sync(obs_type):
    ppo = PPO(PPOConfig(obs_type=obs_type, height=6, width=6, num_envs=32, num_steps=4, hidden=8, mirror=True))
    calls = spy_on_env(ppo)
    report = audit_syncs(lambda: ppo.rollout_step(0), "cpu")
    assert report.total == 0, report
    obs = calls[-1]["out"][0]  # the audit runs the step more than once
    want = torch.where(ppo.flipped.view(-1, *[1] * (obs.ndim - 1)), mirror_observation(obs, obs_type), obs)
    assert torch.equal(ppo.next_obs, want)


def test_a_truncation_can_end_the_game_as_a_death_does_and_rewards_are_scaled():
    config = dict(**EGO, num_envs=64, num_steps=16, hidden=8, max_steps_without_food=3, gamma=0.9)
    for bootstrap in (True, False):
        ppo = PPO(PPOConfig(**config, bootstrap_truncated=bootstrap, reward_scale=0.25))
        calls = spy_on_env(ppo)
        ppo.collect()
        rewards = torch.stack([c["out"][1] for c in calls])
        truncated = torch.stack([c["out"][3] for c in calls])
        assert truncated.any()
        if bootstrap:  # topped up with gamma * V(last observation) where truncated, and only there
            assert not torch.equal(ppo.rewards[truncated], 0.25 * rewards[truncated])
            assert torch.equal(ppo.rewards[~truncated], 0.25 * rewards[~truncated])
        else:
            assert torch.equal(ppo.rewards, 0.25 * rewards)


def test_the_shared_trunk_runs_once_per_rollout_step_when_truncations_are_not_bootstrapped():
    ppo = PPO(PPOConfig(**EGO, num_envs=32, num_steps=4, hidden=8, net="mlp", bootstrap_truncated=False))
    rows = []
    ppo.model.trunk.register_forward_hook(lambda module, args, out: rows.append(("trunk", args[0].shape[0])))
    ppo.model.critic.register_forward_hook(lambda module, args, out: rows.append(("critic", args[0].shape[0])))
    ppo.collect()
    # one pass per step for the action and the value, then one for the value after the last step
    assert rows == [("trunk", 32), ("critic", 32)] * 5


def test_the_entropy_weight_follows_its_schedule_and_the_loss_reads_it():
    ppo = PPO(PPOConfig(**EGO, num_envs=16, num_steps=8, num_minibatches=1, hidden=8, ent_coef=0.02,
                        ent_coef_final=0.0, anneal_lr=False))
    ppo.collect()
    idx = torch.arange(128)
    losses = {}
    for used in (0.0, 0.5, 1.0, 2.0):
        ppo._ent_coef.fill_(0.02 + (0.0 - 0.02) * min(used, 1.0))
        losses[used] = ppo._minibatch_loss(idx)(idx).item()
    fixed = PPO(PPOConfig(**EGO, num_envs=16, num_steps=8, num_minibatches=1, hidden=8, ent_coef=0.01,
                          anneal_lr=False))
    fixed.model.load_state_dict(ppo.model.state_dict())
    for name in ("obs", "actions", "logprobs", "advantages", "returns"):
        setattr(fixed, name, getattr(ppo, name))
    assert losses[0.5] == pytest.approx(fixed._minibatch_loss(idx)(idx).item(), rel=1e-6)
    assert losses[1.0] == losses[2.0] and losses[0.0] < losses[0.5] < losses[1.0]  # less bonus, larger loss
    ppo.iterate(0.25)
    assert float(ppo._ent_coef) == pytest.approx(0.015)


def test_a_mirrored_run_saves_its_flags_and_resumes_them(tmp_path):
    config = PPOConfig(**EGO, num_envs=16, num_steps=8, hidden=8, net="mlp", mirror=True)
    first = PPO(config)
    first.iterate()
    state = first.state_dict()
    second = PPO(dataclasses.replace(config, seed=1))
    second.load_state_dict(state)
    assert torch.equal(second.flipped, first.flipped) and second.flipped.data_ptr() != first.flipped.data_ptr()
    with pytest.raises(ValueError, match=r"state is missing \['flipped'\]"):
        second.load_state_dict({k: v for k, v in state.items() if k != "flipped"})
    with pytest.raises(TypeError, match="state\\['flipped'\\] must be a bool tensor"):
        second.load_state_dict({**state, "flipped": state["flipped"].float()})


# ---------------------------------------------------------------------------- old runs, the preset

def test_a_run_saved_before_the_new_settings_resumes_and_its_agent_plays(tmp_path):
    out = tmp_path / "run"
    train(PPO(PPOConfig(height=5, width=5, num_envs=16, num_steps=4, hidden=8)), steps=128, out_dir=out)
    path = out / "checkpoint.pt"
    state = load_checkpoint(path)
    old = {k: v for k, v in state["config"].items() if k not in ADDED_FIELDS}
    save_checkpoint(path, {**state, "config": old})
    resumed = train(None, steps=256, out_dir=out, resume=True)
    assert resumed.env_steps == 256 and resumed.config["net"] == "auto" and resumed.config["mirror"] is False
    agent = load_agent(path)
    assert agent.config["hidden"] == 8
    save_checkpoint(path, {**state, "config": {k: v for k, v in old.items() if k != "hidden"}})
    with pytest.raises(CheckpointError, match=r"config lacks \['hidden'\]"):
        train(None, steps=512, out_dir=out, resume=True)


def test_the_win_preset_learns_alike_on_every_device_and_runs_as_each_device_runs_fastest():
    cpu, gpu = preset_settings("win", "cpu"), preset_settings("win", "cuda")
    for values in (cpu, gpu):
        assert values["obs_type"] == "ego_grid" and values["mirror"] and not values["bootstrap_truncated"]
        assert values["num_envs"] * values["num_steps"] // values["num_minibatches"] == 1024
    assert dataclasses.asdict(ppo_settings("cpu", "win")).items() >= cpu.items()  # a valid config (not on a GPU here)
    how_it_runs = {"num_envs", "num_minibatches", "precision", "compile", "cuda_graphs"}
    assert {name for name in cpu if cpu[name] != gpu[name]} <= how_it_runs
    assert cpu["compile"] and gpu["compile"] and gpu["cuda_graphs"] and not cpu["cuda_graphs"]
    assert gpu["num_envs"] == 16 * cpu["num_envs"]


def test_the_agents_on_file_were_trained_by_the_preset_as_it_is_now():
    """The records' ``changes`` are relative to the preset, so the preset may only change with the records
    and agents on file: each stored agent's settings are its device's preset (precision aside, which
    follows the machine's bf16 instructions). A GPU's agent (no ``-cpu``) is there once a GPU has trained
    the preset as it is now."""
    paths = sorted((data_dir() / "agents").glob("ppo-ego_grid-win-10x10*.pt"))
    assert "ppo-ego_grid-win-10x10-cpu.pt" in [path.name for path in paths]
    for path in paths:
        config = load_agent(path).config
        preset = preset_settings("win", "cpu" if path.stem.endswith("-cpu") else "cuda")
        differ = {k: (config[k], v) for k, v in preset.items() if k != "precision" and config[k] != v}
        assert not differ, (path.name, differ)


@pytest.mark.parametrize("bf16_native", [True, False])
def test_the_win_preset_takes_bf16_on_a_cpu_only_where_it_multiplies_bf16_natively(monkeypatch, bf16_native):
    traits = settings.device_traits("cpu")
    monkeypatch.setattr(settings, "device_traits", lambda device: dataclasses.replace(traits, bf16_native=bf16_native))
    assert preset_settings("win", torch.device("cpu"))["precision"] == ("bf16" if bf16_native else "fp32")


@pytest.mark.parametrize(("capability", "precision"), [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp16")])
def test_the_win_preset_takes_notebook_08s_precision_on_each_gpu(monkeypatch, capability, precision):
    """bf16 where the GPU multiplies it natively, fp16 with a GradScaler on a T4 (where compiled bf16 fails)."""
    traits = DeviceTraits("cuda", "a GPU", capability, capability >= (8, 0), capability >= (7, 0))
    monkeypatch.setattr(settings.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(settings, "device_traits", lambda device: traits)
    assert preset_settings("win", torch.device("cuda"))["precision"] == precision


def test_train_preset_win_then_play(tmp_path, capsys):
    out, agent = tmp_path / "run", tmp_path / "agent.pt"
    assert main(["train", "--preset", "win", "--size", "6", "--envs", "16", "--steps", "1024", "--set",
                 "num_steps=16", "--set", "hidden=8", "--set", "mirror=false", "--device", "cpu", "--out", str(out),
                 "--agent", str(agent)]) == 0
    config = load_agent(agent).config
    assert (config["obs_type"], config["net"], config["gamma"], config["num_envs"], config["hidden"],
            config["mirror"]) == ("ego_grid", "mlp", 0.999, 16, 8, False)
    assert rules.observation_shape("ego_grid", 6, 6) == (3, 11, 11)
    assert main(["play", str(agent), "--games", "1"]) == 0
    assert "game 1: score" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--preset", "lose"], "invalid choice: 'lose'"),
        (["train", "--preset", "win", "--algo", "dqn"], "--preset win is a set of PPO settings: leave out --algo dqn"),
        (["train", "--preset", "win", "--resume", "--out", "runs/x"], "leave out --preset"),
    ],
)
def test_bad_preset_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
