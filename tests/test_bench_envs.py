"""The env throughput benchmarks: well-formed records, the `bench envs` suite, and reading records."""

import math

import pytest
import torch

from rlgpu_helpers.bench import envs as env_bench
from rlgpu_helpers.bench import syncs
from rlgpu_helpers.bench.env_records import (
    async_crossover,
    best_per_variant,
    curve_lines,
    microseconds_per_step,
    step_memory_table,
)
from rlgpu_helpers.bench.envs import (
    StepMemory,
    gym_vector_throughput,
    heavy_env_throughput,
    measure_env_throughput,
    snake_loop_throughput,
    vec_snake_step_memory,
    vec_snake_throughput,
)
from rlgpu_helpers.bench.fps_claims import FPS_CLAIMS, NO_GPU_RECORD, fps_claim_checks
from rlgpu_helpers.bench.suites import SUITES
from rlgpu_helpers.bench.syncs import (
    SYNC_CONFIGS,
    SyncAudit,
    audit_sync_points,
    default_scaling_num_envs,
    default_sync_num_envs,
    flat_lines,
    flat_until,
    measure_sync_costs,
    read_cost_table,
    read_cost_throughput,
    same_cost_checks,
    sync_audit_table,
    sync_cost_lines,
    sync_cost_table,
    sync_cost_throughput,
    sync_costs,
    sync_variant,
    time_per_step_records,
)
from rlgpu_helpers.cli import main
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.gpu.sync import SyncRow, audit_syncs, multinomial_synchronizes
from rlgpu_helpers.measure.claims import (
    CLAIMS,
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    PARTLY,
    ClaimCheck,
    claim_checks_table,
    judge,
    speedup_spread,
)
from rlgpu_helpers.measure.records import Record, load_json
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
    floor = [r for r in suite_records if r.name == env_bench.FLOOR_NAME]
    suite_records = [r for r in suite_records if r.name != env_bench.FLOOR_NAME]
    fractions = [r for r in floor if r.metric == env_bench.FLOOR_METRIC]
    assert [(r.variant, r.params) for r in fractions] == [
        (r.variant, r.params) for r in suite_records if r.variant.startswith("VecSnake")]
    assert all(math.isfinite(r.value) and r.value > 0 for r in floor)
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
    monkeypatch.setattr(env_bench, "default_vec_num_envs", lambda device="cpu": (1, 4))
    monkeypatch.setattr(env_bench, "default_gym_num_envs", lambda: (2,))
    path = tmp_path / "envs.json"
    assert main(["bench", "envs", "--device", "cpu", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "throughput (steps/s)" in out and f"Wrote {path}" in out
    assert "floor fraction (of floor)" in out and "bytes touched (B/game)" in out
    records = [r for r in load_json(path) if r.name != env_bench.FLOOR_NAME]
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
    (lambda: snake_loop_throughput(obs_type="pixels"), ValueError, r"obs_type='pixels' must be one of \('features', 'grid', 'features_reach', 'ego_grid'\)"),
    (lambda: vec_snake_throughput("cpu", obs_types=7), TypeError, r"obs_types=7 must be one of"),
    (lambda: measure_env_throughput("cpu", vec_num_envs=()), ValueError, r"vec_num_envs=\(\) must not be empty"),
    (lambda: heavy_env_throughput((0.0, -1e-3)), ValueError, r"step_costs_s=\(0.0, -0.001\): step_costs_s\[1\]=-0.001 must be"),
    (lambda: heavy_env_throughput((0.0,), num_envs=True), TypeError, r"num_envs=True must be an int"),
    (lambda: heavy_env_throughput((0.0,), num_envs=(2, 4)), TypeError, r"num_envs=\(2, 4\) must be an int"),
    (lambda: gym_vector_throughput(obs_type=("grid",)), ValueError, r"obs_type=\('grid',\) must be one of \('features', 'grid', 'features_reach', 'ego_grid'\)"),
])
def test_bad_input_raises_naming_the_parameter_and_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_microseconds_per_step_is_n_over_the_rate():
    records = [make("SnakeEnv loop", 1, 250_000.0), make("VecSnake grid", 4096, 2_048_000.0)]
    assert microseconds_per_step(records, "SnakeEnv loop") == pytest.approx(4.0)
    assert microseconds_per_step(records, "VecSnake grid", 4096) == pytest.approx(2_000.0)


