"""The capstone's choice of settings and its ablation (notebook 11)."""

import pytest
import torch

from rlgpu_helpers.bench import ablation
from rlgpu_helpers.bench.ablation import (
    ABLATION,
    BASELINE,
    FEW_GAMES,
    ablation_arms,
    ablation_records_table,
    ablation_table,
    capstone_recap,
    capstone_verdicts,
    choice_records,
    measure_capstone,
    run_arms,
    seed_spread,
)
from rlgpu_helpers.bench.time_to_score import CHOICE, Curve, chosen_on_file
from rlgpu_helpers.core.device import device_report, machine_label
from rlgpu_helpers.gpu.precision import PrecisionPolicy
from rlgpu_helpers.learn import tune
from rlgpu_helpers.learn.ppo import PPO, PPOConfig
from rlgpu_helpers.learn.training import TrainingResult
from rlgpu_helpers.learn.tune import (
    CapstoneSettings,
    Choice,
    average_score,
    choose_num_envs,
    choose_precision,
    choose_settings,
)
from rlgpu_helpers.measure.claims import NOT_TESTED

TINY = {"height": 6, "width": 6, "num_envs": 16, "num_steps": 8, "hidden": 16, "obs_type": "features_reach"}


def curve(scores, seconds=None, rate=1000.0, setup="ours"):
    """A curve with a point a second: (1, scores[0]), (2, scores[1]), ..."""
    seconds = float(len(scores)) if seconds is None else seconds
    points = [{"seconds": float(i + 1), "env_steps": int(rate * (i + 1)), "mean_score": s, "episodes": i}
              for i, s in enumerate(scores)]
    return Curve(setup, seconds, int(rate * seconds), points)


def trained(scores, seconds=None, rate=1000.0):
    """What a short run returns, with the curve of :func:`curve`."""
    c = curve(scores, seconds, rate)
    return TrainingResult("ppo", {}, c.points, c.seconds, c.env_steps, len(scores), c.final_mean_score, None)


def test_average_score_is_the_area_under_the_curve_over_its_length():
    # 0 until the first game ends, then 10 for a second, then 20 until the end at 4 s.
    assert average_score(curve([None, 10.0, 20.0]).points, 4.0) == pytest.approx((10 + 20) / 4)
    assert average_score([], 1.0) == 0.0
    early, late = curve([10.0, 10.0, 10.0, 10.0]), curve([0.0, 0.0, 0.0, 10.0])
    assert average_score(early.points, 4.0) > average_score(late.points, 4.0)  # learning sooner counts


def test_the_number_of_games_is_chosen_by_learning_not_by_steps_per_second(monkeypatch):
    learned = {16: [5.0, 9.0], 32: [6.0, 12.0], 64: [1.0, 4.0]}

    def fake_run(seconds, seed, device, **settings):
        n = settings["num_envs"]
        return trained(learned[n], seconds=seconds, rate=100.0 * n)

    monkeypatch.setattr(tune, "trial_run", fake_run)
    choice = choose_num_envs(TINY, "cpu", num_envs=(64, 16, 32), trial_s=2.0)
    assert choice.settings == {"num_envs": 32} and choice.lesson.startswith("06")
    assert set(choice.figures) == {16, 32, 64} and choice.figures[64][1] == 6400.0
    assert "32 games learned best (steps/s alone would pick 64)" in choice.reasons


def test_running_out_of_memory_ends_the_search_for_games(monkeypatch):
    def fake_run(seconds, seed, device, **settings):
        if settings["num_envs"] >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return trained([float(settings["num_envs"])], seconds=seconds + 1)

    monkeypatch.setattr(tune, "trial_run", fake_run)
    choice = choose_num_envs(TINY, "cpu", num_envs=(16, 32, 64, 128), trial_s=1.0)
    assert choice.settings == {"num_envs": 32} and set(choice.figures) == {16, 32}
    assert any("64 games did not fit" in reason for reason in choice.reasons)
    with pytest.raises(ValueError, match="trial_s"):
        choose_num_envs(TINY, "cpu", trial_s=0)


