"""On a CUDA GPU: the hot loops never synchronize, VecSnake captures in a CUDA graph, the same seed
gives the same games on CPU and GPU, and PPO and DQN train. Skipped without CUDA; run with
`pytest -m gpu` (tools/gpu_sweep.py does)."""

import pytest
import torch

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.learn.dqn import DQN, DQNConfig
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.training import make_learner, train
from rlgpu_helpers.snake import rules
from rlgpu_helpers.snake.vec import VecSnake

pytestmark = pytest.mark.gpu
CUDA = "cuda"


def random_actions(steps, num_envs, seed=0, device=CUDA):
    return torch.randint(0, 3, (steps, num_envs), generator=torch.Generator().manual_seed(seed)).to(device)


def outputs(step):
    obs, reward, terminated, truncated, info = step
    return [obs, reward, terminated, truncated, info["final_obs"], info["episode"]["score"]]


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_vec_snake_steps_under_sync_debug_mode_error(obs_type):
    """Any synchronizing CUDA call inside step would raise: with the default action check on."""
    env = VecSnake(4096, 10, 10, obs_type=obs_type, device=CUDA, seed=0)
    actions = random_actions(200, 4096)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for a in actions:
            env.step(a)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_the_audit_finds_no_sync_in_the_hot_loops_and_finds_a_real_one():
    env = VecSnake(1024, 10, 10, device=CUDA, seed=0)
    a = random_actions(1, 1024)[0]
    assert audit_syncs(lambda: env.step(a), CUDA).total == 0
    assert audit_syncs(lambda: env.step(a), CUDA, method="rules").total == 0
    ppo = PPO(PPOConfig(num_envs=256, num_steps=4, device=CUDA))
    assert audit_syncs(lambda: ppo.rollout_step(0), CUDA).total == 0
    dqn = DQN(DQNConfig(num_envs=64, learning_starts=128, batch_size=64, device=CUDA))
    for _ in range(3):
        dqn.act_and_learn(0.5)
    report = audit_syncs(lambda: dqn.act_and_learn(0.5), CUDA)
    assert report.total == 0, report
    x = torch.arange(8.0, device=CUDA)
    found = audit_syncs(lambda: x.sum().item(), CUDA)
    assert found.method == "cuda" and found.total >= 1, found
    assert found.runtime_calls is None or sum(found.runtime_calls.values()) >= 1


def test_a_bad_action_raises_once_the_device_has_caught_up():
    env = VecSnake(64, 8, 8, device=CUDA, seed=1)
    bad = torch.zeros(64, dtype=torch.int64, device=CUDA)
    bad[17] = 5
    before = env.state_dict()
    try:
        env.step(bad)
    except ValueError:
        pass  # the note may already be back
    else:
        torch.cuda.synchronize()
        with pytest.raises(ValueError, match=r"actions\[17\] = 5"):
            env.step(torch.zeros(64, dtype=torch.int64, device=CUDA))
    after = env.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)  # the random stream too


def test_capturing_the_checked_step_is_refused_with_the_way_out():
    from rlgpu_helpers.gpu.graphs import CapturedStep

    env = VecSnake(256, 10, 10, device=CUDA, seed=0)  # check_action_values=True
    step = CapturedStep(env.step, CUDA, warmup=1)
    a = random_actions(2, 256)
    step(a[0])  # the warm-up runs eagerly
    with pytest.raises(RuntimeError, match=r"check_action_values=False"):
        step(a[1])  # the capture


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_the_same_seed_gives_the_same_games_on_cpu_and_cuda(obs_type):
    cpu = VecSnake(512, 8, 9, obs_type=obs_type, device="cpu", seed=7)
    gpu = VecSnake(512, 8, 9, obs_type=obs_type, device=CUDA, seed=7)
    for a in random_actions(300, 512, seed=2, device="cpu"):
        for want, got in zip(outputs(cpu.step(a)), outputs(gpu.step(a.to(CUDA)))):
            assert torch.equal(want, got.cpu())


