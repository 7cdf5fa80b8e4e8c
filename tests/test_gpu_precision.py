"""The precision policy, the training step in each precision, and the GradScaler (notebook 08)."""

import copy
from pathlib import Path

import pytest
import torch

import rlgpu_helpers
from rlgpu_helpers.gpu.precision import (
    PRECISIONS,
    DeviceTraits,
    PrecisionPolicy,
    autocast,
    available_precisions,
    check_precision,
    choose_policy,
    fp16_step_checks,
    fp32_matmul_precision,
    precision_context,
    set_tf32_matmuls,
    stale_weights_check,
    tf32_matmuls,
    uses_tf32,
)
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.train_step import TrainStep, scaler_trace, step_flops

A100 = DeviceTraits("cuda", "NVIDIA A100", (8, 0), bf16_native=True, fp16_native=True)
H100 = DeviceTraits("cuda", "NVIDIA H100", (9, 0), bf16_native=True, fp16_native=True)
T4 = DeviceTraits("cuda", "Tesla T4", (7, 5), bf16_native=False, fp16_native=True)
V100 = DeviceTraits("cuda", "Tesla V100", (7, 0), bf16_native=False, fp16_native=True)
P100 = DeviceTraits("cuda", "Tesla P100", (6, 0), bf16_native=False, fp16_native=False)
CPU_BF16 = DeviceTraits("cpu", "cpu", None, bf16_native=True)
CPU_PLAIN = DeviceTraits("cpu", "cpu", None)
NEW_TF32_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")  # torch 2.9+


@pytest.mark.parametrize("traits, speedup, spread, precision, tf32, scaler", [
    (A100, None, 0.0, "bf16", True, False),
    (H100, None, 0.0, "bf16", True, False),
    (T4, None, 0.0, "fp16", False, True),
    (V100, None, 0.0, "fp16", False, True),
    (P100, None, 0.0, "fp32", False, False),
    (CPU_PLAIN, 3.0, 0.1, "fp32", False, False),   # emulated bf16: never, whatever a probe said
    (CPU_BF16, None, 0.0, "fp32", False, False),   # not measured: fp32
    (CPU_BF16, 1.8, 0.2, "bf16", False, False),    # measured faster beyond noise
    (CPU_BF16, 1.1, 0.2, "fp32", False, False),    # within noise
    (CPU_BF16, 0.5, 0.1, "fp32", False, False),    # slower
    (DeviceTraits("mps", "mps:0"), None, 0.0, "fp32", False, False),
])
def test_the_policy_for_given_device_properties(traits, speedup, spread, precision, tf32, scaler):
    policy = choose_policy(traits, speedup, spread)
    assert (policy.precision, policy.tf32, policy.grad_scaler) == (precision, tf32, scaler)
    assert policy.reasons and all(policy.reasons)
    assert str(policy).count("\n  - ") == len(policy.reasons)


def test_a_t4_is_told_why_not_bf16_and_a_cpu_shows_its_measurement():
    assert "emulation" in str(choose_policy(T4)) and "GradScaler" in str(choose_policy(T4))
    assert "1.10x" in str(choose_policy(CPU_BF16, 1.1, 0.2))


def test_precisions_that_exist_on_each_device():
    assert available_precisions(A100) == ("fp32", "tf32", "bf16", "fp16")
    assert available_precisions(T4) == ("fp32", "fp16")
    assert available_precisions(CPU_PLAIN) == ("fp32", "bf16", "fp16")


def test_unknown_precisions_and_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match=r"precision='fp8' must be one of"):
        TrainStep("fp8")
    with pytest.raises(TypeError, match="precision=16"):
        check_precision("precision", 16)
    with pytest.raises(ValueError, match="tf32.*CUDA"):
        TrainStep("tf32", device="cpu")
    with pytest.raises(TypeError, match="traits"):
        choose_policy("A100")
    with pytest.raises(ValueError, match="cpu_bf16_speedup"):
        choose_policy(CPU_BF16, -1.0)
    with pytest.raises(ValueError, match="GradScaler"):
        autocast(choose_policy(T4), "cpu")
    with pytest.raises(ValueError, match="hidden=0"):
        TrainStep("fp32", hidden=0)


@pytest.fixture
def tf32_state():
    """Put the process-wide TF32 setting back as it was, through whichever API a test used."""
    matmul = torch.backends.cuda.matmul
    legacy = torch.get_float32_matmul_precision()
    new = matmul.fp32_precision if NEW_TF32_API else None
    yield
    torch.set_float32_matmul_precision(legacy)  # sets both APIs consistently
    if NEW_TF32_API:
        matmul.fp32_precision = new