def test_a_policy_of_fp16_trains_ppo_in_fp16_with_its_grad_scaler(monkeypatch):

    t4 = PrecisionPolicy("cuda", "fp16", False, True, ("Tesla T4 has compute capability 7.5",))
    monkeypatch.setattr(tune, "precision_policy", lambda *args, **kwargs: t4)
    choice = choose_precision(TINY, "cpu")
    assert choice.settings == {"precision": "fp16"} and choice.reasons == t4.reasons
    assert PPO(PPOConfig(**TINY, **choice.settings)).scaler is not None


def test_a_compile_that_costs_more_than_it_saves_within_the_budget_loses():
    seconds, startup = {"eager": (1.0, 0.01), "compiled": (0.5, 0.01)}, {"compiled": 30.0}
    short = choose_settings("cpu", seconds, startup, budget_s=10.0)
    assert short.name == "eager" and short.budget_s == 10.0
    assert any("fewer iterations than eager within the 10 s budget" in r for r in short.reasons)
    long = choose_settings("cpu", seconds, startup, budget_s=600.0)
    assert long.name == "compiled" and any("paid back after 60 s" in r for r in long.reasons)
    assert choose_settings("cpu", seconds).name == "compiled"  # no budget: steady-state speed only


def chosen(**settings):
    start = {"obs_type": "features_reach"}
    best = {"obs_type": "features_reach", "num_envs": 512, "precision": "fp32", "compile": False,
            "cuda_graphs": False, **settings}
    return CapstoneSettings("cpu", start, best, (Choice("06 batch size", {"num_envs": best["num_envs"]}, ("x",)),))


def test_ablation_arms_switch_off_only_what_was_chosen():
    plain = {arm.lesson: arm for arm in ablation_arms(chosen(), "cpu")}
    assert [lesson[:2] for lesson in plain] == ["al", "03", "04", "05", "06", "07", "08", "09", "10", "11"]
    assert plain[BASELINE].settings["num_envs"] == 512
    assert plain["03 many games at once"].settings["num_envs"] == FEW_GAMES
    assert plain["11 the observation"].settings["obs_type"] == "features"
    for lesson in ("04 the env on the device", "06 batch size", "08 precision", "09 compile and CUDA graphs"):
        assert plain[lesson].settings is None
    tuned = {arm.lesson: arm for arm in ablation_arms(chosen(num_envs=256, precision="bf16", compile=True), "cpu")}
    assert tuned["06 batch size"].settings["num_envs"] == 512  # PPOConfig's starting point
    assert tuned["08 precision"].settings["precision"] == "fp32"
    assert tuned["09 compile and CUDA graphs"].settings["compile"] is False
    assert tuned["09 compile and CUDA graphs"].settings["precision"] == "bf16"  # only that lesson is off


def test_the_ablation_table_says_what_switching_each_lesson_off_did():
    arms = ablation_arms(chosen(), "cpu")
    curves = {BASELINE: curve([20.0, 30.0, 40.0]), "03 many games at once": curve([5.0, 10.0, 12.0]),
              "11 the observation": curve([10.0, 20.0, 30.0])}
    table = ablation_table(arms, curves)
    rows = {row[0]: row for row in table.rows}
    effect = table.columns.index("effect of switching it off")
    assert rows["03 many games at once"][effect] == "never reached 30 (final score -28.0)"
    assert rows["11 the observation"][effect] == "1.50x the time to 30 (final score -10.0)"
    assert rows["04 the env on the device"][effect] == "nothing to switch off"
    assert rows["08 precision"][2] == "—"
    with pytest.raises(ValueError, match="no 'all lessons' run"):
        ablation_table(arms, {"11 the observation": curves["11 the observation"]})


