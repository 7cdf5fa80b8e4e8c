"""Time to win: the training curve's win rate, the suite's records, and a short real run of the "win" preset."""

import numpy as np
import pytest
import torch

from rlgpu_helpers.bench.time_to_score import Curve
from rlgpu_helpers.bench.time_to_win import (
    NAME,
    WinRun,
    load_win_curves,
    measure_wins,
    network_costs,
    plot_win_curves,
    preset_changes,
    plot_step_curves,
    save_win_curves,
    steps_table,
    target_lines,
    win_records,
    win_table,
)
from rlgpu_helpers.learn.agents import load_agent
from rlgpu_helpers.learn.training import ScoreCurve
from rlgpu_helpers.learn.wins import WinRecord
from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.measure.table import format_number
from rlgpu_helpers.snake import rules


def test_the_winning_score_fills_the_board():
    assert rules.winning_score(10, 10) == 97 and rules.winning_score(4, 6) == 21


def test_the_curve_counts_a_full_board_as_a_win_among_the_last_100_games():
    curve = ScoreCurve(win_score=21)
    curve.point(0.0, 0)
    curve.add([21, 5, 20, 21])
    curve.point(1.0, 100)
    curve.add([0] * 98)  # the two wins stay among the last 100 games, the first one drops out
    curve.point(2.0, 200)
    assert [p["win_rate"] for p in curve.points] == [None, 0.5, 0.01]
    plain = ScoreCurve()  # a curve told no winning score has no win rate
    plain.add([21])
    plain.point(0.0, 0)
    assert plain.win_rate is None and "win_rate" not in plain.points[0]


def a_run():
    points = [{"seconds": s, "env_steps": 1000 * s, "mean_score": m, "episodes": 10 * s, "win_rate": w}
              for s, m, w in ((1.0, None, None), (2.0, 45.0, 0.0), (3.0, 61.0, 0.02), (4.0, 90.0, 0.6))]
    curve = Curve("ours", 4.0, 4000, points, {"obs_type": "ego_grid"}, name="win")
    greedy = WinRecord(np.array([97, 97, 50, 3]), np.array([True, True, False, False]),
                       np.array([False, False, True, False]))
    return WinRun(3, curve, {"greedy": greedy})


def test_the_records_hold_the_times_to_each_score_and_win_rate_and_the_evaluation():
    by_metric = {r.metric: r for r in win_records(a_run(), "m", budget_s=4.0)}
    assert by_metric["seconds to mean score 60"].value == 3.0 and by_metric["env steps to mean score 90"].value == 4000
    assert "seconds to mean score 20" in by_metric and "seconds to mean score 80" in by_metric
    assert by_metric["seconds to win rate 1%"].value == 3.0 and by_metric["seconds to win rate 50%"].value == 4.0
    assert "seconds to win rate 90%" not in by_metric  # never reached: no record, not a made-up one
    assert by_metric["evaluation win rate (greedy)"].value == 50.0
    assert by_metric["evaluation mean score (greedy)"].value == pytest.approx((97 + 97 + 50 + 3) / 4)
    assert by_metric["evaluation median score (greedy)"].value == pytest.approx(73.5)
    assert by_metric["evaluation truncated (greedy)"].value == 25.0
    assert by_metric["evaluation win rate (greedy)"].params["games"] == 4
    assert all(r.params["seed"] == 3 for r in by_metric.values())


def test_the_suite_trains_evaluates_and_saves_each_seeds_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")
    records = measure_wins("cpu", progress=False, seeds=(0, 1), games=6, agents=tmp_path)
    seeds = {r.params["seed"] for r in records}
    assert seeds == {0, 1}
    plays = {r.params.get("play") for r in records if r.metric.startswith("evaluation win rate")}
    assert plays == {"greedy", "sampled"}
    for seed in (0, 1):
        agent = load_agent(tmp_path / f"win-6x6-seed{seed}.pt")
        assert agent.extra["curve"][-1]["env_steps"] > 0 and "win_rate" in agent.extra["curve"][-1]
        assert agent.config["obs_type"] == "ego_grid" and agent.config["mirror"] is True
        assert isinstance(agent.model(torch.zeros(1, 3, 11, 11))[0], torch.Tensor)