@pytest.mark.parametrize("records, args, message", [
    ([make("A", 1, 10.0)], ("A", 2), r"no record of variant='A' at num_envs=2; records hold \[\('A', 1\)\]"),
    ([make("A", 1, 10.0), make("A", 1, 20.0, machine="m2")], ("A", 1), r"2 records of variant='A' at num_envs=1"),
    ([make("A", 1, 10.0, unit="GB/s")], ("A", 1), r"needs a positive figure in steps/s"),
    ([make("A", 1, 10.0)], ("A", 0), r"num_envs=0 must be an int >= 1"),
])
def test_microseconds_per_step_rejects_what_it_cannot_read(records, args, message):
    with pytest.raises(ValueError, match=message):
        microseconds_per_step(records, *args)


# ---------------------------------------------------------------------------- the guide's FPS table

def env_record(variant, n, value, spread=0.0, device="cpu", machine="cpu-here", name="env_step"):
    obs_type = "grid" if variant == "VecSnake grid" else "features"
    return Record(name, variant, "throughput", value, "steps/s",
                  {"num_envs": n, "obs_type": obs_type, "device": device}, spread, machine)


CPU_RUN = [env_record("SnakeEnv loop", 1, 300_000, 30_000),
           env_record("SyncVectorEnv", 16, 150_000, 8_000), env_record("AsyncVectorEnv", 16, 24_000, 1_000),
           env_record("SyncVectorEnv", 4, 5_500, 100),
           # a CPU VecSnake at the GPU rows' N, right on their figures: it must never answer them
           env_record("VecSnake features", 64, 35_000, 100), env_record("VecSnake features", 256, 120_000, 100)]


def by_key(checks):
    grouped = {}
    for check in checks:
        grouped.setdefault(check.claim.key, []).append(check)
    return grouped


def test_fps_claims_are_the_guides_table():
    assert FPS_CLAIMS == ("single-env-fps", "cpu-16-envs-fps", "gpu-64-envs-fps", "gpu-256-envs-fps",
                          "vectorized-speedup")
    assert all(key in CLAIMS for key in FPS_CLAIMS)


def test_without_a_gpu_record_the_gpu_rows_are_not_measured():
    checks = fps_claim_checks(CPU_RUN)
    assert [c.claim.key for c in checks] == list(FPS_CLAIMS)
    single, cpu16, gpu64, gpu256, speedup = checks
    assert single.verdict == judge(CLAIMS["single-env-fps"], 300_000, 30_000)
    assert single.outcome == NOT_HELD and single.answered_by.startswith("SnakeEnv loop, N=1, cpu, cpu-here")
    # the faster of the two gymnasium vectors at N=16, and which one it was
    assert cpu16.verdict.measured == 150_000 and cpu16.verdict.spread == 8_000
    assert "SyncVectorEnv, N=16" in cpu16.answered_by and "faster than AsyncVectorEnv" in cpu16.answered_by
    for check in (gpu64, gpu256, speedup):
        assert check.verdict is None and check.outcome == NOT_MEASURED and check.answered_by == NO_GPU_RECORD


