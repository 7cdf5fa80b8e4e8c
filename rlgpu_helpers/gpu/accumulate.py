"""Gradient accumulation: one optimizer step over a batch taken in K micro-batches (introduced in notebook 07).

A batch too big for memory can still make one step: run forward and backward on each micro-batch
in turn (``backward`` *adds* into ``.grad``) and step once at the end. Only one micro-batch's
activations are alive at a time, so memory falls with the micro-batch, while time usually grows.

It equals the full batch only if each micro-batch's loss is scaled right. A micro-batch of n_k
rows returns the mean over its own rows, so for the batch's B rows

    L = (1/B) Σ_i ℓ_i = Σ_k (n_k / B) · mean_k ,    and so   ∇L = Σ_k (n_k / B) · ∇mean_k .

:func:`accumulate_gradients` scales each loss by its **share** n_k / B, exact for any split;
dividing by K is right only for equal micro-batches, not dividing makes the gradient K times too
big (``scaling`` names all three). Statistics of the whole batch, such as PPO's advantage
normalization, must stay over the whole batch (``learn.ppo`` shows how).

:func:`accumulated_step` is the whole update: ``zero_grad``, the K backward passes, clipping
**once**, on the summed gradient, and one ``optimizer.step()``; it reads nothing on the host. Under
DDP, :func:`sync_last_micro_batch_only` all-reduces on the last backward only. An fp16
``GradScaler`` scales each loss and unscales the sum before clipping; with a fused Adam its skip
of an inf or NaN step is decided on the device too.

:func:`gradient_difference` and :func:`parameter_change` are the proof: one piece against
accumulated, in any float type (``BatchNorm``, whose rows depend on each other, never agrees).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from ..core.checks import check_choice, check_int, check_number

SCALINGS = {
    "share": "each micro-batch's mean loss times n_k / B: exact for any split",
    "1/K": "each micro-batch's mean loss divided by K: exact only when every micro-batch has B / K rows",
    "none": "no scaling (the classic mistake): K times the gradient when the micro-batches are equal",
}
"""How :func:`accumulate_gradients` can scale each micro-batch's loss; only ``"share"`` is always right."""


# ---------------------------------------------------------------------------- splitting a batch

def micro_batch_sizes(batch_size: int, *, accumulation_steps: int | None = None,
                      micro_batch_size: int | None = None) -> tuple[int, ...]:
    """Rows in each micro-batch of a batch of ``batch_size`` rows; give exactly one of the two.

    * ``accumulation_steps=K``: K micro-batches differing by at most a row, the larger first (as
      ``torch.tensor_split``): 10 rows in 3 give (4, 3, 3). K is at most ``batch_size``.
    * ``micro_batch_size=m``: micro-batches of m rows, the last one smaller: 10 rows by 4 give
      (4, 4, 2). The usual choice when memory decides: m, the largest micro-batch that fits.
    """
    batch_size = check_int("batch_size", batch_size)
    if (accumulation_steps is None) == (micro_batch_size is None):
        raise ValueError(f"give exactly one of accumulation_steps={accumulation_steps!r} and "
                         f"micro_batch_size={micro_batch_size!r}")
    if accumulation_steps is not None:
        steps = check_int("accumulation_steps", accumulation_steps)
        if steps > batch_size:
            raise ValueError(f"accumulation_steps={steps} is larger than the batch ({batch_size} rows): "
                             "every micro-batch needs at least one row")
        small, extra = divmod(batch_size, steps)
        return tuple(small + 1 if k < extra else small for k in range(steps))
    size = check_int("micro_batch_size", micro_batch_size)
    full, rest = divmod(batch_size, size)
    return (size,) * full + ((rest,) if rest else ())


def describe_sizes(sizes) -> str:
    """Micro-batch sizes in short: ``(4, 3, 3)`` as "4 + 2 x 3", ``(100,) * 300`` as "300 x 100"."""
    runs = []
    for size in sizes:
        if runs and runs[-1][1] == size:
            runs[-1][0] += 1
        else:
            runs.append([1, size])
    return " + ".join(f"{count} x {size}" if count > 1 else f"{size}" for count, size in runs)