def test_the_table_shows_each_seed_then_the_median_and_the_worst_seed():
    def run(seed, to_60, greedy):
        records = win_records(a_run(), "m", budget_s=4.0)
        for r in records:
            r.params["seed"] = seed
        records = [r for r in records if r.metric != "seconds to mean score 60"]
        if to_60 is not None:
            records.append(Record(NAME, "PPO, the 'win' preset", "seconds to mean score 60", to_60, "s",
                                  records[0].params, None, "m"))
        return [Record(r.name, r.variant, r.metric, greedy if r.metric == "evaluation win rate (greedy)" else r.value,
                       r.unit, r.params, None, r.machine) for r in records]

    table = win_table(run(0, 300.0, 60.0) + run(1, None, 20.0) + run(2, 500.0, 80.0))
    rows = {row[2]: row for row in table.rows}
    assert {row[1] for row in table.rows} == {"fp32"}  # a record without a precision: the default
    column = table.columns.index("s to mean 60")
    assert rows["1"][column] == "not reached" and rows["median"][column] == "500"
    assert rows["worst"][column] == "not reached"  # a seed that never got there is the worst
    greedy = table.columns.index("greedy wins (%)")
    assert rows["median"][greedy] == format_number(60.0) and rows["worst"][greedy] == format_number(20.0)


def test_curves_are_saved_with_their_machine_and_command_and_plotted(tmp_path):
    points = a_run().curve.points
    path = save_win_curves(tmp_path / "c.json", {"seed 3": points}, {"cpu": "x"}, "python -m rlgpu_helpers bench wins")
    document = load_win_curves(path)
    assert document["curves"] == {"seed 3": points} and document["machine"] == {"cpu": "x"}
    assert document["command"].startswith("python -m") and len(document["date"]) == 10
    fig = plot_win_curves(document["curves"])
    score_ax, win_ax = fig.axes
    assert "minutes" in score_ax.get_xlabel() and "(%)" in win_ax.get_ylabel()
    assert list(win_ax.lines[0].get_ydata()) == [0.0, 0.0, 2.0, 60.0]
    assert list(score_ax.lines[-1].get_ydata()) == [97, 97]  # the full 10x10 board
    assert list(plot_win_curves(document["curves"], size=20).axes[0].lines[-1].get_ydata()) == [397, 397]
    by_steps = plot_win_curves(document["curves"], x="env_steps").axes[0]
    assert "env steps" in by_steps.get_xlabel()
    assert list(by_steps.lines[0].get_xdata()) == [p["env_steps"] / 1e6 for p in points]
    with pytest.raises(ValueError, match="x='hours'"):
        plot_win_curves(document["curves"], x="hours")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a file of time-to-win curves"):
        load_win_curves(tmp_path / "other.json")


def test_network_costs_count_the_multiply_adds_of_a_linear_layer_exactly():
    table = network_costs((11,), nets=("mlp",), hidden=8, batch=16, repeats=1)
    row = dict(zip(table.columns, table.rows[0]))
    # two ReLU layers 11 -> 8 -> 8, then the heads 8 -> 3 and 8 -> 1
    assert row["forward MMAC per sample"] == format_number((11 * 8 + 8 * 8 + 8 * 3 + 8 * 1) / 1e6)
    assert row["weights"] == f"{11 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3 + 8 + 1:,}"


def test_a_target_is_met_only_if_the_worst_seed_meets_it():
    def records(seed, to_60, greedy):
        params = {"budget_s": 1800.0, "seed": seed}
        out = [Record(NAME, "v", "evaluation win rate (greedy)", greedy, "%", params, None, "m")]
        if to_60 is not None:
            out.append(Record(NAME, "v", "seconds to mean score 60", to_60, "s", params, None, "m"))
        return out

    met = target_lines(records(0, 300.0, 90.0) + records(1, 590.0, 51.0), "m")
    assert met[0].endswith("on the training curve: met (worst seed: 590 s)")
    assert "half of the greedy games won after 30 minutes on every seed: met (worst seed: 51.0%)" in met[1]
    missed = target_lines(records(0, 300.0, 90.0) + records(1, None, 49.0), "m")
    assert "not met (worst seed: never)" in missed[0] and "not met" in missed[1]
    assert target_lines([], "m") == ["m: no 'bench wins' runs of 1,800 s on file"]


