"""Gradient accumulation (gpu.accumulate) and PPO's accumulation setting: the accumulated update
equals the full-batch one, in float64 to rounding, for any split; bad input is refused by name."""

import contextlib
import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgpu_helpers.gpu.accumulate import (
    accumulate_gradients,
    accumulated_step,
    cast_batch,
    describe_sizes,
    flat_gradient,
    gradient_difference,
    micro_batch_sizes,
    micro_batches,
    parameter_change,
    relative_difference,
    sync_last_micro_batch_only,
)
from rlgpu_helpers.gpu.graphs import graph_breaks
from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.learn.nets import QNetwork
from rlgpu_helpers.learn.ppo import PPO, PPOConfig

FLOAT64_TOLERANCE = 1e-12  # of the gradient's largest element: rounding is ~1e-16, a wrong scale is ~1
FLOAT32_TOLERANCE = 1e-5  # float32's epsilon is 1.2e-7


def q_loss(model, batch):
    obs, actions, targets = batch
    return torch.nn.functional.smooth_l1_loss(model(obs).gather(1, actions[:, None]).squeeze(1), targets)


def make_case(obs_shape, rows, seed=0, hidden=16):
    torch.manual_seed(seed)
    model = QNetwork(obs_shape, hidden=hidden)
    generator = torch.Generator().manual_seed(seed)
    batch = (torch.rand(rows, *obs_shape, generator=generator), torch.randint(0, 3, (rows,), generator=generator),
             torch.randn(rows, generator=generator))
    return model, batch


MLP, CNN = (11,), (3, 5, 6)


# ---------------------------------------------------------------------------- splitting

@pytest.mark.parametrize("rows, kwargs, sizes", [
    (10, {"accumulation_steps": 1}, (10,)),
    (10, {"accumulation_steps": 3}, (4, 3, 3)),
    (10, {"accumulation_steps": 4}, (3, 3, 2, 2)),
    (10, {"accumulation_steps": 10}, (1,) * 10),
    (10, {"micro_batch_size": 4}, (4, 4, 2)),
    (10, {"micro_batch_size": 5}, (5, 5)),
    (10, {"micro_batch_size": 64}, (10,)),
])
def test_micro_batch_sizes(rows, kwargs, sizes):
    assert micro_batch_sizes(rows, **kwargs) == sizes


@given(rows=st.integers(1, 500), data=st.data())
def test_k_micro_batches_cover_the_batch_in_near_equal_sizes_the_last_no_larger(rows, data):
    steps = data.draw(st.integers(1, rows))
    sizes = micro_batch_sizes(rows, accumulation_steps=steps)
    assert len(sizes) == steps and sum(sizes) == rows and min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1 and list(sizes) == sorted(sizes, reverse=True)
    size = data.draw(st.integers(1, rows + 3))
    pieces = micro_batch_sizes(rows, micro_batch_size=size)
    assert sum(pieces) == rows and all(p == min(size, rows) for p in pieces[:-1]) and 1 <= pieces[-1] <= size


