"""Checkpoints are written atomically and unreadable ones are reported clearly."""

import os
import stat

import pytest
import torch

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
