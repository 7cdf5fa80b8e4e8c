"""The `bench graphs` suite and its tables (notebook 09): what it measures on a CPU, what it skips
there and why, and LeanRL's claims judged only against GPU records."""

import pytest
from hidden_compiler import run_without_a_compiler

from rlgpu_helpers.bench import graphs as graphs_suite
from rlgpu_helpers.bench.graphs import (
    CAPTURED,
    COMPILE_NAME,
    COMPILED,
    EAGER,
    LAUNCH_NAME,
    NAME,
    OP_NAME,
    CudaGraphsSkipped,
    launch_records,
    launch_share_table,
    leanrl_checks,
    op_time_by_size,
    part_call,
    step_records,
    step_table,
)
from rlgpu_helpers.gpu.graphs import Compiled
from rlgpu_helpers.measure.claims import CLAIMS
from rlgpu_helpers.measure.records import Record


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_the_suite_times_each_part_eager_and_compiled_on_a_cpu():
    records = step_records("cpu", parts=("env", "acting"), num_envs=(32,), progress=False)
    steps = {(r.params["part"], r.variant) for r in records if r.name == NAME}
    assert steps == {("env", EAGER), ("env", COMPILED), ("acting", EAGER), ("acting", COMPILED)}
    assert all(r.value > 0 and r.unit == "µs" for r in records if r.name == NAME)
    assert {r.params["part"] for r in records if r.name == COMPILE_NAME} == {"env", "acting"}
    table = step_table(records)
    assert [row[1] for row in table.rows] == ["env", "acting"] and table.rows[0][5].endswith("x")


def test_op_time_and_launch_counts():
    sizes = op_time_by_size("cpu", sizes=(1, 2**18))
    assert [r.params["elements"] for r in sizes] == [1, 2**18] and all(r.name == OP_NAME for r in sizes)
    assert sizes[1].value > sizes[0].value  # a quarter million additions cost more than one
    launches = {r.variant: r.value for r in launch_records("cpu", num_envs=16) if r.name == LAUNCH_NAME}
    assert set(launches) == {"env", "acting", "update"}
    assert launches["env"] > 50 and launches["update"] > launches["acting"] > 3


def test_cuda_graph_modes_are_refused_on_a_cpu():
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA GPU"):
        part_call("env", CAPTURED, 16, "cpu")


def test_leanrl_claims_are_against_their_same_code_eager_baseline():
    """LeanRL's README: PPO Atari 3728 fps eager (LeanRL implementation) -> 6809 compiled and graphed, PPO
    continuous 683 -> 1774. The 6.8x and 2.7x "overall" figures are against CleanRL's original script."""
    assert CLAIMS["leanrl-ppo-atari"].low == pytest.approx(6809 / 3728)  # 1.83x
    assert CLAIMS["leanrl-ppo-continuous"].low == pytest.approx(1774 / 683)  # 2.60x
    assert "CleanRL implementation" not in CLAIMS["leanrl-ppo-atari"].quote


def test_leanrl_claims_are_not_measured_without_gpu_records_and_judged_with_them():
    assert [c.outcome for c in leanrl_checks([])] == ["not measured"] * 3
    gpu = [Record(NAME, mode, "time per call", value, "µs", {"part": "iteration", "num_envs": 4096, "device": "cuda"},
                  0.0, "gpu-h100") for mode, value in ((EAGER, 6000.0), (COMPILED, 4000.0), (CAPTURED, 1000.0))]
    checks = {c.claim.key: c for c in leanrl_checks([], gpu)}
    assert checks["leanrl-ppo-atari"].verdict.measured == pytest.approx(6.0)
    assert checks["leanrl-compile-alone"].outcome == "held"


def _step(part, mode, n, value, spread=0.0):
    return Record(NAME, mode, "time per call", value, "µs", {"part": part, "num_envs": n, "device": "cpu"}, spread,
                  "cpu-test")


