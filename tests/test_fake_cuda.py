"""The CUDA code paths, dry-run on a CPU-only machine with fake CUDA tensors (``tests/fakecuda.py``).

Every case builds its learner or env on ``device="cuda"`` under ``FakeCuda`` and runs its hot loop
inside ``fc.hot(...)``: a device mismatch raises, as it would on a GPU, and a host sync, a host
tensor, a host-to-device copy or illegal work inside a CUDA-graph capture is recorded. A case
passes when it ran (its counters say so: steps, backward passes, captures, replays) and its
problems are exactly the documented ones of :attr:`Case.allowed`, each named by ``file:function``
with the reason: none for the GPU-resident paths; for the replay buffers that keep transitions in
host memory, the copies their docstrings describe, and nothing else. The planted bugs show that
the harness catches a CPU tensor in a hot loop, a ``.item()`` in ``VecSnake.step`` and a
host-to-device copy in acting, each as exactly that problem at that place.

Without g++ or torch's headers the dry runs skip, with the reason; where ``CI_REQUIRE_FAKE_CUDA=1``
(``.ci/run`` sets it) they fail instead, so CI cannot skip them silently.

The fake CUDA device guard is a few lines of C++ compiled with g++ into pytest's temporary folder,
and its registration cannot be undone, so the cases run in child processes of this interpreter,
one per group (``Case.group``; the groups run side by side), each case in a ``FakeCuda`` of its
own. By hand: ``PYTHONPATH=. python tests/test_fake_cuda.py GUARD_LIBRARY [CASE ...]`` runs cases
(default: all) in one process and prints their results as JSON, each case's report
(``FakeCuda.report``) and seconds included.

The cases also guard two bugs this dry run found: a resumed learner with ``cuda_graphs=True``
must read its learning rate from the device (``gpu.graphs.load_optimizer_state``), and a checked
``VecSnake.step`` must refuse to be captured rather than query an event during the capture.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import io
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from fakecuda import FakeCuda
from fakecuda_guard import build_guard, guard_unavailable, load_guard
from fakecuda_notes import ROOT

import rlgpu_helpers
from rlgpu_helpers.gpu.graphs import CapturedStep
from rlgpu_helpers.learn.dqn import DQN, DQNConfig
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.settings import ppo_settings
from rlgpu_helpers.replay import KINDS
from rlgpu_helpers.replay.pinned import PinnedReplayBuffer
from rlgpu_helpers.snake.rules import OBS_TYPES
from rlgpu_helpers.snake.vec import VecSnake

SIZE = {"height": 6, "width": 6}
"""A small grid: fake tensors cost Python time per operator, and the flood fill's rounds grow with the grid."""
STEPS = 4
"""Env steps per VecSnake case: two warm-ups, the capture and a replay for a captured step."""
PPO_SIZES = {**SIZE, "num_envs": 8, "num_steps": 2, "update_epochs": 1, "num_minibatches": 2, "hidden": 8}
DQN_SIZES = {**SIZE, "num_envs": 8, "steps_per_iteration": 4, "buffer_size": 64, "learning_starts": 16,
             "batch_size": 4, "hidden": 8}
"""Learning starts at the second vector step: of an iteration's 4 steps, 3 learn."""

PPO_READ = {"sync rlgpu_helpers/learn/ppo.py:iterate":
            "the one host read per iteration (learn/ppo.py's docstring): the finished games' scores"}
DQN_READ = {"sync rlgpu_helpers/learn/dqn.py:iterate":
            "the one host read per iteration (learn/dqn.py's docstring): the finished games' scores"}
# What the replay buffers that keep transitions in host memory do on each add and sample, by design
# (notebook 05 measures it): DQN's documented problems with each buffer kind, and why.
STORE = {"sync rlgpu_helpers/replay/tensor.py:_store":
         "add copies each batch from the GPU into host storage, which waits for the GPU (learn/dqn.py's docstring)"}
DRAW = {"cpu-in-hot rlgpu_helpers/replay/base.py:_draw":
        "sample draws its indices on the storage device, the host (replay/base.py's docstring)"}
DELIVER = {"h2d-in-hot rlgpu_helpers/replay/base.py:_deliver":
           "sample moves the batch to the GPU with a plain .to, which waits for the copy (ReplayBuffer._deliver)"}
