"""MemmapReplayBuffer under faults: writers killed at random moments leave only whole transitions
among the counted rows, a checkpoint refers to the files and resumes after a kill, one buffer
holds a folder at a time, creation survives a full disk, and temporary folders do not pile up."""

import collections
import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from rlgpu_helpers.core.files import LockHeld
from rlgpu_helpers.replay import TensorReplayBuffer
from rlgpu_helpers.replay import memmap as memmap_module
from rlgpu_helpers.replay.memmap import (
    COUNT,
    HEADER,
    MemmapReplayBuffer,
    remove_stale_temporaries,
)

CAPACITY, WIDTH = 256, 2048  # 8 KiB observations: an add of many rows takes long enough to be cut

WRITER = textwrap.dedent(f"""
    import io, random, sys, torch
    from rlgpu_helpers.core.files import atomic_write
    from rlgpu_helpers.replay.memmap import MemmapReplayBuffer
    path, seed, checkpoint_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    buffer = MemmapReplayBuffer({CAPACITY}, ({WIDTH},), path=path)
    rng = random.Random(seed)
    print("ready", flush=True)
    adds = 0
    while True:
        count = rng.randint(1, {CAPACITY})
        ids = torch.arange(buffer.written, buffer.written + count, dtype=torch.float32)
        obs = ids[:, None].expand(count, {WIDTH})
        buffer.add(obs, ids.long() % 3, ids, -obs, ids % 2)
        adds += 1
        if adds == checkpoint_after:
            state = buffer.state_dict()
            saved = io.BytesIO()
            torch.save(state, saved)
            atomic_write(path + ".ckpt", saved.getvalue())
            print("saved", flush=True)
""")


