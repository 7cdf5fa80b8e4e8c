"""PinnedReplayBuffer: each sample returns the batch prepared by the previous call, equal to a direct
gather of the same indices, and starts the next one. (On CUDA: tests/test_gpu_cuda.py.)"""

import torch

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.replay.base import DTYPES, FIELDS
from rlgpu_helpers.replay.pinned import PinnedReplayBuffer
from rlgpu_helpers.replay.tensor import TensorReplayBuffer


def filled(capacity=64, count=50):
    buffer = PinnedReplayBuffer(capacity, (3,))
    ids = torch.arange(count, dtype=torch.float32)
    buffer.add(ids[:, None].repeat(1, 3), ids.long() % 3, ids, -ids[:, None].repeat(1, 3), ids % 2 == 0)
    return buffer


def test_the_prefetched_batch_equals_a_direct_gather_of_its_indices():
    buffer = filled()
    first = buffer.sample(32)
    for _ in range(5):
        batch = buffer.sample(32)
        direct = buffer.gather(batch["indices"])
        assert set(direct) == set(batch) - {"indices"}
        assert all(torch.equal(batch[name], direct[name]) for name in direct)
        assert torch.equal(batch["rewards"], batch["indices"].float())  # slot i holds transition i
    assert not torch.equal(first["indices"], batch["indices"])


def test_a_sample_is_the_batch_drawn_during_the_previous_call():
    """The same generator gives the pinned buffer and a plain tensor buffer the same draws, one
    call apart: the first call draws two batches (the one it returns and the next)."""
    pinned, plain = filled(), TensorReplayBuffer(64, (3,))
    plain.load_state_dict(pinned.state_dict())
    g_pinned, g_plain = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    got = [pinned.sample(16, g_pinned)["indices"] for _ in range(4)]
    want = [plain.sample(16, g_plain)["indices"] for _ in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_new_batch_size_or_a_loaded_state_drops_the_prefetched_batch():
    buffer = filled()
    buffer.sample(8)
    assert buffer.sample(12)["indices"].shape == (12,)
    other = filled(count=10)
    buffer.load_state_dict(other.state_dict())
    assert buffer.sample(12)["rewards"].max() < 10  # nothing from before the load


def test_without_cuda_the_storage_is_ordinary_memory():
    buffer = filled()
    assert not buffer.pinned and buffer.device.type == "cpu"
    assert not buffer.obs.is_pinned() and list(buffer.memory_bytes()) == ["host"]


def random_transitions(rows, device):
    """``rows`` random transitions made on ``device``, as an env would hand them to ``add``."""
    return dict(obs=torch.randn(rows, 11, device=device), actions=torch.randint(0, 3, (rows,), device=device),
                rewards=torch.randn(rows, device=device), next_obs=torch.randn(rows, 11, device=device),
                terminated=torch.rand(rows, device=device) < 0.1)


def add_then_read_back(device, rows, work=lambda: None):
    """Fill a pinned buffer with four adds of ``rows`` transitions made on ``device``, ``work()``
    queued before each (on a GPU the copies then wait behind it), and check that it reads back
    exactly what was added. Returns the sync audit of the last three adds.

    The three adds are audited in one call without a warm-up call (which would add them twice),
    so their copies may all be in flight when ``gather`` reads the storage: it waits on the last
    add's event only, as ``sample`` does.
    """
    buffer = PinnedReplayBuffer(4 * rows, (11,), device)
    added = [random_transitions(rows, device) for _ in range(4)]

    def add(fields):
        work()
        buffer.add(**fields)

    add(added[0])  # one-time set-up, outside the audit
    report = audit_syncs(lambda: [add(fields) for fields in added[1:]], device, warmup=0)
    gathered = buffer.gather(torch.arange(len(buffer)))
    stored = buffer.state_dict()
    for name in FIELDS:
        expected = torch.cat([fields[name] for fields in added]).to("cpu", DTYPES[name])
        assert torch.equal(gathered[name].cpu(), expected), name
        assert torch.equal(stored[name], expected), name
    batch = buffer.sample(256)
    assert torch.equal(batch["obs"].cpu(), stored["obs"][batch["indices"].cpu()])
    return report


def test_add_does_not_wait_and_everything_added_is_read_back():
    """On the host; on a GPU with the copies still in flight: tests/test_gpu_cuda.py."""
    report = add_then_read_back("cpu", rows=16)
    assert report.total == 0, report
