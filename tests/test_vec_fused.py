"""The fused step (``snake.vec_fused``): the same games as ``VecSnake.step_tensors``, bit for bit, in
Triton's interpreter on a CPU (a fresh process, where Triton is installed) and on a GPU (``-m gpu``)."""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fused_lockstep import CASES, lockstep
from rlgpu_helpers.snake import vec_fused
from rlgpu_helpers.snake.vec import VecSnake
from rlgpu_helpers.snake.vec_fused import FusedStep, triton_missing

LOCKSTEP = Path(__file__).with_name("fused_lockstep.py")


@pytest.mark.skipif(not vec_fused.has_triton(), reason="Triton is not installed (torch's CUDA wheels bring it)")
def test_in_tritons_interpreter_the_fused_step_plays_the_eager_steps_games():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(LOCKSTEP)], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(seen) == set(CASES)
    for obs_type in FusedStep.OBS_TYPES:
        assert seen[f"{obs_type} 10x10, two programs"]["ate"] > 0 and seen[f"{obs_type} 10x10, two programs"]["died"] > 0
        assert seen[f"{obs_type} 4x4 wins"]["won"] == 2  # both games set one move from a full board
        assert seen[f"{obs_type} 5x7 truncations"]["truncated"] > 0


TRITON_TYPES = {torch.int32: "i32", torch.int64: "i64", torch.float32: "fp32", torch.bool: "i1"}


@pytest.mark.parametrize("aligned", [False, True], ids=["unspecialized", "as-launched"])
@pytest.mark.parametrize("obs_type", FusedStep.OBS_TYPES)
@pytest.mark.parametrize("height, width", [(10, 10), (4, 4), (5, 7), (64, 64)])
def test_the_kernels_compile_to_code_for_an_h100_here(monkeypatch, height, width, obs_type, aligned):
    """Triton's compiler and its ptxas need no GPU: each kernel, given the env's own argument types,
    becomes machine code for an H100's or H200's sm_90 (what the GPU machines would build). A launch
    also tells the compiler which pointers and sizes are multiples of 16 (``aligned``: all of them,
    as for torch's allocations and N = 4,096), and the code can differ (vector stores where it may)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if "constexprs" not in inspect.signature(ASTSource).parameters:
        pytest.skip(f"Triton {triton.__version__}'s ahead-of-time API predates the GPU machines' (3.6)")
    monkeypatch.setattr(vec_fused, "INTERPRETED", True)  # a FusedStep of a CPU env, for its arguments
    env = VecSnake(3, height, width, obs_type=obs_type, seed=0, check_action_values=False)
    launches, _ = FusedStep(env).launches(torch.zeros(3, dtype=torch.int64))
    kernels = ["fused_step", "fused_grid_observe"] if obs_type == "grid" else ["fused_step"]
    assert [kernel.fn.__name__ for kernel, *_ in launches] == kernels
    for kernel, _, arguments, constants in launches:
        signature = {name: ("*" + TRITON_TYPES[value.dtype] if isinstance(value, torch.Tensor) else "i32")
                     for name, value in zip(kernel.arg_names, arguments)}
        signature.update(dict.fromkeys(constants, "constexpr"))
        attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
                 if aligned and (signature[name].startswith("*") or name == "N")}
        compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs),
                                  target=GPUTarget("cuda", 90, 32))
        assert len(compiled.asm["cubin"]) > 5_000 and ".target sm_90" in compiled.asm["ptx"]


@pytest.mark.parametrize("obs_type", ["features_reach", "ego_grid"])
def test_only_features_and_grid_have_a_fused_step(obs_type):
    with pytest.raises(ValueError, match=f"obs_type='{obs_type}': the fused step is written for"):
        FusedStep(VecSnake(4, obs_type=obs_type, seed=0))


def test_without_triton_or_a_gpu_it_says_why(monkeypatch):
    monkeypatch.setattr(vec_fused, "has_triton", lambda: False)
    assert "pip install triton" in triton_missing("cuda")
    with pytest.raises(RuntimeError, match="needs Triton, which is not installed"):
        FusedStep(VecSnake(4, seed=0))
    monkeypatch.setattr(vec_fused, "has_triton", lambda: True)
    monkeypatch.setattr(vec_fused, "INTERPRETED", False)
    assert "TRITON_INTERPRET=1 set before" in triton_missing("cpu")
    assert triton_missing("cuda") is None
    monkeypatch.setattr(vec_fused, "INTERPRETED", True)
    assert triton_missing("cpu") is None
    assert "not on meta" in triton_missing("meta")


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_on_a_gpu_the_fused_step_plays_the_eager_steps_games(name):
    seen = lockstep(**CASES[name], device="cuda")
    assert seen["steps"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("obs_type", FusedStep.OBS_TYPES)
def test_on_a_gpu_many_games_match_and_never_synchronize(obs_type):
    seen = lockstep(10, 10, num_envs=3 * 4096 + 5, steps=200, seed=11, device="cuda", obs_type=obs_type)
    assert seen["ate"] > 0 and seen["died"] > 0
    env = VecSnake(4096, obs_type=obs_type, device="cuda", seed=0, check_action_values=False)
    fused = FusedStep(env)
    actions = torch.randint(0, 3, (50, 4096), generator=torch.Generator().manual_seed(0)).to("cuda")
    fused(actions[0])  # Triton compiles the kernels at their first launch
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for a in actions:
            fused(a)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
