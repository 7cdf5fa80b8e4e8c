"""torch.compile and CUDA graphs (gpu.graphs, PPO's compile and cuda_graphs settings): compiled code
equals eager code, the graph breaks are found, bad settings are refused; on CUDA (`-m gpu`) a
captured step replays equal eager steps, draws fresh random numbers, and PPO trains graph-captured."""

import dataclasses
import inspect
import io

import pytest
import torch
from chatter import stderr_of_the_code
from hidden_compiler import run_without_a_compiler

from rlgpu_helpers.gpu.graphs import (
    CapturedStep,
    check_break_free,
    compile_step,
    cuda_graph_skips,
    graph_breaks,
    graph_safe_adam,
    load_optimizer_state,
    set_learning_rate,
    static_copy,
    with_launch_settings,
)
from rlgpu_helpers.gpu.sync import DeferredCheck, audit_syncs
from rlgpu_helpers.learn.dqn import DQN, DQNConfig
from rlgpu_helpers.learn.ppo import PPO, PPOConfig, sample_actions
from rlgpu_helpers.learn.settings import ppo_settings
from rlgpu_helpers.learn.tune import choose_settings
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.vec import VecSnake

CUDA_ONLY = pytest.mark.gpu


def outputs(step):
    obs, reward, terminated, truncated, info = step
    return [obs, reward, terminated, truncated, info["final_obs"], info["episode"]["score"], info["_episode"]]


def actions(steps, num_envs, device="cpu", seed=5):
    return torch.randint(0, 3, (steps, num_envs), generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_the_compiled_env_step_equals_the_eager_one(obs_type):
    eager = VecSnake(48, 6, 7, obs_type=obs_type, seed=3, check_action_values=False)
    compiled_env = VecSnake(48, 6, 7, obs_type=obs_type, seed=3, check_action_values=False)
    moves = actions(60, 48)
    compiled = compile_step(compiled_env.step_tensors, moves[0], fullgraph=True)  # its example call is step 0
    assert compiled.compile_seconds > 0 and compiled.fullgraph
    eager.step_tensors(moves[0])
    finished = 0
    for a in moves[1:]:
        want, got = outputs(eager.step_tensors(a)), outputs(compiled.fn(a))
        for w, g in zip(want, got):
            assert torch.equal(w, g)
        finished += int(want[-1].sum())
    assert finished > 0  # games ended and restarted inside the compared steps


def test_the_compiled_training_step_equals_the_eager_one_to_float32_rounding():
    config = {"num_envs": 32, "num_steps": 8, "num_minibatches": 2, "hidden": 16, "seed": 1}
    eager, compiled = PPO(PPOConfig(**config)), PPO(PPOConfig(**config, compile=True))
    for learner in (eager, compiled):
        torch.manual_seed(0)
        learner.collect()
    # the compiled rollout draws its actions with Inductor's own RNG: give both the same rollout
    compiled.obs.copy_(eager.obs), compiled.actions.copy_(eager.actions), compiled.logprobs.copy_(eager.logprobs)
    compiled.advantages.copy_(eager.advantages), compiled.returns.copy_(eager.returns)
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(2))[:128]
    for _ in range(3):
        want, got = eager.minibatch_update(idx), compiled._update_fn(idx)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(eager.model.parameters(), compiled.model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert not torch.equal(next(eager.model.parameters()), next(PPO(PPOConfig(**config)).model.parameters()))


WIN_SMALL = {"height": 6, "width": 6, "num_envs": 16, "num_steps": 8, "hidden": 16, "num_minibatches": 4,
             "max_steps_without_food": 12, "seed": 3}
"""The ``"win"`` preset made small: games end and restart within a few iterations."""
ROLLOUT = ("obs", "actions", "rewards", "dones", "scores", "finished")
"""What the games were: equal to the bit between two learners that played the same games."""


def run_iterations(learner, iterations=3):
    """Each iteration's rollout and values, and the weights after it."""
    done = []
    for i in range(iterations):
        learner.iterate(i / iterations)
        done.append({**{name: getattr(learner, name).clone() for name in ROLLOUT + ("logprobs", "values",
                                                                                      "advantages")},
                     "weights": [p.detach().clone() for p in learner.model.parameters()]})
    return done


def test_the_win_preset_compiled_after_its_warm_up_plays_the_same_games_and_updates_as_eager():
    """The same seed, compiled (with Inductor drawing its random numbers as eager torch does) or eager: the same
    games, step for step, and the same values and updates to float32 rounding, over several iterations. The
    compiled learner is warmed up first, and the warm-up's iterations are undone: it starts where eager starts."""
    config = ppo_settings("cpu", "win", overrides={**WIN_SMALL, "precision": "fp32"})
    with torch._inductor.config.patch(fallback_random=True):
        eager = run_iterations(PPO(dataclasses.replace(config, compile=False)))
        compiled = PPO(dataclasses.replace(config, compile=True))
        assert compiled.warm_up() > 0 and (compiled.env_steps, compiled.iterations) == (0, 0)
        optimizer_steps = [int(s["step"]) for s in compiled.optimizer.state.values()]
        assert optimizer_steps and set(optimizer_steps) == {0}  # the warm-up's steps undone: a fresh Adam
        compiled = run_iterations(compiled)
    ended = sum(int(i["finished"].sum()) for i in eager)
    assert ended > 10, "the test needs games that end and restart"
    for want, got in zip(eager, compiled):
        for name in ROLLOUT:
            assert torch.equal(want[name], got[name]), name
        for name in ("logprobs", "values", "advantages"):
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-4)
        for p, q in zip(want["weights"], got["weights"]):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