def test_gpu_rows_are_judged_against_gpu_records_per_machine():
    reference = [env_record("VecSnake features", 64, 40_000, 1_000, device="cuda", machine="gpu-a"),
                 env_record("VecSnake features", 256, 200_000, 10_000, device="cuda", machine="gpu-a"),
                 env_record("SnakeEnv loop", 1, 1_000, 50, machine="gpu-a"),
                 env_record("VecSnake features", 256, 400_000, 0, device="cuda", machine="gpu-b"),
                 env_record("VecSnake features", 256, 1.0, 0, device="cpu", machine="cpu-other"),
                 Record("copy", "device copy", "bandwidth", 50.0, "GB/s", {"MiB": 64}, 1.0, "gpu-a")]
    checks = by_key(fps_claim_checks(CPU_RUN, reference))
    gpu64, = checks["gpu-64-envs-fps"]
    assert (gpu64.outcome, gpu64.answered_by) == (HELD, "VecSnake features, N=64, cuda, gpu-a")
    assert [(c.answered_by.split(", ")[-1], c.outcome) for c in checks["gpu-256-envs-fps"]] == [
        ("gpu-a", PARTLY), ("gpu-b", NOT_HELD)]  # 200,000 is within 2x of 150,000; 400,000 is not
    speedup_a, speedup_b = checks["vectorized-speedup"]
    assert speedup_a.verdict.measured == pytest.approx(200.0) and speedup_a.outcome == HELD
    assert speedup_a.verdict.spread == pytest.approx(speedup_spread(200.0, 10_000 / 200_000, 50 / 1_000))
    assert speedup_b.verdict is None and "no SnakeEnv loop record from gpu-b" in speedup_b.answered_by


def test_a_gpu_measured_in_this_run_answers_too_and_a_missing_n_is_named():
    run = CPU_RUN + [env_record("VecSnake features", 64, 35_000, 0, device="cuda")]
    checks = by_key(fps_claim_checks(run))
    assert checks["gpu-64-envs-fps"][0].outcome == HELD
    gpu256, = checks["gpu-256-envs-fps"]
    assert gpu256.verdict is None and gpu256.answered_by == "no VecSnake features record on a GPU at N=256"


def test_missing_cpu_measurements_are_said_not_guessed():
    quick_run = [env_record("SyncVectorEnv", 4, 5_500, 100)]  # quick mode stops at N=4
    single, cpu16, *_ = fps_claim_checks(quick_run)
    assert single.outcome == cpu16.outcome == NOT_MEASURED
    assert "N=16" in cpu16.answered_by and "SnakeEnv loop" in single.answered_by


def test_claim_checks_table_shows_figures_measurements_and_verdicts():
    text = str(claim_checks_table(fps_claim_checks(CPU_RUN)))
    assert "~500 steps/s" in text and "300,000 ± 30,000 steps/s" in text and "did not hold" in text
    assert "100-300 x" in text and text.count(NOT_MEASURED) == 3
    with pytest.raises(TypeError, match="only ClaimCheck objects"):
        claim_checks_table(["held"])
    with pytest.raises(TypeError, match="records must hold only Record objects"):
        fps_claim_checks(["fast"])
    assert isinstance(fps_claim_checks(CPU_RUN)[0], ClaimCheck)


# ---------------------------------------------------------------------------- memory of a step

def test_step_memory_counts_the_observations_a_step_returns():
    grid, = vec_snake_step_memory(8, obs_type="grid", steps=2)
    features, = vec_snake_step_memory(8, obs_type="features", steps=2)
    assert (grid.num_envs, grid.observation_bytes, grid.returned_bytes) == (8, 3 * 10 * 10 * 4, 2 * 8 * 1_200)
    assert (features.observation_bytes, features.returned_bytes) == (11 * 4, 2 * 8 * 44)
    assert grid.bytes_per_game == 2_400 and grid.bytes_per_second(1e6) == pytest.approx(2.4e9)
    assert grid.page_size > 0 and (grid.page_faults is None or grid.page_faults >= 0)


def test_step_memory_takes_the_median_of_the_page_faults(monkeypatch):
    counts = iter([0, 3, 10, 11, 20, 27])  # 3, 1 and 7 faults in the three steps
    monkeypatch.setattr(env_bench, "_minor_page_faults", lambda: next(counts))
    memory, = vec_snake_step_memory(4, steps=3)
    assert memory.page_faults == 3.0 and memory.fresh_bytes == 3.0 * memory.page_size
    monkeypatch.setattr(env_bench, "_minor_page_faults", lambda: None)  # an OS that does not count
    memory, = vec_snake_step_memory(4, steps=1)
    assert memory.page_faults is None and memory.fresh_bytes is None
    assert "n/a" in str(step_memory_table([memory]))


