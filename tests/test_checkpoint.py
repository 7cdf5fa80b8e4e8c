"""Checkpoints are written atomically and unreadable ones are reported clearly."""

import os
import stat

import pytest
import torch

from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.learn import checkpoint
from rlgpu_helpers.learn.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)


def test_round_trip(tmp_path):
    state = {"weights": torch.arange(5.0), "step": 7, "curve": [{"seconds": 1.5}]}
    path = save_checkpoint(tmp_path / "run" / "checkpoint.pt", state)
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["weights"], state["weights"]) and loaded["step"] == 7
    assert load_checkpoint(tmp_path / "run")["curve"] == [{"seconds": 1.5}]  # a folder works too


def test_a_saved_file_has_the_mode_any_new_file_gets(tmp_path):
    old = os.umask(0o027)
    try:
        path = save_checkpoint(tmp_path / "checkpoint.pt", {"step": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"step": 1})

    def dies_half_way(obj, f):
        f.write(b"PK\x03\x04 half a zip file")
        raise KeyboardInterrupt  # like a kill arriving during the write

    monkeypatch.setattr(checkpoint.torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no checkpoint at"),
        (b"not a checkpoint at all", "not a checkpoint written by this package"),
        (b"PK\x03\x04 truncated", "not a checkpoint written by this package"),
    ],
)
def test_unreadable_files_raise_checkpoint_errors(tmp_path, content, message):
    path = tmp_path / "checkpoint.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_a_checkpoint_must_hold_a_dict(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointError, match="holds a list"):
        load_checkpoint(path)


def test_a_run_removes_the_unfinished_checkpoints_of_killed_runs_and_keeps_the_rest(tmp_path, capsys):
    import contextlib

    from rlgpu_helpers.learn.training import hold_run_folder

    save_checkpoint(tmp_path / "checkpoint.pt", {"step": 1})
    left = [tmp_path / "checkpoint.pt.a1b2.tmp", tmp_path / "checkpoint.pt.zz_9.tmp"]
    kept = [tmp_path / "other.pt.a1b2.tmp", tmp_path / "notes.tmp"]
    for path in left + kept:
        path.write_bytes(b"x" * 100)
    with contextlib.ExitStack() as stack:
        hold_run_folder(stack, tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["checkpoint.pt", "train.lock", *(p.name for p in kept)])
    printed = capsys.readouterr().out
    assert all(f"Removed {path}" in printed for path in left)
    assert load_checkpoint(tmp_path)["step"] == 1


def test_the_folder_is_flushed_after_the_rename(tmp_path, monkeypatch):
    import os

    synced, real_fsync = [], os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = save_checkpoint(tmp_path / "checkpoint.pt", {"step": 1})
    assert len(synced) == 2 and synced[1] == str(tmp_path.resolve())  # the file's data, then the folder
    assert synced[0].startswith(str(path)) and synced[0].endswith(".tmp")


def test_a_checkpoint_whose_bytes_changed_is_refused_as_corrupt_naming_the_file(tmp_path):
    """Bit rot: 16 bytes flipped at any of 9 places of a real agent file, never a load with other weights."""
    import random

    from rlgpu_helpers.learn.agents import load_agent, save_agent
    from rlgpu_helpers.learn.ppo import PPO, PPOConfig

    path = save_agent(tmp_path / "agent.pt", PPO(PPOConfig(height=5, width=5, num_envs=4, num_steps=4, hidden=8)))
    assert checkpoint.has_checksum(path) and load_agent(path).config["hidden"] == 8
    good = path.read_bytes()
    rng = random.Random(0)
    for place in [0, 5, 20, len(good) // 4, len(good) // 2, 3 * len(good) // 4, len(good) - 100, len(good) - 16,
                  rng.randrange(len(good) - 16)]:
        bad = bytearray(good)
        for i in range(place, min(place + 16, len(bad))):
            bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match=rf"^{path}(: | is )"):
            load_agent(path)
    path.write_bytes(good)
    assert load_agent(path).config["hidden"] == 8


def test_a_file_saved_before_checksums_still_loads_and_says_it_has_none(tmp_path, capsys):
    from rlgpu_helpers.cli import main
    from rlgpu_helpers.learn.agents import AGENT_FORMAT, save_agent
    from rlgpu_helpers.learn.ppo import PPO, PPOConfig

    path = save_agent(tmp_path / "agent.pt", PPO(PPOConfig(height=5, width=5, num_envs=4, num_steps=4, hidden=8)))
    old = tmp_path / "old.pt"
    torch.save(load_checkpoint(path), old)  # as save_checkpoint wrote it before checksums
    assert not checkpoint.has_checksum(old) and load_checkpoint(old)["format"] == AGENT_FORMAT
    assert main(["play", str(old), "--games", "1"]) == 0
    assert "was saved before checkpoints carried a checksum" in capsys.readouterr().out
    assert main(["play", str(path), "--games", "1"]) == 0
    assert "checksum" not in capsys.readouterr().out


FULL_DISK = """
import resource, sys, torch
from pathlib import Path
from rlgpu_helpers.core.files import DiskFullError
from rlgpu_helpers.learn.checkpoint import save_checkpoint
from rlgpu_helpers.measure.records import Record, save_reference
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.replay.memmap import MemmapReplayBuffer
folder = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))  # as `ulimit -f 64` does
def said(what, write):
    try:
        write()
    except DiskFullError as error:
        print(what, "|", error)
    else:
        print(what, "| written")
said("checkpoint", lambda: save_checkpoint(folder / "checkpoint.pt", {"weights": torch.zeros(100_000)}))
said("records", lambda: save_reference(
    [Record("n", str(i) * 50, "m", 1.0, "u", {}, None, machine_label(device_report("cpu"))) for i in range(2000)],
    device_report("cpu"), "a command", directory=folder))
said("memmap", lambda: MemmapReplayBuffer(100_000, (11,), path=folder / "buffer"))
"""


def test_a_full_disk_is_one_clear_error_naming_the_file_and_the_bytes_and_the_old_file_stays(tmp_path):
    import subprocess
    import sys

    save_checkpoint(tmp_path / "checkpoint.pt", {"step": 1})
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" | ", 1) for line in done.stdout.splitlines())
    assert lines["checkpoint"].startswith(f"[Errno 27] could not write {tmp_path / 'checkpoint.pt'}: no room for its ")
    assert "bytes (File too large): free some disk space, or raise the file-size limit" in lines["checkpoint"]
    label = machine_label(device_report("cpu"))
    assert f"could not write {tmp_path / (label + '.json')}: no room" in lines["records"]
    assert "could not write " + str(tmp_path / "buffer") in lines["memmap"] and "bytes" in lines["memmap"]
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 1  # the good file, as it was
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path / "buffer").exists()