def test_what_an_iteration_changes_is_put_back_in_place_and_the_run_goes_on_as_before():
    """``warm_up``'s undo on an eager learner mid-run (Adam has state): the iterations after it equal a twin's
    that never ran the undone ones; the tensors are the same objects (a CUDA graph reads them where they lie)."""
    config = ppo_settings("cpu", "win", overrides={**WIN_SMALL, "compile": False})
    twin = PPO(config)
    twin.iterate(0.1)
    want = run_iterations(twin, 2)
    learner = PPO(config)
    learner.iterate(0.1)
    tensors = [id(t) for t in [*learner.model.parameters(), learner.flipped, learner.env._stamp]
               + [v for s in learner.optimizer.state.values() for v in s.values()]]
    saved = learner._iteration_state()
    learner.iterate(0.5), learner.iterate(0.9)
    learner._restore_iteration_state(saved)
    assert (learner.env_steps, learner.iterations) == (twin.config.num_envs * twin.config.num_steps, 1)
    assert tensors == [id(t) for t in [*learner.model.parameters(), learner.flipped, learner.env._stamp]
                       + [v for s in learner.optimizer.state.values() for v in s.values()]]
    got = run_iterations(learner, 2)
    for a, b in zip(want, got):
        for name in ROLLOUT + ("logprobs", "values", "advantages"):
            assert torch.equal(a[name], b[name]), name
        assert all(torch.equal(p, q) for p, q in zip(a["weights"], b["weights"]))
    assert PPO(config).warm_up() == 0.0  # eager: nothing to compile or capture


def test_an_iteration_of_the_win_preset_reads_nothing_on_the_host_before_its_one_read():
    """On a CPU the audit intercepts every operator that would wait for a GPU: none in the whole iteration's
    device work (rollout, GAE, every epoch's minibatch updates); the one read is ``iterate``'s."""
    learner = PPO(ppo_settings("cpu", "win", overrides={**WIN_SMALL, "compile": False}))
    report = audit_syncs(lambda: learner.iterate_on_device(0.5), "cpu")
    assert report.total == 0, report
    read = audit_syncs(lambda: learner.iterate(0.5), "cpu")  # the copy, then what is done with it on the host
    assert read.total >= 1 and {row.where.rsplit(" ", 1)[-1] for row in read.rows} == {"(iterate)"}, read


def test_a_compiled_bf16_learner_iterates_with_its_forward_passes_in_bf16():
    """The TF32 setting of a precision cannot be traced: compiled, only its autocast is inside the graph."""
    learner = PPO(PPOConfig(num_envs=16, num_steps=4, num_minibatches=2, hidden=8, precision="bf16", compile=True,
                            obs_type="features_reach"))
    before = [p.detach().clone() for p in learner.model.parameters()]
    learner.iterate()
    assert learner.env_steps == 64 and learner.logprobs.dtype == torch.float32
    assert all(not torch.equal(b, p) for b, p in zip(before, learner.model.parameters()))


    def logits(obs):
        with learner._forward():
            return learner.model.logits(obs).float()

    obs = learner.next_obs
    with torch.no_grad():
        compiled, eager, fp32 = torch.compile(logits)(obs), logits(obs), learner.model.logits(obs)
    torch.testing.assert_close(compiled, eager, rtol=0.05, atol=0.05)  # both in bf16 ...
    assert not torch.allclose(compiled, fp32, rtol=0, atol=1e-6)  # ... which rounds what fp32 keeps


def test_compile_step_compiles_for_its_shapes_also_after_the_function_compiled_for_others():
    """Once a function has compiled for one shape, dynamo's next compile of it is for any shape
    (automatic dynamic shapes), slower code than a fixed shape's. ``compile_step``'s
    code is for its example's shapes: a third size compiles again."""
    def scale(x):
        return x * 2 + 1

    torch._dynamo.reset()
    torch.compile(scale)(torch.ones(8))
    compiled = compile_step(scale, torch.ones(16))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch.testing.assert_close(compiled.fn(torch.ones(24)), torch.full((24,), 3.0))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1
    torch._dynamo.reset()


