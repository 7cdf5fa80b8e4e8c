"""Fake CUDA on a CPU-only machine: dry-run the CUDA code paths and find what would make a GPU wait.

A test utility (``tests/test_fake_cuda.py`` uses it), not part of the package. Inside
``with FakeCuda() as fc:`` every tensor asked for on ``"cuda"`` is a torch ``FakeTensor`` that
claims device ``cuda:0`` and holds no data, and ``torch.cuda`` answers as if a GPU were there.
Code then runs its CUDA branches for real, shapes and devices included:

* mixing a CUDA tensor with a CPU tensor raises, as on a GPU (a 0-d CPU tensor is allowed, as
  on a GPU), and ``.numpy()`` of a CUDA tensor raises ``TypeError``, as on a GPU;
* every read of a CUDA tensor's value on the host (``item``, ``bool``, ``int``, ``float``,
  ``tolist``, an index), every blocking copy to the host and every operator whose output size
  depends on the data is recorded as a **sync** (the code goes on with a placeholder value: 0,
  False, 1.0 for ``item`` of a float; data-dependent operators raise, as fake tensors cannot size
  their output);
* inside ``with fc.hot("label"):`` (a hot loop) it also records host tensors made by factories
  (``torch.zeros(n)`` without ``device=``), host-to-device copies, and 0-d host tensors used as
  operands beside CUDA tensors;
* inside a (fake) CUDA-graph capture, anything a capture cannot hold: a sync, a copy between host
  and device, an event query, a 0-d host operand (its value would be baked into the graph).

``fc.problems()`` gives the notes of those kinds (:data:`PROBLEMS`) and how often each happened;
``fc.report()`` lists every note, one line each, including syncs outside hot loops (set-up, the
documented once-per-iteration reads), which are not problems. Counters say that the code under
test ran: ``fc.captures``, ``fc.replays``, ``fc.backwards`` and ``fc.calls`` (see
:meth:`FakeCuda.count_calls`).

What is stood in for, and why:

* a CUDA device guard: a CPU build of torch has none, and indexing, ``copy_`` and friends open
  one. A few lines of C++ register c10's ``FakeGuardImpl`` for CUDA (:func:`build_guard`,
  compiled with g++ once per torch build; the registration cannot be undone, so each dry run
  belongs in a process of its own);
* about 30 ``torch.cuda`` calls (:data:`_CUDA_STAND_INS`), with events, streams and CUDA graphs
  that record what they are asked to do (a graph counts its captures and replays);
* ``Tensor.backward``: autograd cannot run on fake CUDA tensors in a CPU build (it asks for CUDA
  streams), so every leaf the graph reaches gets a zero gradient of its own shape, dtype and device;
* ``torch._fused_adam_`` (a fused Adam's step, which an fp16 GradScaler relies on): fake tensors
  have no kernel for its learning-rate-tensor form; the stand-in checks its tensors' devices;
* ``nn.Module.to``, ``Tensor.__deepcopy__``, ``Tensor.data_ptr``, ``pin_memory`` and
  ``record_stream``, which do not work on fake tensors as they are.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import torch._subclasses.fake_tensor as fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

CUDA = torch.device("cuda", 0)
ROOT = Path(__file__).resolve().parents[1]
_HERE = str(Path(__file__).resolve())
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_TORCH_INCLUDE = Path(_TORCH_DIR) / "include"
# torch's own machinery between a call and this file's handlers: never the place to name.
_TORCH_PLUMBING = ("overrides.py", "_tensor.py", "_subclasses/", "utils/_python_dispatch.py", "utils/_contextlib.py")

_ABSENT = object()  # no attribute to put back

PROBLEMS = ("sync", "cpu-in-hot", "h2d-in-hot", "cpu-scalar-in-hot", "capture", "mismatch")
"""The kinds of note that a hot loop must not have (``sync-outside-hot`` and ``cpu-in-torch`` are not problems)."""


# ---------------------------------------------------------------------------- the device guard

GUARD_SOURCE = """#include <c10/core/impl/FakeGuardImpl.h>
namespace { C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>); }
"""
"""Registers c10's fake device guard for CUDA: devices, streams and events that exist in name only."""