def test_effects_within_the_seeds_spread_are_marked_as_such():
    arms = ablation_arms(chosen(), "cpu")
    base = curve([20.0, 30.0, 40.0])  # reaches 30 at 2 s, ends at 40
    curves = {BASELINE: base, "03 many games at once": curve([10.0, 20.0, 29.0]),  # 30 never
              "11 the observation": curve([10.0, 20.0, 30.0])}  # 30 at 3 s; -10 food
    seeds = [curve([10.0, 30.0, 38.0]), curve([10.0, 20.0, 30.0, 41.0])]  # 30 at 2 s and 3 s; ends 38 and 41
    table = ablation_table(arms, curves, seeds=seeds)
    rows = {row[0]: row[-1] for row in table.rows}
    assert rows[BASELINE] == "— (over 3 seeds: final score 38.0-41.0, time to 20 1.00-2.00 s, time to 30 2.00-3.00 s)"
    # a second later to 30 is what two seeds differ by; 10 food lost is not: each measure is judged apart
    assert rows["11 the observation"] == ("1.50x the time to 30 (final score -10.0): final score beyond the seeds' "
                                          "spread, time to 30 within")
    assert rows["03 many games at once"] == "never reached 30 (final score -11.0): beyond the seeds' spread"
    close = {**curves, "11 the observation": curve([10.0, 20.0, 30.0, 39.0])}  # 30 at 3 s, ends at 39: -1
    assert ablation_table(arms, close, seeds=seeds).rows[-1][-1] == (
        "1.50x the time to 30 (final score -1.00): within the seeds' spread")
    slower = {**curves, "11 the observation": curve([10.0, 20.0, 20.0, 30.0, 40.0])}  # 30 at 4 s, ends at 40
    assert ablation_table(arms, slower, seeds=seeds).rows[-1][-1] == (
        "2.00x the time to 30 (final score +0): time to 30 beyond the seeds' spread, final score within")
    with pytest.raises(ValueError, match="at least 2 Curves"):
        seed_spread([base])


def test_run_arms_trains_each_arm_once_and_labels_it():
    arms = [ablation.Arm(BASELINE, "the chosen settings", dict(TINY)),
            ablation.Arm("11 the observation", "the 11 'features'", {**TINY, "obs_type": "features"}),
            ablation.Arm("05 transfers and replay", "nothing here", None)]
    done = {BASELINE: curve([1.0])}
    curves = run_arms(arms, 1.0, device="cpu", done=done, progress=False)
    assert set(curves) == {BASELINE, "11 the observation"} and curves[BASELINE].points == done[BASELINE].points
    assert curves[BASELINE].label == BASELINE
    observation = curves["11 the observation"]
    assert observation.env_steps > 0 and observation.details["obs_type"] == "features"
    assert observation.label == "11 the observation off: the 11 'features'"


def test_the_choice_goes_on_file_and_comes_back(monkeypatch):
    machine = machine_label(device_report("cpu"))
    launches = Choice("09 compile and CUDA graphs", {"compile": True, "cuda_graphs": False}, ("x",),
                      {"eager": (0.3, 0.01, 0.0), "compiled": (0.2, 0.01, 12.0)})
    batch = Choice("06 batch size", {"num_envs": 256}, ("x",), {256: (30.0, 9e4), 512: (28.0, 1.1e5)})
    settings = CapstoneSettings("cpu", {}, {**chosen(num_envs=256, compile=True).settings}, (batch, launches))
    records = choice_records(settings, machine, 120.0)
    assert {r.name for r in records} == {CHOICE}
    assert len([r for r in records if r.variant == "06 batch size"]) == 4
    compiled = next(r for r in records if r.params.get("setting") == "compiled")
    assert compiled.value == 0.2 and compiled.spread == 0.01 and compiled.params["startup_s"] == 12.0
    back = chosen_on_file("cpu", records)
    assert back["num_envs"] == 256 and back["compile"] is True and back["obs_type"] == "features_reach"
    assert chosen_on_file("cpu", [r for r in records if r.variant != "chosen settings"]) is None


