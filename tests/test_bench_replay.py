"""The ``replay`` bench suite (notebook 05): samples/s, memory, DQN steps/s, targets and verdicts."""

import pytest
import torch

from rlgpu_helpers.bench import replay
from rlgpu_helpers.bench.replay import (
    LABELS,
    TORCHRL,
    dqn_table,
    dqn_throughput,
    memory_table,
    replay_claim_checks,
    sampling_table,
    sampling_throughput,
    target_checks,
)
from rlgpu_helpers.measure.claims import claim_checks_table
from rlgpu_helpers.measure.records import Record


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_sampling_measures_each_buffer_at_each_batch_size_and_weighs_its_storage():
    records = sampling_throughput("cpu", kinds=("tensor", "deque", "memmap"), batch_sizes=(8, 64), capacity=300,
                                  torchrl=False, progress=False, machine="m")
    sampled = [r for r in records if r.name == "replay_sample"]
    assert [(r.variant, r.params["batch_size"]) for r in sampled] == [
        (LABELS[kind], b) for kind in ("tensor", "deque", "memmap") for b in (8, 64)]
    assert all(r.unit == "samples/s" and r.value > 0 and r.machine == "m" for r in sampled)
    assert all(r.params["capacity"] == 300 and r.params["device"] == "cpu" for r in sampled)
    memory = {(r.variant, r.params["place"]): r.value for r in records if r.name == "replay_memory"}
    # 11 features twice, an action, a reward, a flag: 2 * 44 + 8 + 4 + 4 = 104 bytes per transition
    assert memory[(LABELS["tensor"], "host")] == pytest.approx(300 * 104 / 2**20)
    assert memory[(LABELS["memmap"], "files")] == pytest.approx(300 * 104 / 2**20)
    assert memory[(LABELS["deque"], "host")] > memory[(LABELS["tensor"], "host")]  # Python objects weigh more
    text = str(sampling_table(records))
    assert "batch 64 (samples/s)" in text and LABELS["deque"] in text
    assert "per transition (bytes)" in str(memory_table(records)) and "104" in str(memory_table(records))


def test_torchrl_joins_the_same_run_when_it_is_installed(capsys):
    pytest.importorskip("torchrl")
    records = sampling_throughput("cpu", kinds=("tensor", "prioritized"), batch_sizes=(16,), capacity=200,
                                  progress=False, machine="m")
    variants = {r.variant for r in records if r.name == "replay_sample"}
    assert TORCHRL["tensor"] in variants
    # TorchRL's prioritized buffer needs its compiled extension: measured, or said why not
    assert TORCHRL["prioritized"] in variants or "not measured" in capsys.readouterr().out
    assert "INFO" not in capsys.readouterr().out  # its log lines are kept quiet


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="kinds"):
        sampling_throughput("cpu", kinds=("fast",))
    with pytest.raises(ValueError, match="batch_sizes"):
        sampling_throughput("cpu", batch_sizes=(0,))
    with pytest.raises(ValueError, match="seconds"):
        dqn_throughput("cpu", seconds=0)


def test_dqn_throughput_trains_with_each_buffer():
    records = dqn_throughput("cpu", kinds=("tensor", "deque"), seconds=0.05, progress=False, machine="m",
                             num_envs=8, batch_size=16)
    assert [r.variant for r in records] == [LABELS["tensor"], LABELS["deque"]]
    assert all(r.value > 0 and r.params == {"device": "cpu", "num_envs": 8, "batch_size": 16} for r in records)
    assert "1.00x" in str(dqn_table(records))


def rate(variant, batch, value, machine="m", device="cpu", spread=0.0):
    return Record("replay_sample", variant, "throughput", value, "samples/s",
                  {"batch_size": batch, "capacity": 1000, "device": device}, spread, machine)


def test_targets_are_met_or_missed_from_the_ratios():
    records = [rate(LABELS["tensor"], 256, 3000.0), rate(LABELS["deque"], 256, 100.0),
               rate(TORCHRL["tensor"], 256, 4000.0)]
    text = str(target_checks(records))
    lines = {line.split(" (cpu")[0]: line for line in text.splitlines()[2:]}
    assert lines["TensorReplayBuffer ≥ 20x DequeReplay, batch 256"].rstrip().endswith("met")
    assert lines[f"TensorReplayBuffer ≥ {TORCHRL['tensor']}, batch 256"].rstrip().endswith("missed")
    assert "30" in lines["TensorReplayBuffer ≥ 20x DequeReplay, batch 256"]
    gpu = [rate(LABELS[kind], 4096, value, device="cuda") for kind, value in
           (("host", 100.0), ("tensor", 2000.0), ("pinned", 150.0))]
    gpu_text = str(target_checks(gpu))
    assert "≥ 10x" in gpu_text and "≥ 2x" in gpu_text and "missed" in gpu_text and " met" in gpu_text


