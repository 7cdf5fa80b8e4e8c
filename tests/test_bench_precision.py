"""The ``precision`` bench suite (notebook 08): step time and memory, PPO in each precision, verdicts."""

import pytest

from rlgpu_helpers.bench.ablation import ABLATION, BASELINE
from rlgpu_helpers.bench.precision import (
    MEMORY_NAME,
    NAME,
    PPO_NAME,
    batch_records,
    batch_table,
    capstone_precision_table,
    learning_verdicts,
    memory_table,
    plot_learning,
    ppo_batches,
    ppo_config,
    ppo_records,
    ppo_runs,
    ppo_table,
    precision_claim_checks,
    scaler_table,
    small_net_summary,
    step_records,
    step_table,
    target_checks,
)
from rlgpu_helpers.bench.time_to_score import CHOICE
from rlgpu_helpers.core.device import machine_of
from rlgpu_helpers.learn.train_step import scaler_trace
from rlgpu_helpers.measure.claims import HELD, NOT_TESTED, claim_checks_table
from rlgpu_helpers.measure.records import Record


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_step_records_time_and_weigh_each_precision_at_each_width():
    records = step_records("cpu", hiddens=(16, 32), batch_size=32, precisions=("fp32", "bf16"), progress=False,
                           machine="m")
    assert [(r.name, r.variant, r.params["hidden"]) for r in records] == [
        (name, p, h) for h in (16, 32) for p in ("fp32", "bf16") for name in (NAME, MEMORY_NAME)]
    assert all(r.value > 0 and r.machine == "m" for r in records)
    assert "bf16 step (ms, speedup)" in str(step_table(records))
    assert small_net_summary(records)[0].startswith("m (cpu): width 16 -> 32")


def test_emulated_precisions_stop_at_small_widths(capsys):
    records = step_records("cpu", hiddens=(8, 512), batch_size=8, precisions=("fp16",), progress=False, machine="m")
    from rlgpu_helpers.gpu.precision import device_traits
    if device_traits("cpu").fp16_native:
        pytest.skip("this CPU multiplies fp16 natively")
    assert {r.params["hidden"] for r in records} == {8}
    assert "measured only up to width 256" in capsys.readouterr().out


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="precisions"):
        step_records("cpu", precisions=("tf32",))  # no TF32 on a CPU
    with pytest.raises(ValueError, match="hiddens"):
        step_records("cpu", hiddens=(0,))


def _record(name, variant, value, hidden, device="cuda", machine="gpu-x", spread=0.0, metric="step time"):
    return Record(name, variant, metric, value, "ms" if name == NAME else "MiB",
                  {"hidden": hidden, "batch_size": 4096, "device": device}, spread, machine)


def test_verdicts_and_targets_from_gpu_records():
    records = [_record(NAME, "fp32", 10.0, 4096), _record(NAME, "bf16", 4.0, 4096), _record(NAME, "fp16", 5.0, 4096),
               _record(NAME, "fp32", 1.0, 1024), _record(NAME, "bf16", 0.8, 1024),
               _record(MEMORY_NAME, "fp32", 100.0, 4096, metric="peak memory"),
               _record(MEMORY_NAME, "bf16", 50.0, 4096, metric="peak memory")]
    checks = {c.claim.key: c for c in precision_claim_checks(records)}
    assert checks["amp-speedup"].verdict.measured == pytest.approx(2.5) and checks["amp-speedup"].outcome == HELD
    assert checks["fp16-speedup"].verdict.measured == pytest.approx(2.0)
    assert checks["amp-memory"].verdict.measured == pytest.approx(2.0)
    outcomes = [row[-1] for row in target_checks(records).rows]
    assert outcomes == ["missed", "met"]  # width 1,024 then 4,096
    assert "2.50" in str(claim_checks_table(list(checks.values())))


def test_a_cpu_answers_no_gpu_claim():
    records = [_record(NAME, "fp32", 10.0, 256, "cpu", "cpu-m"), _record(NAME, "bf16", 4.0, 256, "cpu", "cpu-m")]
    checks = precision_claim_checks(records)
    assert all(c.verdict is None for c in checks if c.claim.key != "amp-memory")
    assert "not measured" in str(target_checks(records))