BUFFER_ALLOWED = {
    "tensor": {},
    "prioritized": {},
    "host": {**STORE, **DRAW, **DELIVER},
    "memmap": {**STORE, **DRAW, **DELIVER},
    "pinned": {
        "sync rlgpu_helpers/replay/pinned.py:_storage_written":
            "add's copies into pinned memory do not wait; the host waits for them before it gathers a batch "
            "from the storage (replay/pinned.py's docstring)",
        **DRAW,
        "cpu-in-hot rlgpu_helpers/replay/pinned.py:_staging":
            "each prefetch gathers into fresh pinned staging tensors (PinnedReplayBuffer._staging's docstring)",
        "cpu-in-hot rlgpu_helpers/replay/pinned.py:_prefetch": "the prefetched indices are staged in pinned memory too",
        "h2d-in-hot rlgpu_helpers/replay/pinned.py:_prefetch":
            "the prefetch: a non_blocking copy from pinned memory on a side stream (replay/pinned.py's docstring)",
    },
    "deque": {
        "sync rlgpu_helpers/replay/naive.py:_store":
            "add copies each batch to the host (.to('cpu'), .tolist()) to append it row by row: the tutorial's memory",
        **DRAW,
        "cpu-in-hot rlgpu_helpers/replay/naive.py:batch": "sample builds the batch on the host from Python lists",
        **DELIVER,
    },
    "arrays": {"sync rlgpu_helpers/replay/naive.py:_store": "add copies each batch to the host into NumPy arrays",
               **DRAW, **DELIVER},
}
"""The documented problems of DQN's hot loop with each replay buffer (``replay.base.KINDS``)."""


@dataclasses.dataclass(frozen=True)
class Case:
    """A dry run: ``run(fc)`` works on fake CUDA inside ``fc.hot``; it returns facts to check (or None)."""

    group: str
    """The child process it runs in: ``"vecsnake"``, ``"ppo"``, ``"dqn"`` or ``"replay"``, the code under test."""
    run: Callable[[FakeCuda], dict | None]
    expect: dict
    """Counters and facts the run must show, to prove it did its work (see ``FakeCuda``)."""
    allowed: dict = dataclasses.field(default_factory=dict)
    """The problems it must have, exactly: ``"kind file:function"`` -> why (documented, or planted)."""


CASES: dict[str, Case] = {}


# ---------------------------------------------------------------------------- VecSnake

def step_env(fc: FakeCuda, obs_type: str, captured: bool = False, checked: bool = True) -> None:
    """``STEPS`` steps of 8 games; ``captured``: ``env.step`` (checked) or ``env.step_tensors`` in a ``CapturedStep``."""
    env = VecSnake(8, **SIZE, obs_type=obs_type, device="cuda", seed=0, check_action_values=checked)
    actions = torch.randint(0, 3, (8,), device="cuda")
    fc.count_calls(VecSnake, "step_tensors")
    step = env.step if checked else env.step_tensors
    if captured:
        step = CapturedStep(step, "cuda")
    with fc.hot("VecSnake.step"):
        for _ in range(STEPS):
            step(actions)


for obs in OBS_TYPES:
    CASES[f"VecSnake {obs}"] = Case("vecsnake", functools.partial(step_env, obs_type=obs),
                                    {"calls": {"VecSnake.step_tensors": STEPS}})
    CASES[f"VecSnake {obs}, _step captured"] = Case(
        "vecsnake", functools.partial(step_env, obs_type=obs, captured=True, checked=False),
        {"calls": {"VecSnake.step_tensors": 3}, "captures": 1, "replays": STEPS - 2})


def capture_checked_step(fc: FakeCuda) -> dict:
    """``VecSnake.step`` with its action check, captured: refused, with the way out in the message."""
    env = VecSnake(8, **SIZE, device="cuda", seed=0)
    actions = torch.randint(0, 3, (8,), device="cuda")
    fc.count_calls(VecSnake, "step_tensors")
    step = CapturedStep(env.step, "cuda")
    with fc.hot("VecSnake.step"):
        step(actions), step(actions)  # the warm-ups run eagerly
        try:
            step(actions)
        except RuntimeError as error:
            return {"refused": "check_action_values=False" in str(error)}
    return {"refused": False}


CASES["VecSnake features, checked step captured"] = Case(
    "vecsnake", capture_checked_step, {"calls": {"VecSnake.step_tensors": 2}, "captures": 1, "replays": 0, "refused": True})


# ---------------------------------------------------------------------------- PPO

