"""gpu.monitor (notebook 06): the background utilization monitor, and the profiler over PPO."""

import json
import threading
import time

import pytest
from chatter import stderr_of_the_code

from rlgpu_helpers.gpu import monitor as monitor_module
from rlgpu_helpers.gpu.monitor import (
    NVML_MEANING,
    PSUTIL_MEANING,
    Sample,
    UtilizationMonitor,
    plot_utilization,
)
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.profile import LABELS, profile_ppo, time_shares, top_operators


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


def test_the_monitor_samples_while_work_runs_and_its_thread_ends_on_stop():
    before = set(threading.enumerate())
    with UtilizationMonitor("cpu", interval=0.05) as monitor:
        assert any(t.name == "UtilizationMonitor" and t.is_alive() for t in threading.enumerate())
        busy(1.0)
    assert set(threading.enumerate()) == before  # no thread left alive
    samples = monitor.samples
    assert len(samples) >= 5 and all(isinstance(s, Sample) for s in samples)
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)
    assert all(0 <= s.utilization_pct <= 100 and s.memory_mib > 0 for s in samples)
    one_core = 100 / monitor_module.logical_cores()  # psutil's share of all cores: 6.25% for one core of 16
    assert max(s.utilization_pct for s in samples) > one_core / 2  # the busy loop shows
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


class StandInNVML:
    """A pynvml with ``gpus`` GPUs, each busy at its own level; it refuses to be asked by index."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus=3, fail_init=False):
        self.fail_init, self.opened, self.running = fail_init, [], False
        self.gpus = {f"GPU-0000000{n}-aaaa-bbbb-cccc-dddddddddddd": 10.0 * (n + 1) for n in range(gpus)}

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")
        self.running = True

    def nvmlShutdown(self):
        self.running = False

    def nvmlDeviceGetHandleByIndex(self, index):
        raise AssertionError("NVML's index ignores CUDA_VISIBLE_DEVICES: it must not be used")

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.gpus:
            raise self.NVMLError("Not Found")
        self.opened.append(uuid)
        return uuid

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": self.gpus[handle]})

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"used": 512 * 2**20})


@pytest.fixture
def visible_gpu_2(monkeypatch):
    """A machine of three GPUs seen through CUDA_VISIBLE_DEVICES=2: torch's cuda:0 is NVML's GPU 2."""
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: type("Properties", (), {"uuid": "00000002-aaaa-bbbb-cccc-dddddddddddd"}))


def test_nvml_reads_the_gpu_torch_sees_not_the_one_with_its_index(visible_gpu_2, monkeypatch):
    nvml = StandInNVML()
    monkeypatch.setattr(monitor_module, "_nvml", lambda: nvml)
    with UtilizationMonitor("cuda", interval=0.01) as monitor:
        time.sleep(0.1)
    assert nvml.opened == ["GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"] and not nvml.running
    assert monitor.source == NVML_MEANING and monitor.samples
    assert {s.utilization_pct for s in monitor.samples} == {30.0} and monitor.samples[0].memory_mib == 512


@pytest.mark.parametrize("nvml, reason", [
    (StandInNVML(fail_init=True), "NVML did not start (Driver Not Loaded): measuring with psutil instead."),
    (StandInNVML(gpus=0), "NVML does not know cuda:0 (Not Found): measuring with psutil instead."),
])
def test_when_nvml_fails_the_monitor_says_why_and_measures_with_psutil(visible_gpu_2, monkeypatch, capsys, nvml,
                                                                      reason):
    monkeypatch.setattr(monitor_module, "_nvml", lambda: nvml)
    with UtilizationMonitor("cuda", interval=0.01) as monitor:
        busy(0.1)
    assert reason in capsys.readouterr().out and not nvml.running
    assert monitor.source == PSUTIL_MEANING and monitor.samples


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
    assert stderr_of_the_code(capfd.readouterr().err) == ""  # Kineto's chatter is kept off stderr
    assert learner.iterations == 4  # one waited, one warmed up, two recorded
    assert "step" not in vars(learner.env) and "update" not in vars(learner)  # wrappers removed
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
