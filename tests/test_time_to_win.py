"""Time to win: the training curve's win rate, the suite's records, and a short real run of the "win" preset."""

import numpy as np
import pytest
import torch

from rlgpu_helpers.bench.time_to_score import Curve
from rlgpu_helpers.bench.time_to_win import WinRun, measure_wins, win_records
from rlgpu_helpers.learn.agents import load_agent
from rlgpu_helpers.learn.training import ScoreCurve
from rlgpu_helpers.learn.wins import WinRecord
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
