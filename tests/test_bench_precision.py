"""The ``precision`` bench suite (notebook 08): step time and memory, PPO in each precision, verdicts."""

import pytest

from rlgpu_helpers.bench.precision import (
    MEMORY_NAME,
    NAME,
    PPO_NAME,
    learning_verdicts,
    plot_learning,
    ppo_records,
    ppo_runs,
    ppo_table,
    precision_claim_checks,
    small_net_summary,
    step_records,
    step_table,
    target_checks,
)
from rlgpu_helpers.measure.claims import HELD, claim_checks_table
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