def _rows(batch) -> int:
    """Rows of a batch (a tensor, or a tuple, list or dict of tensors with the same first size)."""
    if isinstance(batch, torch.Tensor):
        parts = {"batch": batch}
    elif isinstance(batch, Mapping):
        parts = {f"batch[{key!r}]": value for key, value in batch.items()}
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        parts = {f"batch[{index}]": value for index, value in enumerate(batch)}
    else:
        raise TypeError(f"batch={batch!r} must be a tensor, or a tuple, list or dict of tensors")
    if not parts:
        raise ValueError(f"batch={batch!r} holds no tensors")
    rows = {}
    for name, part in parts.items():
        if not isinstance(part, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, not {type(part).__name__}")
        if part.dim() == 0:
            raise ValueError(f"{name} is a 0-d tensor: a batch needs a first dimension of rows")
        rows[name] = part.shape[0]
    if len(set(rows.values())) > 1:
        (first, n), *others = rows.items()
        other, m = next((name, count) for name, count in others if count != n)
        raise ValueError(f"{other} has {m} rows but {first} has {n}: every part of a batch needs the same rows")
    (count,) = set(rows.values())
    if count == 0:
        raise ValueError("batch has 0 rows: there is nothing to learn from")
    return count


def _take(batch, start: int, stop: int):
    if isinstance(batch, torch.Tensor):
        return batch[start:stop]
    if isinstance(batch, Mapping):
        return {key: value[start:stop] for key, value in batch.items()}
    return type(batch)(value[start:stop] for value in batch) if isinstance(batch, tuple) else [
        value[start:stop] for value in batch]


def micro_batches(batch, *, accumulation_steps: int | None = None, micro_batch_size: int | None = None) -> list:
    """``batch`` cut into micro-batches of :func:`micro_batch_sizes` rows, each of the same kind.

    ``batch`` is a tensor, or a tuple, list or dict of tensors with the same number of rows
    (observations, actions, targets...). The pieces are views: nothing is copied.
    """
    sizes = micro_batch_sizes(_rows(batch), accumulation_steps=accumulation_steps,
                              micro_batch_size=micro_batch_size)
    pieces, start = [], 0
    for size in sizes:
        pieces.append(_take(batch, start, start + size))
        start += size
    return pieces


# ---------------------------------------------------------------------------- accumulating

class _NoSync:
    """Where :func:`sync_last_micro_batch_only` leaves DDP's ``no_sync`` for :func:`accumulate_gradients`.

    A plain attribute, not a ``ContextVar``, which ``torch.compile`` cannot trace (a graph break in
    every compiled update). One setting per process, as DDP has one model per process.
    """

    current: Callable[[], contextlib.AbstractContextManager] | None = None


_NO_SYNC = _NoSync()


@contextlib.contextmanager
def sync_last_micro_batch_only(no_sync: Callable[[], contextlib.AbstractContextManager]):
    """Inside it, :func:`accumulate_gradients` runs every micro-batch but the last inside ``no_sync()``.

    ``no_sync`` is DDP's ``model.no_sync``: its backward passes only add into ``.grad``, and the last
    one all-reduces the sum, once per batch instead of once per micro-batch (notebook 10).
    """
    if not callable(no_sync):
        raise TypeError(f"no_sync={no_sync!r} must be callable, such as DistributedDataParallel.no_sync")
    before, _NO_SYNC.current = _NO_SYNC.current, no_sync
    try:
        yield
    finally:
        _NO_SYNC.current = before


def accumulate_gradients(loss_fn: Callable[[object], torch.Tensor], batch, *, accumulation_steps: int | None = None,
                         micro_batch_size: int | None = None, scaling: str = "share",
                         scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
    """Add into every ``.grad`` the gradient of the mean loss over ``batch``, one micro-batch at a time.

    ``loss_fn(micro_batch)`` returns the **mean** loss over its rows, a scalar; each is multiplied by
    its share (``scaling``, see :data:`SCALINGS`) and back-propagated before the next runs. Call
    ``optimizer.zero_grad()`` first (:func:`accumulated_step` does). One piece runs
    ``loss_fn(batch).backward()`` exactly. Returns the batch's loss, detached and left on the device.
    A ``scaler`` scales each loss for ``backward`` only: the gradients come out scaled, the loss not.
    """
    scaling = check_choice("scaling", scaling, tuple(SCALINGS))
    if not callable(loss_fn):
        raise TypeError(f"loss_fn={loss_fn!r} must be callable")
    total_rows = _rows(batch)
    pieces = micro_batches(batch, accumulation_steps=accumulation_steps, micro_batch_size=micro_batch_size)
    total, no_sync = None, _NO_SYNC.current
    for index, piece in enumerate(pieces):
        quiet = no_sync is not None and index < len(pieces) - 1
        with no_sync() if quiet else contextlib.nullcontext():  # DDP: no all-reduce before the last micro-batch
            loss = _micro_batch_backward(loss_fn, piece, index, len(pieces), total_rows, scaling, scaler)
        total = loss if total is None else total + loss
    return total


def _micro_batch_backward(loss_fn, piece, index: int, count: int, total_rows: int, scaling: str,
                          scaler: torch.amp.GradScaler | None) -> torch.Tensor:
    """One micro-batch's forward and backward, its loss scaled for ``scaling``; returns the scaled loss, detached."""
    loss = loss_fn(piece)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"loss_fn returned {shape} for micro-batch {index}: it must return a scalar tensor, "
                         "the mean loss over the micro-batch's rows")
    if count > 1:  # a batch in one piece is left exactly as it is: no multiply by 1
        if scaling == "share":
            loss = loss * (_rows(piece) / total_rows)
        elif scaling == "1/K":
            loss = loss / count
    (loss if scaler is None else scaler.scale(loss)).backward()
    return loss.detach()


@dataclasses.dataclass(frozen=True)
class AccumulatedStep:
    """What :func:`accumulated_step` did: the batch's loss, the gradient's norm before clipping
    (None without clipping), both tensors left on the device, and the micro-batches' sizes."""

    loss: torch.Tensor
    grad_norm: torch.Tensor | None
    micro_batch_sizes: tuple[int, ...]


def _optimizer_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def accumulated_step(optimizer: torch.optim.Optimizer, loss_fn: Callable[[object], torch.Tensor], batch, *,
                     accumulation_steps: int | None = None, micro_batch_size: int | None = None,
                     max_grad_norm: float | None = None, scaling: str = "share",
                     scaler: torch.amp.GradScaler | None = None) -> AccumulatedStep:
    """One optimizer step on ``batch``, taken in micro-batches: the accumulated update.

    ``zero_grad(set_to_none=True)``, :func:`accumulate_gradients`, ``clip_grad_norm_`` once on the
    summed gradient when ``max_grad_norm`` is given, and ``optimizer.step()``; with
    ``accumulation_steps=1``, the ordinary update, operation for operation. With an fp16 ``scaler``:

        for each micro-batch: scaler.scale(loss).backward()
        scaler.unscale_(optimizer)         # the true gradient, before clipping measures it
        clip_grad_norm_(...)
        scaler.step(optimizer)             # skipped if the gradient holds inf or NaN
        scaler.update()                    # halve the scale after a skip, grow it after a good run
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
    if max_grad_norm is not None:
        max_grad_norm = check_number("max_grad_norm", max_grad_norm, above=0)
    sizes = micro_batch_sizes(_rows(batch), accumulation_steps=accumulation_steps, micro_batch_size=micro_batch_size)
    optimizer.zero_grad(set_to_none=True)
    loss = accumulate_gradients(loss_fn, batch, accumulation_steps=accumulation_steps,
                                micro_batch_size=micro_batch_size, scaling=scaling, scaler=scaler)
    if scaler is not None:
        scaler.unscale_(optimizer)
    norm = None
    if max_grad_norm is not None:
        norm = nn.utils.clip_grad_norm_(_optimizer_parameters(optimizer), max_grad_norm)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()
    return AccumulatedStep(loss, norm, sizes)


# ---------------------------------------------------------------------------- the proof

def _check_model(model) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no parameter that requires a gradient")
    return model


def _check_float(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype={dtype!r} must be a floating-point torch.dtype, such as torch.float64")
    return dtype


def cast_batch(batch, dtype: torch.dtype):
    """``batch`` with its floating-point tensors in ``dtype`` (integer ones, such as actions, unchanged)."""
    _rows(batch)
    dtype = _check_float(dtype)

    def cast(t):
        return t.to(dtype) if t.is_floating_point() else t

    if isinstance(batch, torch.Tensor):
        return cast(batch)
    if isinstance(batch, Mapping):
        return {key: cast(value) for key, value in batch.items()}
    return tuple(cast(value) for value in batch) if isinstance(batch, tuple) else [cast(v) for v in batch]


def flat_gradient(model: nn.Module) -> torch.Tensor:
    """Every parameter's ``.grad`` in one flat vector (zeros for a parameter without one)."""
    model = _check_model(model)
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
                      for p in model.parameters() if p.requires_grad])


