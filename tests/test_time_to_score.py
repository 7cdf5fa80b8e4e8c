"""The time-to-score comparison: curves, records, tables, and each runner for a short budget."""

import pytest

from rlgpu_helpers.bench import time_to_score
from rlgpu_helpers.bench.time_to_score import (
    Curve,
    compare_to_score,
    comparison_sentences,
    curve_records,
    plot_curves,
    run_naive,
    run_ours,
    run_sb3,
    sb3_available,
    sb3_vec_env_rates,
    seed_summary,
    time_to_score_table,
)
from rlgpu_helpers.learn.tune import CAPSTONE_OBS
from rlgpu_helpers.measure.records import Record


def curve(setup="ours", scores=(None, 2.0, 12.0, 25.0), seconds=4.0, steps=4000):
    points = [{"seconds": float(i + 1), "env_steps": 1000 * (i + 1), "mean_score": s, "episodes": 10 * i}
              for i, s in enumerate(scores)]
    return Curve(setup, seconds, steps, points)


def test_seconds_to_score_is_the_first_point_at_or_above_it():
    c = curve()
    assert c.seconds_to_score(2.0) == 2.0 and c.seconds_to_score(20) == 4.0
    assert c.steps_to_score(2.0) == 2000 and c.steps_to_score(20) == 4000
    assert c.seconds_to_score(30) is None and c.steps_to_score(30) is None
    assert c.final_mean_score == 25.0 and c.steps_per_second == 1000.0


def test_curve_records_skip_thresholds_never_reached():
    records = curve_records(curve(), "m", budget_s=4, seed=1, thresholds=(10, 20, 30))
    by_metric = {r.metric: r for r in records}
    assert by_metric["throughput"].value == 1000.0 and by_metric["throughput"].unit == "steps/s"
    assert by_metric["final mean score"].value == 25.0
    assert by_metric["seconds to mean score 10"].value == 3.0
    assert by_metric["env steps to mean score 10"].value == 3000 and by_metric["env steps to mean score 10"].unit == "steps"
    assert "seconds to mean score 30" not in by_metric
    assert all(r.params == {"budget_s": 4, "seed": 1} and r.machine == "m" for r in records)
    sb3 = Curve("sb3", 4.0, 4000, curve().points, {"num_envs": 2, "vec_env": "DummyVecEnv"})
    assert curve_records(sb3, "m", 4, 0)[0].params == {"budget_s": 4, "seed": 0, "num_envs": 2, "vec_env": "DummyVecEnv"}


def test_the_headline_table_is_time_and_env_steps_to_each_score():
    table = time_to_score_table([curve("ours", steps=40_000), curve("naive", scores=(None, 1.0, 3.0))])
    ours, naive = table.rows
    assert table.columns[1:5] == ["time to mean score 10 (s)", "env steps to mean score 10",
                                  "time to mean score 20 (s)", "env steps to mean score 20"]
    assert ours[1:5] == ["3.00", "3,000", "4.00", "4,000"]
    assert naive[1:3] == ["not reached", "not reached"]
    assert ours[table.columns.index("throughput (steps/s)")] == "10,000"
    assert "<table>" in table._repr_html_()


def test_compare_to_score_says_how_much_sooner_and_with_how_many_env_steps():
    fast = Curve("ours", 10.0, 10**6, [{"seconds": 2.0, "env_steps": 400_000, "mean_score": 12.0, "episodes": 9}])
    slow = Curve("naive", 60.0, 60_000, [{"seconds": 40.0, "env_steps": 40_000, "mean_score": 10.5, "episodes": 9}])
    assert compare_to_score(fast, slow, 10) == (
        "To a mean score of 10.0: PPO on VecSnake (this course) took 2.00 s and 400,000 env steps; "
        "naive single-env DQN (notebook 01) took 40.0 s and 40,000 env steps. That is 20.0x sooner, "
        "using 10.0x as many env steps.")
    assert compare_to_score(fast, slow, 11).endswith(
        "naive single-env DQN (notebook 01) did not reach it in 60.0 s (60,000 env steps, final mean score 10.5).")


def test_comparison_sentences_say_each_score_and_the_steps_per_second_for_every_other_run():
    fast = Curve("ours", 10.0, 10**6, [{"seconds": 2.0, "env_steps": 400_000, "mean_score": 12.0, "episodes": 9}])
    slow = Curve("naive", 60.0, 60_000, [{"seconds": 40.0, "env_steps": 40_000, "mean_score": 10.5, "episodes": 9}])
    text = comparison_sentences(fast, [slow, slow], scores=(10, 11))
    first, second = text.split("\n\n")
    assert first == second and first.splitlines() == [
        compare_to_score(fast, slow, 10), compare_to_score(fast, slow, 11),
        ("(End to end, PPO on VecSnake (this course) made 100x as many env steps per second as naive single-env "
         "DQN (notebook 01).)")]
    assert comparison_sentences(fast, []) == ""