def test_a_gpu_s_three_minute_runs_are_judged_by_the_gpu_targets():
    def records(machine, budget_s, wins, seed=0, steps_per_s=2.5e6):
        params = {"budget_s": budget_s, "seed": seed, "games": 1000}
        return [Record(NAME, "v", "evaluation win rate (greedy)", wins, "%", params, None, machine),
                Record(NAME, "v", "seconds to mean score 60", 80.0, "s", params, None, machine),
                Record(NAME, "v", "throughput", steps_per_s, "steps/s", params, None, machine)]

    speed, seed_0, every = target_lines(records("gpu-nvidia-h200", 180.0, 0.8, steps_per_s=383_108.0),
                                        "gpu-nvidia-h200", budget_s=180.0)
    assert speed.endswith("1 seed (0): 2M env steps/s or more on every seed: not met (worst seed: 383,108 steps/s)")
    assert seed_0.endswith("66% of the greedy games won within 3 minutes on seed 0: not met (seed 0: 0.800%)")
    assert every.endswith("90% of the greedy games won within 3 minutes on every seed: not met (worst seed: 0.800%)")
    # seed 0 meets the first, the worst of three seeds not the moonshot
    runs = records("gpu-nvidia-h100", 180.0, 95.0) + records("gpu-nvidia-h100", 180.0, 70.0, seed=1)
    speed, seed_0, every = target_lines(runs + records("gpu-nvidia-h100", 180.0, 91.0, seed=2, steps_per_s=1.9e6),
                                        "gpu-nvidia-h100", budget_s=180.0)
    assert speed.endswith("not met (worst seed: 1,900,000 steps/s)") and "3 seeds (0, 1, 2)" in speed
    assert seed_0.endswith(": met (seed 0: 95.0%)") and every.endswith(": not met (worst seed: 70.0%)")
    t4 = target_lines(records("gpu-tesla-t4", 120.0, 95.0, seed=1), "gpu-tesla-t4", budget_s=120.0)
    assert all("(the target names an H100 or H200)" in line for line in t4)
    assert t4[1].endswith("not met (seed 0: no evaluation)") and t4[2].endswith("met (worst seed: 95.0%)")
    longer = target_lines(records("gpu-nvidia-h100", 600.0, 95.0), "gpu-nvidia-h100", budget_s=600.0)
    assert "90%" not in " ".join(longer) and "on the training curve" in longer[0]


def test_ten_minute_runs_are_also_judged_by_the_agents_greedy_mean():
    def records(seed, to_60, greedy_mean):
        params = {"budget_s": 600.0, "seed": seed}
        played = {**params, "games": 200}
        out = [Record(NAME, "v", "evaluation mean score (greedy)", greedy_mean, "food", played, None, "m"),
               Record(NAME, "v", "evaluation win rate (greedy)", 0.0, "%", played, None, "m")]
        if to_60 is not None:
            out.append(Record(NAME, "v", "seconds to mean score 60", to_60, "s", params, None, "m"))
        return out

    lines = target_lines(records(0, 400.0, 61.0) + records(1, None, 60.5), "m", budget_s=600.0)
    assert len(lines) == 2 and "on the training curve: not met (worst seed: never)" in lines[0]
    assert lines[1].endswith("the agent after 10 minutes scores a mean of 60 in its greedy games (200 per seed) on "
                             "every seed: met (worst seed: 60.5)")
    one_seed = target_lines(records(0, None, 58.0), "m", budget_s=600.0)
    assert one_seed[0].startswith("m (fp32), 1 seed (0): ") and "not met (worst seed: 58.0)" in one_seed[1]
    lines = target_lines(records(0, 400.0, 61.0) + records(1, 500.0, 59.9), "m", budget_s=600.0)
    assert "training curve: met (worst seed: 500 s)" in lines[0] and "not met (worst seed: 59.9)" in lines[1]