@pytest.mark.parametrize("obs_type", rules.OBS_TYPES)
def test_a_cuda_graph_of_the_step_replays_the_eager_steps(obs_type):
    """Capture VecSnake.step_tensors once; each replay with new actions must equal an eager step, and
    the random stream (the counter the food placement hashes) must move on at every replay."""
    eager = VecSnake(256, 8, 8, obs_type=obs_type, device=CUDA, seed=3, check_action_values=False)
    graphed = VecSnake(256, 8, 8, obs_type=obs_type, device=CUDA, seed=3, check_action_values=False)
    warmup, actions = random_actions(3, 256, seed=4), random_actions(100, 256, seed=5)
    static_actions = warmup[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
        for a in warmup:
            static_actions.copy_(a)
            graphed.step_tensors(static_actions)
    torch.cuda.current_stream().wait_stream(side)
    for a in warmup:
        eager.step_tensors(a)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = graphed.step_tensors(static_actions)
    counter = graphed._counter.clone()
    for k, a in enumerate(actions, start=1):
        static_actions.copy_(a)
        graph.replay()
        got = [t.clone() for t in outputs(static_out)]  # copied before the next replay overwrites them
        for want, have in zip(outputs(eager.step_tensors(a)), got):
            assert torch.equal(want, have)
        assert int(graphed._counter) == int(counter) + k


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_short_training_run_on_cuda(algorithm):
    settings = dict(height=6, width=6, num_envs=256, device=CUDA, seed=0)
    if algorithm == "ppo":
        settings.update(num_steps=16, hidden=32)
    else:
        settings.update(learning_starts=2_048, batch_size=128)
    result = train(make_learner(algorithm, **settings), steps=50_000, progress=False)
    assert result.env_steps >= 50_000 and result.episodes > 0 and result.mean_score is not None
    assert next(result.learner.model.parameters()).device.type == "cuda"


# --- notebook 05: host-device transfers and the side-stream prefetch --------------------------

def test_every_transfer_variant_runs_on_cuda():
    from rlgpu_helpers.bench.transfers import transfer_bandwidth

    records = transfer_bandwidth(CUDA, sizes=(2**20,), progress=False)
    assert {(r.variant, r.params["direction"]) for r in records} == {
        ("pageable", "host to device"), ("pinned", "host to device"), ("pin_memory() then copy", "host to device"),
        ("non_blocking", "host to device"), ("pageable", "device to host"), ("pinned", "device to host"),
        ("non_blocking", "device to host")}
    assert all(r.unit == "GB/s" and r.value > 0 for r in records)


@pytest.mark.gpu_alone
def test_pinned_copies_to_the_gpu_beat_pageable_ones_at_256_mib():
    from rlgpu_helpers.bench.transfers import pinned_claim, transfer_bandwidth

    records = transfer_bandwidth(CUDA, sizes=(2**28,), variants=("pageable", "pinned"),
                                 directions=("host to device",), progress=False)
    speed = {r.variant: r.value for r in records}
    assert speed["pinned"] > speed["pageable"], records
    assert pinned_claim(records, nbytes=2**28).measured == pytest.approx(speed["pinned"] / speed["pageable"])


def test_the_pinned_buffer_adds_from_the_gpu_without_waiting_and_reads_what_was_added():
    from test_replay_pinned import add_then_read_back

    busy = torch.randn(4096, 4096, device=CUDA)
    product = torch.empty_like(busy)
    # A matmul queued before each add keeps the GPU busy: the copies are still queued when add
    # returns, and when the buffer is read back.
    report = add_then_read_back(CUDA, rows=1024, work=lambda: torch.mm(busy, busy, out=product))
    assert report.total == 0, report


def test_a_non_blocking_copy_to_the_host_is_right_once_synchronized():
    from rlgpu_helpers.gpu.transfer import read_before_sync

    early = read_before_sync(CUDA, elements=2**20, attempts=5)
    assert early.elements == 2**20 and 1 <= early.attempts <= 5
    assert early.wrong_after == 0 and early.first_after == (1, 2, 3, 4, 5)
    assert 0 <= early.wrong_before <= early.elements
    assert early.wrong_before > 0 or early.attempts == 5  # it stops at the first read that shows it


def test_prefetch_on_a_side_stream_gives_the_same_batches_as_direct_copies():
    from rlgpu_helpers.gpu.transfer import prefetch_to_device

    batches = [torch.randn(512, 1024, generator=torch.Generator().manual_seed(i)).pin_memory() for i in range(6)]
    busy = torch.randn(2048, 2048, device=CUDA)
    scratch = torch.empty_like(busy)
    got = []
    for batch in prefetch_to_device(batches, CUDA):
        torch.mm(busy, busy, out=scratch)  # default-stream work while the next copy runs
        got.append(batch * 1)  # used on the default stream, as a learner would
    torch.cuda.synchronize()
    assert len(got) == len(batches)
    for host, on_gpu in zip(batches, got):
        assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), host)