def test_reduce_overhead_says_when_its_cuda_graphs_did_not_come(capfd):
    def bump(x, counter):  # mutates an input
        counter.add_(1)
        return x * 2

    x, counter = torch.ones(4), torch.zeros(())
    assert compile_step(bump, x, counter, mode="default").cuda_graphs_skipped == ()
    skipped = compile_step(bump, x, counter, mode="reduce-overhead").cuda_graphs_skipped  # no CUDA graphs on a CPU
    assert len(skipped) == 1 and "skipped CUDA graphs" in skipped[0]
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with cuda_graph_skips() as reasons:  # how Inductor reports a skip on CUDA: a warning, and a count
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
    assert reasons == ["skipping cudagraphs due to mutated inputs (1 instances)"]
    assert stderr_of_the_code(capfd.readouterr().err) == ""  # collected, not printed


def test_the_graph_breaks_of_the_checked_step_are_found_and_the_unchecked_step_has_none():
    checked = VecSnake(16, seed=0)
    found = graph_breaks(checked.step, actions(1, 16)[0])
    # The break is the deferred check's host read. Its frame's name depends on the torch version
    # (raise_if_failed, or the generator expression in it), its lines do not.
    lines, first = inspect.getsourcelines(DeferredCheck.raise_if_failed)
    inside = {f"sync.py:{line}" for line in range(first, first + len(lines))}
    assert found.breaks >= 1 and any(where.split(" in ")[0] in inside for _, where in found.reasons), found
    clean = graph_breaks(VecSnake(16, seed=0, check_action_values=False).step_tensors, actions(1, 16)[0])
    assert (clean.graphs, clean.breaks, clean.reasons) == (1, 0, ()) and clean.operators > 50
    assert "graph break(s)" in str(found)


def _normalize(adv):
    std = adv.std()
    if std > 0:  # a Python `if` on a tensor: a graph break
        adv = (adv - adv.mean()) / std
    return adv


def _normalize_on_device(adv):
    std = adv.std()
    return torch.where(std > 0, (adv - adv.mean()) / std, adv)


def test_graph_breaks_counts_what_dynamo_explain_counts_by_hand_and_the_rewrite_compiles_equal():
    """Notebook 09's by-hand section: the raw ``torch._dynamo.explain`` and ``torch.compile`` beside the helpers."""
    adv = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    for fn, breaks in ((_normalize, 1), (_normalize_on_device, 0)):
        torch._dynamo.reset()
        raw = torch._dynamo.explain(fn)(adv)
        found = graph_breaks(fn, adv)
        assert (found.graphs, found.breaks) == (raw.graph_count, raw.graph_break_count) == (breaks + 1, breaks)
    compiled = torch.compile(_normalize_on_device, fullgraph=True)
    torch.testing.assert_close(compiled(adv), _normalize(adv))
    flat = torch.full((1000,), 3.0)
    assert torch.equal(compiled(flat), flat)
    torch.testing.assert_close(compile_step(_normalize_on_device, adv).fn(adv), _normalize(adv))


def _scale_with_if(rewards):
    biggest = rewards.abs().max()
    if biggest > 1:
        rewards = rewards / biggest
    return rewards


def _scale_on_device(rewards):
    biggest = rewards.abs().max()
    return torch.where(biggest > 1, rewards / biggest, rewards)


REWARDS = [torch.tensor([0.5, -1.0, 0.0]), torch.tensor([3.0, -6.0, 1.5])]
SCALED = [torch.tensor([0.5, -1.0, 0.0]), torch.tensor([0.5, -1.0, 0.25])]


def test_the_exercise_checker_names_each_break_and_passes_only_a_break_free_equal_rewrite():
    naive = check_break_free(_scale_with_if, REWARDS, SCALED)
    assert naive.splitlines()[:3] == ["_scale_with_if: 1 graph break(s)", "  at _scale_with_if: if biggest > 1:",
                                      "eager results as expected: True"]
    assert naive.endswith("(torch.where)")
    done = check_break_free(_scale_on_device, REWARDS, SCALED)
    assert "0 graph break(s)" in done and done.endswith("done: one graph, the same results")
    wrong = check_break_free(lambda rewards: rewards.clamp(-1, 1), REWARDS, SCALED)
    assert "eager results as expected: False" in wrong and wrong.endswith("results differ from the expected ones")
    with pytest.raises(ValueError, match=r"^inputs \(2\) and expected \(1\) must be as many"):
        check_break_free(_scale_on_device, REWARDS, SCALED[:1])
    with pytest.raises(TypeError, match="^fn=3 is not callable"):
        check_break_free(3, REWARDS, SCALED)