def guard_unavailable() -> str | None:
    """Why the fake CUDA device guard cannot be built here, or None if it can."""
    if torch.cuda.is_available():
        return "real CUDA is available: the GPU tests (-m gpu) run the CUDA paths for real"
    if torch.version.cuda is not None:
        return (f"this torch is a CUDA build (CUDA {torch.version.cuda}) and no GPU is here: fake tensors on "
                "'cuda' would call its CUDA runtime (a convolution asks it for a backend); the dry runs need "
                "a CPU-only torch")
    if shutil.which("g++") is None:
        return "g++ is missing: the fake CUDA device guard is compiled at test time"
    header = _TORCH_INCLUDE / "c10/core/impl/FakeGuardImpl.h"
    if not header.is_file():
        return f"torch's C++ headers are missing ({header} does not exist)"
    return None


def build_guard(folder: Path) -> Path:
    """Compile :data:`GUARD_SOURCE` into a shared library in ``folder``; returns its path.

    The file name is keyed by the torch build and its C++ ABI, so a folder can be shared
    between runs and environments; an existing library is reused. About a second with g++.
    """
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    key = f"{torch.__version__} {torch.version.git_version} abi{abi} {GUARD_SOURCE}"
    stem = f"fakeguard-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    library = Path(folder) / f"{stem}.so"
    if library.exists():
        return library
    source = Path(folder) / f"{stem}.cpp"
    source.write_text(GUARD_SOURCE)
    partial = Path(folder) / f"{stem}.so.partial"
    torch_lib = Path(_TORCH_DIR) / "lib"
    command = ["g++", "-O1", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               f"-I{_TORCH_INCLUDE}", str(source), f"-L{torch_lib}", "-lc10", f"-Wl,-rpath,{torch_lib}",
               "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the fake CUDA device guard failed:\n{' '.join(command)}\n{done.stderr}")
    partial.replace(library)  # whole or absent, for a concurrent run
    return library


def load_guard(library: Path) -> None:
    """Load the library from :func:`build_guard`: from now on this process has a CUDA device guard."""
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


# ---------------------------------------------------------------------------- notes and where they come from

@dataclasses.dataclass(frozen=True)
class Note:
    """One kind of finding: its kind (see the module docstring), what happened, and where."""

    kind: str
    what: str
    file: str
    line: int
    function: str
    torch_site: str | None = None

    @property
    def key(self) -> str:
        """``"kind file:function"``, how allow-lists name a note (line numbers move)."""
        return f"{self.kind} {self.file}:{self.function}"

    def describe(self, count: int) -> str:
        inside = f"  [in torch: {self.torch_site}]" if self.torch_site else ""
        return f"{self.kind:<17} x{count:<4} {self.file}:{self.line} ({self.function})  {self.what}{inside}"


def _caller() -> tuple[str, int, str]:
    """``(file, line, function)`` of the code that made the current torch call.

    The innermost frame in this repository outside this file (the package, or a test), else the
    innermost one outside torch. Files are named relative to the repository; a comprehension or
    lambda is named by the function around it.
    """
    frame, fallback = sys._getframe(1), None
    while frame is not None:
        filename = _real(frame.f_code.co_filename)
        if filename != _HERE and not filename.startswith(_TORCH_DIR):
            if filename.startswith(str(ROOT)) and "site-packages" not in filename:
                return _describe_frame(frame)
            fallback = fallback or frame
        frame = frame.f_back
    return _describe_frame(fallback) if fallback is not None else ("?", 0, "?")


@functools.cache
def _real(filename: str) -> str:
    """A code object's file name as a resolved path (a venv or a checkout may be reached through links)."""
    return os.path.realpath(filename)


def _describe_frame(frame) -> tuple[str, int, str]:
    path = Path(_real(frame.f_code.co_filename))
    file = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    line, outer = frame.f_lineno, frame
    while outer.f_code.co_name.startswith("<") and outer.f_back is not None \
            and outer.f_back.f_code.co_filename == outer.f_code.co_filename:
        outer = outer.f_back
    return file, line, outer.f_code.co_name