def test_the_launch_share_table_reads_each_part_against_its_launch_floor():
    ops = [Record(OP_NAME, "a + b", "time per call", value, "µs", {"elements": n, "device": "cpu"}, 0.0, "cpu-test")
           for n, value in ((1, 2.0), (2**16, 20.0))]
    launches = [Record(LAUNCH_NAME, part, "launches per call", count, "launches", {"part": part}, None, "cpu-test")
                for part, count in (("env", 100), ("update", 200))]
    steps = [_step("env", EAGER, 64, 400.0, 10.0), _step("env", COMPILED, 64, 100.0, 5.0),
             _step("env", EAGER, 1024, 1000.0, 50.0), _step("env", COMPILED, 1024, 1020.0, 60.0),
             _step("update", EAGER, 64, 1000.0), _step("update", COMPILED, 64, 1250.0),
             _step("iteration", EAGER, 64, 9000.0), _step("iteration", COMPILED, 64, 3000.0)]
    table = launch_share_table(steps, launches, ops)
    rows = {(row[0], row[1]): row for row in table.rows}
    assert set(rows) == {("env", "64"), ("env", "1,024"), ("update", "64")}  # no launch count for the iteration
    assert rows[("env", "64")][3:5] == ["200", "50%"]  # 100 operators x 2 µs, of eager's 400 µs
    assert [rows[k][-1] for k in (("env", "64"), ("env", "1,024"), ("update", "64"))] == [
        "faster", "within noise", "slower"]
    assert rows[("env", "64")][5] == "4.00x ± 0.22"
    with pytest.raises(ValueError, match="^op_records holds no graphs_op_time record"):
        launch_share_table(steps, launches, [])


def test_a_compile_without_its_cuda_graphs_is_not_timed_as_graphed(monkeypatch, capsys):
    """Inductor may compile ``reduce-overhead`` without CUDA graphs (a part that mutates its inputs): that part
    would run as compiled, so it is named and left out, not timed under the graphed mode's name."""
    reason = "skipping cudagraphs due to mutated inputs (2 instances)"
    monkeypatch.setattr(graphs_suite, "compile_step", lambda fn, *args, mode, fullgraph, device, options: Compiled(
        fn, 1.0, mode, fullgraph, (reason,)))
    with pytest.raises(CudaGraphsSkipped, match=r"^env at N=16: Inductor skipped the CUDA graphs .*mutated inputs"):
        part_call("env", COMPILED, 16, "cpu")
    records = step_records("cpu", parts=("env",), num_envs=(16,), progress=False)
    assert {r.variant for r in records} == {EAGER}
    assert f"env at N=16: Inductor skipped the CUDA graphs of reduce-overhead ({reason})" in capsys.readouterr().out


SUITE_WITHOUT_A_COMPILER = """
from rlgpu_helpers.bench.graphs import COMPILED, part_call, step_records
for _ in range(2):  # the line is said once per process
    records = step_records("cpu", parts=("env", "iteration"), num_envs=(8,), progress=False)
    print("records:", sorted({(r.name, r.params["part"], r.variant) for r in records}))
try:
    part_call("env", COMPILED, 8, "cpu")
except RuntimeError as error:
    print("part_call:", type(error).__name__, error)
"""


def test_without_a_cpp_compiler_the_suite_keeps_its_eager_records_and_leaves_the_compiled_ones_out(tmp_path):
    """No compiled record (a compiled learner would run eagerly under compile's name), one line saying why,
    and part_call refuses a compiled mode with the same why."""
    done = run_without_a_compiler(SUITE_WITHOUT_A_COMPILER, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    why = ("torch.compile needs a C++ compiler on a CPU (InvalidCxxCompiler): install a C++ compiler (g++ or clang; "
           "on macOS `xcode-select --install`, on Windows the Visual Studio Build Tools) and restart")
    eager = "records: [('graphs_step', 'env', 'eager'), ('graphs_step', 'iteration', 'eager')]"
    assert lines == [f"graphs, the modes that compile: not measured here: {why}", eager, eager, f"part_call: CompilerMissingError {why}"]
    assert "InvalidCxxCompiler" not in done.stderr and "Traceback" not in done.stderr