def test_the_static_inputs_of_a_capture_do_not_make_a_compiled_function_compile_again():
    """PPO's rollout step gets a normal tensor (the step counter) beside inference tensors (the observations).
    Copies that all became inference tensors compiled the step a second time inside the capture on an H200."""
    compiles = []

    def count(graph_module, example_inputs):
        compiles.append(graph_module)
        return graph_module.forward

    weight = torch.randn(4, 3)
    step = torch.compile(lambda t, obs: obs @ weight + t, backend=count, fullgraph=True)
    t = torch.zeros(1)
    with torch.inference_mode():
        obs = torch.randn(5, 4)
        want = step(t, obs)
        copies = [static_copy(x) for x in (t, obs)]
        assert [x.is_inference() for x in copies] == [False, True]
        assert torch.equal(step(*copies), want)
        assert len(compiles) == 1
        step(*(x.clone() for x in (t, obs)))  # what the capture did before
    assert len(compiles) == 2


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^cuda_graphs=True needs a CUDA GPU, not device='cpu'"):
        PPOConfig(cuda_graphs=True)
    with pytest.raises(TypeError, match="compile"):
        PPOConfig(compile="yes")
    with pytest.raises(ValueError, match=r"^CUDA graphs need a CUDA GPU, not device='cpu'"):
        CapturedStep(lambda x: x, "cpu")
    with pytest.raises(ValueError, match="^mode='max'"):
        compile_step(lambda x: x, torch.ones(1), mode="max")


def test_the_graph_safe_adam_takes_its_learning_rate_in_place():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = graph_safe_adam([weight], 0.1, device="cpu")
    lr = optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and float(lr) == pytest.approx(0.1)
    set_learning_rate(optimizer, 0.25)
    assert optimizer.param_groups[0]["lr"] is lr and float(lr) == 0.25
    weight.grad = torch.ones(3)
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.full((3,), 0.75))  # Adam's first step moves by lr
    plain = torch.optim.Adam([weight], lr=0.1)
    set_learning_rate(plain, 0.5)
    assert plain.param_groups[0]["lr"] == 0.5


def through_a_file(state: dict) -> dict:
    """``state`` as a checkpoint gives it back: saved, then loaded onto the host."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=True)


def saved(optimizer):
    return through_a_file(optimizer.state_dict())


def trained_adam(make, steps=3):
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make([weight])
    for _ in range(steps):
        weight.grad = torch.ones(3)
        optimizer.step()
    return optimizer


def test_a_loaded_graph_safe_adam_keeps_its_own_learning_rate_tensor_and_anneals_it():
    """The bug this guards against: ``load_state_dict`` puts the saved lr tensor (on the host) in place of the
    device tensor a captured step reads, so a resumed run's annealing never reaches the step."""
    state = saved(trained_adam(lambda p: graph_safe_adam(p, 0.1, device="cpu")))
    state["param_groups"][0]["lr"] = torch.tensor(0.05)  # annealed before the checkpoint
    resumed = graph_safe_adam([torch.nn.Parameter(torch.ones(3))], 0.1, device="cpu")
    built = resumed.param_groups[0]["lr"]
    load_optimizer_state(resumed, state)
    assert resumed.param_groups[0]["lr"] is built and float(built) == pytest.approx(0.05)
    set_learning_rate(resumed, 0.01)
    assert float(built) == pytest.approx(0.01)
    assert resumed.state[resumed.param_groups[0]["params"][0]]["step"].item() == 3


def test_a_load_keeps_each_learning_rate_as_a_float_or_a_tensor_as_built():
    plain = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))], lr=0.1)
    load_optimizer_state(plain, saved(trained_adam(lambda p: graph_safe_adam(p, 0.2, device="cpu"))))
    assert plain.param_groups[0]["lr"] == pytest.approx(0.2) and not isinstance(plain.param_groups[0]["lr"], torch.Tensor)
    safe = graph_safe_adam([torch.nn.Parameter(torch.ones(3))], 0.1, device="cpu")
    built = safe.param_groups[0]["lr"]
    load_optimizer_state(safe, saved(trained_adam(lambda p: torch.optim.Adam(p, lr=0.3))))
    assert safe.param_groups[0]["lr"] is built and float(built) == pytest.approx(0.3)