def test_step_memory_table_sets_the_bytes_beside_the_rate():
    memory = [StepMemory(1_000, "grid", 1_200, 2_400_000, 0.0, 4096),
              StepMemory(4_000, "grid", 1_200, 9_600_000, 2_000.0, 4096)]
    rates = [env_record("VecSnake grid", 1_000, 1e6), env_record("VecSnake features", 4_000, 5e6),
             env_record("VecSnake grid", 4_000, 1e6, device="cuda")]  # neither answers the grid on a CPU
    table = step_memory_table(memory, rates)
    assert table.columns[-2:] == ["throughput (steps/s)", "observations written (GB/s)"]
    assert table.rows[0] == ["1,000", "1,200", "2.40", "0", "1,000,000", "2.40"]
    assert table.rows[1] == ["4,000", "1,200", "9.60", "8.19", "", ""]
    with pytest.raises(ValueError, match="machines \\['a', 'b'\\]"):
        step_memory_table(memory, [env_record("VecSnake grid", 1, 1.0, machine="a"),
                                   env_record("VecSnake grid", 2, 1.0, machine="b")])
    with pytest.raises(TypeError, match="only StepMemory objects"):
        step_memory_table([1_200])


@pytest.mark.parametrize("call, error, message", [
    (lambda: vec_snake_step_memory(4, obs_type="pixels"), ValueError, r"obs_type='pixels' must be one of"),
    (lambda: vec_snake_step_memory(4, steps=0), ValueError, r"steps=0 must be an int >= 1"),
    (lambda: vec_snake_step_memory((4, 0)), ValueError, r"num_envs=\(4, 0\): num_envs\[1\]=0 must be"),
    (lambda: StepMemory(4, "grid", 1, 8, 0.0, 4096).bytes_per_second(-1.0), ValueError, r"steps_per_second=-1.0"),
])
def test_step_memory_rejects_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------------------- notebook 04: sizes and N

def test_on_a_gpu_full_size_reaches_2_to_the_24_and_quick_mode_stays_small(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "0")
    gpu = env_bench.default_vec_num_envs("cuda")
    assert gpu[0] == 1 and gpu[-1] == 2**24 and all(b == 4 * a for a, b in zip(gpu, gpu[1:]))
    assert env_bench.default_vec_num_envs() == env_bench.default_vec_num_envs("cpu")
    assert env_bench.default_vec_num_envs("cpu")[-1] == 65_536
    assert default_scaling_num_envs("cpu")[-1] == 262_144
    assert default_scaling_num_envs(torch.device("cuda")) == gpu
    assert default_sync_num_envs("cpu") == (16, 1024, 65_536)
    assert default_sync_num_envs("cuda")[-1] == 1_048_576
    monkeypatch.setenv("RLGPU_QUICK", "1")
    for sizes in (env_bench.default_vec_num_envs("cuda"), default_scaling_num_envs("cuda")):
        assert max(sizes) <= 256
    with pytest.raises(TypeError, match="device=3"):
        env_bench.default_vec_num_envs(3)


def test_an_n_that_does_not_fit_is_skipped_with_every_larger_one(monkeypatch, capsys):
    real = env_bench.vec_snake_job

    def small_memory(num_envs, obs_type, device):
        if num_envs >= 8 and obs_type == "grid":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(num_envs, obs_type, device)

    monkeypatch.setattr(env_bench, "vec_snake_job", small_memory)
    records = vec_snake_throughput("cpu", num_envs=(2, 8, 32), progress=False)
    assert [(r.variant, r.params["num_envs"]) for r in records] == [
        ("VecSnake features", 2), ("VecSnake features", 8), ("VecSnake features", 32), ("VecSnake grid", 2)]
    out = capsys.readouterr().out
    assert "VecSnake grid at N=8 did not fit in cpu memory (CUDA out of memory." in out
    assert "none at larger N" in out and "N=32" not in out


def test_the_machine_label_can_be_given():
    vec = vec_snake_throughput("cpu", num_envs=2, obs_types="features", progress=False, machine="gpu-box")
    assert vec[0].machine == "gpu-box" and vec[0].params["device"] == "cpu"
    with pytest.raises(ValueError, match="machine=''"):
        vec_snake_throughput("cpu", num_envs=2, progress=False, machine="")