def test_micro_batches_are_views_of_every_part_of_the_batch():
    obs, actions = torch.arange(20.0).view(10, 2), torch.arange(10)
    for batch in ((obs, actions), [obs, actions], {"obs": obs, "actions": actions}):
        pieces = micro_batches(batch, accumulation_steps=3)
        assert [type(piece) for piece in pieces] == [type(batch)] * 3
        parts = [list(piece.values()) if isinstance(piece, dict) else list(piece) for piece in pieces]
        assert [p[1].tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
        assert parts[1][0].data_ptr() == obs[4].data_ptr()  # a view: nothing copied
    assert [p.shape[0] for p in micro_batches(obs, micro_batch_size=4)] == [4, 4, 2]


def test_describe_sizes():
    assert describe_sizes((4, 3, 3)) == "4 + 2 x 3"
    assert describe_sizes((100,) * 3 + (1,)) == "3 x 100 + 1"
    assert describe_sizes((7,)) == "7"


# ---------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("rows, kwargs, error, message", [
    (10, {"accumulation_steps": 0}, ValueError, r"^accumulation_steps=0 must be an int >= 1"),
    (10, {"accumulation_steps": -2}, ValueError, r"^accumulation_steps=-2 must be an int >= 1"),
    (10, {"accumulation_steps": 11}, ValueError,
     r"^accumulation_steps=11 is larger than the batch \(10 rows\): every micro-batch needs at least one row"),
    (10, {"accumulation_steps": 2.0}, TypeError, r"^accumulation_steps=2.0 must be an int, not float"),
    (10, {"accumulation_steps": True}, TypeError, r"^accumulation_steps=True must be an int"),
    (10, {"micro_batch_size": 0}, ValueError, r"^micro_batch_size=0 must be an int >= 1"),
    (10, {}, ValueError, r"^give exactly one of accumulation_steps=None and micro_batch_size=None"),
    (10, {"accumulation_steps": 2, "micro_batch_size": 5}, ValueError,
     r"^give exactly one of accumulation_steps=2 and micro_batch_size=5"),
    (0, {"accumulation_steps": 1}, ValueError, r"^batch_size=0 must be an int >= 1"),
])
def test_bad_splits_raise_naming_the_value(rows, kwargs, error, message):
    with pytest.raises(error, match=message):
        micro_batch_sizes(rows, **kwargs)


@pytest.mark.parametrize("batch, error, message", [
    ((torch.zeros(4, 2), torch.zeros(5)), ValueError, r"batch\[1\] has 5 rows but batch\[0\] has 4"),
    ({"obs": torch.zeros(4, 2), "a": torch.zeros(3)}, ValueError, r"batch\['a'\] has 3 rows but batch\['obs'\] has 4"),
    (torch.zeros(0, 3), ValueError, "batch has 0 rows"),
    (torch.tensor(1.0), ValueError, r"batch is a 0-d tensor"),
    ((torch.zeros(4), [1, 2, 3, 4]), TypeError, r"batch\[1\] must be a tensor, not list"),
    ((), ValueError, "holds no tensors"),
    ("rows", TypeError, "must be a tensor, or a tuple, list or dict of tensors"),
])
def test_bad_batches_raise_naming_the_part(batch, error, message):
    with pytest.raises(error, match=message):
        micro_batches(batch, accumulation_steps=1)


