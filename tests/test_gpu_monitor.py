"""gpu.monitor (notebook 06): the background utilization monitor, and the profiler over PPO."""

import json
import threading
import time

import pytest

from rlgpu_helpers.gpu.monitor import (
    LABELS,
    PSUTIL_MEANING,
    Sample,
    UtilizationMonitor,
    plot_utilization,
    profile_ppo,
    time_shares,
    top_operators,
)
from rlgpu_helpers.learn.ppo import PPO, PPOConfig


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


def test_the_monitor_samples_while_work_runs_and_its_thread_ends_on_stop():
    before = set(threading.enumerate())
    with UtilizationMonitor("cpu", interval=0.02) as monitor:
        assert any(t.name == "UtilizationMonitor" and t.is_alive() for t in threading.enumerate())
        busy(0.3)
    assert set(threading.enumerate()) == before  # no thread left alive
    samples = monitor.samples
    assert len(samples) >= 5 and all(isinstance(s, Sample) for s in samples)
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)
    assert all(0 <= s.utilization_pct <= 100 and s.memory_mib > 0 for s in samples)
    assert max(s.utilization_pct for s in samples) > 10  # the busy loop shows
    assert monitor.source == PSUTIL_MEANING


def test_start_and_stop_are_checked_and_a_monitor_can_run_again():
    monitor = UtilizationMonitor("cpu", interval=0.01)
    with pytest.raises(RuntimeError, match="not running"):
        monitor.stop()
    monitor.start()
    with pytest.raises(RuntimeError, match="already running"):
        monitor.start()
    busy(0.05)
    first = monitor.stop()
    monitor.start()
    busy(0.05)
    assert monitor.stop() is not first and monitor.samples
    assert not any(t.name == "UtilizationMonitor" for t in threading.enumerate())


@pytest.mark.parametrize("interval, error", [(0, ValueError), (-1, ValueError), ("fast", TypeError)])
def test_bad_intervals_name_the_parameter(interval, error):
    with pytest.raises(error, match="interval="):
        UtilizationMonitor("cpu", interval=interval)


def test_the_plot_has_titled_labelled_panels():
    samples = [Sample(0.1 * i, 50.0, 100.0 + i) for i in range(5)]
    fig = plot_utilization(samples, PSUTIL_MEANING)
    top, bottom = fig.axes
    assert top.get_ylabel() == "utilization (%)" and bottom.get_ylabel() == "memory used (MiB)"
    assert "s)" in bottom.get_xlabel() and PSUTIL_MEANING in top.get_title()
    with pytest.raises(ValueError, match="samples="):
        plot_utilization([], PSUTIL_MEANING)


def test_the_profile_of_ppo_splits_its_time_and_writes_a_trace(tmp_path, capfd):
    learner = PPO(PPOConfig(num_envs=16, num_steps=4, update_epochs=1, num_minibatches=2))
    trace = tmp_path / "trace.json"
    prof = profile_ppo(learner, 2, trace)
    assert capfd.readouterr().err == ""  # Kineto's chatter is kept off stderr
    assert learner.iterations == 4  # one waited, one warmed up, two recorded
    assert "step" not in vars(learner.env) and "_update" not in vars(learner)  # wrappers removed
    counts = {a.key: a.count for a in prof.key_averages()}
    assert all(counts[label] == (2 if label != "env" else 8) for label in LABELS)
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert set(LABELS) <= names
    shares = time_shares(prof)
    assert [row[0].split()[0] for row in shares.rows] == ["env", "acting", "learning", "other"]
    assert sum(float(row[2]) for row in shares.rows) == pytest.approx(100, abs=0.5)
    top = top_operators(prof, limit=5)
    assert len(top.rows) == 5 and not any(row[0] in LABELS for row in top.rows)
    assert "self CPU time (ms)" in top.columns
    with pytest.raises(ValueError, match="iterations=0"):
        profile_ppo(learner, 0)