def test_a_checkpoint_of_a_host_run_loads_capturable_with_its_state_on_the_parameters_device():
    """A GPU learner resuming a CPU run's checkpoint: ``capturable`` stays on, and the step counters and the
    learning rate live where the parameters do. The "meta" device stands in for a GPU here."""
    state = saved(trained_adam(lambda p: torch.optim.Adam(p, lr=0.1)))
    assert state["param_groups"][0]["capturable"] is False
    weight = torch.nn.Parameter(torch.ones(3, device="meta"))
    on_device = torch.optim.Adam([weight], lr=0.1, capturable=True)
    built = on_device.param_groups[0]["lr"] = torch.tensor(0.1, device="meta")  # Adam's own check reads a value
    load_optimizer_state(on_device, state)
    group = on_device.param_groups[0]
    assert group["capturable"] is True and group["lr"] is built and built.device.type == "meta"
    assert {name: value.device.type for name, value in on_device.state[weight].items()} == {
        "step": "meta", "exp_avg": "meta", "exp_avg_sq": "meta"}


def test_a_loaded_optimizer_keeps_its_own_copy_of_a_live_state():
    """``load_state_dict`` keeps a state tensor already on the right device as it is: without the copy, the loaded
    optimizer's step moves the moments and step counter of the optimizer it was loaded from."""
    source = trained_adam(lambda p: graph_safe_adam(p, 0.1, device="cpu"))
    weight = source.param_groups[0]["params"][0]
    before = {name: value.clone() for name, value in source.state[weight].items()}
    loaded = graph_safe_adam([torch.nn.Parameter(weight.detach().clone())], 0.1, device="cpu")
    load_optimizer_state(loaded, source.state_dict())
    copy = loaded.param_groups[0]["params"][0]
    copy.grad = torch.ones(3)
    loaded.step()
    for name, value in source.state[weight].items():
        assert torch.equal(value, before[name]), name
    assert loaded.state[copy]["step"].item() == before["step"].item() + 1


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_learner_loaded_from_a_live_learner_trains_without_moving_it(algorithm):
    """A GPU test loaded a CUDA-graphed PPO's live state into an eager one and compared one update of each: the
    eager step had moved the Adam moments the captured one then stepped from (and the loaded learner's last
    observations were the source's own tensor). Loading copies: training the loaded learner leaves the source."""
    def make():
        if algorithm == "ppo":
            return PPO(PPOConfig(num_envs=8, num_steps=4, hidden=8))
        return DQN(DQNConfig(num_envs=8, buffer_size=64, learning_starts=8, steps_per_iteration=4, hidden=8))

    source = make()
    source.iterate(0.5)
    before = through_a_file(source.state_dict())
    loaded = make()
    loaded.load_state_dict(source.state_dict())
    observations = "next_obs" if algorithm == "ppo" else "obs"
    assert getattr(loaded, observations).data_ptr() != getattr(source, observations).data_ptr()
    loaded.iterate(0.5)
    after = source.state_dict()
    for key, entries in before["optimizer"]["state"].items():
        for name, value in entries.items():
            assert torch.equal(after["optimizer"]["state"][key][name], value), (key, name)
    assert torch.equal(after[observations], before[observations])


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_resumed_compiled_learner_keeps_the_learning_rate_tensor_its_update_reads(algorithm):
    def make():
        if algorithm == "ppo":
            return PPO(PPOConfig(num_envs=8, num_steps=4, hidden=8, compile=True))
        return DQN(DQNConfig(num_envs=8, buffer_size=64, learning_starts=8, hidden=8, compile=True))

    first, resumed = make(), make()
    set_learning_rate(first.optimizer, 2e-4)
    built = resumed.optimizer.param_groups[0]["lr"]
    resumed.load_state_dict(through_a_file(first.state_dict()))
    assert resumed.optimizer.param_groups[0]["lr"] is built and float(built) == pytest.approx(2e-4)


def test_choose_settings_keeps_eager_unless_something_is_faster_beyond_the_noise():
    noisy = choose_settings("cpu", {"eager": (1.0, 0.1), "compiled": (0.95, 0.1)})
    assert noisy.settings == {"compile": False, "cuda_graphs": False}
    assert any("not beyond the noise" in r for r in noisy.reasons)
    fast = choose_settings("cuda", {"eager": (1.0, 0.01), "compiled": (0.5, 0.01), "CUDA graphs": (0.3, 0.01),
                                    "compiled + CUDA graphs": (0.2, 0.01)})
    assert fast.settings == {"compile": True, "cuda_graphs": True} and "compiled + CUDA graphs" in str(fast)
    with pytest.raises(ValueError, match="must include 'eager'"):
        choose_settings("cpu", {"compiled": (1.0, 0.0)})


# ---------------------------------------------------------------------------- on CUDA