def _torch_site() -> str | None:
    """The innermost frame of torch's own code that made the current call (Adam, autocast), if any."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = _real(frame.f_code.co_filename)
        if filename.startswith(_TORCH_DIR) and not any(part in filename for part in _TORCH_PLUMBING):
            file = Path(filename).relative_to(_TORCH_DIR).as_posix()
            return f"torch/{file}:{frame.f_lineno} ({frame.f_code.co_name})"
        if filename != _HERE and not filename.startswith(_TORCH_DIR):
            return None  # reached the caller: the call was not made inside torch
        frame = frame.f_back
    return None


def _on_cuda(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cuda"


def _is_device_mismatch(error: RuntimeError) -> bool:
    message = str(error)  # torch 2.13 says "two devices", 2.11 "two different devices"
    return "two devices" in message or "two different devices" in message


# ---------------------------------------------------------------------------- what stands in for CUDA

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
        fc = FakeCuda.current
        if fc.capturing:
            fc.note("capture", "Event.query() (cudaEventQuery is illegal while capturing)")
        return True

    def synchronize(self):
        FakeCuda.current.note_sync("Event.synchronize()")

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
        FakeCuda.current.note_sync("Stream.synchronize()")

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
        FakeCuda.current.replays += 1

    def reset(self):
        self.captured = False


@contextlib.contextmanager
def _capture(cuda_graph, pool=None, stream=None, capture_error_mode="global"):
    """``torch.cuda.graph``: what runs inside is a capture, in which ``FakeCuda`` notes what a graph cannot hold."""
    fc = FakeCuda.current
    fc.capturing += 1
    fc.captures += 1
    try:
        yield
    finally:
        fc.capturing -= 1
        cuda_graph.captured = True


def _synchronize(device=None):
    FakeCuda.current.note_sync("torch.cuda.synchronize()")


_CUDA_STAND_INS = {
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
    "is_current_stream_capturing": lambda: FakeCuda.current.capturing > 0,
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


def _fused_adam(*args, **kwargs):
    """``torch._fused_adam_`` (a fused Adam's whole step, a GradScaler's skip included): fake tensors have no
    kernel for its learning-rate-tensor form. Stand-in: check that every tensor it gets is on the GPU, as the
    kernel does, and leave the parameters as they are (the gradients are stand-ins anyway)."""
    tensors = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else [a])
               if isinstance(t, torch.Tensor)]
    elsewhere = sorted({str(t.device) for t in tensors if not _on_cuda(t)})
    if elsewhere:
        raise RuntimeError(f"torch._fused_adam_ got tensors on {elsewhere} beside CUDA ones (fake CUDA)")


def _backward(loss, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``Tensor.backward``: a zero gradient for every leaf the graph reaches that has none (see the module
    docstring)."""
    FakeCuda.current.backwards += 1
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


def _module_to(module, *args, **kwargs):
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


def _deepcopy(t, memo):
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


def _data_ptr(t) -> int:
    """``Tensor.data_ptr`` of a fake tensor (torch warns and says 0): distinct for distinct storages and
    offsets, equal for views of the same element, so ``a.data_ptr() != b.data_ptr()`` means what it does on a GPU."""
    return t.untyped_storage()._cdata + t.storage_offset() * t.element_size()


def _tolist(t):
    """``FakeTensor.tolist`` reads one element at a time; count it as the one copy to the host it is."""
    fc = FakeCuda.current
    if _on_cuda(t):
        fc.note_sync("Tensor.tolist() of a CUDA tensor")
    return fc.placeholder(t, "numpy").tolist()


# ---------------------------------------------------------------------------- the interception

_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.tensor, torch.as_tensor,
              torch.rand, torch.randn, torch.randint, torch.randperm, torch.linspace, torch.eye}
_HOST_READS = {"item", "__bool__", "__int__", "__float__", "__index__", "numpy"}


class _FakeMode(FakeTensorMode):
    """FakeTensorMode that never touches a real device: it would, to constant-fold a copy, when
    ``torch.cuda.is_available()`` says True (as it does here)."""

    @property
    def avoid_device_init(self) -> bool:
        return True