def test_bad_arguments_of_the_step_raise_naming_the_value():
    model, batch = make_case(MLP, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss(rows):
        return q_loss(model, rows)

    with pytest.raises(ValueError, match=r"^scaling='mean' must be one of \('share', '1/K', 'none'\)"):
        accumulate_gradients(loss, batch, accumulation_steps=2, scaling="mean")
    with pytest.raises(ValueError, match=r"loss_fn returned \(4,\) for micro-batch 0: it must return a scalar"):
        accumulate_gradients(lambda rows: model(rows[0]).sum(1), batch, accumulation_steps=2)
    with pytest.raises(TypeError, match="^loss_fn=3 must be callable"):
        accumulate_gradients(3, batch, accumulation_steps=2)
    with pytest.raises(ValueError, match="^max_grad_norm=0 must be a finite number > 0"):
        accumulated_step(optimizer, loss, batch, accumulation_steps=2, max_grad_norm=0)
    with pytest.raises(TypeError, match="^optimizer must be a torch.optim.Optimizer, not QNetwork"):
        accumulated_step(model, loss, batch, accumulation_steps=2)
    with pytest.raises(ValueError, match=r"^accumulation_steps=9 is larger than the batch \(8 rows\)"):
        accumulated_step(optimizer, loss, batch, accumulation_steps=9)
    with pytest.raises(TypeError, match="^dtype=torch.int64 must be a floating-point torch.dtype"):
        gradient_difference(model, q_loss, batch, accumulation_steps=2, dtype=torch.int64)
    with pytest.raises(TypeError, match="^model must be a torch.nn.Module, not function"):
        gradient_difference(lambda x: x, q_loss, batch, accumulation_steps=2)
    with pytest.raises(ValueError, match="value has shape"):
        relative_difference(torch.zeros(3), torch.ones(2))


# ---------------------------------------------------------------------------- equal to the full batch

@settings(max_examples=40)
@given(rows=st.integers(1, 48), seed=st.integers(0, 2**16), data=st.data())
def test_accumulated_gradient_equals_the_full_batch_gradient_in_float64(rows, seed, data):
    model, batch = make_case(MLP, rows, seed)
    steps = data.draw(st.integers(1, rows), label="accumulation_steps")
    size = data.draw(st.integers(1, rows), label="micro_batch_size")
    for split in ({"accumulation_steps": steps}, {"micro_batch_size": size}):
        comparison = gradient_difference(model, q_loss, batch, dtype=torch.float64, **split)
        assert comparison.relative < FLOAT64_TOLERANCE, (split, comparison)


@pytest.mark.parametrize("split", [{"accumulation_steps": 2}, {"accumulation_steps": 3}, {"accumulation_steps": 7},
                                   {"micro_batch_size": 16}, {"micro_batch_size": 1}])
def test_the_cnn_accumulates_to_its_full_batch_gradient_in_float64_and_float32(split):
    model, batch = make_case(CNN, 45)  # 45 rows: 3 and 7 and micro-batches of 16 split unevenly
    assert gradient_difference(model, q_loss, batch, dtype=torch.float64, **split).relative < FLOAT64_TOLERANCE
    float32 = gradient_difference(model, q_loss, batch, dtype=torch.float32, **split)
    assert 0 < float32.relative < FLOAT32_TOLERANCE or float32.max_abs_difference == 0, float32


def test_a_batch_in_one_piece_is_the_plain_backward_bit_for_bit():
    model, batch = make_case(MLP, 20)
    comparison = gradient_difference(model, q_loss, batch, accumulation_steps=1, dtype=torch.float32)
    assert comparison.max_abs_difference == 0


def test_accumulate_returns_the_full_batch_mean_loss():
    model, batch = make_case(MLP, 30)
    model = model.double()
    batch = cast_batch(batch, torch.float64)
    full = q_loss(model, batch).detach()
    accumulated = accumulate_gradients(lambda rows: q_loss(model, rows), batch, micro_batch_size=7)
    torch.testing.assert_close(accumulated, full, rtol=1e-13, atol=0)


def test_the_two_wrong_scalings():
    """No scaling: K times the gradient (equal micro-batches). 1/K: right only for equal micro-batches."""
    model, batch = make_case(MLP, 24)
    assert gradient_difference(model, q_loss, batch, accumulation_steps=4, scaling="1/K").relative < FLOAT64_TOLERANCE
    uneven = gradient_difference(model, q_loss, batch, micro_batch_size=10, scaling="1/K")  # 10 + 10 + 4
    assert uneven.relative > 1e-3
    copied = copy.deepcopy(model).double()
    double_batch = cast_batch(batch, torch.float64)
    accumulate_gradients(lambda rows: q_loss(copied, rows), double_batch, accumulation_steps=4)
    right = flat_gradient(copied)
    copied.zero_grad()
    accumulate_gradients(lambda rows: q_loss(copied, rows), double_batch, accumulation_steps=4, scaling="none")
    assert relative_difference(flat_gradient(copied), 4 * right) < FLOAT64_TOLERANCE


def test_one_accumulated_step_with_k_1_is_the_ordinary_step_bit_for_bit():
    model, batch = make_case(CNN, 16)
    twin = copy.deepcopy(model)
    first = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-5)
    second = torch.optim.Adam(twin.parameters(), lr=1e-3, eps=1e-5)
    for _ in range(3):
        accumulated_step(first, lambda rows: q_loss(model, rows), batch, accumulation_steps=1, max_grad_norm=0.1)
        second.zero_grad(set_to_none=True)
        q_loss(twin, batch).backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.1)
        second.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_clipping_happens_once_on_the_summed_gradient():
    model, batch = make_case(MLP, 30)
    model.double()
    batch = cast_batch(batch, torch.float64)
    q_loss(model, batch).backward()
    full = flat_gradient(model)
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    max_norm = float(full.norm()) / 3  # the summed gradient is clipped; its micro-batches' need not be
    result = accumulated_step(torch.optim.SGD(model.parameters(), lr=1.0), lambda rows: q_loss(model, rows), batch,
                              accumulation_steps=4, max_grad_norm=max_norm)
    assert result.micro_batch_sizes == (8, 8, 7, 7)
    torch.testing.assert_close(result.grad_norm, full.norm(), rtol=1e-12, atol=0)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = before - full * max_norm / (float(full.norm()) + 1e-6)  # clip_grad_norm_'s own formula
    torch.testing.assert_close(after, expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("steps", [2, 4])
def test_forgetting_to_divide_by_k_is_adam_with_eps_divided_by_k(steps):
    """Adam's update is unchanged when every gradient is scaled by c, except that eps acts as eps / c."""
    model, batch = make_case(MLP, 32)
    wrong = parameter_change(model, q_loss, batch, lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-5),
                             accumulation_steps=steps, scaling="none", steps=5)
    right_smaller_eps = parameter_change(model, q_loss, batch, lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-5 / steps),
                                         accumulation_steps=steps, steps=5)
    assert relative_difference(wrong, right_smaller_eps) < 1e-10
    sgd_wrong = parameter_change(model, q_loss, batch, lambda p: torch.optim.SGD(p, lr=0.1),
                                 accumulation_steps=steps, scaling="none")
    sgd_right = parameter_change(model, q_loss, batch, lambda p: torch.optim.SGD(p, lr=0.1), accumulation_steps=steps)
    assert relative_difference(sgd_wrong, steps * sgd_right) < FLOAT64_TOLERANCE  # SGD: a step K times too long


