"""Measuring the naive DQN's loop: warm-up then timed segments, rows in turn, one record per row."""

import pytest
import torch
from test_naive_dqn import SMALL

from rlgpu_helpers.bench.loop import measure_loop, measure_rows, tuning_rows
from rlgpu_helpers.bench.records import Record
from rlgpu_helpers.learn.naive_dqn import PARTS, LoopSettings


def test_measure_loop_times_segments_after_the_warm_up():
    settings = LoopSettings(**SMALL)
    measured = measure_loop(settings, steps=40, repeats=3, progress=False)
    assert len(measured.runs) == 3
    assert all(run.steps == 40 and run.updates == 40 for run in measured.runs)  # all after learning starts
    rates = sorted(run.steps_per_second for run in measured.runs)
    assert measured.steps_per_second == pytest.approx(rates[1])
    assert set(measured.microseconds_per_step()) == set(PARTS)
    record = measured.record("baseline", "cpu-test-1c")
    assert isinstance(record, Record) and record.unit == "steps/s" and record.spread is not None
    assert record.params["steps"] == 40 and record.params["repeats"] == 3


def test_measure_rows_times_every_row_in_turn():
    rows = {"baseline": LoopSettings(**SMALL), "learn every 2": LoopSettings(**SMALL, learn_every=2)}
    measured = measure_rows(rows, steps=30, repeats=2, progress=False)
    assert list(measured) == list(rows)
    for name, measurement in measured.items():
        assert measurement.settings == rows[name]
        assert [run.steps for run in measurement.runs] == [30, 30]
    assert [run.updates for run in measured["learn every 2"].runs] == [15, 15]
    with pytest.raises(ValueError, match="rows="):
        measure_rows({}, progress=False)


def test_tuning_rows_change_one_thing_each_then_all_switches():
    rows = tuning_rows()
    base = rows["baseline"]
    assert base == LoopSettings()
    changed = {name: {f for f in base.__dataclass_fields__ if getattr(s, f) != getattr(base, f)}
               for name, s in rows.items()}
    assert changed["inference_mode for acting"] == {"inference_mode"}
    assert changed["zero_grad(set_to_none=True)"] == {"set_to_none"}
    assert changed["learn every 4 steps"] == {"learn_every"}
    assert changed["batches from arrays"] == {"array_batches"}
    assert changed["1 thread"] == {"num_threads"}
    assert changed["batch size 64"] == {"batch_size"}
    assert changed["all together"] == {"inference_mode", "set_to_none", "learn_every", "array_batches",
                                       "num_threads"}
    assert tuning_rows(together_threads=None)["all together"].num_threads is None


def test_measure_tunings_gives_one_cpu_record_per_row(monkeypatch):
    import rlgpu_helpers.bench.loop as naive_dqn

    small = {"baseline": LoopSettings(**SMALL), "all together": LoopSettings(**SMALL, learn_every=4)}
    real = naive_dqn.measure_rows
    monkeypatch.setattr(naive_dqn, "measure_rows",
                        lambda progress: real(small, steps=20, repeats=1, progress=progress))
    records = naive_dqn.measure_tunings("cpu", progress=False)
    assert [r.variant for r in records] == ["baseline", "all together"]
    assert all(r.name == "naive-dqn" and r.unit == "steps/s" and r.machine.startswith("cpu-") for r in records)


def test_measure_tunings_refuses_a_gpu(monkeypatch):
    import rlgpu_helpers.bench.loop as naive_dqn

    monkeypatch.setattr(naive_dqn, "get_device", lambda device: torch.device("cuda"))
    with pytest.raises(ValueError, match="device='cuda': the naive DQN runs on the CPU only"):
        naive_dqn.measure_tunings("cuda", progress=False)
