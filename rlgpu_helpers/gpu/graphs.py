"""Fewer launches per step: ``torch.compile`` and CUDA graphs (introduced in notebook 09).

A Snake step or a PPO minibatch update at small N is *launch-bound* (``gpu.launches``): a hundred
tiny operators, each paying a fixed cost, and almost no arithmetic. Two tools cut that cost:

* ``torch.compile`` traces a function into a graph and fuses its operators into a few generated
  kernels (C++ on a CPU, Triton on a GPU). :func:`compile_step` compiles and times the first call;
  :func:`graph_breaks` shows where tracing stops (a host read, a call it cannot trace), splitting
  the function with Python in between. Without a C++ compiler or Triton nothing compiles:
  :func:`compiler_missing` says why, the learners run eagerly (:func:`compile_or_say_why`) and
  measurements leave compiled code out (:func:`can_measure_compiled`), each with one printed line.
* A CUDA graph records every kernel of one call and replays them with one launch.
  :class:`CapturedStep` captures by hand, as the PyTorch CUDA notes say. A replay overwrites its
  *static* outputs, and nothing captured may read a value on the host, change shape, or allocate
  outside the graph's pool; random draws stay fresh (each replay advances the generator's offset).
* An optimizer step inside a graph needs its state on the device: :func:`graph_safe_adam`, whose
  learning rate is a device tensor that :func:`set_learning_rate` changes in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import time
from collections.abc import Callable

import torch
from torch._dynamo.utils import counters
from torch._inductor import cpp_builder
from torch.utils._triton import has_triton

from ..core.checks import check_bool, check_choice, check_int, check_number
from ..core.device import get_device, synchronize

COMPILE_MODES = ("default", "reduce-overhead")
"""The ``torch.compile`` modes measured in notebook 09 (``reduce-overhead``: plus CUDA graphs, on CUDA only)."""


class _DropProfilerLabel(logging.Filter):
    """Dynamo drops the profiler label of ``optimizer.step`` and warns once on standard error; harmless."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Profiler record function")


logging.getLogger("torch._dynamo.variables.ctx_manager").addFilter(_DropProfilerLabel())


# ---------------------------------------------------------------------------- torch.compile

@dataclasses.dataclass(frozen=True)
class Compiled:
    """A compiled function, and the seconds its first call took (the compile, mostly).

    ``cuda_graphs_skipped``: under ``mode="reduce-overhead"``, why Inductor did not replay the compiled
    code as CUDA graphs (one reason per graph; empty when it did). Inductor skips them quietly, and the
    call then runs as in the default mode: timed as graphed, the number would be a lie.
    """

    fn: Callable
    compile_seconds: float
    mode: str
    fullgraph: bool
    cuda_graphs_skipped: tuple[str, ...] = ()


@contextlib.contextmanager
def cuda_graph_skips():
    """Collect, as a list, why Inductor skips CUDA graphs under ``reduce-overhead`` while the block runs:
    each logged reason (kept off standard error), or a count where Inductor only counts (a CPU)."""
    reasons: list[str] = []

    def collect(record: logging.LogRecord) -> bool:  # a logger filter: keep the reason, drop the record
        if "cudagraph" not in record.getMessage().lower():
            return True
        reasons.append(record.getMessage())
        return False

    # torch >= 2.7 logs skips as "cudagraphs" artifacts; torch 2.6 as "perf_hints" (with other hints).
    loggers = [logging.getLogger(f"torch._inductor.cudagraph_utils.__{name}") for name in ("cudagraphs", "perf_hints")]
    before = counters["inductor"]["cudagraph_skips"]
    for logger in loggers:
        logger.addFilter(collect)
    try:
        yield reasons
    finally:
        for logger in loggers:
            logger.removeFilter(collect)
        unexplained = counters["inductor"]["cudagraph_skips"] - before - len(reasons)
        if unexplained > 0:
            reasons.append(f"Inductor skipped CUDA graphs for {unexplained} graph(s) without a reason")


