import json
import platform
import sys
import types

import pytest
import torch

from rlgpu_helpers.core import device as device_module
from rlgpu_helpers.core.device import (
    describe_device,
    device_report,
    get_device,
    machine_label,
    native_half_dtypes,
    synchronize,
)


@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend one CUDA device exists; record synchronize calls."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    return calls


def test_cpu_by_name_and_by_device():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")


def test_best_device_is_cpu_without_accelerators(no_accelerator):
    assert get_device() == torch.device("cpu")


def test_best_device_prefers_cuda(fake_cuda):
    assert get_device() == torch.device("cuda:0")


def test_cuda_comes_back_with_the_index_tensors_report(fake_cuda):
    # torch.device("cuda") != torch.device("cuda:0"), and tensors on the GPU report "cuda:0".
    assert get_device("cuda") == torch.device("cuda:0")
    assert get_device(torch.device("cuda")).index == 0


@pytest.mark.parametrize("name", ["gpu", "tpu", "cuda:x", "meta", ""])
def test_unknown_names_raise(name):
    with pytest.raises(ValueError, match=f"name={name!r}"):
        get_device(name)


def test_wrong_type_raises():
    with pytest.raises(TypeError, match="name=0"):
        get_device(0)


@pytest.mark.parametrize("name", ["cuda", "cuda:0", torch.device("cuda")])
def test_cuda_without_cuda_raises(no_accelerator, name):
    with pytest.raises(RuntimeError, match="asks for CUDA"):
        get_device(name)


def test_cuda_index_out_of_range(fake_cuda):
    assert get_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match="name='cuda:1'.* 1 CUDA device"):
        get_device("cuda:1")


def test_mps_without_mps_raises(no_accelerator):
    with pytest.raises(RuntimeError, match="asks for MPS"):
        get_device("mps")


def test_synchronize_waits_on_cuda_only(fake_cuda):
    synchronize("cpu")
    assert fake_cuda == []
    synchronize("cuda:0")
    assert fake_cuda == [torch.device("cuda:0")]


def test_device_report_on_cpu():
    report = device_report("cpu")
    assert set(report) == {"device", "gpu", "gpu_memory_gib", "driver", "cuda", "cpu", "logical_cores",
                           "torch_threads", "ram_gib", "torch", "numpy", "python", "os"}
    assert report["device"] == "cpu"
    assert report["gpu"] is None and report["gpu_memory_gib"] is None and report["driver"] is None
    assert report["logical_cores"] >= 1 and report["torch_threads"] >= 1
    assert report["ram_gib"] > 0
    assert report["cpu"]
    assert report["torch"] == torch.__version__
    assert json.loads(json.dumps(report)) == report


@pytest.mark.parametrize("report, label", [
    ({"gpu": "NVIDIA H100 80GB HBM3", "cpu": "Intel Xeon", "logical_cores": 26}, "gpu-nvidia-h100-80gb-hbm3"),
    ({"gpu": None, "cpu": "AMD EPYC 7B13", "logical_cores": 2}, "cpu-amd-epyc-7b13-2c"),
    ({"gpu": None, "cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "logical_cores": 8}, "cpu-intel-xeon-cpu-2-20ghz-8c"),
])
def test_machine_label(report, label):
    assert machine_label(report) == label


@pytest.mark.parametrize("report", [{}, {"gpu": None}, "cpu", None])
def test_machine_label_rejects_non_reports(report):
    with pytest.raises(ValueError, match="report="):
        machine_label(report)


def test_machine_label_of_this_machine_is_file_name_safe():
    label = machine_label(device_report("cpu"))
    assert label.startswith("cpu-") and label.endswith("c")
    assert all(char.isalnum() or char == "-" for char in label)


def test_describe_device_tells_how_to_get_a_gpu(no_accelerator):
    assert describe_device() == "No GPU: Runtime > Change runtime type > GPU in Colab; continuing on CPU"


def test_describe_device_when_the_cpu_is_chosen_over_a_gpu(fake_cuda):
    assert "although cuda:0 is available" in describe_device("cpu")


def test_native_half_dtypes_follow_cpu_features(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)
    assert native_half_dtypes("cpu") == (torch.bfloat16,)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_half_dtypes("cpu") == ()


def test_nvidia_driver_from_nvidia_smi(monkeypatch):
    monkeypatch.setattr(device_module, "_command_output", lambda args: "550.54.15")
    assert device_module._nvidia_driver() == "550.54.15"


def test_nvidia_driver_is_none_without_nvidia_smi_or_pynvml(monkeypatch):
    monkeypatch.setattr(device_module, "_command_output", lambda args: None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    assert device_module._nvidia_driver() is None


def test_nvidia_driver_is_none_when_nvml_fails(monkeypatch):
    class NVMLError(Exception):
        pass

    def fail():
        raise NVMLError("library not found")

    fake = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=fail)
    monkeypatch.setattr(device_module, "_command_output", lambda args: None)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert device_module._nvidia_driver() is None


def test_command_output_of_a_missing_command_is_none():
    assert device_module._command_output(["surely-not-a-command-rlgpu"]) is None


def test_retain_freed_memory_is_idempotent_and_reports_what_it_did():
    from rlgpu_helpers.core.device import retain_freed_memory

    first, again = retain_freed_memory(), retain_freed_memory()
    assert first == again
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert first is True