def iterate_ppo(fc: FakeCuda, iterations: int = 1, **settings) -> dict:
    """``iterations`` of ``PPO.iterate`` in the hot loop; returns the dtypes the policy's logits came in."""
    ppo = PPO(PPOConfig(**PPO_SIZES, device="cuda", **settings))
    dtypes = set()
    ppo.model.actor.register_forward_hook(lambda module, inputs, output: dtypes.add(str(output.dtype)))
    fc.count_calls(VecSnake, "step_tensors")
    for _ in range(iterations):
        with fc.hot("PPO.iterate"):
            ppo.iterate(0.5)
    return {"logits dtypes": sorted(dtypes)}


def resume_ppo(fc: FakeCuda) -> None:
    """A PPO with CUDA graphs saved (``torch.save``), loaded to the CPU (``map_location="cpu"``) and resumed."""
    first = PPO(PPOConfig(**PPO_SIZES, device="cuda", cuda_graphs=True))
    first.iterate(0.5)  # Adam has its state after the warm-up updates
    resumed = PPO(PPOConfig(**PPO_SIZES, device="cuda", cuda_graphs=True))
    resumed.load_state_dict(round_trip(fc, first.state_dict()))
    fc.count_calls(VecSnake, "step_tensors")
    for _ in range(3):
        with fc.hot("PPO.iterate, resumed"):
            resumed.iterate(0.5)


def round_trip(fc: FakeCuda, state: dict) -> dict:
    """``state`` through ``torch.save`` and ``torch.load(map_location="cpu")``, as a checkpoint goes.

    Fake tensors hold no data: only their metadata are saved (``skip_data``), so the loaded state
    has every tensor on the host, like a real checkpoint's, with no values. Checks that read the
    values (``VecSnake`` validates each game) are skipped for the rest of the case.
    """
    buffer = io.BytesIO()
    with torch.serialization.skip_data(materialize_fake_tensors=True):
        torch.save(state, buffer)
    buffer.seek(0)
    fc.replace(VecSnake, "_check_state", lambda env, state: None)
    return torch.load(buffer, map_location="cpu", weights_only=True)


PPO_BACKWARDS = PPO_SIZES["update_epochs"] * PPO_SIZES["num_minibatches"]
for obs in OBS_TYPES:
    for precision in ("fp32", "bf16"):
        CASES[f"PPO {obs} {precision}"] = Case(
            "ppo", functools.partial(iterate_ppo, obs_type=obs, precision=precision),
            {"calls": {"VecSnake.step_tensors": PPO_SIZES["num_steps"]}, "backwards": PPO_BACKWARDS,
             "logits dtypes": ["torch.bfloat16" if precision == "bf16" else "torch.float32"]}, PPO_READ)
CASES["PPO features fp32, accumulation_steps=2"] = Case(
    "ppo", functools.partial(iterate_ppo, accumulation_steps=2),
    {"calls": {"VecSnake.step_tensors": PPO_SIZES["num_steps"]}, "backwards": 2 * PPO_BACKWARDS}, PPO_READ)
# Three iterations capture each graph: 6 rollout steps, 3 GAE calls and 6 updates, each captured on
# its third call (after two warm-ups), which replays too; the rollout and the update replay 4 times, GAE once.
for obs, precision in (("features", "fp32"), ("grid", "bf16")):
    CASES[f"PPO {obs} {precision}, cuda_graphs"] = Case(
        "ppo", functools.partial(iterate_ppo, iterations=3, obs_type=obs, precision=precision,
                                        cuda_graphs=True),
        {"calls": {"VecSnake.step_tensors": 3}, "captures": 3, "replays": 9, "backwards": 3}, PPO_READ)
CASES["PPO features fp32, cuda_graphs, resumed from a checkpoint"] = Case(
    "ppo", resume_ppo, {"calls": {"VecSnake.step_tensors": 3}, "captures": 3, "replays": 9}, PPO_READ)
# fp16: a GradScaler in the update, whose skip the fused Adam decides on the device.
CASES["PPO features fp16"] = Case(
    "ppo", functools.partial(iterate_ppo, precision="fp16"),
    {"calls": {"VecSnake.step_tensors": PPO_SIZES["num_steps"]}, "backwards": PPO_BACKWARDS,
     "logits dtypes": ["torch.float16"]}, PPO_READ)
CASES["PPO features fp16, cuda_graphs"] = Case(
    "ppo", functools.partial(iterate_ppo, iterations=3, precision="fp16", cuda_graphs=True),
    {"calls": {"VecSnake.step_tensors": 3}, "captures": 3, "replays": 9, "backwards": 3}, PPO_READ)