def test_time_per_step_is_n_over_the_rate_with_its_relative_spread():
    records = [env_record("VecSnake features", 1, 4_000, 400), env_record("VecSnake features", 256, 512_000, 0),
               Record("copy", "device copy", "bandwidth", 50.0, "GB/s", {"MiB": 64}, 1.0, "cpu-here")]
    one, many = time_per_step_records(records)
    assert (one.metric, one.unit, one.value, one.spread) == ("time per step", "µs", 250.0, pytest.approx(25.0))
    assert many.value == pytest.approx(500.0) and many.params == records[1].params


def test_flat_until_reads_where_the_time_of_a_step_starts_to_rise():
    # 100 µs per step up to N = 64 (and 120 µs at 256: within 25%), then 4x at 1,024
    rates = {1: 10_000, 4: 40_000, 64: 640_000, 256: 256 / 120e-6, 1024: 1024 / 400e-6}
    records = [env_record("VecSnake features", n, rate) for n, rate in rates.items()]
    assert flat_until(records, "VecSnake features") == (256, 1024)
    assert flat_until(records, "VecSnake features", tolerance=0.1) == (64, 1024)
    assert flat_until(records[1:], "VecSnake features") is None
    assert flat_until(records, "VecSnake grid") is None
    mixed = records + [env_record("VecSnake features", 1, 1.0, machine="other")]
    with pytest.raises(ValueError, match="pass one machine's records"):
        flat_until(mixed, "VecSnake features")


def test_same_cost_is_judged_on_gpu_records_only():
    cpu_only = CPU_RUN + [env_record("VecSnake features", 1, 4_000)]
    check, = same_cost_checks(cpu_only)
    assert check.verdict is None and check.answered_by == NO_GPU_RECORD
    reference = [env_record("VecSnake features", 1, 10_000, 500, device="cuda", machine="gpu-a"),
                 env_record("VecSnake features", 256, 2_048_000, 0, device="cuda", machine="gpu-a"),
                 env_record("VecSnake features", 256, 25_600, 0, device="cuda", machine="gpu-b")]
    a, b = same_cost_checks(cpu_only, reference)
    # gpu-a: 125 µs at N=256 against 100 µs at N=1: 1.25x, held; its spread from N=1's 5%
    assert a.verdict.measured == pytest.approx(1.25) and a.outcome == HELD
    assert a.verdict.spread == pytest.approx(1.25 * 0.05)
    assert "gpu-a" in a.answered_by and a.claim.key == "same-cost-1-vs-256"
    assert b.verdict is None and "no VecSnake features record from gpu-b at N=1" in b.answered_by


# ---------------------------------------------------------------------------- notebook 04: sync points

def test_sync_costs_are_measured_for_every_configuration():
    records = sync_cost_throughput("cpu", num_envs=(4,), progress=False)
    assert [r.variant for r in records] == [sync_variant(c) for c in SYNC_CONFIGS]
    assert sync_variant("if_any") == "NaiveTensorSnake + if_any"
    assert sync_variant("all four") == "NaiveTensorSnake, all four"
    for record in records:
        assert_well_formed(record, name="env_step_syncs")
        assert record.params == {"num_envs": 4, "obs_type": "features", "device": "cpu"}
    with pytest.raises(ValueError, match="'bogus' is not one of"):
        sync_cost_throughput("cpu", configs=("bogus",), progress=False)


def test_the_audit_counts_each_configuration_per_step_the_same_on_every_run():
    audits = audit_sync_points(64, steps=5)
    per_step = {a.config: a.per_step for a in audits}
    assert per_step["VecSnake"] == per_step["no syncs"] == 0
    assert per_step["mask_reset"] == per_step["if_any"] == per_step["item_logging"] == 2
    # nonzero, and multinomial where this torch checks its input on the host (torch 2.4)
    assert per_step["nonzero_food"] == 1 + multinomial_synchronizes() and per_step["all four"] > 6
    assert audits == audit_sync_points(64, steps=5)
    table = str(sync_audit_table(audits))
    assert "syncs per step" in table and "Tensor.item()" in table and "naive_tensor.py" in table
    assert "VecSnake (not NaiveTensorSnake)" in table
    with pytest.raises(TypeError, match="only SyncAudit objects"):
        sync_audit_table(["audit"])


