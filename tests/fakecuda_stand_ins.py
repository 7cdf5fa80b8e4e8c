"""What stands in for CUDA under ``FakeCuda`` (``tests/fakecuda.py``), and for what fake tensors cannot do.

* about 30 ``torch.cuda`` calls (:data:`CUDA_STAND_INS`), with events, streams and CUDA graphs that
  record what they are asked to do (a graph counts its captures and replays);
* ``Tensor.backward``: autograd cannot run on fake CUDA tensors in a CPU build (it asks for CUDA
  streams), so every leaf the graph reaches gets a zero gradient of its own shape, dtype and device;
* ``torch._fused_adam_`` (a fused Adam's step, which an fp16 GradScaler relies on): fake tensors
  have no kernel for its learning-rate-tensor form; the stand-in checks its tensors' devices;
* ``nn.Module.to``, ``Tensor.__deepcopy__``, ``Tensor.data_ptr`` and ``FakeTensor.tolist``, which do
  not work on fake tensors as they are, and the :func:`placeholder` a host read of a value gets.
"""

from __future__ import annotations

import contextlib

import torch
import torch._subclasses.fake_tensor as fake_tensor

from fakecuda_notes import CUDA, Recorder, on_cuda, torch_caller


class _Props:
    """What ``torch.cuda.get_device_properties`` tells about the fake GPU (an H100's figures)."""

    name = "NVIDIA H100 80GB HBM3 (fake)"
    major, minor = 9, 0
    total_memory = 80 * 2**30
    multi_processor_count = 132
    L2_cache_size = 50 * 2**20
    uuid = "00000000-0000-0000-0000-000000000000"


class _Event:
    """``torch.cuda.Event``: always complete; querying it during a capture is noted (an error on a GPU)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        pass

    def record(self, stream=None):
        pass

    def query(self):
        fc = Recorder.current
        if fc.capturing:
            fc.note("capture", "Event.query() (cudaEventQuery is illegal while capturing)")
        return True

    def synchronize(self):
        Recorder.current.note_sync("Event.synchronize()")

    def wait(self, stream=None):
        pass

    def elapsed_time(self, other):
        return 1.0


class _Stream:
    """``torch.cuda.Stream``: one object per stream; synchronizing it is a sync."""

    def __init__(self, device=None, priority=0, **options):
        self.device = CUDA

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event

    def synchronize(self):
        Recorder.current.note_sync("Stream.synchronize()")

    def query(self):
        return True


_DEFAULT_STREAM = _Stream()


class _CUDAGraph:
    """``torch.cuda.CUDAGraph``: captured by :func:`_capture`, counts its replays."""

    def __init__(self, *args, **kwargs):
        self.captured = False

    def replay(self):
        if not self.captured:
            raise RuntimeError("CUDAGraph.replay() before a capture")
        Recorder.current.replays += 1

    def reset(self):
        self.captured = False


@contextlib.contextmanager
def _capture(cuda_graph, pool=None, stream=None, capture_error_mode="global"):
    """``torch.cuda.graph``: what runs inside is a capture, in which ``FakeCuda`` notes what a graph cannot hold."""
    fc = Recorder.current
    fc.capturing += 1
    fc.captures += 1
    try:
        yield
    finally:
        fc.capturing -= 1
        cuda_graph.captured = True


def _synchronize(device=None):
    Recorder.current.note_sync("torch.cuda.synchronize()")


CUDA_STAND_INS = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "_lazy_init": lambda: None,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": lambda device: None,
    "get_device_properties": lambda device=None: _Props(),
    "get_device_name": lambda device=None: _Props.name,
    "get_device_capability": lambda device=None: (_Props.major, _Props.minor),
    "is_bf16_supported": lambda including_emulation=True: True,
    "synchronize": _synchronize,
    "Event": _Event,
    "Stream": _Stream,
    "current_stream": lambda device=None: _DEFAULT_STREAM,
    "default_stream": lambda device=None: _DEFAULT_STREAM,
    "stream": lambda stream: contextlib.nullcontext(),
    "CUDAGraph": _CUDAGraph,
    "graph": _capture,
    "is_current_stream_capturing": lambda: Recorder.current.capturing > 0,
    "empty_cache": lambda: None,
    "memory_allocated": lambda device=None: 0,
    "memory_reserved": lambda device=None: 0,
    "max_memory_allocated": lambda device=None: 0,
    "reset_peak_memory_stats": lambda device=None: None,
    "mem_get_info": lambda device=None: (_Props.total_memory, _Props.total_memory),
    "get_sync_debug_mode": lambda: 0,
    "set_sync_debug_mode": lambda mode: None,
    "manual_seed": lambda seed: None,
    "manual_seed_all": lambda seed: None,
    "get_rng_state_all": lambda: [],
    "set_rng_state_all": lambda states: None,
    "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
    "set_rng_state": lambda new_state, device="cuda": None,
}
"""``torch.cuda`` as the fake GPU answers it: the calls the package makes."""


def fused_adam(*args, **kwargs):
    """``torch._fused_adam_`` (a fused Adam's whole step, a GradScaler's skip included): fake tensors have no
    kernel for its learning-rate-tensor form. Stand-in: check that every tensor it gets is on the GPU, as the
    kernel does, and leave the parameters as they are (the gradients are stand-ins anyway)."""
    tensors = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else [a])
               if isinstance(t, torch.Tensor)]
    elsewhere = sorted({str(t.device) for t in tensors if not on_cuda(t)})
    if elsewhere:
        raise RuntimeError(f"torch._fused_adam_ got tensors on {elsewhere} beside CUDA ones (fake CUDA)")


def backward(loss, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``Tensor.backward``: a zero gradient for every leaf the graph reaches that has none (see the module
    docstring)."""
    Recorder.current.backwards += 1
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is None:
            stack.extend(following for following, _ in node.next_functions)
        elif leaf.grad is None:
            with torch.no_grad():
                leaf.grad = torch.zeros_like(leaf)


