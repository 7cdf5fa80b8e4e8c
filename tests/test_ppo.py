"""PPO: advantages by hand, config checks, truncation bootstrapping, and real learning."""

import pytest
import torch

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.learn.ppo import PPO, PPOConfig, compute_gae, sample_actions
from rlgpu_helpers.learn.training import make_learner, train


def test_gae_matches_a_hand_computed_rollout():
    # One env, 4 steps. Step 1 ends the episode (terminated): no bootstrap across it.
    # Step 3 is truncated: its reward already carries gamma * V(final obs) = 0.9 * 2.0,
    # and the boundary is treated as an end as well.
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0], [-1.0], [0.0], [1.0 + 0.9 * 2.0]])
    values = torch.tensor([[0.5], [0.2], [0.4], [0.3]])
    dones = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    next_value = torch.tensor([7.0])  # ignored: the last step ended an episode
    adv, ret = compute_gae(rewards, values, dones, next_value, gamma, lam)
    d3 = 2.8 - 0.3  # reward + 0 - V
    d2 = 0.0 + 0.9 * 0.3 - 0.4
    d1 = -1.0 - 0.2
    d0 = 1.0 + 0.9 * 0.2 - 0.5
    a3 = d3
    a2 = d2 + 0.9 * 0.5 * a3
    a1 = d1
    a0 = d0 + 0.9 * 0.5 * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_gae_bootstraps_from_next_value_when_the_rollout_ends_mid_episode():
    rewards, values = torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [1.0]])
    adv, _ = compute_gae(rewards, values, torch.zeros(2, 1), torch.tensor([2.0]), 0.5, 1.0)
    # delta1 = 0 + 0.5 * 2 - 1 = 0; delta0 = 0 + 0.5 * 1 - 1 = -0.5; a0 = -0.5 + 0.5 * a1
    torch.testing.assert_close(adv, torch.tensor([[-0.5], [0.0]]))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_envs=0), ValueError, "num_envs=0 must be an int >= 1"),
        (dict(num_envs=10, num_steps=3, num_minibatches=4), ValueError, "must be divisible by num_minibatches"),
        (dict(gamma=1.5), ValueError, r"gamma=1.5 must be a finite number >= 0 and <= 1"),
        (dict(learning_rate=0.0), ValueError, "learning_rate=0.0 must be a finite number > 0"),
        (dict(ent_coef=-0.1), ValueError, "ent_coef=-0.1 must be a finite number >= 0"),
        (dict(anneal_lr="no"), TypeError, "anneal_lr='no' must be True or False"),
        (dict(obs_type="pixels"), ValueError, "obs_type='pixels' must be one of"),
        (dict(height=100), ValueError, r"height=100 must be an int in \[4, 64\]"),
        (dict(seed=2**64), ValueError, "seed=18446744073709551616 must be a seed"),
        (dict(device="tpu"), ValueError, "device='tpu' is not a device"),
        (dict(accumulation_steps=0), ValueError, "accumulation_steps=0 must be an int >= 1"),
        (dict(num_envs=8, num_steps=4, num_minibatches=2, accumulation_steps=17), ValueError,
         r"accumulation_steps=17 is larger than the minibatch \(16 = num_envs \* num_steps / num_minibatches"),
        (dict(precision="fp8"), ValueError, "precision='fp8' must be one of"),
        (dict(target_kl=0.0), ValueError, "target_kl=0.0 must be a finite number > 0"),
        (dict(precision="tf32"), ValueError, "precision='tf32' needs a CUDA GPU"),
    ],
)
def test_bad_config_raises(kwargs, error, message):
    with pytest.raises(error, match=message):
        PPOConfig(**kwargs)


def test_sampled_actions_follow_the_softmax_distribution():
    """Gumbel-max draws, counted over many rows, against softmax(logits): a chi-square test."""
    torch.manual_seed(0)
    logits = torch.tensor([1.5, -0.5, 0.3])
    draws = 200_000
    actions = sample_actions(logits.expand(draws, 3))
    counts = torch.bincount(actions, minlength=3).double()
    expected = torch.softmax(logits.double(), 0) * draws
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 13.8, (counts, expected)  # 2 degrees of freedom: p = 0.001
    # Rows are independent: each row's own logits decide its draw.
    certain = torch.tensor([[0.0, -1e9, -1e9], [-1e9, -1e9, 0.0]]).repeat(500, 1)
    assert torch.equal(sample_actions(certain), torch.tensor([0, 2]).repeat(500))