def sync_record(config, n, value, spread=0.0, machine="cpu-here", device="cpu"):
    return Record("env_step_syncs", sync_variant(config), "throughput", value, "steps/s",
                  {"num_envs": n, "obs_type": "features", "device": device}, spread, machine)


def test_sync_costs_set_each_variant_beside_the_sync_free_one():
    records = [sync_record("VecSnake", 100, 2e6), sync_record("no syncs", 100, 1e6, 1e4),
               sync_record("if_any", 100, 0.5e6), sync_record("mask_reset", 100, 1.01e6, 5e4),
               Record("env_step_sync_count", sync_variant("if_any"), "syncs per step", 2.0, "syncs/step",
                      {"num_envs": 100, "obs_type": "features", "device": "cpu", "method": "rules"}, None,
                      "cpu-here")]
    costs = {c.config: c for c in sync_costs(records)}
    assert costs["no syncs"].extra_us is None and costs["no syncs"].syncs_per_step == 0
    # 200 µs a step against 100 µs: 100 µs more, 2 syncs per step, 50 µs each
    assert costs["if_any"].extra_us == pytest.approx(100.0) and costs["if_any"].per_sync_us == pytest.approx(50.0)
    assert costs["if_any"].spread_us == pytest.approx(1.0) and costs["if_any"].beyond_noise
    assert costs["mask_reset"].syncs_per_step is None and not costs["mask_reset"].beyond_noise
    audits = [SyncAudit("mask_reset", 100, 4, "rules", (SyncRow("x", 8, "here"),))]
    assert {c.config: c for c in sync_costs(records, audits)}["mask_reset"].syncs_per_step == 2
    table = str(sync_cost_table(records, audits))
    assert "+100.0 ± 1.00" in table and "(reference)" in table and "50.0" in table
    assert "vs no syncs, per sync (µs)" in table
    with pytest.raises(ValueError, match="not one of sync_cost_throughput's"):
        sync_costs([env_record("VecSnake grid", 1, 5.0, name="env_step_syncs")])


def test_measure_sync_costs_stores_the_counts_beside_the_rates(monkeypatch):
    monkeypatch.setattr(syncs, "default_sync_num_envs", lambda device=None: (8,))
    monkeypatch.setattr(syncs, "default_read_num_envs", lambda: (8,))
    records = measure_sync_costs("cpu", progress=False)
    counts = {r.variant: r.value for r in records if r.name == "env_step_sync_count"}
    assert counts[sync_variant("no syncs")] == 0 and counts[sync_variant("item_logging")] == 2
    assert {r.name for r in records} == {"env_step_syncs", "env_step_sync_count", "env_step_reads"}
    assert sorted(r.params["reads"] for r in records if r.name == "env_step_reads") == list(syncs.READS)
    assert all(c.syncs_per_step is not None for c in sync_costs(records))


def read_record(n, reads, value, spread=0.0, machine="cpu-here"):
    return Record("env_step_reads", f"VecSnake + {reads} reads", "throughput", value, "steps/s",
                  {"num_envs": n, "reads": reads, "device": "cpu"}, spread, machine)


def test_read_cost_table_sets_each_k_beside_the_step_without_reads():
    # 100 games: 100 µs a step without reads, 300 µs with 4 reads: 3x, +200 µs, 50 µs a read
    records = [read_record(100, 0, 1e6, 1e4), read_record(100, 4, 1e6 / 3), read_record(100, 1, 0.99e6, 5e4),
               read_record(7, 2, 1e5)]
    rows = {row[3] + "@" + row[2]: row for row in read_cost_table(records).rows}
    assert rows["0@100"][5] == "(reference)"
    assert rows["4@100"][5] == "3.00x (+200.0 ± 1.00 µs)" and rows["4@100"][6] == "+50.00"
    assert rows["1@100"][6] == ""  # within the spread: no cost to share out
    assert rows["2@7"][5] == "no step without reads measured"