def test_the_prefetch_loop_never_makes_the_host_wait():
    from rlgpu_helpers.gpu.transfer import prefetch_to_device

    batches = [torch.randn(256, 256).pin_memory() for _ in range(4)]
    weight = torch.randn(256, 256, device=CUDA)
    out = torch.empty(256, 256, device=CUDA)

    def loop():
        for batch in prefetch_to_device(batches, CUDA):
            torch.mm(batch, weight, out=out)

    report = audit_syncs(loop, CUDA)
    assert report.total == 0, report


def test_the_prefetch_is_timed_and_its_copies_run_on_their_own_stream(tmp_path):
    from rlgpu_helpers.bench.transfers import prefetch_time
    from rlgpu_helpers.gpu.transfer import PREFETCH, SERIAL, plot_timeline, prefetch_timeline

    records = prefetch_time(CUDA, rows=1024, width=1024, batches=4)
    assert [r.variant for r in records] == [SERIAL, PREFETCH] and all(r.value > 0 for r in records)
    intervals = prefetch_timeline(CUDA, rows=1024, width=1024, trace_path=tmp_path / "trace.json")
    if intervals is None:
        pytest.skip("the profiler recorded no GPU work here (no CUPTI)")
    assert (tmp_path / "trace.json").stat().st_size > 0
    for loop in (SERIAL, PREFETCH):
        assert {i.kind for i in intervals if i.loop == loop} == {"copy", "kernel"}
    copy_streams = {i.stream for i in intervals if i.loop == PREFETCH and i.kind == "copy"}
    kernel_streams = {i.stream for i in intervals if i.loop == PREFETCH and i.kind == "kernel"}
    assert copy_streams.isdisjoint(kernel_streams)
    assert len(plot_timeline(intervals).axes) == 2


def test_the_transfers_suite_on_cuda_reads_the_link_and_shows_an_early_read():
    import shutil

    from rlgpu_helpers.bench.transfers import measure_transfers

    records = measure_transfers(CUDA, progress=False)
    names = {r.name for r in records}
    assert {"transfer", "prefetch", "non_blocking_read"} <= names
    after, = [r for r in records if r.name == "non_blocking_read" and r.variant == "read after synchronize"]
    assert after.value == 0
    if shutil.which("nvidia-smi"):
        link, = [r for r in records if r.name == "host_link"]
        assert link.params["pcie_gen"] >= 1 and link.params["lanes"] >= 1 and link.value > 0


def test_the_precision_policy_of_this_gpu_and_a_step_in_each_of_its_precisions():
    from rlgpu_helpers.gpu.precision import available_precisions, device_traits
    from rlgpu_helpers.learn.train_step import TrainStep
    from rlgpu_helpers.learn.tune import precision_policy

    traits = device_traits(CUDA)
    policy = precision_policy(CUDA, verbose=False)
    assert policy.precision == ("bf16" if traits.capability >= (8, 0) else "fp16" if traits.capability >= (7, 0)
                                else "fp32")
    for precision in available_precisions(traits):
        step = TrainStep(precision, 64, 256, CUDA)
        first = step.loss().item()
        for _ in range(20):
            step()
        assert step.loss().item() < first, precision


