"""The env throughput benchmarks: well-formed records, the `bench envs` suite, and reading records."""

import math

import pytest

from rlgpu_helpers.bench import envs as env_bench
from rlgpu_helpers.bench.envs import (
    async_crossover,
    best_per_variant,
    gym_vector_throughput,
    heavy_env_throughput,
    measure_env_throughput,
    snake_loop_throughput,
    vec_snake_throughput,
)
from rlgpu_helpers.bench.records import Record, load_json
from rlgpu_helpers.bench.suites import SUITES
from rlgpu_helpers.cli import main
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.snake.cpu_vector import make_cpu_vector_env

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


@pytest.fixture(scope="module")
def suite_records():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLGPU_QUICK", "1")
        return measure_env_throughput("cpu", progress=False)


def assert_well_formed(record, name="env_step"):
    assert (record.name, record.metric, record.unit, record.machine) == (name, "throughput", "steps/s", LABEL)
    assert math.isfinite(record.value) and record.value > 0
    assert record.spread is not None and math.isfinite(record.spread) and record.spread >= 0


def test_the_suite_measures_every_variant_at_the_quick_sizes(suite_records):
    for record in suite_records:
        assert_well_formed(record)
        assert set(record.params) == {"num_envs", "obs_type", "device"}
        assert record.params["device"] == "cpu"
    got = [(r.variant, r.params["num_envs"], r.params["obs_type"]) for r in suite_records]
    gym_n, vec_n = env_bench.default_gym_num_envs(), env_bench.default_vec_num_envs()
    assert got == ([("SnakeEnv loop", 1, "features")]
                   + [("SyncVectorEnv", n, "features") for n in gym_n]
                   + [("AsyncVectorEnv", n, "features") for n in gym_n]
                   + [("VecSnake features", n, "features") for n in vec_n]
                   + [("VecSnake grid", n, "grid") for n in vec_n])


def test_full_size_reaches_65536_games(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "0")
    vec_n = env_bench.default_vec_num_envs()
    assert vec_n[0] == 1 and vec_n[-1] >= 65_536
    assert all(b == 4 * a for a, b in zip(vec_n, vec_n[1:]))
    assert env_bench.default_gym_num_envs() == (1, 2, 4, 8, 16)


