"""Fake CUDA on a CPU-only machine: dry-run the CUDA code paths and find what would make a GPU wait.

A test utility (``tests/test_fake_cuda.py`` uses it), not part of the package. Inside
``with FakeCuda() as fc:`` every tensor asked for on ``"cuda"`` is a torch ``FakeTensor`` that
claims device ``cuda:0`` and holds no data, and ``torch.cuda`` answers as if a GPU were there
(``fakecuda_stand_ins``; first load the device guard of ``fakecuda_guard``). Code then runs its CUDA
branches for real, shapes and devices included:

* mixing a CUDA tensor with a CPU tensor raises, as on a GPU (a 0-d CPU tensor is allowed, as on a
  GPU), and ``.numpy()`` of a CUDA tensor raises ``TypeError``, as on a GPU;
* every read of a CUDA tensor's value on the host (``item``, ``bool``, ``tolist``, an index...),
  every blocking copy to the host and every operator whose output size depends on the data is
  recorded as a **sync** (the code goes on with a placeholder value; data-dependent operators raise,
  as fake tensors cannot size their output);
* inside ``with fc.hot("label"):`` (a hot loop) it also records host tensors made by factories,
  host-to-device copies, and 0-d host tensors used as operands beside CUDA tensors;
* inside a (fake) CUDA-graph capture, anything a capture cannot hold: a sync, a copy between host
  and device, an event query, a 0-d host operand (its value would be baked into the graph).

``fc.problems()`` gives the notes of those kinds and how often each happened, ``fc.report()`` every
note, one line each (``fakecuda_notes``). ``fc.captures``, ``fc.replays``, ``fc.backwards`` and
``fc.calls`` (see :meth:`FakeCuda.count_calls`) say that the code under test ran.
"""

from __future__ import annotations

import contextlib

import torch
import torch._subclasses.fake_tensor as fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from fakecuda_notes import CUDA, Recorder, is_device_mismatch, on_cuda, torch_caller
from fakecuda_stand_ins import (
    CUDA_STAND_INS,
    backward,
    data_ptr,
    deepcopy,
    fused_adam,
    module_to,
    placeholder,
    tolist,
)

_ABSENT = object()  # no attribute to put back
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
        self.stand_ins = {"backward": backward, "__deepcopy__": deepcopy, "data_ptr": data_ptr}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None
        fake = isinstance(this, FakeTensor)
        if func is torch._fused_adam_:
            return fused_adam(*args, **kwargs)
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
            if any(on_cuda(t) for t in tree_leaves((args, kwargs))):
                self.fc.note_sync(f"{name}: its output depends on the data ({type(error).__name__})")
            elif name == "__getitem__" and isinstance(args[1], torch.Tensor) and args[1].dtype == torch.bool:
                return args[0].new_empty((0, *args[0].shape[args[1].dim():]))
            raise
        except RuntimeError as error:
            if is_device_mismatch(error):
                self.fc.note("mismatch", f"{name}: {error}")
            raise

    def host_read(self, t, name):
        """A value read on the host: a sync for a CUDA tensor; a placeholder value (``FakeCuda.placeholder``)."""
        if on_cuda(t):
            if name == "numpy":
                raise TypeError(f"can't convert {t.device} device type tensor to numpy. Use Tensor.cpu() to copy "
                                "the tensor to host memory first. (fake CUDA)")
            self.fc.note_sync(f"Tensor.{name}() of a CUDA tensor")
        return placeholder(t, name)

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
        if any(on_cuda(t) for t in tensors) and any(not on_cuda(t) and t.dim() == 0 for t in tensors):
            if self.fc.capturing:
                self.fc.note("capture", f"a 0-d host tensor operand of {name} (its value is baked into the graph)",
                             torch_caller())
            else:
                self.fc.note("cpu-scalar-in-hot", f"a 0-d host tensor operand of {name} (read on the host at launch)",
                             torch_caller())


class FakeCuda(Recorder):
    """Fake CUDA for the code inside ``with FakeCuda() as fc:``; see the module docstring.

    The device guard must be loaded first (``fakecuda_guard.load_guard``). One at a time:
    ``FakeCuda.current`` is the active one.
    """

    def __init__(self):
        super().__init__()
        self._exit = contextlib.ExitStack()

    def count_calls(self, owner, name: str) -> None:
        """Count the calls of ``owner.name`` (a function or method) in ``calls["Owner.name"]``, until exit."""
        original = getattr(owner, name)
        key = f"{owner.__name__}.{name}"

        def counted(*args, **kwargs):
            self.calls[key] += 1
            return original(*args, **kwargs)

        self.replace(owner, name, counted)

    # -- entering and leaving

    def replace(self, owner, name: str, value) -> None:
        """Set ``owner.name`` to ``value`` until exit (a stand-in for the run)."""
        original = owner.__dict__.get(name, _ABSENT) if isinstance(owner, type) else getattr(owner, name, _ABSENT)
        setattr(owner, name, value)
        self._exit.callback(lambda: delattr(owner, name) if original is _ABSENT else setattr(owner, name, original))

    def __enter__(self) -> FakeCuda:
        if Recorder.current is not None:
            raise RuntimeError("a FakeCuda is active already")
        Recorder.current = self
        for name, stand_in in CUDA_STAND_INS.items():
            self.replace(torch.cuda, name, stand_in)
        self.replace(torch.nn.Module, "to", module_to)
        self.replace(FakeTensor, "tolist", tolist)
        self.replace(torch.Tensor, "record_stream", lambda t, stream: None)  # its binding refuses a fake stream
        # torch 2.11 makes a real CUDA tensor once when CUDA looks available, which a build without a driver refuses
        self.replace(fake_tensor, "init_gpu_context", lambda device: None)
        self._exit.enter_context(_FakeMode(allow_non_fake_inputs=True))
        self._exit.enter_context(_Intercept(self))
        return self

    def __exit__(self, *exc) -> None:
        self._exit.close()
        Recorder.current = None