@CUDA_ONLY
@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_a_captured_env_step_replays_equal_eager_steps(obs_type):
    eager = VecSnake(256, 8, 8, obs_type=obs_type, device="cuda", seed=3, check_action_values=False)
    graphed = VecSnake(256, 8, 8, obs_type=obs_type, device="cuda", seed=3, check_action_values=False)
    step = CapturedStep(graphed.step_tensors, "cuda", warmup=2)
    for k, a in enumerate(actions(40, 256, "cuda")):
        got = [t.clone() for t in outputs(step(a))]  # copied before the next replay overwrites them
        for want, have in zip(outputs(eager.step_tensors(a)), got):
            assert torch.equal(want, have)
    assert step.graph is not None and step.calls == 40


@CUDA_ONLY
def test_replays_draw_fresh_random_numbers_and_make_no_sync():
    logits = torch.zeros(4096, 3, device="cuda")
    step = CapturedStep(lambda x: sample_actions(x), "cuda")
    draws = [step(logits).clone() for _ in range(4)]
    assert not torch.equal(draws[2], draws[3])  # two replays, two different draws
    counts = torch.bincount(draws[3], minlength=3).float() / 4096
    assert torch.allclose(counts, torch.full((3,), 1 / 3, device="cuda"), atol=0.05)
    assert audit_syncs(lambda: step(logits), "cuda").total == 0


@CUDA_ONLY
def test_ppo_with_cuda_graphs_trains_and_its_captured_update_equals_the_eager_one():
    """From the same weights, Adam state and rollout, a replayed update and an eager one agree to float32 rounding.

    Both learners are fp32 (no TF32 setting of their own) and uncompiled, and both Adams are graph-safe: the
    same kernels run, the captured ones on the capture's stream. The eager learner loads the graphed one's live
    state, so the load must copy Adam's moments: when it shared them, the eager step moved the moments the
    replay then stepped from, and the weights differed by up to 5e-5 (20% of the learning rate).
    """
    config = {"num_envs": 256, "num_steps": 16, "hidden": 32, "seed": 0, "device": "cuda"}
    graphed = PPO(PPOConfig(**config, cuda_graphs=True))
    first = [p.detach().clone() for p in graphed.model.parameters()]
    for i in range(4):
        graphed.iterate(i / 4)
    assert graphed._update_fn.graph is not None and graphed._rollout_fn.graph is not None
    assert any(not torch.equal(a, b) for a, b in zip(first, graphed.model.parameters()))
    eager = PPO(PPOConfig(**config))
    eager.optimizer = graph_safe_adam(eager.model.parameters(), 1e-3, eps=1e-5, device="cuda")  # the same Adam
    eager.load_state_dict(graphed.state_dict())
    for name in ("obs", "actions", "logprobs", "advantages", "returns"):
        getattr(eager, name).copy_(getattr(graphed, name))
    idx = torch.randperm(256 * 16, device="cuda")[:1024]
    want = eager.minibatch_update(idx)
    got = graphed._update_fn(idx)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(eager.model.parameters(), graphed.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-7)  # the clipped gradients
        # One Adam step (lr 2.5e-4 here) from gradients 1e-4 apart moves the weights ~3e-8 apart (measured on a
        # CPU with perturbed gradients): 1e-6 allows for rounding, not for a different step.
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6)
    assert audit_syncs(lambda: graphed.rollout_step(0), "cuda").total == 0


@CUDA_ONLY
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_resumed_captured_learner_reads_the_learning_rate_it_is_given(algorithm):
    """After a resume, learning rate 0 must stop the captured update: the graph reads the lr tensor it was built with."""
    def make():
        if algorithm == "ppo":
            return PPO(PPOConfig(num_envs=64, num_steps=8, hidden=16, device="cuda", cuda_graphs=True))
        return DQN(DQNConfig(num_envs=64, buffer_size=1024, learning_starts=64, batch_size=32, hidden=16,
                             device="cuda", cuda_graphs=True))

    first = make()
    for _ in range(3):
        first.iterate(0.1)
    resumed = make()
    resumed.load_state_dict(through_a_file(first.state_dict()))
    for _ in range(3):  # two warm-ups and the capture
        resumed.iterate(0.1)
    set_learning_rate(resumed.optimizer, 0.0)
    before = [p.detach().clone() for p in resumed.model.parameters()]
    resumed.iterate(1.0) if algorithm == "dqn" else (resumed.collect(), resumed.update())
    assert resumed._update_fn.graph is not None
    for old, new in zip(before, resumed.model.parameters()):
        assert torch.equal(old, new)