def warm_up_the_win_preset(fc: FakeCuda, precision: str) -> dict:
    """The ``"win"`` preset made small, with CUDA graphs and without compile (Inductor cannot run on fake tensors):
    ``warm_up`` captures its three graphs on iterations it then undoes; the next iteration replays them."""
    ppo = PPO(ppo_settings("cuda", "win", overrides={**PPO_SIZES, "precision": precision, "compile": False}))
    # the undo checks each game's state against the rules, reading values that fake tensors do not hold
    fc.replace(VecSnake, "_check_state", lambda env, state: None)
    ppo.warm_up()
    fc.count_calls(VecSnake, "step_tensors")
    with fc.hot("PPO.iterate, the win preset after its warm-up"):
        ppo.iterate(0.5)
    return {"env steps": ppo.env_steps}


# The warm-up's three iterations capture each graph (9 replays, as above), and the iteration after it replays the
# rollout twice, GAE once and the update twice: no step runs in Python any more. Backward ran in the warm-ups only.
for precision in ("bf16", "fp16"):
    CASES[f"PPO win preset {precision}, cuda_graphs, warmed up"] = Case(
        "ppo", functools.partial(warm_up_the_win_preset, precision=precision),
        {"calls": {"VecSnake.step_tensors": 0}, "captures": 3, "replays": 14, "backwards": 3,
         "env steps": PPO_SIZES["num_envs"] * PPO_SIZES["num_steps"]}, PPO_READ)


# ---------------------------------------------------------------------------- DQN

def iterate_dqn(fc: FakeCuda, **settings) -> None:
    """One ``DQN.iterate`` (4 vector steps, 3 of them learning) in the hot loop."""
    dqn = DQN(DQNConfig(**DQN_SIZES, device="cuda", **settings))
    fc.count_calls(VecSnake, "step_tensors")
    fc.count_calls(DQN, "_learn")
    with fc.hot("DQN.iterate"):
        dqn.iterate(0.5)


def resume_dqn(fc: FakeCuda) -> None:
    """A DQN with CUDA graphs saved, loaded to the CPU and resumed (see ``round_trip``)."""
    first = DQN(DQNConfig(**DQN_SIZES, device="cuda", cuda_graphs=True))
    first.iterate(0.5)
    resumed = DQN(DQNConfig(**DQN_SIZES, device="cuda", cuda_graphs=True))
    # The buffer's state is checked value by value on the host; its round trip is tested in test_replay_*.py.
    resumed.buffer.load_state_dict = lambda state: None
    resumed.load_state_dict(round_trip(fc, first.state_dict()))
    fc.count_calls(DQN, "_learn")
    with fc.hot("DQN.iterate, resumed"):
        resumed.iterate(0.5)


DQN_RAN = {"calls": {"VecSnake.step_tensors": 4, "DQN._learn": 3}, "backwards": 3}
for kind in KINDS:
    CASES[f"DQN buffer={kind}"] = Case("dqn", functools.partial(iterate_dqn, buffer=kind), DQN_RAN,
                                       {**BUFFER_ALLOWED[kind], **DQN_READ})
# Acting (4 calls) and the update (3 calls) are each captured on their third call, which replays too.
for kind in ("tensor", "prioritized"):
    CASES[f"DQN buffer={kind}, cuda_graphs"] = Case(
        "dqn", functools.partial(iterate_dqn, buffer=kind, cuda_graphs=True), {**DQN_RAN, "captures": 2, "replays": 3},
        DQN_READ)
# The saved learner captures its graphs too: 4 captures and 6 replays in all.
CASES["DQN buffer=tensor, cuda_graphs, resumed from a checkpoint"] = Case(
    "dqn", resume_dqn, {"calls": {"DQN._learn": 3}, "captures": 4, "replays": 6}, DQN_READ)


# ---------------------------------------------------------------------------- PinnedReplayBuffer alone

PINNED_ADDS = 3


def add_to_pinned(fc: FakeCuda, then_sample: bool = False) -> dict:
    """``PINNED_ADDS`` batches of 8 transitions made on the GPU, added to a pinned buffer (then one ``sample``)."""
    buffer = PinnedReplayBuffer(64, (11,), "cuda")
    fields = {"obs": torch.rand(8, 11, device="cuda"), "actions": torch.randint(0, 3, (8,), device="cuda"),
              "rewards": torch.rand(8, device="cuda"), "next_obs": torch.rand(8, 11, device="cuda"),
              "terminated": torch.rand(8, device="cuda") < 0.5}
    if then_sample:
        buffer.add(**fields)
        buffer.sample(4)  # the first sample draws two batches: the hot one below is a learner's
    fc.count_calls(PinnedReplayBuffer, "_store")
    with fc.hot("PinnedReplayBuffer.add" + (" and sample" if then_sample else "")):
        for _ in range(PINNED_ADDS):
            buffer.add(**fields)
        if then_sample:
            buffer.sample(4)
    return {"stored": len(buffer), "pinned": buffer.obs.is_pinned()}