def test_ppo_in_each_variant_same_budget_and_seeds():
    results = ppo_runs("cpu", variants=("fp32", "bf16", "bf16 whole run"), steps=8192, seeds=(0, 1), progress=False)
    assert list(results) == ["fp32", "bf16", "bf16 whole run"]
    assert all(len(runs) == 2 and all(r.env_steps == 8192 for r in runs) for runs in results.values())
    assert [[r.config["precision"] for r in runs] for runs in results.values()] == [["fp32"] * 2, ["bf16"] * 2,
                                                                                   ["fp32"] * 2]
    assert [r.config["seed"] for r in results["bf16"]] == [0, 1]
    records = ppo_records(results, "cpu", machine="m")
    assert {r.variant for r in records} == {"fp32", "bf16", "bf16 whole run"}
    score = next(r for r in records if r.variant == "fp32" and r.metric == "mean score")
    scores = [r.mean_score or 0.0 for r in results["fp32"]]
    assert score.value == pytest.approx(sum(scores) / 2) and score.spread == pytest.approx(abs(scores[0] - scores[1])
                                                                                         / 2**0.5)
    assert "bf16 whole run" in str(ppo_table(records))
    assert len(learning_verdicts(records)) == 2
    legend = [t.get_text() for t in plot_learning(results).axes[0].get_legend().get_texts()]
    assert len(legend) == 3 and legend[2].endswith("(the mistake)")


def test_the_whole_run_mistake_is_stale_weights_not_lost_gradients_on_every_torch():
    """Before torch 2.11 a cast cached in inference mode had no autograd link (PyTorch issue 158232):
    a layer the learner first ran while acting, inside the region, never learned. ``ppo_runs``
    builds the learner outside the region, so every weight takes its optimizer steps."""
    import torch

    from rlgpu_helpers.learn.ppo import PPO

    initial = {name: value.clone() for name, value in PPO(ppo_config("cpu", 0)).model.state_dict().items()}
    run, = ppo_runs("cpu", variants=("bf16 whole run",), steps=8192, seeds=(0,), progress=False)["bf16 whole run"]
    trained = run.learner.model.state_dict()
    assert initial.keys() == trained.keys()
    assert [name for name in initial if torch.equal(initial[name], trained[name])] == []


def _score(variant, value, spread, seeds=3, machine="m"):
    return Record(PPO_NAME, variant, "mean score", value, "food/game", {"env_steps": 10, "num_envs": 2,
                  "device": "cpu", "seeds": seeds}, spread, machine)


def test_learning_verdicts_compare_the_difference_with_the_seeds_noise():
    # noise: hypot(1/sqrt(3), 1/sqrt(3)) = 0.816, so unharmed up to 1.63 food/game
    records = [_score("fp32", 8.0, 1.0), _score("bf16", 7.0, 1.0), _score("bf16 whole run", 0.2, 0.1)]
    bf16, whole = learning_verdicts(records)
    assert bf16.endswith("unharmed") and "-1.00" in bf16 and "±1.63" in bf16
    assert whole.endswith("worse")
    assert learning_verdicts([_score("fp32", 8.0, 1.0), _score("bf16", 10.0, 0.5)])[0].endswith("better")
    assert "one seed each" in learning_verdicts([_score("fp32", 8.0, None, 1), _score("bf16", 1.0, None, 1)])[0]
    assert learning_verdicts([_score("bf16", 7.0, 1.0, machine="other"), _score("fp32", 8.0, 1.0)]) == []


def test_ppo_runs_refuses_an_unknown_variant():
    with pytest.raises(ValueError, match="variants"):
        ppo_runs("cpu", variants=("fp16",), steps=8192, progress=False)


def _chosen(num_envs, machine):
    return Record(CHOICE, "chosen settings", "for a budget of", 120.0, "s",
                  {"num_envs": num_envs, "precision": "bf16", "compile": False, "cuda_graphs": False}, None, machine)