@CUDA_ONLY
def test_reduce_overhead_on_the_env_step_either_replays_equal_steps_or_says_why_not():
    """The env step mutates its state: Inductor may skip its CUDA graphs. Either way the answer is honest."""
    eager = VecSnake(256, 8, 8, device="cuda", seed=3, check_action_values=False)
    graphed = VecSnake(256, 8, 8, device="cuda", seed=3, check_action_values=False)
    moves = actions(20, 256, "cuda")
    compiled = compile_step(graphed.step_tensors, moves[0], mode="reduce-overhead", device="cuda")
    eager.step_tensors(moves[0])
    try:
        if compiled.cuda_graphs_skipped:
            assert all("skip" in reason for reason in compiled.cuda_graphs_skipped), compiled.cuda_graphs_skipped
        for a in moves[1:]:
            got = [t.clone() for t in outputs(compiled.fn(a))]
            for want, have in zip(outputs(eager.step_tensors(a)), got):
                assert torch.equal(want, have)
    finally:
        # Inductor's CUDA graph trees outlive the test. On torch 2.11 the next compile of an optimizer step with
        # graph breaks then failed an assertion of theirs (_is_static_for_cudagraphs); a reset ends them.
        torch._dynamo.reset()


@CUDA_ONLY
@pytest.mark.parametrize("launches", [{}, {"compile": True}, {"cuda_graphs": True}])
def test_ppo_in_fp16_with_its_grad_scaler_trains_on_cuda_without_a_sync(launches):
    """A T4's precision: fp16 forward passes and a GradScaler whose skip the fused Adam decides on the device."""
    learner = PPO(PPOConfig(num_envs=256, num_steps=16, hidden=32, precision="fp16", device="cuda", **launches))
    first = [p.detach().clone() for p in learner.model.parameters()]
    for i in range(4):
        learner.iterate(i / 4)
    assert any(not torch.equal(a, b) for a, b in zip(first, learner.model.parameters()))
    assert learner.scaler.get_scale() > 0
    report = audit_syncs(learner.update, "cuda")
    assert report.total == 0, report


@CUDA_ONLY
@pytest.mark.parametrize("launches", [{"compile": False, "cuda_graphs": False}, {"compile": False}, {}],
                         ids=["eager", "CUDA graphs", "the preset"])
def test_a_whole_iteration_of_the_win_preset_queues_on_cuda_without_one_sync(launches):
    """``set_sync_debug_mode("error")`` over an iteration's device work (the rollout, GAE, every minibatch update of
    every epoch): any synchronizing CUDA call raises. The preset itself runs at full size (compiled, captured, in
    this GPU's 16-bit format, as ``train --preset win`` runs it); the rungs below it at a smaller size."""
    smaller = {"num_envs": 512, "num_steps": 32, "num_minibatches": 16} if launches else {}
    learner = PPO(ppo_settings("cuda", "win", overrides={**launches, **smaller}))
    setup = learner.warm_up()
    assert (setup > 0) == (learner.config.compile or learner.config.cuda_graphs)
    learner.iterate(0.0)  # an eager learner's first calls set cuBLAS and the allocator up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = learner.iterate_on_device(0.5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    read = pending.cpu()
    assert read[-1] == 0 and read[:-1].max() >= 0  # finite, and games finished
    if learner.config.cuda_graphs:
        assert all(fn.graph is not None for fn in (learner._rollout_fn, learner._gae_fn, learner._update_fn))


@CUDA_ONLY
@pytest.mark.parametrize("precision", ["tf32", "bf16", "fp16"])
def test_ppo_compiled_and_captured_trains_on_cuda_in_each_precision(precision):
    """The rollout step and GAE compile whole (``fullgraph=True``) in every precision and are then captured: nothing
    they call may check a device again (``torch.cuda.device_count()`` cannot be traced; an fp16 run failed on it)."""
    learner = PPO(PPOConfig(num_envs=256, num_steps=16, hidden=32, precision=precision, device="cuda", compile=True,
                            cuda_graphs=True))
    first = [p.detach().clone() for p in learner.model.parameters()]
    for i in range(3):  # two warm-ups and the capture of each function, GAE's in the third iteration
        learner.iterate(i / 3)
    assert learner._rollout_fn.graph is not None and learner._gae_fn.graph is not None
    assert learner._update_fn.graph is not None
    assert any(not torch.equal(a, b) for a, b in zip(first, learner.model.parameters()))


def test_a_compiled_step_compiles_again_for_each_value_of_a_float_it_branches_on_past_torchs_eight():
    """Every float a compiled step reads is a constant of its graph, and a step keeps more versions than torch's
    default of 8, so that every learner of a process gets its own (a full-graph compile past the limit raises)."""
    class Settings:
        def __init__(self, scale):
            self.scale = scale

    def step(x, settings):
        if settings.scale != 1.0:
            return x * settings.scale
        return x

    compiled = with_launch_settings(step, "cpu", compile=True, cuda_graphs=False)
    x = torch.ones(3)
    for k in range(12):
        torch.testing.assert_close(compiled(x, Settings(1.0 + k / 10)), x * (1.0 + k / 10))