def test_the_guides_replay_claims_need_a_gpu_record():
    cpu_only = replay_claim_checks([rate(LABELS["tensor"], 4096, 1.0)])
    assert [c.outcome for c in cpu_only] == ["not measured", "not measured"]
    assert all("no GPU record" in c.answered_by for c in cpu_only)
    reference = [rate(LABELS[kind], 4096, value, machine="h100", device="cuda", spread=value / 100)
                 for kind, value in (("host", 100.0), ("tensor", 2000.0), ("pinned", 250.0))]
    pinned, on_gpu = replay_claim_checks([], reference)
    assert pinned.verdict.measured == pytest.approx(2.5) and pinned.outcome == "held"
    assert on_gpu.verdict.measured == pytest.approx(20.0) and on_gpu.outcome == "held"
    table = str(claim_checks_table([pinned], answered_by="answered here by"))
    assert "answered here by" in table and "h100" in table


def test_the_suite_is_registered():
    from rlgpu_helpers.bench.suites import SUITES

    assert SUITES["replay"].run is replay.measure_replay


def test_the_sync_audit_finds_none_in_the_tensor_buffers_and_finds_the_deques():
    text = str(replay.buffer_sync_table("cpu", kinds=("tensor", "prioritized", "deque"), batch_size=16))
    rows = [line.split() for line in text.splitlines()[2:]]
    counts = {(row[0], row[1]): int(row[2]) for row in rows}
    assert counts[("TensorReplayBuffer", "add")] == counts[("TensorReplayBuffer", "sample")] == 0
    assert counts[("PrioritizedReplayBuffer", "update_priorities")] == 0
    assert counts[("DequeReplay", "add")] > 0 and "tolist" in text


def test_runtime_waits_names_each_waiting_call_or_says_none():
    assert replay.runtime_waits({"cudaEventSynchronize": 1, "cudaStreamSynchronize": 0}) == "cudaEventSynchronize x1"
    assert replay.runtime_waits({}) == "none"
    assert replay.runtime_waits(None) == "profiler could not trace CUDA"


def test_the_sync_table_has_no_runtime_column_without_cuda():
    table = replay.buffer_sync_table("cpu", kinds=("pinned",), batch_size=8)
    assert table.columns[-1] == "audit method" and [row[:3] for row in table.rows] == [
        ["PinnedReplayBuffer", "add", "0"], ["PinnedReplayBuffer", "sample", "0"]]


def test_the_priority_table_sets_each_formula_beside_the_draws():
    from rlgpu_helpers.replay.prioritized import PrioritizedReplayBuffer

    buffer = PrioritizedReplayBuffer(4, (2,), alpha=0.5, beta=0.5)
    buffer.add(torch.zeros(4, 2), torch.zeros(4, dtype=torch.int64), torch.zeros(4), torch.zeros(4, 2), torch.zeros(4))
    priorities = torch.tensor([1.0, 4.0, 9.0, 16.0])  # p ** 0.5 = 1, 2, 3, 4: P = 0.1, 0.2, 0.3, 0.4
    buffer.update_priorities(torch.arange(4), priorities)
    sample = buffer.sample(20_000, generator=torch.Generator().manual_seed(0))
    table = replay.priority_draws_table(priorities, sample, alpha=0.5, beta=0.5)
    assert [row[2] for row in table.rows] == ["0.1000", "0.2000", "0.3000", "0.4000"]
    assert [row[4] for row in table.rows] == ["1.0000", f"{2 ** -0.5:.4f}", f"{3 ** -0.5:.4f}", "0.5000"]
    assert [row[5] for row in table.rows] == [row[4] for row in table.rows]  # the sample's weights are the formula's
    assert all(abs(float(row[3]) - float(row[2])) < 0.02 for row in table.rows)
    one_slot = {"indices": torch.zeros(3, dtype=torch.int64), "weights": torch.ones(3)}
    assert replay.priority_draws_table(priorities, one_slot, alpha=0.5, beta=0.5).rows[1][5] == "not drawn"


@pytest.mark.parametrize("priorities, sample, message", [
    (torch.ones(2, 2), {"indices": torch.zeros(1, dtype=torch.int64), "weights": torch.ones(1)}, "1-d tensor"),
    (torch.ones(2), {"indices": torch.zeros(1, dtype=torch.int64)}, "'indices' and 'weights'"),
    (torch.ones(2), {"indices": torch.tensor([5]), "weights": torch.ones(1)}, "outside the 2 slots"),
])
def test_the_priority_table_refuses_what_it_cannot_read(priorities, sample, message):
    with pytest.raises(ValueError, match=message):
        replay.priority_draws_table(priorities, sample, alpha=0.6, beta=0.4)