def test_bench_envs_is_registered_and_writes_loadable_json(monkeypatch, tmp_path, capsys):
    assert SUITES["envs"].run is measure_env_throughput
    monkeypatch.setattr(env_bench, "default_vec_num_envs", lambda: (1, 4))
    monkeypatch.setattr(env_bench, "default_gym_num_envs", lambda: (2,))
    path = tmp_path / "envs.json"
    assert main(["bench", "envs", "--device", "cpu", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "throughput (steps/s)" in out and f"Wrote {path}" in out
    records = load_json(path)
    assert [(r.variant, r.params["num_envs"]) for r in records] == [
        ("SnakeEnv loop", 1), ("SyncVectorEnv", 2), ("AsyncVectorEnv", 2),
        ("VecSnake features", 1), ("VecSnake features", 4), ("VecSnake grid", 1), ("VecSnake grid", 4)]
    for record in records:
        assert_well_formed(record)


def test_single_functions_take_explicit_sizes():
    loop, = snake_loop_throughput(obs_type="grid")
    assert (loop.variant, loop.params) == ("SnakeEnv loop", {"num_envs": 1, "obs_type": "grid", "device": "cpu"})
    sync, = gym_vector_throughput(kinds=("sync",), num_envs=3, progress=False)
    assert (sync.variant, sync.params["num_envs"]) == ("SyncVectorEnv", 3)
    vec = vec_snake_throughput("cpu", num_envs=(2, 8), obs_types=("grid",), progress=False)
    assert [(r.variant, r.params["num_envs"]) for r in vec] == [("VecSnake grid", 2), ("VecSnake grid", 8)]
    for record in [loop, sync, *vec]:
        assert_well_formed(record)


def test_heavy_env_records_the_step_cost():
    records = heavy_env_throughput((0.0, 2e-4), num_envs=2, progress=False)
    assert [(r.variant, r.params["step_cost_us"]) for r in records] == [
        ("SyncVectorEnv", 0.0), ("AsyncVectorEnv", 0.0), ("SyncVectorEnv", 200.0), ("AsyncVectorEnv", 200.0)]
    for record in records:
        assert_well_formed(record, name="env_step_heavy")
        assert record.params["num_envs"] == 2
    # 2 games x 200 µs of busy waiting per step: the in-process loop cannot beat 5,000 steps/s
    assert records[2].value < 5_000


def test_async_is_skipped_not_mislabelled_without_subprocesses(monkeypatch):
    def sync_only(num_envs, kind="sync", **kwargs):
        return make_cpu_vector_env(num_envs, kind="sync", **kwargs)

    monkeypatch.setattr(env_bench, "make_cpu_vector_env", sync_only)
    records = gym_vector_throughput(num_envs=(1, 2), progress=False)
    assert [(r.variant, r.params["num_envs"]) for r in records] == [("SyncVectorEnv", 1), ("SyncVectorEnv", 2)]


def make(variant, n, value, machine="m1", name="env_step", unit="steps/s", key="num_envs"):
    return Record(name, variant, "throughput", value, unit, {key: n}, None, machine)


def test_best_per_variant_picks_the_fastest_n_of_each_variant_and_machine():
    records = [make("A", 1, 10.0), make("A", 4, 30.0), make("A", 16, 20.0),
               make("B", 1, 5.0), make("B", 4, 5.0),
               make("A", 1, 99.0, machine="m2")]
    best = best_per_variant(records)
    assert [(r.machine, r.variant, r.params["num_envs"], r.value) for r in best] == [
        ("m1", "A", 4, 30.0), ("m1", "B", 1, 5.0), ("m2", "A", 1, 99.0)]  # a tie goes to the smaller N


@pytest.mark.parametrize("records, kwargs, error, message", [
    ([], {}, ValueError, r"records=\[\] holds no records"),
    ([make("A", 1, 1.0), make("A", 2, 1.0, unit="GB/s")], {}, ValueError, "mix metrics/units"),
    ([make("A", 1, 1.0, key="n")], {}, ValueError, "x='num_envs'.*without 'num_envs'"),
    ([make("A", 1, 1.0)], {"x": ""}, ValueError, "x='' must be the name of a parameter"),
    (["not a record"], {}, TypeError, "records must hold only Record objects, not 'not a record'"),
])
def test_best_per_variant_rejects_bad_input(records, kwargs, error, message):
    with pytest.raises(error, match=message):
        best_per_variant(records, **kwargs)


def heavy(sync, asynchronous, costs=(0.0, 100.0, 1000.0)):
    return ([make("SyncVectorEnv", c, v, key="step_cost_us") for c, v in zip(costs, sync)]
            + [make("AsyncVectorEnv", c, v, key="step_cost_us") for c, v in zip(costs, asynchronous)])


def test_async_crossover_is_where_async_wins_from_then_on():
    assert async_crossover(heavy([100.0, 10.0, 1.0], [5.0, 20.0, 1.5])) == 100.0
    assert async_crossover(heavy([100.0, 10.0, 1.0], [5.0, 9.0, 1.5])) == 1000.0
    assert async_crossover(heavy([100.0, 10.0, 1.0], [5.0, 20.0, 0.5])) is None  # lost again at 1000
    assert async_crossover(heavy([100.0, 10.0, 1.0], [5.0, 9.0, 0.9])) is None
    assert async_crossover(heavy([100.0], [])) is None


def test_async_crossover_rejects_mixed_machines_and_other_records():
    with pytest.raises(ValueError, match="machines \\['m1', 'm2'\\]"):
        async_crossover([make("SyncVectorEnv", 0.0, 1.0, key="step_cost_us"),
                         make("AsyncVectorEnv", 0.0, 1.0, machine="m2", key="step_cost_us")])
    with pytest.raises(ValueError, match="without 'step_cost_us'"):
        async_crossover([make("SyncVectorEnv", 1, 1.0)])


@pytest.mark.parametrize("call, error, message", [
    (lambda: vec_snake_throughput("cpu", num_envs=(4, 0)), ValueError, r"num_envs=\(4, 0\): num_envs\[1\]=0 must be"),
    (lambda: vec_snake_throughput("cpu", num_envs=2.5), TypeError, r"num_envs=2.5 must be an int, or a sequence"),
    (lambda: vec_snake_throughput("cpu", obs_types=("rgb",)), ValueError, r"obs_types=\('rgb',\): 'rgb' is not one of"),
    (lambda: gym_vector_throughput(kinds=("threads",)), ValueError, r"kinds=\('threads',\): 'threads' is not one of"),
    (lambda: snake_loop_throughput(obs_type="pixels"), ValueError, r"obs_type='pixels' must be one of \('features', 'grid'\)"),
    (lambda: vec_snake_throughput("cpu", obs_types=7), TypeError, r"obs_types=7 must be one of"),
    (lambda: measure_env_throughput("cpu", vec_num_envs=()), ValueError, r"vec_num_envs=\(\) must not be empty"),
    (lambda: heavy_env_throughput((0.0, -1e-3)), ValueError, r"step_costs_s=\(0.0, -0.001\): step_costs_s\[1\]=-0.001 must be"),
    (lambda: heavy_env_throughput((0.0,), num_envs=True), TypeError, r"num_envs=True must be an int"),
    (lambda: heavy_env_throughput((0.0,), num_envs=(2, 4)), TypeError, r"num_envs=\(2, 4\) must be an int"),
    (lambda: gym_vector_throughput(obs_type=("grid",)), ValueError, r"obs_type=\('grid',\) must be one of \('features', 'grid'\)"),
])
def test_bad_input_raises_naming_the_parameter_and_value(call, error, message):
    with pytest.raises(error, match=message):
        call()