def _flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad])


@dataclasses.dataclass(frozen=True)
class Comparison:
    """An accumulated result against the full batch's: the largest absolute difference of any
    element, the largest absolute element of the full-batch result, and the float type."""

    dtype: torch.dtype
    micro_batch_sizes: tuple[int, ...]
    max_abs_difference: float
    max_abs_reference: float

    @property
    def relative(self) -> float:
        """The difference as a fraction of the largest element: comparable across models."""
        return self.max_abs_difference / self.max_abs_reference if self.max_abs_reference else float("inf")

    @property
    def in_epsilons(self) -> float:
        """:attr:`relative` in units of the float type's machine epsilon (its rounding step)."""
        return self.relative / torch.finfo(self.dtype).eps

    def __str__(self) -> str:
        name = str(self.dtype).removeprefix("torch.")
        return (f"{name}, micro-batches {describe_sizes(self.micro_batch_sizes)}: max |difference| "
                f"{self.max_abs_difference:.3g} (largest element {self.max_abs_reference:.3g}; "
                f"{self.relative:.3g} of it, {self.in_epsilons:.3g} x {name} epsilon)")


def _compare(reference: torch.Tensor, other: torch.Tensor, dtype, sizes) -> Comparison:
    return Comparison(dtype, tuple(sizes), float((other - reference).abs().max()), float(reference.abs().max()))