def test_an_accumulated_step_makes_no_host_sync():
    model, batch = make_case(MLP, 20)
    optimizer = torch.optim.Adam(model.parameters())
    report = audit_syncs(lambda: accumulated_step(optimizer, lambda rows: q_loss(model, rows), batch,
                                                  accumulation_steps=3, max_grad_norm=0.5), "cpu")
    assert report.total == 0, report


def test_a_grad_scaler_changes_nothing_but_the_scale_of_what_backward_sees():
    """Scaling by a power of two and dividing it out again is exact in float32: with a scaler (and no fp16 in
    the forward pass) the accumulated, clipped update is the plain one bit for bit."""
    model, batch = make_case(MLP, 30)
    twin = copy.deepcopy(model)
    plain, scaled = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(twin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    for _ in range(3):
        want = accumulated_step(plain, lambda rows: q_loss(model, rows), batch, accumulation_steps=4, max_grad_norm=0.5)
        got = accumulated_step(scaled, lambda rows: q_loss(twin, rows), batch, accumulation_steps=4, max_grad_norm=0.5,
                               scaler=scaler)
        assert torch.equal(got.loss, want.loss) and torch.equal(got.grad_norm, want.grad_norm)  # unscaled both
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_a_scaled_step_with_an_inf_gradient_is_skipped_and_the_scale_halved():
    model, batch = make_case(MLP, 16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)  # decides the skip itself: no host read
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    poisoned = (batch[0].clone(), batch[1], batch[2])
    poisoned[0][3, 0] = float("inf")
    before = [p.detach().clone() for p in model.parameters()]

    def step(rows):
        return accumulated_step(optimizer, lambda part: q_loss(model, part), rows, accumulation_steps=2,
                                max_grad_norm=0.5, scaler=scaler)

    step(poisoned)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and scaler.get_scale() == 2.0**11
    step(batch)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and scaler.get_scale() == 2.0**11
    report = audit_syncs(lambda: step(poisoned), "cpu")
    assert report.total == 0, report


# ---------------------------------------------------------------------------- PPO

SMALL_PPO = {"height": 6, "width": 6, "num_envs": 32, "num_steps": 8, "num_minibatches": 2, "hidden": 16, "seed": 4}


def ppo_in_float64(**config):
    learner = PPO(PPOConfig(**{**SMALL_PPO, **config}))
    learner.collect()
    learner.model.double()
    for name in ("obs", "logprobs", "advantages", "returns"):
        setattr(learner, name, getattr(learner, name).double())
    return learner


@pytest.fixture(scope="module")
def ppo64():
    return ppo_in_float64()


@settings(max_examples=15)
@given(steps=st.integers(1, 128), seed=st.integers(0, 1000))
def test_ppo_minibatch_gradient_is_the_same_for_any_accumulation(ppo64, steps, seed):
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(seed))[:128]
    ppo64.minibatch_gradient(idx, accumulation_steps=1)
    reference = flat_gradient(ppo64.model)
    ppo64.minibatch_gradient(idx, accumulation_steps=steps)
    assert relative_difference(flat_gradient(ppo64.model), reference) < FLOAT64_TOLERANCE