def test_read_cost_throughput_measures_each_k_on_the_same_step():
    records = read_cost_throughput("cpu", reads=(0, 3), num_envs=(4,), progress=False, machine="cpu-here")
    assert [(r.variant, r.params) for r in records] == [
        ("VecSnake + 0 reads", {"num_envs": 4, "reads": 0, "device": "cpu"}),
        ("VecSnake + 3 reads", {"num_envs": 4, "reads": 3, "device": "cpu"})]
    assert all(r.name == "env_step_reads" and r.value > 0 and r.machine == "cpu-here" for r in records)
    with pytest.raises(ValueError, match="reads"):
        read_cost_throughput("cpu", reads=(-1,), num_envs=(4,), progress=False)


def test_the_reads_are_the_syncs_the_audit_counts():
    step, _, close = syncs._read_job(3, 8, torch.device("cpu"))
    step()
    report = audit_syncs(step, "cpu", warmup=0)
    assert [(row.operator, row.count) for row in report.rows] == [("Tensor.item()", 3)]
    close()


def test_sync_cost_lines_sum_up_each_device_and_set_the_step_beside_its_other_measurement():
    records = [sync_record("VecSnake", 100, 2e6), sync_record("no syncs", 100, 1e6, 1e4),
               sync_record("if_any", 100, 0.5e6), sync_record("mask_reset", 100, 1.01e6, 5e4),
               sync_record("item_logging", 100, 2e6)]
    audits = [SyncAudit("if_any", 100, 1, "rules", (SyncRow("x", 2, "here"),))]
    scaling = [env_record("VecSnake features", 100, 1e6, machine="cpu-here")]
    lines = sync_cost_lines(records, audits, scaling)
    assert lines[0] == ("cpu-here on cpu: of 3 steps with sync points on (configuration x N), 1 were slower than "
                        "the sync-free step beyond their spread, 1 faster, 1 within it")
    # 200 µs a step against 100: +100 µs, 100% of the sync-free step, 2 syncs: 50 µs each
    assert lines[1] == "    if_any at N = 100: +100.0 µs per step (100% of the sync-free step), 50.0 µs per synchronization"
    assert lines[2] == ("The same VecSnake step on cpu at N = 100, measured twice: 1,000,000 steps/s in section 2, "
                        "2,000,000 here (2.00x)")
    quiet = sync_cost_lines([sync_record("no syncs", 100, 1e6, 1e4), sync_record("if_any", 100, 1e6, 1e4)])
    assert quiet[1] == "    no step with sync points on was slower than the sync-free step beyond the spread"


def test_curve_lines_read_each_curve_with_the_loop_beside_its_own_machine():
    records = [env_record("VecSnake features", n, v) for n, v in ((1, 1_000.0), (16, 9_000.0), (256, 8_000.0))]
    records += [env_record("VecSnake grid", 4, 50.0, device="cuda", machine="gpu-x")]
    loop = env_record("SnakeEnv loop", 1, 3_000.0)
    here, there = curve_lines(records, loop)
    assert here == ("cpu-here · VecSnake features on cpu: 1,000 steps/s with 1 game; best 9,000 at N = 16 "
                    "(3x the SnakeEnv loop); 8,000 at N = 256, the largest measured")
    assert there == ("gpu-x · VecSnake grid on cuda: no measurement with 1 game; best 50 at N = 4; "
                     "50 at N = 4, the largest measured")


def test_flat_lines_give_the_flat_stretch_of_each_curve():
    # 1 µs per game-step at N = 1 (1e6 steps/s), the same time per step at N = 16, 8x at N = 256
    records = [env_record("VecSnake features", n, v) for n, v in ((1, 1e6), (16, 16e6), (256, 32e6))]
    records += [env_record("VecSnake grid", 4, 5.0)]
    features, grid = flat_lines(records)
    assert features == ("cpu-here · VecSnake features on cpu: 1 µs per step at N = 1; within 25% of it up to "
                        "N = 16; 8 µs at N = 256 (8.00x)")
    assert grid == "cpu-here · VecSnake grid on cpu: no measurement at N = 1"