def test_a_rollout_step_makes_no_host_sync():
    ppo = PPO(PPOConfig(height=6, width=6, num_envs=64, num_steps=4, hidden=16))
    report = audit_syncs(lambda: ppo.rollout_step(0), "cpu")
    assert report.total == 0, report

    def step_then_read():
        ppo.rollout_step(1)
        return ppo.actions.sum().item()

    assert audit_syncs(step_then_read, "cpu").total == 1, "the audit should catch a read planted after the step"


def test_the_critic_rates_each_step_with_the_policy_and_its_values_are_right():
    ppo = PPO(PPOConfig(height=5, width=5, num_envs=32, num_steps=8, hidden=16, seed=2))
    calls = []
    ppo.model.critic.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    ppo.model.actor.register_forward_hook(lambda module, args, out: calls.append("actor"))
    ppo.collect()
    # per step: the policy and the critic on the observations, then the critic on the games' last
    # observations (bootstrap_truncated); after the last step, the critic on the next observations
    assert calls == ["actor", 32, 32] * 8 + [32]
    with torch.inference_mode():
        torch.testing.assert_close(ppo.values, ppo.model.value(ppo.obs.flatten(0, 1)).view(8, 32))
        torch.testing.assert_close(ppo.next_value, ppo.model.value(ppo.next_obs))


def test_bf16_autocasts_each_forward_pass_and_keeps_the_rest_in_float32():
    """Every forward pass sees the weights as they are now: no autocast region outlives an optimizer step."""
    fp32 = PPO(PPOConfig(height=6, width=6, num_envs=32, num_steps=8, hidden=16, seed=4))
    bf16 = PPO(PPOConfig(height=6, width=6, num_envs=32, num_steps=8, hidden=16, seed=4, precision="bf16"))
    matmuls = []
    bf16.model.actor[-1].register_forward_hook(lambda module, args, out: matmuls.append(out.dtype))
    bf16.collect()
    assert matmuls and set(matmuls) == {torch.bfloat16}
    for name in ("logprobs", "values", "advantages", "returns"):
        assert getattr(bf16, name).dtype == torch.float32
    with torch.inference_mode():  # the same weights in float32 rate bf16's rollout alike, to bf16's rounding
        logits, values = fp32.model(bf16.obs.flatten(0, 1))
        logprobs = torch.log_softmax(logits, -1).gather(1, bf16.actions.flatten()[:, None]).squeeze(1)
    torch.testing.assert_close(bf16.logprobs.flatten(), logprobs, atol=0.02, rtol=0.02)
    torch.testing.assert_close(bf16.values.flatten(), values, atol=0.02, rtol=0.02)
    obs = bf16.obs[0]
    with torch.inference_mode(), bf16._forward():
        before = bf16.model.logits(obs).float()
    bf16.update()
    assert not torch.is_autocast_enabled("cpu")
    with torch.inference_mode():
        exact = bf16.model.logits(obs)
        with bf16._forward():
            after = bf16.model.logits(obs).float()
    assert (after - before).abs().max() > 0.01  # the update moved the policy ...
    torch.testing.assert_close(after, exact, atol=0.02, rtol=0.02)  # ... and the bf16 forward sees it


def test_fp16_scales_its_loss_skips_a_poisoned_update_and_reads_nothing_on_the_host():
    """fp16's forward passes, a GradScaler in the update (notebook 08): what a T4 trains in."""
    fp16 = PPO(PPOConfig(height=6, width=6, num_envs=32, num_steps=8, hidden=16, seed=4, precision="fp16"))
    matmuls = []
    fp16.model.actor[-1].register_forward_hook(lambda module, args, out: matmuls.append(out.dtype))
    fp16.collect()
    assert set(matmuls) == {torch.float16} and fp16.logprobs.dtype == torch.float32
    assert fp16.optimizer.defaults["fused"] and fp16.scaler.get_scale() == 2.0**16
    before = [p.detach().clone() for p in fp16.model.parameters()]
    report = audit_syncs(fp16.update, "cpu")
    assert report.total == 0, report
    assert not torch.equal(before[0], next(fp16.model.parameters()))  # it learns
    fp16.advantages[0, 0] = float("nan")  # a poisoned rollout: every minibatch that holds it is skipped
    moved = [p.detach().clone() for p in fp16.model.parameters()]
    fp16._update_fn(torch.tensor([0, 1, 2]))
    assert all(torch.equal(a, b) for a, b in zip(moved, fp16.model.parameters()))
    assert fp16.scaler.get_scale() == 2.0**15
    resumed = PPO(PPOConfig(height=6, width=6, num_envs=32, num_steps=8, hidden=16, seed=4, precision="fp16"))
    resumed.load_state_dict(fp16.state_dict())
    assert resumed.scaler.get_scale() == 2.0**15


