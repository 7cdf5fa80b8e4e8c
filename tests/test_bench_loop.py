"""Measuring the naive DQN's loop: warm-up then timed segments, rows in turn, one record per row."""

import pytest
import torch
from test_naive_dqn import SMALL

from rlgpu_helpers.measure.claims import HELD, PARTLY, WITHIN_NOISE
from rlgpu_helpers.bench.loop import (
    LoopMeasurement,
    changes_table,
    loop_table,
    machine_noise,
    measure_loop,
    measure_rows,
    tuning_rows,
    tuning_verdicts,
)
from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.learn.naive_dqn import PARTS, LoopSettings, NaiveRunResult


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
    assert list(rows)[-1] == "baseline, again" and rows["baseline, again"] == base
    if "all cores" in rows:
        assert changed["all cores"] == {"num_threads"} and rows["all cores"].num_threads > 1


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


def fake(settings, rates, parts, updates_per_step=1.0):
    """A measurement whose segments ran at ``rates`` steps/s with time shares ``parts``."""
    runs = []
    for rate in rates:
        steps = 1000
        seconds = steps / rate
        share = sum(parts.values())
        runs.append(NaiveRunResult(settings, steps, seconds, {p: seconds * v / share for p, v in parts.items()},
                                   round(steps * updates_per_step), [], None))
    return LoopMeasurement(settings, runs)


SPLIT = {"env": 10.0, "act": 60.0, "replay": 80.0, "learn": 550.0, "other": 0.0}


def test_steps_per_second_and_the_split_come_from_the_same_median():
    measured = fake(LoopSettings(), [1000.0, 1500.0, 1250.0], SPLIT)
    split = measured.microseconds_per_step()
    assert measured.steps_per_second == 1250.0
    assert sum(split.values()) == pytest.approx(1e6 / 1250.0)  # the median step, in µs
    assert split["learn"] / split["act"] == pytest.approx(550 / 60)
    table = str(loop_table({"baseline": measured}))
    assert "800" in table  # total (µs/step) = 1e6 / 1,250


def test_the_noise_is_the_difference_between_the_two_baselines_and_judges_the_tunings():
    base = LoopSettings()
    rows = {
        "baseline": fake(base, [1000.0] * 3, SPLIT),
        "learn every 4 steps": fake(base, [3000.0] * 3, SPLIT, 0.25),
        "inference_mode for acting": fake(base, [1010.0] * 3, {**SPLIT, "act": 59.0}),
        "batches from arrays": fake(base, [1100.0] * 3, {**SPLIT, "replay": 40.0}),
        "all together": fake(base, [4400.0] * 3, SPLIT, 0.25),
        "baseline, again": fake(base, [1100.0] * 3, SPLIT),
    }
    noise = machine_noise(rows)
    assert noise["steps/s"] == pytest.approx(100 / 1050)
    verdicts = {v.claim.key: v for v in tuning_verdicts(rows)}
    assert verdicts["learn-every-4"].measured == pytest.approx(3.0) and verdicts["learn-every-4"].outcome == HELD
    assert verdicts["loop-tunings"].outcome == HELD  # 4.4 +- noise reaches 4.7 - 25%
    assert verdicts["inference-mode"].outcome == WITHIN_NOISE  # 2.5% less act time; the baselines differ by 10%
    assert verdicts["array-batches"].measured == pytest.approx(2.08, abs=0.01)
    assert verdicts["array-batches"].outcome == PARTLY  # faster, as claimed, but twice the claimed gain
    assert verdicts["loop-baseline-fps"].claim.low == 435 and verdicts["loop-baseline-fps"].measured == 1000.0
    assert "set-to-none" not in verdicts  # not measured: left out
    table = str(changes_table(rows))
    assert "learn every 4 steps               3.00" in table  # beyond the noise: shown plainly
    assert "inference_mode for acting       (1.01)" in table  # within it: in parentheses
    with pytest.raises(ValueError, match=r"lack the rows \['baseline, again'\]"):
        machine_noise({"baseline": rows["baseline"]})