def test_runs_of_different_setups_are_never_pooled():
    def records(seed, precision, changes, to_60):
        params = {"budget_s": 1800.0, "seed": seed, "precision": precision, "changes": changes}
        return [Record(NAME, "v", "seconds to mean score 60", to_60, "s", params, None, "m"),
                Record(NAME, "v", "evaluation win rate (greedy)", 0.0, "%", params, None, "m")]

    on_file = (records(0, "fp32", "", 900.0) + records(1, "fp32", "", 800.0) + records(0, "bf16", "", 500.0)
               + records(1, "bf16", "", 550.0) + records(0, "bf16", "food_shaping=0.2", 300.0))
    lines = target_lines(on_file, "m")
    assert len(lines) == 6
    assert ("m (bf16), 2 seeds (0, 1): mean score 60 within 10 minutes on every seed, on the training curve: met "
            "(worst seed: 550 s)") in lines
    assert ("m (fp32), 2 seeds (0, 1): mean score 60 within 10 minutes on every seed, on the training curve: not met "
            "(worst seed: 900 s)") in lines
    table = win_table(on_file)
    worst = {row[1]: row[table.columns.index("s to mean 60")] for row in table.rows if row[2] == "worst"}
    assert worst == {"fp32": "900", "bf16": "550"}  # the one-seed setup has no summary rows
    assert [row[1] for row in table.rows].count("bf16, food_shaping=0.2") == 1


def test_a_runs_changes_name_what_differs_from_the_preset():
    preset = {"precision": "bf16", "food_shaping": 0.0, "mirror": True}
    assert preset_changes(preset, {}) == ""
    assert preset_changes(preset, {"mirror": True}) == ""  # the preset's own value is no change
    assert preset_changes(preset, {"mirror": False, "food_shaping": 0.2}) == "food_shaping=0.2, mirror=False"


def test_the_suite_refuses_settings_it_sets_itself_or_that_ppo_lacks():
    with pytest.raises(ValueError, match=r"bench wins sets \['height', 'seed'\] itself"):
        measure_wins("cpu", progress=False, seed=3, height=8)
    with pytest.raises(ValueError, match="unknown settings"):
        measure_wins("cpu", progress=False, frames=3)
    with pytest.raises(TypeError, match="food_shaping"):
        measure_wins("cpu", progress=False, food_shaping="lots")


def test_the_steps_table_gives_each_steps_median_and_worst_seed_in_the_targets_columns():
    def run(seed, setup_changes, precision, to_60, wins, rate):
        params = {"budget_s": 1800.0, "seed": seed, "precision": precision, "changes": setup_changes}
        out = [Record(NAME, "v", "evaluation win rate (greedy)", wins, "%", params, None, "m"),
               Record(NAME, "v", "throughput", rate, "steps/s", params, None, "m")]
        if to_60 is not None:
            out.append(Record(NAME, "v", "seconds to mean score 60", to_60, "s", params, None, "m"))
        return out

    records = (run(0, "gamma=0.995", "bf16", 500.0, 10.0, 100.0) + run(1, "gamma=0.995", "bf16", None, 30.0, 300.0)
               + run(2, "gamma=0.995", "bf16", 400.0, 20.0, 200.0) + run(0, "", "bf16", 300.0, 60.0, 150.0)
               + run(1, "", "bf16", 200.0, 70.0, 150.0))
    table = steps_table(records, {"before": "bf16, gamma=0.995", "after": "bf16"}, "m")
    assert table.rows == [["before", "0, 1, 2", "200", "500", "not reached", "20.0", "10.0"],
                          ["after", "0, 1", "150", "250", "300", "65.0", "60.0"]]
    with pytest.raises(ValueError, match=r"steps\['later'\]: no 1,800 s runs of 'fp32' on m"):
        steps_table(records, {"later": "fp32"}, "m")
    figure = plot_step_curves({"before": [[{"seconds": 0.0, "env_steps": 0, "win_rate": 0.0},
                                           {"seconds": 60.0, "env_steps": 10, "win_rate": 0.5}]]}, "t")
    line, = figure.axes[0].lines
    assert list(line.get_ydata()) == [0.0, 50.0] and figure.axes[0].get_ylabel().endswith("(%)")