def test_target_kl_stops_the_update_after_the_epoch_that_moved_the_policy_too_far():
    settings = dict(height=6, width=6, num_envs=32, num_steps=8, hidden=16, seed=5, update_epochs=6,
                    learning_rate=3e-2, anneal_lr=False)
    epochs = {}
    for target_kl in (None, 1e-9):
        ppo = PPO(PPOConfig(**settings, target_kl=target_kl))
        calls = []
        ppo.optimizer.register_step_post_hook(lambda optimizer, args, kwargs: calls.append(1))
        ppo.collect()
        idx = torch.arange(64)
        assert ppo._approx_kl(idx).item() == pytest.approx(0.0, abs=1e-6)  # no step yet: the same policy
        ppo.update()
        assert ppo._approx_kl(idx).item() > 1e-9
        epochs[target_kl] = len(calls) // ppo.config.num_minibatches
    assert epochs == {None: 6, 1e-9: 1}


def test_truncated_games_bootstrap_and_terminated_games_do_not():
    # A tiny step limit forces truncations; a 4x4 grid forces deaths.
    ppo = PPO(PPOConfig(height=4, width=4, num_envs=64, num_steps=16, hidden=16))
    ppo.env = type(ppo.env)(64, 4, 4, max_steps_without_food=3, seed=1, check_action_values=False)
    ppo.next_obs, _ = ppo.env.reset()
    seen = {"truncated": 0, "terminated": 0}
    original_step = ppo.env.step

    def spy(action):
        out = original_step(action)
        seen["truncated"] += int(out[3].sum())
        seen["terminated"] += int(out[2].sum())
        spy.last = out
        return out

    ppo.env.step = spy
    ppo.collect()
    assert seen["truncated"] > 0 and seen["terminated"] > 0
    # The last step's stored reward equals env reward + gamma * V(final_obs) * truncated.
    obs, reward, terminated, truncated, info = spy.last
    with torch.inference_mode():
        expected = reward + ppo.config.gamma * ppo.model.value(info["final_obs"]) * truncated
    torch.testing.assert_close(ppo.rewards[-1], expected)
    torch.testing.assert_close(ppo.dones[-1], (terminated | truncated).float())


def random_policy_mean_score(height, width, games=2000, seed=0):
    from rlgpu_helpers.snake.vec import VecSnake

    env = VecSnake(games, height, width, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    env.reset()
    done_scores = []
    finished = torch.zeros(games, dtype=torch.bool)
    while not finished.all():
        _, _, terminated, truncated, info = env.step(torch.randint(0, 3, (games,), generator=generator))
        new = info["_episode"] & ~finished
        done_scores += info["episode"]["score"][new].tolist()
        finished |= info["_episode"]
    return sum(done_scores) / len(done_scores)


@pytest.mark.learning
def test_ppo_learns_to_beat_a_random_policy_on_a_small_grid():
    random_score = random_policy_mean_score(6, 6)
    learner = make_learner("ppo", height=6, width=6, num_envs=128, num_steps=32, seed=3)
    result = train(learner, steps=400_000, progress=False)
    assert result.mean_score is not None
    assert result.mean_score > random_score + 2.0, (result.mean_score, random_score)


def test_compiled_learners_in_one_process_each_use_their_own_settings():
    """The compiled rollout and GAE of a second learner with another reward scale and gamma compile again with
    its values, not the first learner's (on torch 2.6, a symbolic float made them fail to trace)."""
    small = dict(num_envs=8, num_steps=8, hidden=8, height=6, width=6, seed=0, compile=True, bootstrap_truncated=False)
    plain = PPO(PPOConfig(**small))
    plain.collect()  # the same seed, then the same draws: the same games, one scaled
    scaled = PPO(PPOConfig(**small, reward_scale=0.1, gamma=0.9))
    scaled.collect()
    assert plain.rewards.abs().sum() > 0  # some food eaten or some game lost: the scale has something to show
    torch.testing.assert_close(scaled.rewards, 0.1 * plain.rewards)
    want = compute_gae(scaled.rewards, scaled.values, scaled.dones, scaled.next_value, 0.9, scaled.config.gae_lambda)
    torch.testing.assert_close(scaled.advantages, want[0])