def gradient_difference(model: nn.Module, loss_fn: Callable[[nn.Module, object], torch.Tensor], batch, *,
                        accumulation_steps: int | None = None, micro_batch_size: int | None = None,
                        scaling: str = "share", dtype: torch.dtype = torch.float64) -> Comparison:
    """The gradient of ``loss_fn(model, batch)`` in one piece against its accumulation in micro-batches.

    Works on a copy of ``model`` converted to ``dtype``, with ``batch``'s float tensors in
    ``dtype`` too (the model itself is left alone). ``loss_fn(model, rows)`` returns the mean loss
    over ``rows``. Returns a :class:`Comparison` of the two flat gradients.
    """
    model = _check_model(model)
    dtype = _check_float(dtype)
    copied = copy.deepcopy(model).to(dtype)
    batch = cast_batch(batch, dtype)
    sizes = micro_batch_sizes(_rows(batch), accumulation_steps=accumulation_steps, micro_batch_size=micro_batch_size)
    copied.zero_grad(set_to_none=True)
    loss_fn(copied, batch).backward()
    full = flat_gradient(copied)
    copied.zero_grad(set_to_none=True)
    accumulate_gradients(lambda rows: loss_fn(copied, rows), batch, accumulation_steps=accumulation_steps,
                         micro_batch_size=micro_batch_size, scaling=scaling)
    return _compare(full, flat_gradient(copied), dtype, sizes)


def parameter_change(model: nn.Module, loss_fn: Callable[[nn.Module, object], torch.Tensor], batch,
                     make_optimizer: Callable[[list], torch.optim.Optimizer], *,
                     accumulation_steps: int | None = None, micro_batch_size: int | None = None,
                     scaling: str = "share", max_grad_norm: float | None = None, steps: int = 1,
                     dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """How ``steps`` accumulated updates on ``batch`` move the parameters: one flat vector.

    Each update is :func:`accumulated_step`, on a copy of ``model`` in ``dtype`` with an
    optimizer made by ``make_optimizer(parameters)`` (``lambda p: torch.optim.SGD(p, lr=0.1)``).
    ``accumulation_steps=1`` gives the ordinary update to compare with (:func:`relative_difference`).
    """
    model = _check_model(model)
    dtype = _check_float(dtype)
    steps = check_int("steps", steps)
    copied = copy.deepcopy(model).to(dtype)
    batch = cast_batch(batch, dtype)
    optimizer = make_optimizer([p for p in copied.parameters() if p.requires_grad])
    before = _flat_parameters(copied).clone()
    for _ in range(steps):
        accumulated_step(optimizer, lambda rows: loss_fn(copied, rows), batch, accumulation_steps=accumulation_steps,
                         micro_batch_size=micro_batch_size, max_grad_norm=max_grad_norm, scaling=scaling)
    return _flat_parameters(copied) - before


def relative_difference(value: torch.Tensor, reference: torch.Tensor) -> float:
    """``max |value - reference| / max |reference|``: 0 when equal, 1 when off by the reference's own size."""
    for name, tensor in (("value", value), ("reference", reference)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}={tensor!r} must be a tensor")
    if value.shape != reference.shape:
        raise ValueError(f"value has shape {tuple(value.shape)} but reference has {tuple(reference.shape)}")
    scale = float(reference.abs().max())
    if scale == 0:
        raise ValueError("reference is all zeros: a relative difference needs a non-zero reference")
    return float((value - reference).abs().max()) / scale