def test_the_ablation_part_uses_the_choice_on_file(monkeypatch):
    monkeypatch.setattr(ablation, "chosen_on_file", lambda device: {**TINY, "precision": "fp32", "compile": False,
                                                                     "cuda_graphs": False})
    monkeypatch.setattr(ablation, "capstone_settings", lambda *a, **k: pytest.fail("the choice was measured again"))
    records = measure_capstone("cpu", progress=False, budget_s=1.0, parts=("ablation",))
    variants = {r.variant for r in records}
    assert {r.name for r in records} == {ABLATION}
    assert variants == {BASELINE, "03 many games at once off", "06 batch size off", "11 the observation off"}
    with pytest.raises(ValueError, match="parts"):
        measure_capstone("cpu", parts=("everything",))
    with pytest.raises(ValueError, match="arms: '12' starts none of the lessons"):
        measure_capstone("cpu", parts=("ablation",), arms=("12",))
    some = measure_capstone("cpu", progress=False, budget_s=0.5, parts=("ablation",), arms=("11",))
    assert {r.variant for r in some} == {"11 the observation off"}
    table = ablation_records_table(records)
    assert [row[1] for row in table.rows] == [BASELINE, "03 many games at once off", "06 batch size off",
                                              "11 the observation off"]
    assert all(row[2] == "1.00" and row[-1] != "—" for row in table.rows)


def test_the_guides_training_figures_are_judged_against_the_run():
    ours = curve([20.0, 30.0], seconds=10.0, rate=125_000.0)  # 1M env steps in 8 s
    naive = curve([1.0, 2.0], seconds=10.0, rate=1_000.0)
    million, speedup = capstone_verdicts(ours, naive, "cuda:0")
    assert million.measured == pytest.approx(8.0) and million.outcome == "held"
    assert speedup.measured == pytest.approx(125.0) and speedup.outcome == "partly"  # faster, but not 240x
    with pytest.raises(ValueError, match="naive="):
        capstone_verdicts(ours, curve([], seconds=1.0, rate=0.0), "cuda")


def test_a_cpu_run_gives_no_verdict_on_the_guides_gpu_figures():
    ours = curve([20.0, 30.0], seconds=10.0, rate=125_000.0)
    naive = curve([1.0, 2.0], seconds=10.0, rate=1_000.0)
    on_cpu = capstone_verdicts(ours, naive, torch.device("cpu"))
    assert [v.outcome for v in on_cpu] == [NOT_TESTED, NOT_TESTED]
    assert [v.measured for v in on_cpu] == pytest.approx([8.0, 125.0])  # still shown beside the claims


def test_the_recap_says_only_what_the_runs_measured():
    ours = Curve("ours", 10.0, 1_250_000, curve([20.0, 30.0, 40.0]).points, {"obs_type": "features_reach"})
    naive = Curve("naive", 10.0, 10_000, curve([1.0, 2.0]).points, {"obs_type": "features_reach"})
    verdicts = capstone_verdicts(ours, naive, "cpu")
    ablation = {BASELINE: curve([20.0, 30.0, 40.0]), "03 many games at once": curve([5.0, 10.0, 12.0]),
                "08 precision": curve([20.0, 30.0, 39.5])}
    seeds = [curve([20.0, 30.0, 38.0]), curve([10.0, 30.0, 41.0])]
    text = capstone_recap("cpu-x-2c", [ours, naive], verdicts, ablation, seeds)
    lines = text.splitlines()
    assert lines[0] == "On cpu-x-2c, each setup given the same budget:"
    assert lines[1] == ("- PPO on VecSnake (this course), 'features_reach' observation: reached a mean score of 30.0 "
                        "after 2.00 s and 2,000 env steps (final mean score 40.0, 125,000 env steps/s).")
    assert lines[2].startswith("- naive single-env DQN (notebook 01), 'features_reach' observation: did not reach")
    assert lines[3] == "- Every setup saw the same observation, 'features_reach'."
    assert lines[4] == ("- Switching a lesson off changed the run by more than 3 seeds of the chosen settings differ: "
                        "03 many games at once; within that spread (no effect shown): 08 precision.")
    assert all(line.endswith(("not tested here (no GPU), measured 8.00 s.", "not tested here (no GPU), measured 125 x."))
               for line in lines[5:]) and len(lines) == 7
    naive.details["obs_type"] = "features"
    assert "different observations" in capstone_recap("m", [ours, naive], [], {}, [])
