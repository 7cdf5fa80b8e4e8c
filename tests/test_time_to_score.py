"""The time-to-score comparison: curves, records, tables, and each runner for a short budget."""

import pytest

from rlgpu_helpers.bench.records import Record
from rlgpu_helpers.bench.time_to_score import (
    Curve,
    curve_records,
    plot_curves,
    run_naive,
    run_ours,
    run_sb3,
    sb3_available,
    seed_summary,
    summary_table,
)


def curve(setup="ours", scores=(None, 2.0, 12.0, 25.0), seconds=4.0, steps=4000):
    points = [{"seconds": float(i + 1), "env_steps": 1000 * (i + 1), "mean_score": s, "episodes": 10 * i}
              for i, s in enumerate(scores)]
    return Curve(setup, seconds, steps, points)


def test_seconds_to_score_is_the_first_point_at_or_above_it():
    c = curve()
    assert c.seconds_to_score(2.0) == 2.0 and c.seconds_to_score(20) == 4.0
    assert c.seconds_to_score(30) is None
    assert c.final_mean_score == 25.0 and c.steps_per_second == 1000.0


def test_curve_records_skip_thresholds_never_reached():
    records = curve_records(curve(), "m", budget_s=4, seed=1, thresholds=(10, 20, 30))
    by_metric = {r.metric: r for r in records}
    assert by_metric["throughput"].value == 1000.0 and by_metric["throughput"].unit == "steps/s"
    assert by_metric["final mean score"].value == 25.0
    assert by_metric["seconds to mean score 10"].value == 3.0
    assert "seconds to mean score 30" not in by_metric
    assert all(r.params == {"budget_s": 4, "seed": 1} and r.machine == "m" for r in records)


def test_summary_table_has_speedups_against_the_other_setups():
    table = summary_table([curve("ours", steps=40_000), curve("naive", steps=400)])
    assert "speedup vs naive (x)" in table.columns
    ours, naive = table.rows
    assert ours[table.columns.index("speedup vs naive (x)")] == "100"
    assert naive[table.columns.index("time to mean score 20 (s)")] == "4.00"
    assert "<table>" in table._repr_html_() and "throughput (steps/s)" in str(table)


def test_seed_summary_gives_mean_and_spread_and_says_when_some_runs_missed():
    records = [Record("training", "PPO", "final mean score", v, "food", {"seed": s}, None, "m")
               for s, v in enumerate([20.0, 22.0, 24.0])]
    records += [Record("training", "PPO", "seconds to mean score 20", 100.0, "s", {"seed": 0}, None, "m")]
    table = seed_summary(records)
    row, = table.rows
    assert row[2] == "3"
    assert row[table.columns.index("final mean score (food), mean ± sd")] == "22.0 ± 2.00"
    assert row[table.columns.index("seconds to mean score 20 (s), mean ± sd")] == "100 (1 of 3 runs)"


def test_plot_curves_labels_both_views():
    fig = plot_curves([curve(), curve("naive")])
    left, right = fig.axes
    assert left.get_xlabel() == "wall-clock time (s)" and right.get_xscale() == "log"
    assert left.get_ylabel() == "mean score (food eaten)"


def test_the_runners_produce_curves_for_a_short_budget():
    ours = run_ours(2.0, height=6, width=6, num_envs=32, num_steps=16, hidden=16)
    naive = run_naive(1.0, segment_s=0.5)
    for c in (ours, naive):
        assert c.seconds >= 1.0 and c.env_steps > 0 and c.points
        assert c.points[-1]["env_steps"] == c.env_steps


@pytest.mark.skipif(not sb3_available(), reason="stable-baselines3 is an optional extra (compare)")
def test_stable_baselines3_runner():
    c = run_sb3(3.0, num_envs=2, height=6, width=6)
    assert c.setup == "sb3" and c.env_steps > 0 and c.seconds >= 3.0
