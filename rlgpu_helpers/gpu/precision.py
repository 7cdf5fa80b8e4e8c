"""Mixed precision: which float format a device trains fastest in, and autocast in the right place.

Introduced in notebook 08.

A float32 step can run its matrix products in a 16-bit format: ``bf16`` keeps float32's range with
fewer mantissa bits, ``fp16`` has more mantissa bits and a much narrower range, and ``tf32`` is
float32 whose matmuls round their inputs to 10 mantissa bits (Ampere and later). :func:`choose_policy`
picks one from what the device multiplies natively, and says why. Everything uses ``torch.amp``
and sets TF32 in one place (:func:`set_tf32_matmuls`).

fp16 gradients underflow where float32's would not, so an fp16 step scales the loss up before
``backward`` and the gradients down before the step (``torch.amp.GradScaler``, which also skips a
step holding inf or NaN); :func:`fp16_step_checks` checks a hand-written one against the course's.

Autocast belongs around the forward pass and the loss only (:func:`precision_context`): a region
held open across optimizer steps keeps multiplying by the 16-bit weights it cached first
(:func:`stale_weights_check`), which is how a whole PPO run inside one autocast learns nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn

from ..core.checks import check_choice, check_number
from ..core.device import get_device, native_half_dtypes
from .accumulate import accumulated_step

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
"""The precisions a step can run in: plain float32, float32 with TF32 matmuls, and two autocasts."""
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(name: str, value) -> str:
    """``value`` if it is one of :data:`PRECISIONS` (a str), else a clear error."""
    if not isinstance(value, str):
        raise TypeError(f"{name}={value!r} must be a str, one of {PRECISIONS}")
    return check_choice(name, value, PRECISIONS)


TF32_PRECISIONS = ("tf32", "bf16")
"""The precisions whose float32 matmuls run in TF32 on a CUDA GPU: ``tf32``, and ``bf16``, whose GPUs
(8.0+) all have TF32. ``fp16`` is the format of older GPUs, whose float32 stays full float32."""

# torch 2.9 replaced the ``allow_tf32`` flag by ``fp32_precision``; once that is "tf32", reading the
# old flag (or torch.get_float32_matmul_precision()) raises, so where the new API exists only it is
# used. The fallback to ``allow_tf32`` is for torch 2.6-2.8 and goes once the floor is torch 2.9.
_TF32_SETTING = "fp32_precision" if hasattr(torch.backends.cuda.matmul, "fp32_precision") else "allow_tf32"


def tf32_matmuls() -> bool:
    """Whether float32 matmuls on CUDA run in TF32 now (a process-wide setting, readable on a CPU build too)."""
    value = getattr(torch.backends.cuda.matmul, _TF32_SETTING)
    return value == "tf32" if _TF32_SETTING == "fp32_precision" else value


def set_tf32_matmuls(tf32: bool) -> None:
    """From now on, float32 matmuls on CUDA run in TF32 (``True``) or in full float32 (``False``)."""
    if not isinstance(tf32, bool):
        raise TypeError(f"tf32={tf32!r} must be a bool")
    value = ("tf32" if tf32 else "ieee") if _TF32_SETTING == "fp32_precision" else tf32
    setattr(torch.backends.cuda.matmul, _TF32_SETTING, value)


@contextlib.contextmanager
def fp32_matmul_precision(tf32: bool):
    """Within the block, float32 CUDA matmuls run in TF32 (``tf32=True``) or full float32; the previous
    setting comes back afterwards through the same API. Changes nothing on a CPU."""
    if tf32_matmuls() == tf32:
        yield
        return
    before = getattr(torch.backends.cuda.matmul, _TF32_SETTING)  # fp32_precision "none" (inherit) stays "none"
    set_tf32_matmuls(tf32)
    try:
        yield
    finally:
        setattr(torch.backends.cuda.matmul, _TF32_SETTING, before)


def uses_tf32(precision: str) -> bool:
    """Whether ``precision`` runs its float32 matmuls in TF32 on a CUDA GPU (it is in :data:`TF32_PRECISIONS`)."""
    return check_precision("precision", precision) in TF32_PRECISIONS


@dataclasses.dataclass(frozen=True)
class DeviceTraits:
    """What the precision policy looks at: the kind of device and the formats it multiplies natively.

    ``capability`` is a CUDA GPU's compute capability (``(8, 0)`` for an A100), None elsewhere.
    ``bf16_native`` / ``fp16_native``: the device has hardware for them (a GPU's tensor cores, a
    CPU's AVX512-BF16 or AMX), not an emulation.
    """

    type: str
    name: str
    capability: tuple[int, int] | None = None
    bf16_native: bool = False
    fp16_native: bool = False


def device_traits(device: str | torch.device | None = None) -> DeviceTraits:
    """The :class:`DeviceTraits` of a real device (default: the best available)."""
    device = get_device(device, param="device")
    native = native_half_dtypes(device)  # on CUDA: bf16 checked with including_emulation=False
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        capability = (properties.major, properties.minor)
        return DeviceTraits("cuda", properties.name, capability, torch.bfloat16 in native, capability >= (7, 0))
    return DeviceTraits(device.type, str(device), None, torch.bfloat16 in native, torch.float16 in native)


def available_precisions(traits: DeviceTraits) -> tuple[str, ...]:
    """The precisions a step can run in on this device (emulated ones included on a CPU, where autocast has them)."""
    if traits.type == "cuda":
        fast = ["tf32"] if traits.capability >= (8, 0) else []
        return ("fp32", *fast, *(["bf16"] if traits.bf16_native else []), "fp16")
    if traits.type == "cpu":
        return ("fp32", "bf16", "fp16")
    return ("fp32", "fp16")


@dataclasses.dataclass(frozen=True)
class PrecisionPolicy:
    """The precision a device should train in, and why.

    ``precision`` is one of :data:`PRECISIONS`; ``tf32``: the float32 matmuls left outside
    autocast use TF32; ``grad_scaler``: the step needs a ``GradScaler`` (fp16).
    """

    device_type: str
    precision: str
    tf32: bool
    grad_scaler: bool
    reasons: tuple[str, ...]

    def __post_init__(self):
        check_precision("precision", self.precision)

    def __str__(self) -> str:
        what = {"fp32": "float32", "tf32": "float32 with TF32 matmuls", "bf16": "bf16 autocast",
                "fp16": "fp16 autocast with a GradScaler"}[self.precision]
        extra = " (float32 matmuls outside autocast in TF32)" if self.tf32 and self.precision != "tf32" else ""
        return "\n".join([f"Precision policy on {self.device_type}: {what}{extra}, because"]
                         + [f"  - {reason}" for reason in self.reasons])


def choose_policy(traits: DeviceTraits, cpu_bf16_speedup: float | None = None,
                  cpu_bf16_spread: float = 0.0) -> PrecisionPolicy:
    """The precision policy for a device with these ``traits``.

    * CUDA, compute capability 8.0+ with native bf16: bf16 autocast, TF32 for the rest, no scaler;
    * CUDA 7.x (T4, V100): fp16 autocast with a ``GradScaler``; bf16 would be emulated;
    * older CUDA GPUs: fp32 (no tensor cores);
    * a CPU: fp32, unless it has bf16 instructions and bf16 autocast was measured faster:
      ``cpu_bf16_speedup`` (fp32 time over bf16 time) above 1 by more than ``cpu_bf16_spread``;
    * anything else (MPS): fp32.
    """
    if not isinstance(traits, DeviceTraits):
        raise TypeError(f"traits={traits!r} must be a DeviceTraits (see device_traits)")
    if cpu_bf16_speedup is not None:
        check_number("cpu_bf16_speedup", cpu_bf16_speedup, above=0)
    check_number("cpu_bf16_spread", cpu_bf16_spread, at_least=0)
    if traits.type == "cuda":
        major, minor = traits.capability
        cc = f"{traits.name} has compute capability {major}.{minor}"
        if traits.capability >= (8, 0) and traits.bf16_native:
            return PrecisionPolicy("cuda", "bf16", True, False, (
                (f"{cc} (8.0 or more): its tensor cores multiply bf16 natively "
                "(torch.cuda.is_bf16_supported(including_emulation=False))"),
                "bf16 has float32's exponent range: gradients do not underflow, no GradScaler needed",
                ("what autocast leaves in float32 runs its matmuls in TF32 "
                "(torch.backends.cuda.matmul.fp32_precision = 'tf32')")))
        if traits.capability >= (7, 0):
            return PrecisionPolicy("cuda", "fp16", False, True, (
                (f"{cc} (below 8.0): no native bf16 (torch.cuda.is_bf16_supported() may say True, "
                "through a slow emulation) and no TF32"),
                "its tensor cores multiply fp16 (compute capability 7.0 and later)",
                "fp16's narrow range lets small gradients underflow: a GradScaler scales the loss"))
        return PrecisionPolicy("cuda", "fp32", False, False, (
            f"{cc} (below 7.0): no tensor cores, 16-bit formats gain little", ))
    if traits.type == "cpu":
        if not traits.bf16_native:
            return PrecisionPolicy("cpu", "fp32", False, False, (
                "this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 autocast would be emulated",))
        if cpu_bf16_speedup is None:
            return PrecisionPolicy("cpu", "fp32", False, False, (
                "this CPU has bf16 instructions, but bf16 autocast was not measured here: fp32 until it is",))
        measured = f"bf16 autocast measured {cpu_bf16_speedup:.2f}x ± {cpu_bf16_spread:.2f} fp32's speed"
        if cpu_bf16_speedup - cpu_bf16_spread > 1:
            return PrecisionPolicy("cpu", "bf16", False, False, (
                "this CPU has bf16 instructions (AVX512-BF16 or AMX)", f"{measured}: faster, so bf16"))
        return PrecisionPolicy("cpu", "fp32", False, False, (
            "this CPU has bf16 instructions (AVX512-BF16 or AMX)",
            f"{measured}: not faster beyond noise, so fp32"))
    return PrecisionPolicy(traits.type, "fp32", False, False, (
        f"mixed precision on {traits.type} is not covered by this course: fp32",))


def precision_context(precision: str, device: str | torch.device | None = None):
    """A context for **forward passes and losses** in ``precision``: its autocast (bf16, fp16) and TF32 setting.

    Never an optimizer step: autocast caches the 16-bit copy of each weight for as long as its region
    lasts, so a region held open across ``optimizer.step()`` keeps using the first weights
    (:func:`stale_weights_check`). ``"tf32"`` and ``"bf16"`` run CUDA float32 matmuls in TF32
    (:data:`TF32_PRECISIONS`). Inside a function ``torch.compile`` traces, only the autocast is entered:
    the caller sets TF32 around the compiled call (``PPO`` does). A ``torch.device`` is taken as
    resolved, as ``torch.compile(fullgraph=True)`` cannot trace ``torch.cuda.device_count()``; a name
    or None is resolved with ``get_device``.
    """
    precision = check_precision("precision", precision)
    if not isinstance(device, torch.device):
        device = get_device(device, param="device")
    autocast = torch.amp.autocast(device.type, dtype=AUTOCAST_DTYPES.get(precision, torch.bfloat16),
                                  enabled=precision in AUTOCAST_DTYPES)
    if torch.compiler.is_compiling():
        return autocast  # the compiler traces a plain autocast block, not one inside an ExitStack
    stack = contextlib.ExitStack()
    stack.enter_context(fp32_matmul_precision(uses_tf32(precision)))
    stack.enter_context(autocast)
    return stack


def autocast(policy: PrecisionPolicy, device: str | torch.device | None = None):
    """:func:`precision_context` for ``policy``, for code that cannot take a ``GradScaler``.

    Only for policies without a scaler: an fp16 policy raises ``ValueError``, since its step
    needs ``GradScaler`` calls around ``backward`` and ``optimizer.step()``.
    """
    if not isinstance(policy, PrecisionPolicy):
        raise TypeError(f"policy={policy!r} must be a PrecisionPolicy (see choose_policy)")
    if policy.grad_scaler:
        raise ValueError(f"policy.precision={policy.precision!r} needs a GradScaler inside the update, "
                         "which a context around the forward pass cannot add")
    return precision_context(policy.precision, device)


def stale_weights_check(device: str | torch.device | None = "cpu", dtype: str = "bf16") -> dict[str, float]:
    """How much one SGD step (learning rate 1) changes a ``Linear`` layer's autocast output on the same input,
    for three ways of placing autocast:

    * ``"one region around forward, step and forward"``: 0, the cached 16-bit weights (the mistake);
    * ``"one region, cache_enabled=False"``: the true change, casting the weights at every use;
    * ``"a region per forward pass"``: the true change (the right way).
    """
    device = get_device(device, param="device")
    dtype = check_choice("dtype", dtype, tuple(AUTOCAST_DTYPES))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=generator).to(device)
    changes = {}
    for name in ("one region around forward, step and forward", "one region, cache_enabled=False",
                 "a region per forward pass"):
        torch.manual_seed(0)
        layer = nn.Linear(16, 4).to(device)
        optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
        region = functools.partial(torch.amp.autocast, device.type, dtype=AUTOCAST_DTYPES[dtype],
                                   cache_enabled=name != "one region, cache_enabled=False")
        with region():
            before = layer(x)
            before.float().square().mean().backward()
            optimizer.step()
            if name != "a region per forward pass":
                after = layer(x)
        if name == "a region per forward pass":
            with region():
                after = layer(x)
        changes[name] = (after.float() - before.float()).abs().max().item()
    return changes


@dataclasses.dataclass(frozen=True)
class StepCheck:
    """One check of :func:`fp16_step_checks`: what was checked, whether it passed, and what was measured."""

    what: str
    passed: bool
    detail: str

    def __str__(self) -> str:
        return f"{'passed' if self.passed else 'FAILED'}: {self.what} ({self.detail})"


def fp16_step_checks(step: Callable, device: str | torch.device | None = "cpu", *,
                     max_grad_norm: float = 0.5) -> list[StepCheck]:
    """Check a hand-written fp16 training step against the course's, on a small seeded regression.

    ``step(model, optimizer, scaler, x, y, max_grad_norm)`` takes one SGD step on the mean squared
    error of ``model(x)`` against ``y`` in fp16 autocast, with the ``GradScaler`` ``scaler`` and the
    gradient's norm clipped (SGD, since Adam would hide a wrongly scaled gradient). The course's step
    is ``accumulated_step(optimizer, loss, batch, max_grad_norm=..., scaler=scaler)``. Two checks:

    * a good batch: the course's update, to within 1e-4 (clipping before ``scaler.unscale_`` makes
      it thousands of times too small);
    * a batch holding a NaN: no weight changes, and the scale is halved.
    """
    if not callable(step):
        raise TypeError(f"step={step!r} must be callable: step(model, optimizer, scaler, x, y, max_grad_norm)")
    device = get_device(device, param="device")
    max_grad_norm = check_number("max_grad_norm", max_grad_norm, above=0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator).to(device)
    y = torch.randn(64, 1, generator=generator).to(device)
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)

    def run(update, batch_x):
        model = copy.deepcopy(start)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device.type)
        scale = scaler.get_scale()
        update(model, optimizer, scaler, batch_x)
        change = torch.cat([(p.detach() - q.detach()).flatten() for p, q in zip(model.parameters(),
                                                                                 start.parameters())])
        return change, scale, scaler.get_scale()

    def course(model, optimizer, scaler, batch_x):
        def loss(_):
            with torch.amp.autocast(device.type, dtype=torch.float16):
                return nn.functional.mse_loss(model(batch_x), y)
        accumulated_step(optimizer, loss, batch_x, accumulation_steps=1, max_grad_norm=max_grad_norm, scaler=scaler)

    def theirs(model, optimizer, scaler, batch_x):
        step(model, optimizer, scaler, batch_x, y, max_grad_norm)

    right, _, _ = run(course, x)
    mine, _, _ = run(theirs, x)
    off = ((mine - right).norm() / right.norm()).item()
    good = StepCheck("a good batch: the same update as the course's step", off <= 1e-4,
                     f"the update differs by {off:.1e} of its size; allowed 1e-4")
    poisoned = x.clone()
    poisoned[0, 0] = float("nan")
    change, before, after = run(theirs, poisoned)
    untouched = bool((change == 0).all())
    bad = StepCheck("a NaN in the batch: the step skipped and the scale halved", untouched and after == before / 2,
                    f"weights {'unchanged' if untouched else 'changed'}, scale {before:,.0f} -> {after:,.0f}")
    return [good, bad]