def test_batch_records_time_and_weigh_the_capstone_nets_two_batches():
    chosen = [_chosen(8, machine_of("cpu"))]  # 8 games, 64 steps, 4 minibatches: 8 acting, 128 per minibatch
    assert ppo_batches("cpu", chosen) == (64, {"acting": 8, "update minibatch": 128})
    assert ppo_batches("cpu", []) == (64, {"acting": 512, "update minibatch": 8192})  # the capstone's start
    records = batch_records("cpu", progress=False, machine="m", records=chosen)
    assert {(r.params["batch_of"], r.params["batch_size"], r.params["hidden"]) for r in records} == {
        ("acting", 8, 64), ("update minibatch", 128, 64)}
    assert {r.variant for r in records} >= {"fp32", "bf16"}
    memory = [r for r in records if r.name == MEMORY_NAME]
    assert all(0 < r.params["standing_mib"] < r.value for r in memory)
    table = batch_table(records)
    assert [row[2] for row in table.rows] == ["acting", "update minibatch"] and "weights + Adam (share)" in table.columns
    sweep = step_records("cpu", hiddens=(64,), batch_size=8, precisions=("fp32", "bf16"), progress=False, machine="m")
    assert batch_table(sweep).rows == []  # each table keeps to its own records
    assert str(step_table(sweep + records)) == str(step_table(sweep))
    assert str(memory_table(sweep + records)) == str(memory_table(sweep))
    assert small_net_summary(sweep + records) == []


def test_the_capstone_precision_table_sets_the_chosen_precision_beside_fp32():
    def run(variant, precision, value, date="2026-01-01"):
        return Record(ABLATION, variant, "throughput", value, "steps/s",
                      {"num_envs": 128, "precision": precision}, None, "m", date)
    records = [run(BASELINE, "bf16", 110.0), run("08 precision off", "fp32", 100.0), run(BASELINE, "bf16", 90.0, "2025-01-01"),
               run("03 many games at once off", "bf16", 5.0)]
    assert capstone_precision_table(records).rows == [["m", "128", "bf16", "110", "fp32", "100", "1.10x"]]
    assert "no capstone ablation" in str(capstone_precision_table(records[:1]))


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_memory_claim_is_judged_where_activations_dominate_and_where_weights_do(device):
    def memory(variant, value, hidden, batch, standing):
        return Record(MEMORY_NAME, variant, "peak memory", value, "MiB",
                      {"hidden": hidden, "batch_size": batch, "device": device, "standing_mib": standing}, None, "m")
    records = [memory("fp32", 600.0, 4096, 256, 500.0), memory("bf16", 600.0, 4096, 256, 500.0),
               memory("fp32", 100.0, 64, 2048, 4.0), memory("bf16", 50.0, 64, 2048, 4.0)]
    records[2].params["batch_of"] = records[3].params["batch_of"] = "update minibatch"
    activations, weights = [c for c in precision_claim_checks(records) if c.claim.key == "amp-memory"]
    # a GPU claim gets a verdict from a GPU's records only; a CPU's are shown beside it, unjudged
    assert activations.verdict.measured == pytest.approx(2.0)
    assert activations.outcome == (HELD if device == "cuda" else NOT_TESTED)
    assert "weights and Adam 4% of it" in activations.answered_by and "batch 2,048" in activations.answered_by
    assert weights.verdict.measured == pytest.approx(1.0) and "weights and Adam 83% of it" in weights.answered_by


def test_scaler_table_shows_each_step_of_a_scaler_trace():
    trace = scaler_trace("cpu", steps=3, poison_at=(1,), init_scale=2.0**10)
    table = scaler_table(trace)
    assert table.columns == ["step", "scale used", "NaN in batch", "skipped", "next scale"]
    assert table.rows[0][1] == "1,024" and table.rows[1][2:4] == ["True", "True"]
    assert table.rows[1][4] == f"{trace[1].scale / 2:,.0f}"
    with pytest.raises(TypeError, match="trace="):
        scaler_table([1, 2])
