"""The `bench ddp` suite and notebook 10's tables: real torchrun runs measured by processes, the
scaling table against 1 process, and the multi-GPU claims judged only on GPU records."""

import pytest

from rlgpu_helpers.bench import ddp
from rlgpu_helpers.bench.ddp import (
    NAME,
    against_one_thread,
    claim_verdicts,
    measure_processes,
    proof_table,
    scaling_table,
)
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.measure.claims import CLAIMS
from rlgpu_helpers.measure.records import Record

LABEL = machine_label(device_report("cpu"))


def test_measure_processes_runs_torchrun_for_each_count():
    records = measure_processes("cpu", (1, 2), num_envs=8, num_steps=4, repeats=1)
    assert {(r.metric, r.unit, r.params["processes"]) for r in records} == {
        (metric, unit, n) for metric, unit in (("env steps/s", "steps/s"), ("time per update", "ms"),
                                               ("time per rollout", "ms")) for n in (1, 2)}
    assert all(r.machine == LABEL and r.value > 0 and r.variant == "cpu, 1 thread per process" for r in records)
    assert {r.params["backend"] for r in records} == {"gloo"} and {r.params["envs_per_process"] for r in records} == {8}


def record(processes, rate, update, device="cpu", machine="m"):
    params = {"processes": processes, "envs_per_process": 8, "threads_per_process": 1, "device": device,
              "backend": "gloo" if device == "cpu" else "nccl"}
    return [Record(NAME, f"{device}, 1 thread per process", "env steps/s", rate, "steps/s", params, 0.0, machine),
            Record(NAME, f"{device}, 1 thread per process", "time per update", update, "ms", params, 0.0, machine)]


def test_scaling_table_sets_each_count_beside_one_process():
    table = scaling_table(record(1, 100.0, 10.0) + record(2, 150.0, 12.0))
    assert table.rows == [["m", "cpu, 1 thread per process", "1", "100", "1.00x", "10.0", "1.00x", "100%"],
                          ["m", "cpu, 1 thread per process", "2", "150", "1.50x", "12.0", "1.20x", "75%"]]


def test_multi_gpu_claims_are_judged_on_gpu_records_only():
    cpu_only = claim_verdicts(record(1, 100.0, 10.0) + record(4, 380.0, 10.0))
    assert [row[-1] for row in cpu_only.rows] == ["not measured", "not measured"]
    gpus = record(1, 100.0, 1.0, "cuda", "g") + record(4, 300.0, 1.0, "cuda", "g") + record(8, 450.0, 1.0, "cuda", "g")
    verdicts = {row[0]: row[-1] for row in claim_verdicts(gpus).rows}
    assert verdicts[CLAIMS["ddp-further-speedup"].quote] == "partly"  # 4.5x: beyond 2-4x, the claimed way
    assert verdicts[CLAIMS["ddp-diminishing-beyond-4"].quote] == "held"  # 1.5x from 4 to 8


def test_proof_table():
    result = {"world_size": 2, "minibatch_per_rank": 64, "minibatch": 128,
              "ways": [{"way": "DDP, in one piece", "relative_difference": 3e-16, "max_difference_between_ranks": 0.0,
                        "allreduces": 1}]}
    table = proof_table(result)
    assert table.rows == [["DDP, in one piece", "3.00e-16", "0.0e+00", "1"]]
    assert "1 process on all 128" in table.columns[1]


@pytest.mark.parametrize("key", ["ddp-further-speedup", "ddp-diminishing-beyond-4"])
def test_the_claims_are_notebook_10s(key):
    assert CLAIMS[key].lesson == "10" and CLAIMS[key].kind == "speedup"


def test_against_one_thread_sets_every_cpu_point_beside_one_single_thread_process():
    threads = [Record(NAME, "cpu, 2 threads per process", "env steps/s", 130.0, "steps/s",
                      {"processes": 1, "envs_per_process": 8, "threads_per_process": 2, "device": "cpu",
                       "backend": "gloo"}, 0.0, "m")]
    lines = against_one_thread(record(1, 100.0, 10.0) + record(2, 150.0, 12.0) + threads
                               + record(1, 999.0, 1.0, "cuda", "g"))
    assert lines == ["cpu, 1 thread per process, 1 process: 100 env steps/s, 1.00x one single-thread process",
                     ("cpu, 1 thread per process, 2 processes: 150 env steps/s, 1.50x one single-thread process "
                      "(75% of linear)"),
                     "cpu, 2 threads per process, 1 process: 130 env steps/s, 1.30x one single-thread process"]
    with pytest.raises(ValueError, match="no 'env steps/s' of one single-thread CPU process"):
        against_one_thread(record(2, 150.0, 12.0))


def test_the_suite_hands_each_torchruns_records_over_as_it_ends(monkeypatch):
    """A run cut off (the GPU sweep's limit) keeps the records of the torchruns that ended before it."""
    monkeypatch.delenv("RLGPU_QUICK", raising=False)
    runs, cut_at = [], [None]

    def fake_torchrun(where, processes, *, threads=1, **sizes):
        runs.append((str(where), processes, threads, sizes["num_envs"]))
        if len(runs) == cut_at[0]:
            raise RuntimeError("cut off")
        return record(processes[0], 100.0 * len(runs), 10.0)

    monkeypatch.setattr(ddp, "measure_processes", fake_torchrun)
    monkeypatch.setattr(ddp, "logical_cores", lambda: 8)
    saved = []
    records = ddp.measure_ddp("cpu", progress=False, save=saved.append)
    assert runs == [("cpu", (1,), 1, 256), ("cpu", (2,), 1, 256), ("cpu", (4,), 1, 256), ("cpu", (1,), 8, 256)]
    assert len(saved) == 4 and records == [r for made in saved for r in made]
    runs.clear()
    saved.clear()
    cut_at[0] = 3
    with pytest.raises(RuntimeError, match="cut off"):
        ddp.measure_ddp("cpu", progress=False, save=saved.append)
    assert saved == [record(1, 100.0, 10.0), record(2, 200.0, 10.0)]  # the two before the cut
