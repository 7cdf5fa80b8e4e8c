"""One optimizer step of the Snake actor-critic, as the workload of the precision lesson (08).

:class:`TrainStep` runs a step of notebook 11's net in a precision (fp32, TF32, bf16 or fp16 with
a ``GradScaler``), :func:`step_flops` counts its arithmetic, and :func:`scaler_trace` follows a
``GradScaler`` through steps with planted infinite gradients. The precision machinery itself is
in :mod:`rlgpu_helpers.gpu.precision`.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from ..core.checks import check_int, check_ints, check_number, check_seed
from ..core.device import get_device
from ..gpu.precision import check_precision, precision_context
from ..snake import rules
from .nets import ActorCritic

OBS_SIZE = rules.observation_shape("features", 10, 10)[0]
"""The Snake MLP's input: the 11 features."""


class TrainStep:
    """One optimizer step of the Snake actor-critic (``learn.nets.ActorCritic``) in a precision.

    The net is notebook 11's, ``hidden`` wide, learning from a fixed random batch of
    ``batch_size`` feature observations: cross-entropy of the logits against random actions
    plus the squared error of the value against random returns, then Adam. Calling it runs:

        with TF32 matmuls (tf32 only), with autocast (bf16, fp16):
            loss = the loss of the batch
        scaler.scale(loss).backward()   # fp16: loss times the scale; otherwise the loss itself
        scaler.step(optimizer)          # fp16: unscale, skip the step if a gradient is inf/NaN
        scaler.update()                 # fp16: halve the scale after a skip, grow it after good steps
    """

    def __init__(self, precision: str = "fp32", hidden: int = 64, batch_size: int = 256,
                 device: str | torch.device | None = "cpu", *, seed: int = 0, init_scale: float = 2.0**16,
                 growth_interval: int = 2000):
        self.precision = check_precision("precision", precision)
        self.hidden = check_int("hidden", hidden)
        self.batch_size = check_int("batch_size", batch_size)
        self.device = get_device(device, param="device")
        check_seed("seed", seed)
        if precision == "tf32" and self.device.type != "cuda":
            raise ValueError(f"precision='tf32' needs a CUDA GPU, not device={str(self.device)!r}")
        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        self.model = ActorCritic((OBS_SIZE,), hidden=hidden).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=check_number("init_scale", init_scale, above=0),
                                           growth_interval=check_int("growth_interval", growth_interval),
                                           enabled=precision == "fp16")
        self.obs = torch.randn(batch_size, OBS_SIZE, generator=generator).to(self.device)
        self.actions = torch.randint(rules.NUM_ACTIONS, (batch_size,), generator=generator).to(self.device)
        self.returns = torch.randn(batch_size, generator=generator).to(self.device)

    def loss(self) -> torch.Tensor:
        """The loss of the batch, in the step's precision (float32 out)."""
        with precision_context(self.precision, self.device):
            logits, value = self.model(self.obs)
            return (nn.functional.cross_entropy(logits.float(), self.actions)
                    + (value.float() - self.returns).pow(2).mean())

    def __call__(self) -> torch.Tensor:
        """One step; returns the loss (on the device, not read back)."""
        loss = self.loss()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def standing_bytes(self) -> int:
        """Bytes held between steps: the weights and Adam's two moments (float32 in every precision).

        The gradients are not among them: ``zero_grad(set_to_none=True)`` frees them, and each
        step allocates them again.
        """
        return 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())


def step_flops(hidden: int, batch_size: int) -> float:
    """Floating-point operations of one :class:`TrainStep`: its matmuls, forward and backward.

    Each linear layer of ``n_in`` x ``n_out`` costs ``2 * batch * n_in * n_out`` forward and
    twice that backward (gradients of inputs and of weights); the actor and the critic each
    have two layers and a head.
    """
    hidden, batch_size = check_int("hidden", hidden), check_int("batch_size", batch_size)
    weights = 2 * (OBS_SIZE * hidden + hidden * hidden) + hidden * (rules.NUM_ACTIONS + 1)
    return 6.0 * batch_size * weights


@dataclasses.dataclass(frozen=True)
class ScalerStep:
    """One fp16 step under a ``GradScaler``: the scale it used, whether it was skipped, the next scale."""

    step: int
    scale: float
    poisoned: bool
    skipped: bool
    next_scale: float


def scaler_trace(device: str | torch.device | None = "cpu", *, steps: int = 14, poison_at=(8,),
                 init_scale: float = 2.0**20, growth_interval: int = 3, hidden: int = 64,
                 batch_size: int = 64) -> list[ScalerStep]:
    """Run ``steps`` fp16 steps of a :class:`TrainStep` with a ``GradScaler`` and record each.

    The scale starts at ``init_scale``, high enough for the scaled fp16 gradients to overflow:
    the scaler skips those steps and halves the scale until the gradients are finite, and
    doubles it after every ``growth_interval`` good steps in a row. At the steps in
    ``poison_at`` one observation is NaN, as a bad batch would be: that step is skipped too. A
    step counts as skipped when the optimizer left every weight as it was.
    """
    check_int("steps", steps)
    poison_at = set(check_ints("poison_at", poison_at, 0)) if poison_at != () else set()
    step = TrainStep("fp16", hidden, batch_size, device, init_scale=init_scale, growth_interval=growth_interval)
    clean = step.obs.clone()
    trace = []
    for index in range(steps):
        step.obs.copy_(clean)
        if index in poison_at:
            step.obs[0, 0] = math.nan
        scale = step.scaler.get_scale()
        before = [p.detach().clone() for p in step.model.parameters()]
        step()
        unchanged = all(torch.equal(b, p) for b, p in zip(before, step.model.parameters()))
        trace.append(ScalerStep(index, scale, index in poison_at, unchanged, step.scaler.get_scale()))
    return trace
