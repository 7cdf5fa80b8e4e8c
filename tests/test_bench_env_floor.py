"""The env step against its memory floor: eager, compiled and fused figures, their floor fractions, and
the profile of where an eager step's time goes (``bench.env_floor``, the GPU sweep's first call)."""

import pytest

from rlgpu_helpers.bench import env_floor
from rlgpu_helpers.bench.envs import FLOOR_NAME, NAME


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_the_targets_sizes_on_a_gpu_and_smaller_ones_on_a_cpu(monkeypatch):
    monkeypatch.delenv("RLGPU_QUICK")
    assert env_floor.default_floor_num_envs("features", "cpu") == 65_536
    assert env_floor.default_floor_num_envs("grid", "cpu") == 16_384
    assert env_floor.default_floor_num_envs("features", "cuda") == 4_194_304  # with or without a GPU here
    assert env_floor.default_floor_num_envs("grid", "cuda") == 1_048_576


def test_eager_and_compiled_steps_each_get_a_figure_and_its_fraction_of_the_floor(capsys):
    records = env_floor.floor_throughput("cpu", obs_types=("features",), num_envs=64, progress=False)
    assert "fused step: not measured here: the fused step is a Triton kernel for a GPU" in capsys.readouterr().out
    steps = {r.variant: r for r in records if r.name == NAME}
    assert set(steps) == {"VecSnake features", "VecSnake features, compiled"}
    assert all(r.value > 0 and r.params == {"num_envs": 64, "obs_type": "features", "device": "cpu"}
               for r in steps.values())
    (compile_time,) = [r for r in records if r.name == env_floor.COMPILE_NAME]
    assert compile_time.variant == "VecSnake features, compiled" and compile_time.value > 0
    floor = [r for r in records if r.name == FLOOR_NAME]
    bandwidth = next(r.value for r in floor if r.metric == "bandwidth")
    touched = next(r.value for r in floor if r.metric == "bytes touched")
    fractions = {r.variant: r.value for r in floor if r.metric == "floor fraction"}
    for variant, step in steps.items():  # steps/s over bandwidth / bytes, for both modes
        assert fractions[variant] == pytest.approx(step.value * touched / (bandwidth * 1e9))


def test_the_profile_shares_the_steps_time_among_its_operators():
    records = env_floor.step_op_shares("cpu", obs_types=("features", "grid"), num_envs=(64, 32), limit=5)
    for obs_type, n in (("features", 64), ("grid", 32)):
        mine = [r for r in records if r.params["obs_type"] == obs_type]
        assert all(r.name == env_floor.OPS_NAME and r.params["num_envs"] == n for r in mine)
        (per_step,) = [r for r in mine if r.metric == "profiled time per step"]
        assert per_step.value > 0 and per_step.unit == "µs"
        shares = [r for r in mine if r.metric == "share of step time"]
        assert len(shares) == 5 and all(r.variant.startswith("aten::") for r in shares)
        values = [r.value for r in shares]
        assert values == sorted(values, reverse=True) and 0 < sum(values) <= 100 + 1e-9
        assert all(r.params["calls per step"] > 0 for r in shares)
    # the features step gathers from its stamps: a 1-D index_select over the (N x cells) stamps is among its operators
    everything = env_floor.step_op_shares("cpu", obs_types=("features",), num_envs=(64,), limit=1000)
    assert any(r.variant.startswith("aten::index_select 8448,") for r in everything)  # 64 games x 12 x 11 cells


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="obs_types"):
        env_floor.floor_throughput("cpu", obs_types=("ego_grid",), progress=False)
    with pytest.raises(ValueError, match="modes"):
        env_floor.floor_throughput("cpu", modes=("triton",), progress=False)
    with pytest.raises(ValueError, match="num_envs"):
        env_floor.step_op_shares("cpu", obs_types=("features", "grid"), num_envs=(64,))


class StandInFusedStep:
    """The fused step's place in the benchmark, on a CPU: the eager step under its name."""

    def __init__(self, env):
        self.env = env

    def __call__(self, actions):
        return self.env.step_tensors(actions)


