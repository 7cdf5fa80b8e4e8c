"""Reference records lose nothing and show nothing false (issue 21): each bad record is dropped alone
and named, a record of another machine or a second copy of one figure is refused, and saves that
run at the same moment keep every record (the merge holds a file lock)."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
from test_measure import LABEL, REPORT, record

from rlgpu_helpers.core.files import LockHeld, exclusive_lock
from rlgpu_helpers.measure.records import (FORMAT, load_json, load_reference, merge_reference, save_json,
                                          save_reference)


def write_entries(path, entries):
    path.write_text(json.dumps({"format": FORMAT, "machine": REPORT, "records": entries}))


def entry(n, **changes):
    return {**record(n=n).__dict__, "command": "cmd", **changes}


def test_a_bad_record_is_dropped_alone_and_named_with_its_index(tmp_path, capsys):
    write_entries(tmp_path / f"{LABEL}.json",
                  [entry(1), entry(2, value=float("nan")), entry(3), {"value": 4}, entry(5, machine="gpu-h100")])
    assert [r.params["n"] for r in load_reference(tmp_path)] == [1, 3]
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert "record 1:" in out[0] and "value" in out[0]
    assert "record 3 must have exactly the fields" in out[1]
    assert "record 4 was measured on 'gpu-h100'" in out[2]


def test_a_second_copy_of_one_figure_is_refused(tmp_path, capsys):
    write_entries(tmp_path / f"{LABEL}.json", [entry(1), entry(2), entry(1, value=9.0)])
    assert [(r.params["n"], r.value) for r in load_reference(tmp_path)] == [(1, 1.5), (2, 1.5)]
    assert "record 2 repeats record 0" in capsys.readouterr().out
    with pytest.raises(ValueError, match="records 0 and 1 both measure matmul"):
        save_reference([record(n=1), record(n=1, value=2.0)], REPORT, "cmd", directory=tmp_path)
    with pytest.raises(ValueError, match="records 0 and 2 both measure"):
        save_json(tmp_path / "x.json", [record(n=1), record(n=2), record(n=1)], REPORT, "cmd")


def test_merging_a_file_keeps_each_record_s_command_and_replaces_the_same_figures(tmp_path):
    save_reference([record(n=1), record(n=2)], REPORT, "the first run", directory=tmp_path / "reference")
    save_json(tmp_path / "call.json", [record(n=2, value=9.0), record(n=3)], REPORT, "a later run")
    path = merge_reference(tmp_path / "call.json", tmp_path / "reference")
    assert [(r.params["n"], r.value) for r in load_json(path)] == [(1, 1.5), (2, 9.0), (3, 1.5)]
    assert [e["command"] for e in json.loads(path.read_text())["records"]] == ["the first run", "a later run",
                                                                               "a later run"]
    save_json(tmp_path / "foreign.json", [record(n=4, machine="gpu-other")], REPORT, "elsewhere")
    with pytest.raises(ValueError, match="measured on 'gpu-other', which cannot go into the reference file of"):
        merge_reference(tmp_path / "foreign.json", tmp_path / "reference")
    assert len(load_json(path)) == 3


def test_load_json_stays_strict(tmp_path):
    path = tmp_path / "run.json"
    write_entries(path, [entry(1), entry(2, value="fast")])
    with pytest.raises(ValueError, match="record 1: value='fast'"):
        load_json(path)


def _save_many(directory, start, count):
    for n in range(start, start + count):
        save_reference([record(n=n)], REPORT, f"save {n}", directory=directory)


def test_concurrent_saves_keep_every_record(tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_save_many, args=(tmp_path, 100 * k, 25)) for k in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    saved = {r.params["n"] for r in load_reference(tmp_path)}
    assert saved == {100 * k + i for k in range(4) for i in range(25)}


def hold(lock, seconds: float) -> subprocess.Popen:
    """Another process that holds ``lock`` for ``seconds``; returns once it holds it."""
    script = ("import time; from rlgpu_helpers.core.files import exclusive_lock\n"
              f"with exclusive_lock({str(lock)!r}):\n    print('held', flush=True); time.sleep({seconds})")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_lock_names_its_holder_and_a_killed_holders_lock_is_taken_over(tmp_path, capsys):
    lock = tmp_path / "run.lock"
    holder = hold(lock, 60)
    try:
        with pytest.raises(LockHeld, match=f"held by process {holder.pid}") as caught, exclusive_lock(lock, wait=False):
            pass
        assert caught.value.holder == holder.pid
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    with exclusive_lock(lock, wait=False):  # the kill released it; the pid left in the file is stale
        assert lock.read_text().strip() == str(os.getpid())
    assert f"taking over a stale lock of process {holder.pid}" in capsys.readouterr().out
    assert lock.read_text() == ""  # a clean release leaves no pid behind


def test_a_waiting_lock_gets_it_when_the_holder_ends(tmp_path):
    lock = tmp_path / "run.lock"
    holder = hold(lock, 1.0)
    start = time.monotonic()
    with exclusive_lock(lock):
        waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.3


def test_gpu_coverage_says_what_each_gpu_on_file_holds_of_a_lesson_and_what_not():
    from rlgpu_helpers.measure.records import Record, gpu_coverage

    def record(name, machine):
        return Record(name, "v", "m", 1.0, "u", {}, None, machine)

    on_file = [record("transfer", "gpu-a"), record("replay_sample", "gpu-b"), record("transfer", "cpu-x-2c")]
    assert gpu_coverage(on_file, ["transfer", "replay_sample"]) == (
        "GPU machines in data/reference/: gpu-a (holds transfer; not measured yet: replay_sample); "
        "gpu-b (holds replay_sample; not measured yet: transfer)")
    assert gpu_coverage(on_file, ["ddp"]).endswith("gpu-b (holds none of this lesson's records; not measured yet: ddp)")
    assert gpu_coverage(on_file[2:], ["transfer"]) == "GPU machines in data/reference/: none"