class _Intercept(TorchFunctionMode):
    """Every torch call inside ``FakeCuda``: records what a GPU would wait for, and stands in where needed."""

    def __init__(self, fc: FakeCuda):
        super().__init__()
        self.fc = fc
        # Tensor methods that move data, for any tensor (one made before entering is a real host tensor)
        self.copies = {"to": self.to, "cuda": self.to, "cpu": self.to, "copy_": self.copy_,
                       "pin_memory": self.pin_memory, "is_pinned": self.is_pinned}
        # and those that fake tensors need stood in for
        self.stand_ins = {"backward": _backward, "__deepcopy__": _deepcopy, "data_ptr": _data_ptr}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None
        fake = isinstance(this, FakeTensor)
        if func is torch._fused_adam_:
            return _fused_adam(*args, **kwargs)
        if fake and name in _HOST_READS:
            return self.host_read(this, name)
        if fake and name in self.stand_ins:
            return self.stand_ins[name](*args, **kwargs)
        if this is not None and name in self.copies:
            return self.copies[name](func, this, args, kwargs)
        if func in _FACTORIES:
            return self.factory(func, args, kwargs)
        if self.fc.hot_depth or self.fc.capturing:
            self.check_operands(name, args, kwargs)
        return self.run(func, name, args, kwargs)

    def run(self, func, name, args, kwargs):
        """``func``, noting a device mismatch or a data-dependent operator before they raise.

        On the host, ``x[mask]`` (no sync there) gives an empty result: fake tensors cannot size it.
        """
        try:
            return func(*args, **kwargs)
        except (fake_tensor.DataDependentOutputException, fake_tensor.DynamicOutputShapeException) as error:
            if any(_on_cuda(t) for t in tree_leaves((args, kwargs))):
                self.fc.note_sync(f"{name}: its output depends on the data ({type(error).__name__})")
            elif name == "__getitem__" and isinstance(args[1], torch.Tensor) and args[1].dtype == torch.bool:
                return args[0].new_empty((0, *args[0].shape[args[1].dim():]))
            raise
        except RuntimeError as error:
            if _is_device_mismatch(error):
                self.fc.note("mismatch", f"{name}: {error}")
            raise

    def host_read(self, t, name):
        """A value read on the host: a sync for a CUDA tensor; a placeholder value (``FakeCuda.placeholder``)."""
        if _on_cuda(t):
            if name == "numpy":
                raise TypeError(f"can't convert {t.device} device type tensor to numpy. Use Tensor.cpu() to copy "
                                "the tensor to host memory first. (fake CUDA)")
            self.fc.note_sync(f"Tensor.{name}() of a CUDA tensor")
        return self.fc.placeholder(t, name)

    def to(self, func, t, args, kwargs):
        """``.to``, ``.cuda()``, ``.cpu()``: a copy between host and device is noted."""
        name = func.__name__
        if name == "cpu":
            device, dtype, non_blocking, memory_format = torch.device("cpu"), None, False, None
        elif name == "cuda":
            device, dtype, non_blocking, memory_format = CUDA, None, kwargs.get("non_blocking", False), None
        else:  # _parse_to knows every form of .to's arguments but copy=
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
                *args[1:], **{key: value for key, value in kwargs.items() if key != "copy"})
        if device is not None and device.type == "cuda":
            device = CUDA  # "cuda" means cuda:0
        if device is not None and device != t.device:
            # .to("cpu", non_blocking=True) copies into new pinned memory
            pinned = self.is_pinned(None, t) if device.type == "cuda" else non_blocking
            self.fc.note_copy(t.device, device, non_blocking, pinned)
        options = {"device": device, "dtype": dtype, "non_blocking": non_blocking, "memory_format": memory_format,
                   "copy": kwargs.get("copy")}
        return torch.Tensor.to(t, **{key: value for key, value in options.items() if value is not None})

    def copy_(self, func, t, args, kwargs):
        source = args[1] if len(args) > 1 else kwargs["src"]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if isinstance(source, torch.Tensor) and source.device != t.device:
            host_side = source if source.device.type == "cpu" else t
            self.fc.note_copy(source.device, t.device, non_blocking, self.is_pinned(None, host_side))
        return self.run(func, "copy_", args, kwargs)

    def pin_memory(self, func, t, args, kwargs):
        """Pinned memory needs a CUDA driver: a copy marked pinned stands in for it."""
        self.fc.note_host_tensor("Tensor.pin_memory()")
        pinned = t.detach().clone()
        pinned._fake_pinned = True
        return pinned

    def is_pinned(self, func, t, args=(), kwargs=None):
        """Marked pinned by ``pin_memory``, or a view of such a tensor (a slice of a pinned buffer)."""
        return getattr(t, "_fake_pinned", False) or getattr(t._base, "_fake_pinned", False)

    def factory(self, func, args, kwargs):
        """``torch.zeros`` and friends: a host tensor made in a hot loop is noted; ``"cuda"`` means cuda:0."""
        kwargs = dict(kwargs)
        pinned = kwargs.pop("pin_memory", False)
        device = kwargs.get("device")
        device = torch.device(device) if device is not None else torch.get_default_device()
        reuses_a_tensor = func is torch.as_tensor and isinstance(args[0], torch.Tensor)
        if device.type == "cuda":
            kwargs["device"] = CUDA
            if func in (torch.tensor, torch.as_tensor) and not reuses_a_tensor:
                # Python data become a tensor on the host first, then a copy to the device
                self.fc.note_copy(torch.device("cpu"), CUDA, non_blocking=False, pinned=False)
                kwargs.pop("device")
                return func(*args, **kwargs).to(CUDA)
        elif not reuses_a_tensor:
            self.fc.note_host_tensor(f"torch.{func.__name__}(...) on the host{' (pinned)' if pinned else ''}")
        out = func(*args, **kwargs)
        if pinned:
            out._fake_pinned = True
        return out

    def check_operands(self, name, args, kwargs):
        """A 0-d host tensor beside CUDA tensors: its value is read on the host at launch (baked into a capture)."""
        if name in ("__getitem__", "__setitem__"):
            return  # an index on the host is no data read by the device
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(_on_cuda(t) for t in tensors) and any(not _on_cuda(t) and t.dim() == 0 for t in tensors):
            if self.fc.capturing:
                self.fc.note("capture", f"a 0-d host tensor operand of {name} (its value is baked into the graph)",
                             _torch_site())
            else:
                self.fc.note("cpu-scalar-in-hot", f"a 0-d host tensor operand of {name} (read on the host at launch)",
                             _torch_site())