def compile_step(fn: Callable, *example_args, mode: str = "default", fullgraph: bool = True,
                 device: str | torch.device | None = None, options: dict | None = None) -> Compiled:
    """``torch.compile(fn, mode=mode, fullgraph=fullgraph, dynamic=False)``, called once on ``example_args`` and timed.

    The first call traces and compiles (seconds), and runs ``fn`` once; later calls with inputs of the
    same shapes, dtypes and devices run the compiled code. ``fullgraph=True`` makes a graph break an
    error instead of a silent split. ``dynamic=False``: code for these shapes only. Without it, once the
    same function has been compiled for other shapes in this process (another N), dynamo compiles it for
    any size, which can be several times slower. ``options``: Inductor settings added
    to the mode's (for example ``snake.vec.step_compile_options``). Without a compiler for ``device``:
    :class:`CompilerMissingError`.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    mode = check_choice("mode", mode, COMPILE_MODES)
    check_bool("fullgraph", fullgraph)
    device = get_device(device)
    why = compiler_missing(device.type)
    if why is not None:
        raise CompilerMissingError(why)
    if options:  # torch.compile takes a mode or options, not both: the mode's options, then these
        settings = torch._inductor.list_mode_options(mode) | dict(options)
        compiled = torch.compile(fn, options=settings, fullgraph=fullgraph, dynamic=False)
    else:
        compiled = torch.compile(fn, mode=None if mode == "default" else mode, fullgraph=fullgraph, dynamic=False)
    synchronize(device)
    start = time.perf_counter()
    with cuda_graph_skips() as skipped:
        compiled(*example_args)
        synchronize(device)
    seconds = time.perf_counter() - start
    return Compiled(compiled, seconds, mode, fullgraph, tuple(skipped) if mode == "reduce-overhead" else ())


class CompilerMissingError(RuntimeError):
    """``torch.compile`` cannot make code for this device here (no C++ compiler for a CPU, no Triton for a
    GPU): said before compiling, with how to get the compiler, instead of Inductor's long traceback."""


COMPILER_HELP = {
    "cpu": "install a C++ compiler (g++ or clang; on macOS `xcode-select --install`, on Windows the Visual "
           "Studio Build Tools) and restart",
    "cuda": "install Triton (`pip install triton`, a wheel that matches this torch) and restart",
}
"""How to get what ``torch.compile`` needs, by device type."""


@functools.lru_cache(maxsize=None)
def compiler_missing(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot make code for a device of ``device_type`` here, or None if it can:
    Inductor needs a C++ compiler for a CPU and Triton for a GPU, or the first call fails at length."""
    if device_type == "cuda":
        return None if has_triton() else f"torch.compile needs Triton on a GPU, and it is missing: {COMPILER_HELP['cuda']}"
    if device_type != "cpu":
        return None  # other devices: torch's own message, when it comes
    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # torch raises its own InvalidCxxCompiler, and others on odd installs
        return f"torch.compile needs a C++ compiler on a CPU ({type(error).__name__}): {COMPILER_HELP['cpu']}"
    return None


def compile_or_say_why(compile: bool, device: str | torch.device, what: str) -> bool:
    """``compile``, unless this machine cannot compile for ``device``: then one printed line says why, and how
    to get the compiler, and ``what`` (a learner, a step) runs eagerly instead."""
    if not compile:
        return False
    why = compiler_missing(torch.device(device).type)
    if why is None:
        return True
    say_once(f"{what} runs eagerly: {why}")
    return False


def can_measure_compiled(device: str | torch.device, what: str) -> bool:
    """Whether compiled code can be measured on ``device`` here. If not, one printed line says
    ``"<what>: not measured here: <why>"`` (once per process), and the caller leaves that
    measurement out: a compiled mode timed eagerly would be eager under another name."""
    why = compiler_missing(torch.device(device).type)
    if why is not None:
        say_once(f"{what}: not measured here: {why}")
    return why is None


def say_once(line: str) -> None:
    """Print ``line`` unless this process printed it already: a notebook builds many learners, a sweep many parts."""
    if line not in _SAID:
        _SAID.add(line)
        print(line)


_SAID: set[str] = set()


@dataclasses.dataclass(frozen=True)
class GraphBreaks:
    """What ``torch._dynamo.explain`` found: graphs, breaks, and each break's reason and place."""

    graphs: int
    breaks: int
    operators: int
    reasons: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        lines = [f"{self.graphs} graph(s), {self.breaks} graph break(s), {self.operators} operators traced"]
        lines += [f"  - {reason}\n    at {where}" for reason, where in self.reasons]
        return "\n".join(lines)


def _explain_afresh(fn: Callable, *args):
    """``torch._dynamo.explain(fn)(*args)`` from a clean slate: unused compiled functions collected and
    dynamo's caches cleared first, so what earlier compiles left cannot change the verdict."""
    gc.collect()
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args)