def test_normalizing_advantages_per_micro_batch_changes_the_gradient(ppo64):
    idx = torch.arange(128)
    ppo64.minibatch_gradient(idx, accumulation_steps=1)
    reference = flat_gradient(ppo64.model)
    ppo64.minibatch_gradient(idx, accumulation_steps=4, normalize_advantages_over="micro-batch")
    assert relative_difference(flat_gradient(ppo64.model), reference) > 1e-4
    with pytest.raises(ValueError, match="^normalize_advantages_over='batch' must be one of"):
        ppo64.minibatch_gradient(idx, normalize_advantages_over="batch")


@pytest.mark.parametrize("steps", [2, 3, 128])
def test_a_whole_ppo_update_with_accumulation_equals_the_one_without(steps):
    changes = []
    for k in (1, steps):
        learner = ppo_in_float64(accumulation_steps=k)
        before = [p.detach().clone() for p in learner.model.parameters()]
        torch.manual_seed(0)  # the same minibatch shuffles
        learner.update()
        changes.append(torch.cat([(p.detach() - b).flatten() for p, b in zip(learner.model.parameters(), before)]))
    assert relative_difference(changes[1], changes[0]) < 1e-10  # 8 Adam steps in float64: still rounding


def _reference_update(ppo):
    """PPO's minibatch loop as it was before accumulation existed (the update notebook 11 ran)."""
    c = ppo.config
    obs = ppo.obs.flatten(0, 1)
    actions, logprobs = ppo.actions.flatten(), ppo.logprobs.flatten()
    advantages, returns = ppo.advantages.flatten(), ppo.returns.flatten()
    batch = obs.shape[0]
    minibatch = batch // c.num_minibatches
    for _ in range(c.update_epochs):
        order = torch.randperm(batch, device=ppo.device)
        for start in range(0, batch, minibatch):
            idx = order[start : start + minibatch]
            logits, value = ppo.model(obs[idx])
            log_all = torch.log_softmax(logits, -1)
            new_logprob = log_all.gather(1, actions[idx, None]).squeeze(1)
            ratio = (new_logprob - logprobs[idx]).exp()
            adv = advantages[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef)).mean()
            value_loss = 0.5 * (value - returns[idx]).pow(2).mean()
            entropy = -(log_all.exp() * log_all).sum(-1).mean()
            loss = policy_loss + c.vf_coef * value_loss - c.ent_coef * entropy
            ppo.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(ppo.model.parameters(), c.max_grad_norm)
            ppo.optimizer.step()