NO_COMPILER = """
from rlgpu_helpers.cli import main
from rlgpu_helpers.learn.dqn import DQN, DQNConfig
assert main(["train", "--preset", "win", "--device", "cpu", "--size", "6", "--envs", "8", "--steps", "256",
             "--set", "num_steps=16", "--set", "num_minibatches=2", "--set", "hidden=8", "--out", "RUN"]) == 0
learner = DQN(DQNConfig(height=6, width=6, num_envs=8, buffer_size=64, learning_starts=16, batch_size=4,
                        hidden=8, compile=True))
learner.iterate(0.5)
print("DQN compile:", learner.config.compile)
"""


def test_without_a_cpp_compiler_the_preset_and_a_compiled_learner_run_eagerly_with_one_line_saying_why(tmp_path):
    """A laptop with no g++, cc or clang on the PATH: Inductor would raise InvalidCxxCompiler at the first call."""
    done = run_without_a_compiler(NO_COMPILER.replace("RUN", str(tmp_path / "run")), tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    said = [line for line in lines if "runs eagerly" in line]
    assert said == ["PPO (compile=True) runs eagerly: torch.compile needs a C++ compiler on a CPU "
                    "(InvalidCxxCompiler): install a C++ compiler (g++ or clang; on macOS `xcode-select --install`, "
                    "on Windows the Visual Studio Build Tools) and restart",
                    said[1]] and said[1].startswith("DQN (compile=True) runs eagerly:")
    assert "DQN compile: False" in lines and not any("compiling" in line for line in lines)
    assert "InvalidCxxCompiler" not in done.stderr


CPP_HELP = ("torch.compile needs a C++ compiler on a CPU (InvalidCxxCompiler): install a C++ compiler (g++ or clang; "
            "on macOS `xcode-select --install`, on Windows the Visual Studio Build Tools) and restart")

COMPILE_HELPERS_WITHOUT_A_COMPILER = """
import torch
from rlgpu_helpers.gpu.graphs import check_break_free, compile_step, with_launch_settings
try:
    compile_step(lambda x: x + 1, torch.ones(3), device="cpu")
except RuntimeError as error:
    print("raised:", type(error).__name__)
    print("error:", error)
print(check_break_free(lambda x: x * 2, [torch.ones(2)], [torch.full((2,), 2.0)]))
step = with_launch_settings(lambda x: x + 1, "cpu", compile=True, cuda_graphs=False)
print("the step, eagerly:", step(torch.ones(1)).item(), step(torch.ones(1)).item())
"""


def test_without_a_cpp_compiler_compile_step_raises_one_clear_error_and_the_other_helpers_run_eagerly(tmp_path):
    """compile_step raises CompilerMissingError (a RuntimeError) with why and how, before Inductor's traceback;
    the exercise checker checks eagerly and says the compiled check was not measured; with_launch_settings
    runs its step eagerly with one line."""
    done = run_without_a_compiler(COMPILE_HELPERS_WITHOUT_A_COMPILER, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["raised: CompilerMissingError", f"error: {CPP_HELP}"]
    assert "eager results as expected: True" in lines
    assert f"compiled (fullgraph=True): not measured here: {CPP_HELP}" in lines
    assert "done: one graph, the expected results eagerly" in lines
    assert [line for line in lines if "runs eagerly" in line] == [f"<lambda> (compile=True) runs eagerly: {CPP_HELP}"]
    assert lines[-1] == "the step, eagerly: 2.0 2.0"
    assert "InvalidCxxCompiler" not in done.stderr and "Traceback" not in done.stderr


FASTEST_WITHOUT_A_COMPILER = """
from rlgpu_helpers.learn.tune import fastest_settings
chosen = fastest_settings("cpu", iterations=1, num_envs=8, num_steps=4, hidden=8, height=6, width=6,
                          num_minibatches=1, update_epochs=1)
print("measured:", sorted(chosen.seconds), "compile:", chosen.compile)
"""


def test_without_a_cpp_compiler_fastest_settings_does_not_try_compile_and_says_why(tmp_path):
    """Only eager is timed on a CPU without a compiler (a compiled learner would run eagerly, under compile's
    name), the choice is eager, and one reason says compile was not measured here, and why."""
    done = run_without_a_compiler(FASTEST_WITHOUT_A_COMPILER, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "measured: ['eager'] compile: False"
    assert f"  - compiled: not measured here: {CPP_HELP}" in lines
    assert lines[-2] == "  - chosen: eager, nothing was faster beyond the noise"
    assert not any("runs eagerly" in line for line in lines)
