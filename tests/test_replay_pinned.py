"""PinnedReplayBuffer: each sample returns the batch prepared by the previous call, equal to a direct
gather of the same indices, and starts the next one. (On CUDA: tests/test_gpu_cuda.py.)"""

import torch

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