def test_the_grad_scaler_on_cuda_skips_bad_steps_and_adapts():
    from rlgpu_helpers.learn.train_step import scaler_trace

    trace = scaler_trace(CUDA, steps=14, poison_at=(9,), init_scale=2.0**20, growth_interval=2)
    assert trace[9].skipped and trace[9].next_scale == trace[9].scale / 2
    assert any(not row.skipped and row.next_scale == 2 * row.scale for row in trace)


def test_the_precision_suite_on_cuda_measures_bf16_from_width_1024():
    from rlgpu_helpers.bench.precision import NAME, step_records

    records = step_records(CUDA, hiddens=(64, 1024), progress=False)
    assert {r.params["hidden"] for r in records if r.name == NAME and r.variant == "fp32"} == {64, 1024}


# ---------------------------------------------------------------------------- notebook 06

@pytest.mark.gpu_alone
def test_the_search_finds_the_cards_limit_and_the_peak_counts_what_a_step_allocates():
    from rlgpu_helpers.gpu.memory import find_max_batch_size, peak_memory

    assert peak_memory(lambda: torch.empty(2**20, dtype=torch.uint8, device=CUDA), CUDA) == 2**20
    free, _ = torch.cuda.mem_get_info()
    search = find_max_batch_size(lambda batch: torch.empty(batch, 2**20, dtype=torch.uint8, device=CUDA), CUDA,
                                 start=64)
    # a batch is `batch` MiB: the largest that fits is close to the free memory, and one more does not fit
    assert search.first_failure == search.largest_fit + 1
    assert 0.8 * free / 2**20 <= search.largest_fit <= 1.05 * free / 2**20
    assert torch.cuda.memory_allocated() < 2**30  # nothing of the failed tries is kept


@pytest.mark.gpu_alone
def test_the_batch_size_suite_on_cuda_finds_the_limit_within_ten_percent_and_reads_nvml():
    from rlgpu_helpers.bench.batch_size import MAX_NAME, TARGET_RATIO, batch_sweep, max_batch_search
    from rlgpu_helpers.gpu.monitor import NVML_MEANING, UtilizationMonitor

    # The prediction's line runs through the largest half of the batches. From 2**22 on, every per-sample tensor of
    # the MLP's step is 10 MiB or more and what the allocator reserves grows in a straight line; below, it gives
    # those tensors 20 MiB buffers (the step's allocations replayed through the allocator's rules: 1,602 B per
    # sample at 2**20, 1,848 from 2**22 on, against 1,592 B its tensors hold).
    sweep = batch_sweep(CUDA, networks=("mlp",), batch_sizes=(2**18, 2**20, 2**22, 2**24), progress=False)
    reserved = {r.params["batch_size"]: r.value for r in sweep if r.metric == "peak reserved"}
    peaks = {r.params["batch_size"]: r.value for r in sweep if r.metric == "peak memory"}
    assert reserved.keys() == peaks.keys() and reserved[2**24] > peaks[2**24]
    found = {r.metric: r.value for r in max_batch_search(CUDA, sweep, networks=("mlp",), progress=False)
             if r.name == MAX_NAME}
    assert abs(found["largest fit"] / found["predicted"] - 1) <= TARGET_RATIO
    monitor = UtilizationMonitor(CUDA, interval=0.05)
    if monitor.source != NVML_MEANING:
        pytest.skip("nvidia-ml-py is not installed (extra `gpu`)")
    with monitor:
        x = torch.randn(4096, 4096, device=CUDA)
        for _ in range(200):
            x = x @ x / 64
        torch.cuda.synchronize()
    assert max(s.utilization_pct for s in monitor.samples) > 0