def test_where_the_fused_step_runs_it_gets_a_figure_its_first_call_and_a_row(monkeypatch):
    monkeypatch.setattr(env_floor, "fused_missing", lambda device: None)
    monkeypatch.setattr(env_floor, "FusedStep", StandInFusedStep)
    records = env_floor.floor_throughput("cpu", modes=("eager", "fused"), num_envs=32, progress=False)
    steps = {r.variant for r in records if r.name == NAME}
    assert steps == {"VecSnake features", "VecSnake features, fused", "VecSnake grid", "VecSnake grid, fused"}
    first_calls = {r.variant: r.value for r in records if r.name == env_floor.COMPILE_NAME}
    assert set(first_calls) == {"VecSnake features, fused", "VecSnake grid, fused"} and min(first_calls.values()) > 0
    modes = {(row[1], row[2]) for row in env_floor.floor_table(records).rows}
    assert modes == {("features", "eager"), ("features", "fused"), ("grid", "eager"), ("grid", "fused")}


def test_the_tables_set_each_figure_beside_its_floor_and_list_the_largest_shares():
    records = env_floor.floor_throughput("cpu", obs_types=("grid",), modes=("eager",), num_envs=32, progress=False)
    table = env_floor.floor_table(records)
    (row,) = table.rows
    fraction = next(r.value for r in records if r.metric == "floor fraction")
    assert row[1:4] == ["grid", "eager", "32"] and row[-1] == f"{fraction:.1%}"
    shares = env_floor.step_op_shares("cpu", obs_types=("features",), num_envs=(32,), limit=6)
    rows = env_floor.op_share_table(shares, limit=4).rows
    assert len(rows) == 4 and [row[3] for row in rows] == [r.variant for r in shares[1:5]]
    with pytest.raises(ValueError, match="limit"):
        env_floor.op_share_table(shares, limit=0)


class BrokenFusedStep:
    """A fused step whose kernels do not build on this GPU."""

    def __init__(self, env):
        raise RuntimeError("out of resources: the kernel needs more registers than this GPU has")


@pytest.mark.parametrize("failing", ["fused", "profile"])
def test_the_suite_hands_each_part_over_as_it_ends(monkeypatch, failing):
    """A fused kernel or a profile that fails (no CUPTI on a GPU machine, say) leaves the figures
    measured before it saved: eager and compiled first, then fused, then the profile."""
    monkeypatch.setattr(env_floor, "fused_missing", lambda device: None)
    monkeypatch.setattr(env_floor, "FusedStep", BrokenFusedStep if failing == "fused" else StandInFusedStep)
    if failing == "profile":
        def no_profiler(*args, **kwargs):
            raise RuntimeError("the profiler recorded no GPU time for the step")

        monkeypatch.setattr(env_floor, "step_op_shares", no_profiler)
    monkeypatch.setenv("RLGPU_QUICK", "1")
    saved = []
    with pytest.raises(RuntimeError, match="registers" if failing == "fused" else "profiler"):
        env_floor.measure_env_floor("cpu", progress=False, save=saved.append)
    assert len(saved) == (1 if failing == "fused" else 2)
    assert {r.variant for r in saved[0] if r.name == NAME} == {
        "VecSnake features", "VecSnake features, compiled", "VecSnake grid", "VecSnake grid, compiled"}
    if failing == "profile":
        assert {r.variant for r in saved[1] if r.name == NAME} == {"VecSnake features, fused", "VecSnake grid, fused"}


def test_the_suite_is_three_parts_and_on_a_cpu_its_fused_part_says_why_it_is_empty(monkeypatch, capsys):
    monkeypatch.setenv("RLGPU_QUICK", "1")
    saved = []
    records = env_floor.measure_env_floor("cpu", progress=False, save=saved.append)
    assert len(saved) == 3 and records == saved[0] + saved[1] + saved[2]
    assert saved[1] == [] and "fused step: not measured here" in capsys.readouterr().out
    assert {r.name for r in saved[2]} == {env_floor.OPS_NAME}
