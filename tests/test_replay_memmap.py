"""MemmapReplayBuffer: closed and reopened it holds the same transitions; its files are sparse; a
foreign or corrupt folder is refused with nothing written."""

import json
import os

import numpy as np
import pytest
import torch

from rlgpu_helpers.replay.memmap import HEADER, MemmapReplayBuffer
from rlgpu_helpers.replay.tensor import TensorReplayBuffer


def add(buffer, start, count, obs_shape=(2,)):
    ids = torch.arange(start, start + count, dtype=torch.float32)
    obs = ids.view(-1, *[1] * len(obs_shape)).expand(count, *obs_shape).clone()
    buffer.add(obs, ids.long() % 3, ids, -obs, ids % 2 == 0)


def folder_contents(path):
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def test_a_buffer_closed_and_reopened_holds_the_same_transitions(tmp_path):
    path = tmp_path / "replay"
    with MemmapReplayBuffer(6, (2,), path=path) as buffer:
        add(buffer, 0, 4)
        add(buffer, 4, 4)  # wrapped
        state, pos = buffer.transitions(), buffer.pos
    assert buffer.closed
    reopened = MemmapReplayBuffer.open(path)
    assert (len(reopened), reopened.pos, reopened.capacity, reopened.obs_shape) == (6, pos, 6, (2,))
    again = reopened.transitions()
    assert all(torch.equal(again[name], state[name]) for name in state if name != "size")
    add(reopened, 8, 1)  # and it goes on where it stopped: 8 overwrites the oldest, 2
    assert reopened.transitions()["rewards"].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    reopened.close()
    same = MemmapReplayBuffer(6, (2,), path=path)  # the constructor opens it too
    assert same.transitions()["rewards"].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_reopening_finds_every_finished_add_flushed_or_not(tmp_path):
    buffer = MemmapReplayBuffer(4, (2,), path=tmp_path)
    add(buffer, 0, 3)
    add(buffer, 3, 2)  # through the journal: it overwrites a counted row
    del buffer  # never closed nor flushed: the count is in the mapped file
    reopened = MemmapReplayBuffer.open(tmp_path)
    assert reopened.transitions()["rewards"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_samples_come_from_the_files(tmp_path):
    buffer = MemmapReplayBuffer(100, (3, 2), path=tmp_path)
    add(buffer, 0, 40, (3, 2))
    plain = TensorReplayBuffer(100, (3, 2))
    plain.load_state_dict({**buffer.transitions(), "size": len(buffer)})
    got, want = buffer.sample(64, torch.Generator().manual_seed(2)), plain.sample(64, torch.Generator().manual_seed(2))
    assert all(torch.equal(got[name], want[name]) for name in want)


def test_the_files_are_sparse_so_capacity_can_exceed_ram(tmp_path):
    capacity = 2**22  # 4M transitions of 300 floats: 9.6 GiB of obs and next_obs, most never written
    buffer = MemmapReplayBuffer(capacity, (3, 10, 10), path=tmp_path)
    add(buffer, 0, 8, (3, 10, 10))
    obs_file = tmp_path / "obs.bin"
    assert obs_file.stat().st_size == capacity * 300 * 4
    assert obs_file.stat().st_blocks * 512 < 64 * 2**20  # a few pages written, not gigabytes
    assert buffer.memory_bytes()["files"] >= 2 * capacity * 300 * 4
    assert buffer.sample(4)["obs"].shape == (4, 3, 10, 10)
    buffer.close()


def test_a_temporary_buffer_deletes_its_folder_on_close():
    buffer = MemmapReplayBuffer(8, (2,))
    add(buffer, 0, 2)
    path = buffer.path
    assert (path / HEADER).is_file()
    buffer.close()
    assert not path.exists()


def test_a_closed_buffer_says_so(tmp_path):
    buffer = MemmapReplayBuffer(8, (2,), path=tmp_path)
    add(buffer, 0, 2)
    buffer.close()
    buffer.close()  # closing twice is fine
    for call in (lambda: add(buffer, 0, 1), lambda: buffer.sample(2), buffer.state_dict, buffer.flush):
        with pytest.raises(ValueError, match="is closed"):
            call()


def saved_buffer(path):
    with MemmapReplayBuffer(8, (2,), path=path) as buffer:
        add(buffer, 0, 5)
    return folder_contents(path)


@pytest.mark.parametrize("spoil, message", [
    (lambda p: (p / HEADER).write_text("{not json"), "header.json is not valid JSON"),
    (lambda p: (p / HEADER).write_text('{"format": "other"}'), "not a replay buffer header"),
    (lambda p: (p / HEADER).write_text(json.dumps({**json.loads((p / HEADER).read_text()),
                                                   "format": "rlgpu-replay-memmap/1"})), "a buffer of an older format"),
    (lambda p: (p / "count.bin").write_bytes(b"\0" * 7), r"count.bin has 7 bytes, expected 32 bytes"),
    (lambda p: (p / "count.bin").write_bytes(np.array([-1, 0, 0, 0]).tobytes()),
     r"count.bin holds \[-1, 0, 0\]: a corrupt buffer folder"),
    (lambda p: (p / "count.bin").write_bytes(np.array([5, 3, 0, 0]).tobytes()),
     r"count.bin holds \[5, 3, 0\]: a corrupt buffer folder"),
    (lambda p: (p / HEADER).write_text(json.dumps({**json.loads((p / HEADER).read_text()), "id": 7})),
     "id=7 must be 32 hex digits"),
    (lambda p: (p / HEADER).write_text(json.dumps({**json.loads((p / HEADER).read_text()), "capacity": "8"})),
     "capacity='8' must be an int"),
    (lambda p: (p / HEADER).write_text(json.dumps({**json.loads((p / HEADER).read_text()),
                                                   "dtypes": {"obs": "float64"}})), "dtypes="),
    (lambda p: (p / "rewards.bin").write_bytes(b"\0" * 7), r"rewards.bin has 7 bytes, expected 32 bytes"),
    (lambda p: (p / "actions.bin").unlink(), "actions.bin is missing"),
])
def test_a_corrupt_folder_is_refused_and_left_as_it_was(tmp_path, spoil, message):
    saved_buffer(tmp_path)
    spoil(tmp_path)
    before = folder_contents(tmp_path)
    with pytest.raises(ValueError, match=message):
        MemmapReplayBuffer.open(tmp_path)
    with pytest.raises(ValueError, match=message):
        MemmapReplayBuffer(8, (2,), path=tmp_path)
    assert folder_contents(tmp_path) == before


def test_a_foreign_folder_or_a_mismatched_buffer_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files but no header.json: not a replay buffer's folder"):
        MemmapReplayBuffer(8, (2,), path=tmp_path)
    with pytest.raises(ValueError, match="holds no replay buffer"):
        MemmapReplayBuffer.open(tmp_path / "missing")
    assert folder_contents(tmp_path) == {"notes.txt": b"mine"}
    with pytest.raises(ValueError, match="is a file, not a folder"):
        MemmapReplayBuffer(8, (2,), path=tmp_path / "notes.txt")
    saved = saved_buffer(tmp_path / "buffer")
    with pytest.raises(ValueError, match=r"capacity=16 does not match the buffer in .* \(capacity 8\)"):
        MemmapReplayBuffer(16, (2,), path=tmp_path / "buffer")
    with pytest.raises(ValueError, match=r"obs_shape=\(3,\) does not match"):
        MemmapReplayBuffer(8, (3,), path=tmp_path / "buffer")
    with pytest.raises(ValueError, match="device='tpu' is not a device"):
        MemmapReplayBuffer(8, (2,), "tpu", path=tmp_path / "new")
    assert folder_contents(tmp_path / "buffer") == saved and not (tmp_path / "new").exists()