def test_seed_summary_gives_mean_and_spread_and_says_when_some_runs_missed():
    records = [Record("training", "PPO", "final mean score", v, "food", {"seed": s}, None, "m")
               for s, v in enumerate([20.0, 22.0, 24.0])]
    records += [Record("training", "PPO", "seconds to mean score 20", 100.0, "s", {"seed": 0}, None, "m")]
    table = seed_summary(records)
    row, = table.rows
    assert row[3] == "3"
    assert row[table.columns.index("final mean score (food), mean ± sd")] == "22.0 ± 2.00"
    assert row[table.columns.index("seconds to mean score 20 (s), mean ± sd")] == "100 (1 of 3 runs)"


def test_seed_summary_keeps_runs_of_other_settings_apart():
    records = [Record("training", "PPO", "final mean score", v, "food", {"seed": s, "budget_s": 300.0}, None, "m")
               for s, v in enumerate([20.0, 22.0])]
    records += [Record("training", "PPO", "final mean score", v, "food",
                       {"seed": s, "budget_s": 120.0, "obs_type": "features_reach"}, None, "m")
                for s, v in enumerate([40.0, 41.0, 42.0])]
    rows = {row[2]: row for row in seed_summary(records).rows}
    assert set(rows) == {"budget_s 300.0", "budget_s 120.0, obs_type features_reach"}
    assert rows["budget_s 300.0"][3] == "2" and rows["budget_s 300.0"][4] == "21.0 ± 1.41"
    assert rows["budget_s 120.0, obs_type features_reach"][4] == "41.0 ± 1.00"


def test_plot_curves_labels_both_views():
    fig = plot_curves([curve(), curve("naive")])
    left, right = fig.axes
    assert left.get_xlabel() == "wall-clock time (s)" and right.get_xscale() == "log"
    assert left.get_ylabel() == "mean score (food eaten)"


def test_plot_curves_tells_two_runs_of_one_setup_apart_by_their_details():
    runs = [Curve("ours", 1.0, 10, curve().points, {"obs_type": obs}) for obs in ("features_reach", "features")]
    left, _ = plot_curves(runs).axes
    assert [line.get_label() for line in left.get_lines()] == [
        "PPO on VecSnake (this course), 'features_reach' observation",
        "PPO on VecSnake (this course), 'features' observation"]


def test_the_runners_produce_curves_for_a_short_budget():
    ours = run_ours(2.0, height=6, width=6, num_envs=32, num_steps=16, hidden=16, obs_type=CAPSTONE_OBS)
    naive = run_naive(1.0, segment_s=0.25)
    for c in (ours, naive):
        assert c.seconds >= 1.0 and c.env_steps > 0 and c.points
        assert c.points[-1]["env_steps"] == c.env_steps
    assert len(naive.points) >= 3  # a point per segment (of 0.25 s, longer on a loaded machine)
    # the naive DQN sees the capstone's observation by default, and every curve says which it saw
    assert ours.details["obs_type"] == naive.details["obs_type"] == CAPSTONE_OBS
    assert naive.label == f"naive single-env DQN (notebook 01), {CAPSTONE_OBS!r} observation"
    assert run_naive(0.3, segment_s=0.3, obs_type="features").details == {"obs_type": "features"}


def test_the_training_suite_gives_every_setup_the_observation_ours_trains_with(monkeypatch):
    seen = {}

    def fake(setup):
        def run(seconds, seed=0, device=None, obs_type=None, **settings):
            seen[setup] = settings.get("obs_type", obs_type)
            return Curve(setup, 1.0, 10, curve().points, {"obs_type": seen[setup]})
        return run

    for setup in ("ours", "sb3", "naive"):
        monkeypatch.setattr(time_to_score, f"run_{setup}", fake(setup))
    monkeypatch.setattr(time_to_score, "sb3_available", lambda: True)
    monkeypatch.setattr(time_to_score, "chosen_on_file", lambda device: {"obs_type": "grid", "num_envs": 8})
    records = time_to_score.measure_training("cpu", progress=False, budget_s=1.0, seeds=(0,))
    assert seen == {"ours": "grid", "sb3": "grid", "naive": "grid"}
    assert {r.params["obs_type"] for r in records} == {"grid"}


@pytest.mark.skipif(not sb3_available(), reason="stable-baselines3 is an optional extra (compare)")
def test_stable_baselines3_runner_picks_the_faster_vector_env():
    rates = sb3_vec_env_rates(2, seconds=0.3, height=6, width=6)
    assert set(rates) == {"DummyVecEnv", "SubprocVecEnv"} and all(r > 0 for r in rates.values())
    c = run_sb3(3.0, num_envs=2, height=6, width=6)
    assert c.setup == "sb3" and c.env_steps > 0 and c.seconds >= 3.0
    assert c.details["num_envs"] == 2 and c.details["vec_env"] in rates
    assert c.label.startswith("stable-baselines3 PPO (default settings), 2 envs in ")
    assert c.details["obs_type"] == CAPSTONE_OBS and c.label.endswith(f"{CAPSTONE_OBS!r} observation")
    with pytest.raises(ValueError, match="vec_env='ThreadVecEnv' must be one of"):
        run_sb3(1.0, num_envs=2, vec_env="ThreadVecEnv")