@pytest.mark.parametrize("obs_type", ["features", "grid"])
def test_the_default_accumulation_leaves_ppo_bit_identical(obs_type):
    learners = []
    for update in ("accumulation_steps=1", "reference"):
        learner = PPO(PPOConfig(**{**SMALL_PPO, "obs_type": obs_type}))
        assert learner.config.accumulation_steps == 1
        if update == "reference":
            learner.update = lambda learner=learner: _reference_update(learner)
        for _ in range(2):
            learner.iterate()
        learners.append(learner)
    first, second = (learner.state_dict() for learner in learners)
    assert all(torch.equal(a, b) for a, b in zip(first["model"].values(), second["model"].values()))
    for a, b in zip(first["optimizer"]["state"].values(), second["optimizer"]["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    assert torch.equal(first["next_obs"], second["next_obs"])


def test_an_accumulated_ppo_update_makes_no_host_sync():
    learner = PPO(PPOConfig(**{**SMALL_PPO, "accumulation_steps": 3}))
    learner.collect()
    report = audit_syncs(learner.update, "cpu")
    assert report.total == 0, report


@pytest.mark.parametrize("kwargs, error, message", [
    ({"accumulation_steps": 0}, ValueError, "^accumulation_steps=0 must be an int >= 1"),
    ({"accumulation_steps": 129}, ValueError,
     r"^accumulation_steps=129 is larger than the minibatch \(128 = num_envs \* num_steps / num_minibatches"),
    ({"accumulation_steps": "4"}, TypeError, "^accumulation_steps='4' must be an int, not str"),
])
def test_bad_ppo_accumulation_raises_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        PPOConfig(**{**SMALL_PPO, **kwargs})


# ---------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_on_cuda_an_accumulated_step_makes_no_sync_and_the_proof_holds():
    model, batch = make_case(CNN, 45)
    model = model.to("cuda")
    batch = tuple(part.to("cuda") for part in batch)
    optimizer = torch.optim.Adam(model.parameters(), eps=1e-5)
    report = audit_syncs(lambda: accumulated_step(optimizer, lambda rows: q_loss(model, rows), batch,
                                                  accumulation_steps=4, max_grad_norm=0.5), "cuda")
    assert report.total == 0, report
    assert gradient_difference(model, q_loss, batch, micro_batch_size=16).relative < FLOAT64_TOLERANCE
    learner = PPO(PPOConfig(**{**SMALL_PPO, "accumulation_steps": 3, "device": "cuda"}))
    learner.collect()
    assert audit_syncs(learner.update, "cuda").total == 0


@pytest.mark.gpu
def test_the_accumulation_suite_on_cuda(monkeypatch):
    from rlgpu_helpers.bench.accumulation import NAME, measure_accumulation

    monkeypatch.setenv("RLGPU_QUICK", "1")
    records = measure_accumulation("cuda", progress=False)
    memory = {(r.variant, r.params["accumulation_steps"]): r.value for r in records
              if r.name == NAME and r.metric == "peak memory"}
    assert {r.params["device"] for r in records} == {"cuda"}
    assert memory[("CNN", 16)] < memory[("CNN", 1)] / 2


def test_reading_the_no_sync_setting_breaks_no_compiled_graph():
    """``sync_last_micro_batch_only`` used to hand DDP's ``no_sync`` over in a ``ContextVar``, whose ``get``
    dynamo cannot trace: a graph break in every compiled update. Now the only breaks are the backward passes."""
    model, batch = torch.nn.Linear(3, 1), torch.randn(10, 3, generator=torch.Generator().manual_seed(0))

    def update(rows):
        return accumulate_gradients(lambda part: model(part).pow(2).mean(), rows, accumulation_steps=4)

    found = graph_breaks(update, batch)
    assert found.breaks >= 1 and {where.rsplit(" in ", 1)[1] for _, where in found.reasons} == {"_micro_batch_backward"}
    learner = PPO(PPOConfig(num_envs=8, num_steps=4, num_minibatches=1, hidden=8))
    learner.collect()
    update_breaks = graph_breaks(learner.minibatch_update, torch.randperm(32))
    assert not any("accumulate_gradients" in where or "ContextVar" in reason
                   for reason, where in update_breaks.reasons), update_breaks


def test_a_compiled_update_enters_no_sync_as_the_eager_one_does_without_recompiling():
    entered = []

    class Quiet:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False

    model, batch = torch.nn.Linear(3, 1), torch.randn(10, 3, generator=torch.Generator().manual_seed(1))

    def update(rows):
        model.zero_grad(set_to_none=True)
        accumulate_gradients(lambda part: model(part).pow(2).mean(), rows, accumulation_steps=4)
        return model.weight.grad.clone()

    eager = update(batch)
    torch._dynamo.reset()
    compiled = torch.compile(update)
    for quiet in (False, True, False, True):
        with sync_last_micro_batch_only(Quiet) if quiet else contextlib.nullcontext():
            torch.testing.assert_close(compiled(batch), eager)
    assert len(entered) == 2 * 3  # the first K - 1 micro-batches of each quiet call