def run_writer(path, seed, checkpoint_after=-1, wait_for="ready"):
    """Start a writer, wait until it says ``wait_for``, let it write a random while, then SIGKILL it."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(seed), str(checkpoint_after)],
                              stdout=subprocess.PIPE, text=True)
    try:
        while (line := writer.stdout.readline().strip()) != wait_for:
            assert line, f"the writer ended before saying {wait_for!r}"
        time.sleep(random.Random(seed).uniform(0.1, 0.6))
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()


def assert_whole(buffer, consecutive=True):
    """Every counted row is one transition: its fields all encode the same id."""
    rows = buffer.transitions()
    ids = rows["rewards"]
    assert torch.equal(rows["obs"], ids[:, None].expand(-1, WIDTH))
    assert torch.equal(rows["next_obs"], -rows["obs"])
    assert torch.equal(rows["actions"], ids.long() % 3)
    assert torch.equal(rows["terminated"], ids % 2)
    if consecutive:  # and they are the newest transitions ever added, oldest first
        assert ids.tolist() == list(range(buffer.written - len(buffer), buffer.written))


def test_writers_killed_at_random_moments_leave_only_whole_transitions(tmp_path):
    path = tmp_path / "replay"
    pending = collections.Counter()
    for seed in range(8):  # each writer goes on from what the killed one before it left
        run_writer(path, seed)
        pending[int(np.fromfile(path / COUNT, dtype=np.int64)[1]) > 0] += 1  # killed inside a journaled add?
        with MemmapReplayBuffer.open(path) as buffer:
            assert_whole(buffer)
            written = buffer.written
    assert written > CAPACITY  # the ring wrapped: later adds overwrote counted rows, through the journal
    print(f"kills inside a journaled add: {pending[True]} of 8")


def test_a_checkpoint_refers_to_the_files_and_resumes_after_a_kill(tmp_path):
    path = tmp_path / "replay"
    run_writer(path, seed=1, checkpoint_after=3, wait_for="saved")  # it adds on after the checkpoint
    state = torch.load(str(path) + ".ckpt", weights_only=True)
    assert set(state) == {"memmap", "id", "written", "size"}  # no rows: a reference, not a copy
    with MemmapReplayBuffer.open(path) as buffer:
        assert buffer.written >= state["written"]
        buffer.load_state_dict(state)
        assert (buffer.written, len(buffer)) == (state["written"], state["size"])
        assert_whole(buffer, consecutive=False)  # slots the run overwrote since hold newer, whole ones
        ids = torch.arange(buffer.written, buffer.written + 5, dtype=torch.float32)
        buffer.add(ids[:, None].expand(5, WIDTH), ids.long() % 3, ids, -ids[:, None].expand(5, WIDTH), ids % 2)
        assert buffer.written == state["written"] + 5
        assert_whole(buffer, consecutive=False)


def small_add(buffer, start, count):
    ids = torch.arange(start, start + count, dtype=torch.float32)
    buffer.add(ids[:, None].expand(count, 2), ids.long() % 3, ids, -ids[:, None].expand(count, 2), ids % 2)


def test_a_reference_loads_only_into_its_own_folder_and_count(tmp_path):
    with MemmapReplayBuffer(8, (2,), path=tmp_path / "a") as buffer:
        small_add(buffer, 0, 3)
        state = buffer.state_dict()
    with (MemmapReplayBuffer(8, (2,), path=tmp_path / "b") as other,
          pytest.raises(ValueError, match="state refers to the buffer .* open that folder to load it")):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="only a MemmapReplayBuffer on that folder can load it"):
        TensorReplayBuffer(8, (2,)).load_state_dict(state)
    with MemmapReplayBuffer.open(tmp_path / "a") as same:
        with pytest.raises(ValueError, match=r"state\['written'\]=9 must be an int in \[0, 3\]"):
            same.load_state_dict({**state, "written": 9, "size": 8})
        small_add(same, 3, 2)
        same.load_state_dict(state)
        assert len(same) == 3 and same.transitions()["rewards"].tolist() == [0.0, 1.0, 2.0]


def test_one_buffer_holds_a_folder_at_a_time(tmp_path):
    first = MemmapReplayBuffer(8, (2,), path=tmp_path)
    small_add(first, 0, 2)
    for second in (lambda: MemmapReplayBuffer(8, (2,), path=tmp_path), lambda: MemmapReplayBuffer.open(tmp_path)):
        with pytest.raises(LockHeld, match=f"held by process {os.getpid()}"):
            second()
    assert len(first) == 2
    first.close()
    with MemmapReplayBuffer.open(tmp_path) as again:
        assert len(again) == 2


def test_a_creation_that_runs_out_of_disk_can_be_retried(tmp_path, monkeypatch):
    def full_disk(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    given = tmp_path / "given"
    given.mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(MemmapReplayBuffer, "_write_header", full_disk)
        for path in (given, tmp_path / "new"):
            with pytest.raises(OSError, match="No space left"):
                MemmapReplayBuffer(8, (2,), path=path)
    assert os.listdir(given) == ["lock"] and not (tmp_path / "new").exists()
    (given / "obs.bin").write_bytes(b"half")  # what a creation killed half-way leaves
    with MemmapReplayBuffer(8, (2,), path=given) as buffer:
        small_add(buffer, 0, 2)
    assert (given / HEADER).is_file() and len(MemmapReplayBuffer.open(given)) == 2


def test_a_capacity_the_disk_cannot_hold_is_refused_before_any_file(tmp_path, monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(memmap_module.shutil, "disk_usage", lambda path: usage(2000, 1000, 1000))
    with pytest.raises(ValueError, match=r"capacity=100 needs 10,400 bytes .* of disk space in .*, but 1,000 bytes"):
        MemmapReplayBuffer(100, (11,), path=tmp_path / "new")
    assert not (tmp_path / "new").exists()


HOLDER = textwrap.dedent("""
    import sys, time
    from rlgpu_helpers.replay.memmap import MemmapReplayBuffer
    buffer = MemmapReplayBuffer(8, (2,))
    print(buffer.path, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(60)
""")


def temporary_buffer_of_a_process(tmp_path, how):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, how], stdout=subprocess.PIPE, text=True, env=env)
    path = holder.stdout.readline().strip()
    if how == "wait":
        holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
    return path


def test_temporary_folders_go_at_exit_and_those_of_killed_processes_at_the_next_start(tmp_path, monkeypatch):
    assert not os.path.exists(temporary_buffer_of_a_process(tmp_path, "exit"))  # never closed: gone at exit
    killed = temporary_buffer_of_a_process(tmp_path, "wait")
    assert os.path.isdir(killed)
    monkeypatch.setattr(memmap_module.tempfile, "tempdir", str(tmp_path))
    live = MemmapReplayBuffer(8, (2,))  # the next start
    assert not os.path.exists(killed) and str(live.path).startswith(str(tmp_path))
    assert remove_stale_temporaries(tmp_path) == []  # a live buffer's folder stays
    assert live.path.is_dir()
    live.close()
    assert not live.path.exists()