def graph_breaks(fn: Callable, *args) -> GraphBreaks:
    """Trace ``fn(*args)`` with ``torch._dynamo.explain`` (it runs ``fn`` once) and say where it breaks.

    Each reason is the first line of dynamo's explanation and the innermost frame it names; a
    break that made dynamo skip a frame altogether (left to run eagerly) counts too.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    explained = _explain_afresh(fn, *args)
    reasons = []
    for item in explained.break_reasons:
        text = " ".join(item.reason.split("\n")[:2]).strip()
        frame = item.user_stack[-1] if item.user_stack else None
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}" if frame else "?"
        if (text, where) not in reasons:
            reasons.append((text, where))
    return GraphBreaks(explained.graph_count, len(explained.break_reasons), explained.op_count, tuple(reasons))


def check_break_free(fn: Callable, inputs, expected) -> str:
    """Notebook 09's exercise checker: is ``fn`` traced whole, and does it still give ``expected``?

    ``inputs``: the arguments of each call (one tensor each); ``expected``: ``fn``'s outputs for them.
    Counts ``fn``'s graph breaks on the first input and names their lines, then compares ``fn`` eager,
    and compiled with ``fullgraph=True`` once it has none, against ``expected``. Returns text, and never
    raises for a wrong answer, so the notebook runs on.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    inputs, expected = list(inputs), list(expected)
    if not inputs or len(inputs) != len(expected):
        raise ValueError(f"inputs ({len(inputs)}) and expected ({len(expected)}) must be as many, and at least one")
    name = getattr(fn, "__name__", "fn")
    explained = _explain_afresh(fn, inputs[0])
    lines = []
    for item in explained.break_reasons:
        frame = item.user_stack[-1] if item.user_stack else None
        line = f"{frame.name}: {(frame.line or '?').strip()}" if frame else "?"
        if line not in lines:
            lines.append(line)
    eager_ok = all(torch.allclose(fn(x), want) for x, want in zip(inputs, expected))
    verdict = [f"{name}: {len(explained.break_reasons)} graph break(s)" + "".join(f"\n  at {line}" for line in lines),
               f"eager results as expected: {eager_ok}"]
    if explained.break_reasons:
        verdict.append("not yet: rewrite each line above so that no value comes back to Python (torch.where)")
        return "\n".join(verdict)
    why = compiler_missing(inputs[0].device.type if isinstance(inputs[0], torch.Tensor) else "cpu")
    if why is not None:
        verdict.append(f"compiled (fullgraph=True): not measured here: {why}")
        verdict.append("done: one graph, the expected results eagerly" if eager_ok else
                       "not yet: no break, but the results differ from the expected ones")
        return "\n".join(verdict)
    compiled = torch.compile(fn, fullgraph=True)
    compiled_ok = all(torch.allclose(compiled(x), want) for x, want in zip(inputs, expected))
    verdict.append(f"compiled (fullgraph=True) results as expected: {compiled_ok}")
    verdict.append("done: one graph, the same results" if eager_ok and compiled_ok else
                   "not yet: no break, but the results differ from the expected ones")
    return "\n".join(verdict)


# ---------------------------------------------------------------------------- CUDA graphs by hand

def check_cuda(device, what: str = "CUDA graphs") -> torch.device:
    """``device`` as a torch.device if it is a CUDA device and CUDA is here, else a clear ValueError."""
    device = get_device(device, param="device")
    if device.type != "cuda":
        raise ValueError(f"{what} need a CUDA GPU, not device={str(device)!r}")
    return device