# ---------------------------------------------------------------------------- the context

class FakeCuda:
    """Fake CUDA for the code inside ``with FakeCuda() as fc:``; see the module docstring.

    The device guard must be loaded first (:func:`load_guard`). One at a time: ``FakeCuda.current``
    is the active one.
    """

    current: FakeCuda | None = None

    def __init__(self):
        self.notes: collections.Counter[Note] = collections.Counter()
        self.hot_depth = 0
        self.hot_label = ""
        self.calls: collections.Counter[str] = collections.Counter()
        self.capturing = 0
        self.captures = 0
        self.replays = 0
        self.backwards = 0
        self._exit = contextlib.ExitStack()

    # -- recording

    def note(self, kind: str, what: str, torch_site: str | None = None) -> None:
        self.notes[Note(kind, what, *_caller(), torch_site)] += 1

    def note_sync(self, what: str) -> None:
        """A wait for the device: illegal in a capture, a problem in a hot loop, set-up elsewhere."""
        if self.capturing:
            self.note("capture", f"a sync: {what}", _torch_site())
        else:
            self.note("sync" if self.hot_depth else "sync-outside-hot", what, _torch_site())

    def note_copy(self, source: torch.device, destination: torch.device, non_blocking: bool, pinned: bool) -> None:
        """A copy between host and device (``pinned``: its host side is pinned memory).

        Only a non_blocking copy with pinned memory runs without the host waiting, and only it can
        be captured: any other copy to the host is a sync, any other copy to the device waits too.
        """
        asynchronous = non_blocking and pinned
        if source.type == "cuda" and destination.type == "cpu" and not asynchronous:
            self.note_sync("a blocking copy to the host")
        elif source.type == "cpu" and destination.type == "cuda":
            how = ("non_blocking, from pinned memory" if asynchronous else
                   "from pageable memory, staged by the host" if non_blocking else "blocking: it waits for the device")
            if self.capturing and not asynchronous:
                self.note("capture", f"a host-to-device copy ({how}) cannot be captured")
            elif self.hot_depth:
                self.note("h2d-in-hot", f"a host-to-device copy ({how}) in {self.hot_label}")

    def note_host_tensor(self, what: str) -> None:
        """A tensor made in host memory: a problem in a hot loop, unless torch.optim makes it (Adam's step counts)."""
        if self.hot_depth:
            site = _torch_site()
            if site is not None and site.startswith("torch/optim/"):
                self.note("cpu-in-torch", what, site)
            else:
                self.note("cpu-in-hot", f"{what} in {self.hot_label}", site)

    def placeholder(self, t: torch.Tensor, name: str):
        """What a host read of a fake tensor returns: its value if the fake mode kept it, else a placeholder.

        ``bool`` is False (``if bad.any(): raise``: no failure), but True for torch.optim's own
        argument checks (``0.0 <= lr``); ``item`` of a float is 1.0 (Adam divides by
        ``1 - beta ** step``); the rest are zeros.
        """
        constant = getattr(t, "constant", None)
        if constant is not None and name != "numpy":
            return getattr(constant, name)()
        if name == "__bool__":
            return (_torch_site() or "").startswith("torch/optim/")
        if name == "item":
            return 1.0 if t.is_floating_point() else (False if t.dtype == torch.bool else 0)
        if name == "numpy":  # zeros made by torch outside the fake mode and this interception
            with fake_tensor.unset_fake_temporarily(), torch._C.DisableTorchFunction():
                return torch.zeros(t.shape, dtype=t.dtype).numpy()
        return {"__int__": 0, "__index__": 0, "__float__": 0.0}[name]

    # -- regions and counters

    @contextlib.contextmanager
    def hot(self, label: str):
        """A hot loop: host tensors, host-to-device copies and syncs in it are problems."""
        self.hot_depth += 1
        outer, self.hot_label = self.hot_label, label
        try:
            yield
        finally:
            self.hot_depth -= 1
            self.hot_label = outer

    def count_calls(self, owner, name: str) -> None:
        """Count the calls of ``owner.name`` (a function or method) in ``calls["Owner.name"]``, until exit."""
        original = getattr(owner, name)
        key = f"{owner.__name__}.{name}"

        def counted(*args, **kwargs):
            self.calls[key] += 1
            return original(*args, **kwargs)

        self.replace(owner, name, counted)

    # -- results

    def problems(self) -> dict[Note, int]:
        """The notes of :data:`PROBLEMS` kinds, and how often each happened (empty: a clean run)."""
        return {note: count for note, count in self._sorted() if note.kind in PROBLEMS}

    def report(self) -> str:
        """Every note, one line each: kind, count, place, what."""
        return "\n".join(note.describe(count) for note, count in self._sorted())

    def _sorted(self) -> list[tuple[Note, int]]:
        return sorted(self.notes.items(), key=lambda item: (item[0].kind, item[0].file, item[0].line))

    # -- entering and leaving

    def replace(self, owner, name: str, value) -> None:
        """Set ``owner.name`` to ``value`` until exit (a stand-in for the run)."""
        original = owner.__dict__.get(name, _ABSENT) if isinstance(owner, type) else getattr(owner, name, _ABSENT)
        setattr(owner, name, value)
        self._exit.callback(lambda: delattr(owner, name) if original is _ABSENT else setattr(owner, name, original))

    def __enter__(self) -> FakeCuda:
        if FakeCuda.current is not None:
            raise RuntimeError("a FakeCuda is active already")
        FakeCuda.current = self
        for name, stand_in in _CUDA_STAND_INS.items():
            self.replace(torch.cuda, name, stand_in)
        self.replace(torch.nn.Module, "to", _module_to)
        self.replace(FakeTensor, "tolist", _tolist)
        self.replace(torch.Tensor, "record_stream", lambda t, stream: None)  # its binding refuses a fake stream
        # torch 2.11 makes a real CUDA tensor once when CUDA looks available, which a build without a driver refuses
        self.replace(fake_tensor, "init_gpu_context", lambda device: None)
        self._exit.enter_context(_FakeMode(allow_non_fake_inputs=True))
        self._exit.enter_context(_Intercept(self))
        return self

    def __exit__(self, *exc) -> None:
        self._exit.close()
        FakeCuda.current = None