# ---------------------------------------------------------------------------- the memory floor

def test_floor_fraction_is_steps_per_second_over_bandwidth_per_byte():
    throughput = [env_record("VecSnake features", 1024, 2e6, spread=1e5),
                  env_record("VecSnake grid", 1024, 1e6),
                  env_record("SyncVectorEnv", 4, 5e4),
                  env_record("VecSnake features", 1024, 9.0, name="env_step_heavy")]
    records = env_bench.floor_fraction_records(throughput, 10.0, {"features": (400, 500), "grid": 5000}, "test")
    by = {(r.variant, r.metric): r for r in records}
    assert by[("memory bandwidth", "bandwidth")].value == 10.0
    assert by[("VecSnake features", "bytes touched")].value == 400
    assert by[("VecSnake features", "bytes in sectors")].value == 500
    assert ("VecSnake grid", "bytes in sectors") not in by
    features = by[("VecSnake features", "floor fraction")]
    assert features.value == pytest.approx(2e6 / (10e9 / 400))  # 0.08 of the floor
    assert features.spread == pytest.approx(1e5 / (10e9 / 400))
    assert features.params == {"num_envs": 1024, "obs_type": "features", "device": "cpu"}
    assert by[("VecSnake grid", "floor fraction")].value == pytest.approx(1e6 * 5000 / 10e9)
    assert len([r for r in records if r.metric == "floor fraction"]) == 2  # neither SyncVectorEnv nor heavy
    assert env_bench.floor_fraction_records(throughput[2:3], 10.0, {"features": 400}) == []
    with pytest.raises(ValueError):
        env_bench.floor_fraction_records(throughput, 0.0, {"features": 400})


def test_a_cpus_bandwidth_is_its_measured_copy_of_the_largest_buffer():
    value, spread, source = env_bench.device_bandwidth("cpu")
    assert math.isfinite(value) and value > 0 and spread is not None and spread >= 0
    assert source == "measured copy"


def test_known_gpus_have_their_peak_bandwidth():
    table = env_bench.table_bandwidth_gbs
    assert table("NVIDIA H100 80GB HBM3") == 3350 and table("NVIDIA H100 PCIe") == 2000
    assert table("NVIDIA H200") == 4800 and table("Tesla T4") == 320 and table("NVIDIA L4") == 300
    assert table("NVIDIA A100-SXM4-40GB") == 1555 and table("NVIDIA A100-SXM4-80GB") == 2039
    assert table("NVIDIA L40S") is None and table("NVIDIA GeForce RTX 4090") is None


def test_the_step_floor_table_turns_times_per_call_into_a_fraction_of_the_floor():
    times = [Record("graphs_step", "eager", "time per call", 1000.0, "µs", {"part": "env", "num_envs": 1000, "device": "cuda"},
                    None, "gpu-x"),
             Record("graphs_step", "compiled", "time per call", 100.0, "µs", {"part": "env", "num_envs": 1000,
                                                                             "device": "cuda"}, None, "gpu-x"),
             Record("graphs_step", "eager", "time per call", 5.0, "µs", {"part": "acting", "num_envs": 1000}, None, "gpu-x"),
             Record("graphs_step", "eager", "time per call", 5.0, "µs", {"part": "env", "num_envs": 10}, None, "other")]
    # 1,000 games in 1 ms: 1M env steps/s; 10 GB/s over 500 B a game: a floor of 20M env steps/s.
    table = env_bench.step_floor_table(times, {"gpu-x": 10.0}, 500)
    assert [row[1] for row in table.rows] == ["eager", "compiled"]  # the other part and machine are left out
    assert [row[5] for row in table.rows] == ["5.0%", "50.0%"]
    with pytest.raises(ValueError, match="bytes_per_game"):
        env_bench.step_floor_table(times, {"gpu-x": 10.0}, 0)