PINNED_RAN = {"calls": {"PinnedReplayBuffer._store": PINNED_ADDS}, "pinned": True}
# add: non_blocking copies into pinned memory, nothing else (replay/pinned.py's docstring).
CASES["PinnedReplayBuffer.add"] = Case("replay", add_to_pinned, {**PINNED_RAN, "stored": 8 * PINNED_ADDS})
# sample after add: the wait for add's copies, and the prefetch (the same as in DQN's loop).
CASES["PinnedReplayBuffer.add, then sample"] = Case(
    "replay", functools.partial(add_to_pinned, then_sample=True), {**PINNED_RAN, "stored": 8 * (PINNED_ADDS + 1)},
    BUFFER_ALLOWED["pinned"])


# ---------------------------------------------------------------------------- planted bugs

def plant_blocking_copy_in_pinned_add(fc: FakeCuda) -> dict:
    """``PinnedReplayBuffer.add`` copies into its pinned storage without ``non_blocking``: the host waits."""
    fc.replace(PinnedReplayBuffer, "_copies_wait", True)
    return add_to_pinned(fc)


def plant_host_tensor_in_rollout(fc: FakeCuda) -> None:
    """PPO's acting makes an index on the host at every rollout step (``torch.arange`` without ``device=``)."""
    real_act = PPO.act

    def act_with_host_index(self, obs, noise=None):
        action, logprob, value = real_act(self, obs, noise)
        rows = torch.arange(obs.shape[0])  # planted: a host tensor in the hot loop
        return action, logprob[rows], value

    fc.replace(PPO, "act", act_with_host_index)
    ppo = PPO(PPOConfig(**PPO_SIZES, device="cuda"))
    fc.count_calls(VecSnake, "step_tensors")
    with fc.hot("PPO rollout"):
        ppo.collect()


def plant_item_in_step(fc: FakeCuda) -> None:
    """``VecSnake.step`` reads the total reward on the host (``.item()``) at every step."""
    real_step = VecSnake.step_tensors

    def step_with_item(self, actions, frozen=None):
        outputs = real_step(self, actions, frozen)
        self.total_reward = getattr(self, "total_reward", 0.0) + outputs[1].sum().item()  # planted: a sync
        return outputs

    fc.replace(VecSnake, "step_tensors", step_with_item)
    step_env(fc, "features")


def plant_copy_in_acting(fc: FakeCuda) -> None:
    """DQN's acting copies an action mask, kept on the host, to the device at every act."""
    allowed = torch.ones(3, dtype=torch.bool)  # made once, at set-up, on the host
    real_explore = DQN._explore

    def explore_with_host_mask(self, obs, epsilon):
        actions = real_explore(self, obs, epsilon)
        return torch.where(allowed.to(obs.device)[actions], actions, 0)  # planted: a copy to the device

    fc.replace(DQN, "_explore", explore_with_host_mask)
    fc.count_calls(DQN, "_explore")  # before the DQN binds it
    dqn = DQN(DQNConfig(**DQN_SIZES, device="cuda"))
    with fc.hot("DQN.act_and_learn"):
        for _ in range(STEPS):
            dqn.act_and_learn(0.5)


HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()
PLANTED = {
    "a CPU tensor in PPO's rollout": Case(
        "ppo", plant_host_tensor_in_rollout, {"calls": {"VecSnake.step_tensors": PPO_SIZES["num_steps"]}},
        {f"cpu-in-hot {HERE}:act_with_host_index": "planted"}),
    "an .item() in VecSnake.step": Case(
        "vecsnake", plant_item_in_step, {"calls": {"VecSnake.step_tensors": STEPS}},
        {f"sync {HERE}:step_with_item": "planted"}),
    "a host-to-device copy in DQN's acting": Case(
        "dqn", plant_copy_in_acting, {"calls": {"DQN._explore": STEPS}},
        {f"h2d-in-hot {HERE}:explore_with_host_mask": "planted"}),
    "a blocking copy in PinnedReplayBuffer.add": Case(
        "replay", plant_blocking_copy_in_pinned_add, PINNED_RAN,
        {"sync rlgpu_helpers/replay/tensor.py:_store": "planted: a copy to the host without non_blocking"}),
}
CASES.update(PLANTED)