def read_every_tf32_api() -> dict:
    """The TF32 setting as each API reads it; a reading that raises (mixed APIs) is an error."""
    readings = {"allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if NEW_TF32_API:
        readings["fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
    return readings


@pytest.mark.parametrize("start", ["default", "legacy high", "legacy highest", "new tf32", "new ieee"])
@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_is_set_within_the_block_and_put_back_exactly_after_it(tf32_state, start, tf32):
    api, _, value = start.partition(" ")
    if api == "new" and not NEW_TF32_API:
        pytest.skip(f"torch {torch.__version__} has no torch.backends.cuda.matmul.fp32_precision (2.9+)")
    if api == "legacy":
        torch.set_float32_matmul_precision(value)
    elif api == "new":
        torch.backends.cuda.matmul.fp32_precision = value
    before = read_every_tf32_api() if api != "new" else torch.backends.cuda.matmul.fp32_precision
    was = tf32_matmuls()
    with fp32_matmul_precision(tf32):
        assert tf32_matmuls() is tf32
    assert tf32_matmuls() is was
    # Whatever API set it before, every API reads the same as before: nothing was mixed in.
    assert (read_every_tf32_api() if api != "new" else torch.backends.cuda.matmul.fp32_precision) == before


def test_set_tf32_matmuls_sets_what_tf32_matmuls_reads_and_takes_a_bool_only(tf32_state):
    for tf32 in (True, False, True):
        set_tf32_matmuls(tf32)
        assert tf32_matmuls() is tf32
    with pytest.raises(TypeError, match="tf32=1 must be a bool"):
        set_tf32_matmuls(1)


@pytest.mark.parametrize("traits", [A100, H100, T4, V100, P100], ids=lambda traits: traits.name)
def test_a_gpu_policy_prints_the_tf32_setting_its_precision_makes(tf32_state, traits):
    """The policy says TF32 exactly when its precision's context (and PPO in it) runs float32 matmuls in TF32."""
    policy = choose_policy(traits)
    headline = str(policy).splitlines()[0]
    assert ("TF32" in headline) is policy.tf32 is uses_tf32(policy.precision)
    with precision_context(policy.precision, "cpu"):  # the setting is process-wide: readable on a CPU
        assert tf32_matmuls() is policy.tf32
    if policy.precision != "fp32":  # PPO's fp32 leaves the setting to the code around it
        ppo = PPO(PPOConfig(height=6, width=6, num_envs=8, num_steps=4, hidden=8, precision="bf16"))
        ppo.config.precision = policy.precision  # fp16: the same contexts, without PPOConfig's GradScaler check
        with ppo._forward():  # around each forward pass
            assert tf32_matmuls() is policy.tf32
        ppo.device = torch.device("cuda")  # only its type is read: around an iteration on a GPU
        with ppo.matmul_precision():
            assert tf32_matmuls() is policy.tf32


def test_a_bf16_learner_runs_every_forward_pass_with_tf32_as_the_policy_says(tf32_state):
    set_tf32_matmuls(False)
    ppo = PPO(PPOConfig(height=6, width=6, num_envs=8, num_steps=4, hidden=8, precision="bf16"))
    settings = []
    ppo.model.critic.register_forward_hook(lambda module, args, out: settings.append(tf32_matmuls()))
    ppo.iterate()
    assert settings and all(settings)
    assert tf32_matmuls() is False  # put back after each forward pass


def test_a_bf16_step_learns_like_fp32_and_its_matmuls_run_in_bf16():
    fp32, bf16 = TrainStep("fp32", 32, 64), TrainStep("bf16", 32, 64)
    for name, a in fp32.model.named_parameters():
        assert torch.equal(a, dict(bf16.model.named_parameters())[name])  # same seed, same start
    first = fp32.loss().item()
    assert bf16.loss().item() == pytest.approx(first, rel=2e-2)
    for _ in range(30):
        fp32(), bf16()
    assert fp32.loss().item() < first and bf16.loss().item() < first
    assert bf16.loss().item() == pytest.approx(fp32.loss().item(), rel=5e-2)
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        assert bf16.model.logits(bf16.obs).dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # master weights stay fp32


def test_autocast_of_a_policy_applies_its_dtype():
    policy = PrecisionPolicy("cpu", "bf16", False, False, ("test",))
    with autocast(policy, "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast(PrecisionPolicy("cpu", "fp32", False, False, ("test",)), "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_one_autocast_region_around_an_optimizer_step_keeps_the_stale_weights():
    changes = stale_weights_check("cpu")
    stale, uncached, per_forward = changes.values()
    assert stale == 0.0  # the second forward multiplied by the cached copy of the old weights
    assert per_forward > 0.1 and uncached == pytest.approx(per_forward, rel=1e-2)
    with pytest.raises(ValueError, match="dtype='fp32'"):
        stale_weights_check("cpu", "fp32")


def test_precision_context_is_an_autocast_only_for_16_bit_names():
    with precision_context("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu")
    with precision_context("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="precision='int8'"):
        precision_context("int8", "cpu")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_context_takes_a_torch_device_as_it_is(monkeypatch, tf32_state, precision):
    """PPO's compiled rollout enters it with the learner's torch.device. Checking that device again called
    ``torch.cuda.device_count()``, which ``torch.compile(fullgraph=True)`` cannot trace: a GPU run failed on it."""
    def untraceable(*args):
        raise RuntimeError("torch.cuda.device_count() or current_device() called: compiled code cannot trace it")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "device_count", untraceable)
    monkeypatch.setattr(torch.cuda, "current_device", untraceable)
    with precision_context(precision, torch.device("cuda", 0)):
        assert torch.is_autocast_enabled("cuda") is (precision in ("bf16", "fp16"))
        assert tf32_matmuls() is uses_tf32(precision)
    with pytest.raises(RuntimeError, match="cannot trace"):
        precision_context(precision, "cuda")  # a name is still resolved, and checked, by get_device


def test_step_flops_counts_the_matmuls():
    # actor and critic: 11 x 8 and 8 x 8 each, heads 8 x 3 and 8 x 1; 6 FLOPs per weight and sample
    assert step_flops(8, 10) == 6 * 10 * (2 * (11 * 8 + 64) + 8 * 4)


def test_the_grad_scaler_skips_bad_steps_and_adapts_its_scale_on_cpu():
    trace = scaler_trace("cpu", steps=14, poison_at=(9,), init_scale=2.0**20, growth_interval=2)
    for row in trace:
        assert row.next_scale == (row.scale / 2 if row.skipped else row.next_scale)
    assert trace[0].skipped  # 2**20 times fp16 gradients overflows: skipped, scale halved
    assert trace[9].poisoned and trace[9].skipped and trace[9].next_scale == trace[9].scale / 2
    good = [row for row in trace if not row.skipped]
    assert good and any(row.next_scale == 2 * row.scale for row in good)  # grows after good steps


def test_no_file_in_the_package_uses_torch_cuda_amp():
    offenders = [path.name for path in Path(rlgpu_helpers.__file__).parent.rglob("*.py")
                 if "torch.cuda" + ".amp" in path.read_text()]
    assert offenders == []


def _fp16_step(unscale=True, scaler_on=True):
    """An fp16 step written out by hand; ``unscale=False`` clips the scaled gradient (the classic mistake)."""
    def step(model, optimizer, scaler, x, y, max_grad_norm):
        with torch.autocast(device_type=x.device.type, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler_on else loss).backward()
        if unscale and scaler_on:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if scaler_on:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    return step


def test_fp16_step_checks_pass_the_right_step_and_catch_each_mistake():
    right = fp16_step_checks(_fp16_step())
    assert [c.passed for c in right] == [True, True] and str(right[0]).startswith("passed: a good batch")
    assert "differs by 0.0e+00" in right[0].detail and "65,536 -> 32,768" in right[1].detail
    clipped_scaled = fp16_step_checks(_fp16_step(unscale=False))
    assert [c.passed for c in clipped_scaled] == [False, True] and str(clipped_scaled[0]).startswith("FAILED")
    no_scaler = fp16_step_checks(_fp16_step(scaler_on=False))
    assert [c.passed for c in no_scaler] == [True, False] and "weights changed" in no_scaler[1].detail
    with pytest.raises(TypeError, match="step="):
        fp16_step_checks("not a function")
    with pytest.raises(ValueError, match="max_grad_norm"):
        fp16_step_checks(_fp16_step(), max_grad_norm=0)


def test_a_bf16_step_written_with_torch_autocast_is_train_steps_bf16_step():
    helper = TrainStep("bf16", hidden=16, batch_size=32, device="cpu", seed=0)
    model = copy.deepcopy(helper.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits, value = model(helper.obs)
        loss = (torch.nn.functional.cross_entropy(logits.float(), helper.actions)
                + (value.float() - helper.returns).pow(2).mean())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    assert torch.equal(loss, helper())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), helper.model.parameters()))