def static_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` that a compiled function takes for ``x`` itself: an inference tensor stays one, a normal one normal.

    ``torch.compile`` guards on the difference: a plain ``clone()`` under ``torch.inference_mode`` would
    make the compiled function compile again inside the capture, and a compile cannot be captured.
    """
    with torch.inference_mode(x.is_inference()):
        return x.clone()


class CapturedStep:
    """``fn`` captured in a CUDA graph on its first calls, replayed with one launch after that.

    The first ``warmup`` calls run ``fn`` eagerly on a side stream (cuBLAS, autograd and the optimizer
    initialize lazily, before any capture); the next copies its inputs into static inputs, captures
    ``fn`` and replays it; later calls copy and replay. Every call does its work exactly once.

    A replay returns the graph's **static outputs**, which the next call overwrites: clone any you
    keep. ``fn`` must read no value on the host and keep its shapes; other tensors it reads (weights,
    env state) are read where they lie at each replay.
    """

    WARMUP = 2
    """Eager calls before the capture, by default: the third call captures."""

    def __init__(self, fn: Callable, device: str | torch.device, *, warmup: int = WARMUP):
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        self.device = check_cuda(device)
        self.fn = fn
        self.warmup = check_int("warmup", warmup, 1)
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._inputs: tuple[torch.Tensor, ...] = ()
        self._outputs = None

    def __call__(self, *inputs: torch.Tensor):
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
                raise ValueError(f"input {i} must be a CUDA tensor, got {x!r:.80}")
        self.calls += 1
        if self.calls <= self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                out = self.fn(*inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return out
        if self.graph is None:
            self._inputs = tuple(static_copy(x) for x in inputs)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._outputs = self.fn(*self._inputs)
        else:
            if len(inputs) != len(self._inputs):
                raise ValueError(f"the step was captured with {len(self._inputs)} inputs, got {len(inputs)}")
            for i, (static, x) in enumerate(zip(self._inputs, inputs)):
                if x.shape != static.shape or x.dtype != static.dtype:
                    raise ValueError(f"input {i} has shape {tuple(x.shape)} and dtype {x.dtype}; the graph was "
                                     f"captured with {tuple(static.shape)} and {static.dtype}")
        for static, x in zip(self._inputs, inputs):
            if static.data_ptr() != x.data_ptr():
                static.copy_(x)
        self.graph.replay()
        return self._outputs


COMPILED_VERSIONS = 64
"""How many compiled versions of one learner step a process keeps (one per learner's shapes and settings)."""
_RECOMPILE_LIMIT = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
# newer torch names cache_size_limit recompile_limit


def with_launch_settings(fn: Callable, device: str | torch.device, *, compile: bool, cuda_graphs: bool,
                         fullgraph: bool = True) -> Callable:
    """``fn`` as a learner's ``compile`` and ``cuda_graphs`` settings ask: compiled (``fullgraph`` or not),
    captured in a CUDA graph (:class:`CapturedStep`), both (the compiled function captured), or as it is.

    Compiled, every float ``fn`` reads (gamma, a reward scale) is a constant of its graph
    (``specialize_float``), and every shape too (``dynamic=False``, as :func:`compile_step`), so
    learners with other values or sizes each compile their own version, up to
    :data:`COMPILED_VERSIONS` of them. Without a compiler for ``device``, ``fn`` runs eagerly and one
    printed line says why.
    """
    if compile_or_say_why(compile, device, f"{getattr(fn, '__qualname__', 'a step')} (compile=True)"):
        compiled = torch.compile(fn, fullgraph=fullgraph, dynamic=False)

        @functools.wraps(fn)
        def floats_specialized(*args, **kwargs):
            with torch._dynamo.config.patch(specialize_float=True, **{_RECOMPILE_LIMIT: COMPILED_VERSIONS}):
                return compiled(*args, **kwargs)

        fn = floats_specialized
    if cuda_graphs:
        fn = CapturedStep(fn, device)
    return fn


def graph_safe_adam(params, lr: float, *, eps: float = 1e-8, device: str | torch.device | None = None,
                    fused: bool | None = None) -> torch.optim.Adam:
    """``Adam`` whose step can be captured in a CUDA graph or compiled without recompiling.

    The learning rate is a 0-d tensor on ``device``, changed in place by :func:`set_learning_rate`, and
    on CUDA ``capturable=True`` keeps Adam's step counter on the GPU. ``fused`` as for ``Adam`` (with
    it, a GradScaler's step reads nothing on the host).
    """
    device = get_device(device, param="device")
    lr = check_number("lr", lr, above=0)
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), eps=eps, capturable=device.type == "cuda",
                            fused=fused)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group's learning rate: in place where it is a tensor, else as a float."""
    lr = check_number("lr", lr, at_least=0)
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


IMPLEMENTATION_OPTIONS = ("capturable", "foreach", "fused", "differentiable")
"""Optimizer options that say how its step runs on this device, not what it learned: kept as built on a load."""


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """``optimizer.load_state_dict(state)``, keeping how the optimizer was built for this device.

    ``load_state_dict`` would replace two kinds of entry wrongly, so these are kept as built: a tensor
    hyperparameter (:func:`graph_safe_adam`'s learning rate, which compiled and captured steps read
    where it lies) is filled with the saved value, and :data:`IMPLEMENTATION_OPTIONS` (``capturable``
    and the like) stay this device's. Every state tensor is copied, so the optimizer shares no moments
    or step counters with the one whose state it loaded.
    """
    built = [dict(group) for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, before in zip(optimizer.param_groups, built):
        for key, value in before.items():
            if isinstance(value, torch.Tensor):
                value.fill_(float(group[key]))
                group[key] = value
            elif isinstance(group.get(key), torch.Tensor):
                group[key] = float(group[key])
        for key in IMPLEMENTATION_OPTIONS:
            if key in before:
                group[key] = before[key]
        on_device = group.get("capturable") or group.get("fused")
        for parameter in group["params"]:
            step = optimizer.state.get(parameter, {}).get("step")
            if isinstance(step, torch.Tensor):
                optimizer.state[parameter]["step"] = step.to(parameter.device if on_device else "cpu", torch.float32)
    given = {id(value) for entries in state["state"].values() for value in entries.values()
             if isinstance(value, torch.Tensor)}
    for entries in optimizer.state.values():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor) and id(value) in given:
                entries[key] = value.clone()