def module_to(module, *args, **kwargs):
    """``nn.Module.to``: its ``_apply`` swaps parameters with ``swap_tensors``, which refuses fake
    tensors ("has weakref associated with it"): put converted parameters and buffers in their place."""
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None and device.type == "cuda":
        device = CUDA

    def converted(t):
        return t.detach().to(device=device or t.device, dtype=dtype if dtype is not None and t.is_floating_point()
                             else t.dtype)

    for part in module.modules():
        for key, p in part._parameters.items():
            if p is not None:
                part._parameters[key] = torch.nn.Parameter(converted(p), requires_grad=p.requires_grad)
        for key, b in part._buffers.items():
            if b is not None:
                part._buffers[key] = converted(b)
    return module


def deepcopy(t, memo):
    """``Tensor.__deepcopy__`` of a fake tensor: a clone. (torch's own also deep-copies the tensor's
    ``__dict__``, the fake mode included, and the copy crashes the process later.)"""
    if id(t) not in memo:
        with torch.no_grad():
            copy = t.clone()
        copy.requires_grad_(t.requires_grad)
        if getattr(t, "_is_param", False):
            copy._is_param = True  # a fake Parameter is a FakeTensor marked as one
        memo[id(t)] = copy
    return memo[id(t)]


def data_ptr(t) -> int:
    """``Tensor.data_ptr`` of a fake tensor (torch warns and says 0): distinct for distinct storages and
    offsets, equal for views of the same element, so ``a.data_ptr() != b.data_ptr()`` means what it does on a GPU."""
    return t.untyped_storage()._cdata + t.storage_offset() * t.element_size()


def tolist(t):
    """``FakeTensor.tolist`` reads one element at a time; count it as the one copy to the host it is."""
    fc = Recorder.current
    if on_cuda(t):
        fc.note_sync("Tensor.tolist() of a CUDA tensor")
    return placeholder(t, "numpy").tolist()


def placeholder(t: torch.Tensor, name: str):
    """What a host read of a fake tensor returns: its value if the fake mode kept it, else a placeholder.

    ``bool`` is False (``if bad.any(): raise``: no failure), but True for torch.optim's own
    argument checks (``0.0 <= lr``); ``item`` of a float is 1.0 (Adam divides by
    ``1 - beta ** step``); the rest are zeros.
    """
    constant = getattr(t, "constant", None)
    if constant is not None and name != "numpy":
        return getattr(constant, name)()
    if name == "__bool__":
        return (torch_caller() or "").startswith("torch/optim/")
    if name == "item":
        return 1.0 if t.is_floating_point() else (False if t.dtype == torch.bool else 0)
    if name == "numpy":  # zeros made by torch outside the fake mode and this interception
        with fake_tensor.unset_fake_temporarily(), torch._C.DisableTorchFunction():
            return torch.zeros(t.shape, dtype=t.dtype).numpy()
    return {"__int__": 0, "__index__": 0, "__float__": 0.0}[name]