# ---------------------------------------------------------------------------- the child process

def run_cases(library: str, names: list[str]) -> dict:
    """Run the cases ``names`` here, each in a ``FakeCuda`` of its own: their results by name, and the
    package that ran."""
    load_guard(Path(library))
    results = {}
    for name in names:
        case = CASES[name]
        start, facts, error = time.perf_counter(), None, None
        with FakeCuda() as fc:
            try:
                facts = case.run(fc)
            except Exception:
                error = traceback.format_exc()
        results[name] = {
            "seconds": time.perf_counter() - start,
            "error": error,
            "problems": [{"key": note.key, "line": note.describe(count)} for note, count in fc.problems().items()],
            "report": fc.report(),
            "counters": {"calls": dict(fc.calls), "captures": fc.captures, "replays": fc.replays,
                         "backwards": fc.backwards, **(facts or {})},
        }
    return {"package": rlgpu_helpers.__file__, "cases": results}


# ---------------------------------------------------------------------------- the tests

@pytest.fixture(scope="session")
def guard_library(tmp_path_factory) -> Path:
    """The fake CUDA device guard, compiled once per session into pytest's temporary folder."""
    reason = guard_unavailable()
    if reason is not None and os.environ.get("CI_REQUIRE_FAKE_CUDA") == "1":
        pytest.fail(f"{reason}; CI_REQUIRE_FAKE_CUDA=1 forbids skipping the dry runs", pytrace=False)
    if reason is not None:
        pytest.skip(reason)
    return build_guard(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="session")
def dry_runs(request, guard_library) -> dict[str, Future]:
    """The results of the selected cases, by name: one child process per group, all started at once,
    as many running at a time as this process may use CPUs, the largest groups first."""
    groups = collections.defaultdict(list)
    for item in request.session.items:
        if item.path == Path(__file__) and hasattr(item, "callspec"):
            name = item.callspec.params["name"]
            groups[CASES[name].group].append(name)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    pool = ThreadPoolExecutor(max_workers=cpus)
    request.addfinalizer(pool.shutdown)
    futures = {}
    for names in sorted(groups.values(), key=len, reverse=True):
        child = pool.submit(run_child, guard_library, names)
        futures.update(dict.fromkeys(names, child))
    return futures


def run_child(library: Path, names: list[str]) -> dict:
    """Run the cases ``names`` in a child process of this interpreter, importing the same ``rlgpu_helpers``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, str(library), *names], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stderr == "", f"the dry runs {names} failed:\n{done.stderr[-4000:]}"
    results = json.loads(done.stdout)
    assert results["package"] == rlgpu_helpers.__file__, "the child process imported another rlgpu_helpers"
    return results["cases"]


def result_of(name: str, dry_runs: dict[str, Future]) -> dict:
    """The result of case ``name``, after checking that it ran without error and did its work."""
    case = CASES[name]
    result = dry_runs[name].result()[name]
    assert result["error"] is None, f"{name}: {result['error']}\n{result['report']}"
    for key, want in case.expect.items():
        got = result["counters"][key]
        if isinstance(want, dict):
            got = {k: got.get(k, 0) for k in want}
        assert got == want, f"{name}: {key} is {got}, expected {want} (did it run?)\n{result['report']}"
    return result


@pytest.mark.parametrize("name", [name for name in CASES if name not in PLANTED])
def test_dry_run_finds_only_the_documented_problems(name, dry_runs):
    result = result_of(name, dry_runs)
    case = CASES[name]
    unexpected = {problem["key"]: problem["line"] for problem in result["problems"]
                  if problem["key"] not in case.allowed}
    lines = "\n".join(unexpected.values())
    assert not unexpected, f"{name}: problems beyond the documented ones:\n{lines}"
    missing = set(case.allowed) - {problem["key"] for problem in result["problems"]}
    assert not missing, f"{name}: documented problems not found (is the documentation stale?): {sorted(missing)}"


@pytest.mark.parametrize("name", PLANTED)
def test_planted_bug_is_caught_where_it_was_planted(name, dry_runs):
    result = result_of(name, dry_runs)
    found = [problem["key"] for problem in result["problems"]]
    assert found == list(CASES[name].allowed), f"{name}: found {found}, expected only the plant:\n{result['report']}"


if __name__ == "__main__":
    print(json.dumps(run_cases(sys.argv[1], sys.argv[2:] or list(CASES))))
