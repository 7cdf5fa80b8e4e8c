"""bench win_speed: the preset's configurations, one technique at a time and by shape, timed and recorded as they
come; on CUDA (`-m gpu`) with a profile of the GPU's iteration."""

import dataclasses

import pytest

from rlgpu_helpers.bench.win_speed import (
    EAGER,
    GROUPS,
    LAUNCHES,
    NAME,
    PROFILE_NAME,
    SHAPES,
    measure_win_speed,
    speed_settings,
    speed_table,
    speed_target_lines,
)
from rlgpu_helpers.learn.settings import ppo_settings, preset_settings
from rlgpu_helpers.measure.records import Record

SMALL = {"num_envs": 16, "num_steps": 8, "hidden": 8, "num_minibatches": 2}
WIN_MINIBATCH_ROWS = 1024
"""The ``"win"`` preset's minibatch, in rows, on every device (its ``minibatch_rows``)."""


def rows_of(settings: dict) -> int:
    return settings["num_envs"] * settings["num_steps"] // settings["num_minibatches"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_ladder_adds_one_technique_at_a_time_and_ends_at_the_preset(device):
    preset = preset_settings("win", device)
    ladder = [{**preset, **changes} for name, changes in speed_settings(device, (EAGER, LAUNCHES)).items()
              if not name.startswith("the old")]
    assert ladder[0]["precision"] == "fp32" and not ladder[0]["compile"] and not ladder[0]["cuda_graphs"]
    assert ladder[-1] == preset
    for lower, upper in zip(ladder, ladder[1:]):
        changed = {key for key in preset if lower[key] != upper[key]}
        assert len(changed) == 1 and changed <= {"precision", "cuda_graphs", "compile"}, changed
    names = list(speed_settings(device))
    assert names[-4:] == [name for name in speed_settings(device, (SHAPES,))]  # the shapes come last
    assert any(name.startswith("the old GPU preset") for name in names) == (device == "cuda")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_shapes_change_the_minibatch_rows_the_games_or_the_trunk_and_nothing_else(device):
    preset = preset_settings("win", device)
    assert rows_of(preset) == WIN_MINIBATCH_ROWS
    shapes = [{**preset, **changes} for changes in speed_settings(device, (SHAPES,)).values()]
    assert [rows_of(s) for s in shapes] == [4096, 8192, WIN_MINIBATCH_ROWS, WIN_MINIBATCH_ROWS]
    assert [s["num_envs"] for s in shapes] == [preset["num_envs"]] * 2 + [4 * preset["num_envs"], preset["num_envs"]]
    assert [s["net"] for s in shapes] == ["mlp"] * 3 + ["ego_cnn"]
    for s in shapes:  # no compile below the preset, and on a GPU still its CUDA graphs
        assert not s["compile"] and s["cuda_graphs"] == (device == "cuda") and s["precision"] == preset["precision"]
        if device == "cpu":
            dataclasses.replace(ppo_settings("cpu", "win"), **s)


def test_each_configuration_is_timed_and_handed_over_as_it_is_measured():
    handed = []
    records = measure_win_speed("cpu", progress=False, groups=(EAGER, SHAPES), seconds=0.05, size=6,
                                save=handed.append, **SMALL)
    configs = speed_settings("cpu", (EAGER, SHAPES), ppo_settings("cpu", "win", size=6, overrides=SMALL))
    assert [batch[0].variant for batch in handed] == list(configs)
    assert [r for batch in handed for r in batch] == records
    for batch in handed:
        value = {r.metric: r for r in batch}
        assert set(value) == {"throughput", "rollout time", "update time", "optimizer step time", "setup time"}
        params = value["throughput"].params
        assert value["setup time"].value == 0 and not params["compile"]  # eager: nothing to prepare
        steps = params["num_envs"] * 8
        iteration = value["rollout time"].value + value["update time"].value
        assert value["throughput"].value == pytest.approx(steps / iteration, rel=0.5)  # medians of sums, roughly
        optimizer_steps = value["optimizer step time"].params["optimizer_steps"]
        assert value["optimizer step time"].value == pytest.approx(1e3 * value["update time"].value / optimizer_steps)
        assert params["minibatch_rows"] == steps // (optimizer_steps // 4)  # 4 epochs
    rows = {r.params["minibatch_rows"] for r in records}
    assert max(rows) == 16 * 8  # 4,096 rows asked of a rollout of 128: one minibatch, the whole rollout
    assert [row[1] for row in speed_table(records).rows] == list(configs)
    assert speed_target_lines(records, "gpu-x") == ["gpu-x: the preset's speed is not on file ('bench win_speed')"]
    assert not [r for r in records if r.name == PROFILE_NAME]  # a CPU has no GPU timeline to profile


def test_names_pick_configurations_and_unknown_ones_are_refused():
    records = measure_win_speed("cpu", progress=False, groups=GROUPS, names=("eager, fp32",), seconds=0.01, size=6,
                                **SMALL)
    assert {r.variant for r in records} == {"eager, fp32"} and {r.name for r in records} == {NAME}
    with pytest.raises(ValueError, match="names"):
        measure_win_speed("cpu", progress=False, names=("warp drive",), **SMALL)


def test_the_speed_targets_read_the_presets_figures():
    def preset(rate, step_ms, rows):
        params = {"minibatch_rows": rows}
        return [Record(NAME, "the preset: compiled + CUDA graphs, bf16", "throughput", rate, "steps/s", params, None, "g"),
                Record(NAME, "the preset: compiled + CUDA graphs, bf16", "optimizer step time", step_ms, "ms", params,
                       None, "g"),
                Record(NAME, "eager, fp32", "throughput", 9e6, "steps/s", params, None, "g")]

    speed, step = speed_target_lines(preset(2.1e6, 0.4, 1024), "g")
    assert speed.endswith("2M env steps/s or more: met (2,100,000 steps/s)")
    assert step.endswith("one optimizer step of 1,024 rows in 0.5 ms or less: met (0.400 ms)")
    speed, step = speed_target_lines(preset(1.9e6, 0.4, 8192), "g")
    assert "not met (1,900,000 steps/s)" in speed and "of 8,192 rows in 0.5 ms or less: not met" in step


@pytest.mark.gpu
def test_on_cuda_the_preset_and_its_rungs_are_timed_and_the_preset_is_profiled():
    small = {**SMALL, "num_envs": 256, "num_steps": 16, "hidden": 32, "num_minibatches": 4}
    records = measure_win_speed("cuda", progress=False, groups=(LAUNCHES,), seconds=0.5, size=8, **small)
    variants = {r.variant for r in records if r.name == NAME}
    assert any(v.startswith("the preset") for v in variants) and any(v.startswith("CUDA graphs") for v in variants)
    profile = {(r.variant.split(":")[0], r.metric): r.value for r in records if r.name == PROFILE_NAME}
    assert profile[("the preset", "work items per iteration")] > 0
    assert profile[("the preset", "graph launches per iteration")] > 0  # the replays
    assert profile[("the old GPU preset", "graph launches per iteration")] == 0  # eager
    assert 0 <= profile[("the preset", "GPU idle share")] <= 100
    setup = {r.variant: r.value for r in records if r.metric == "setup time"}
    assert all(value > 0 for variant, value in setup.items() if not variant.startswith("the old"))
