"""A stored choice of capstone settings is checked like ``train --set`` before any run uses it (issue 21)."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlgpu_helpers.core.args import check_settings
from rlgpu_helpers.learn.ppo import PPOConfig
from rlgpu_helpers.learn.tune import CAPSTONE_OBS, check_chosen_settings

CHOSEN = {"num_envs": 256, "precision": "fp32", "compile": False, "cuda_graphs": False}
KINDS = {f.name: type(f.default) for f in dataclasses.fields(PPOConfig) if f.default is not None}


def test_a_sound_choice_gives_the_capstones_start_updated_with_it():
    settings = check_chosen_settings(CHOSEN, "cpu", "cpu.json")
    assert "device" not in settings and "seed" not in settings  # given to each run apart
    assert PPOConfig(**settings) == PPOConfig(obs_type=CAPSTONE_OBS, **CHOSEN)  # the start preset on a CPU: defaults


@pytest.mark.parametrize("edit, error, message", [
    ({"precision": "fp64"}, ValueError, r"in cpu.json: precision='fp64' must be one of"),
    ({"num_envs": "256"}, TypeError, r"in cpu.json: num_envs='256' must be an int, not str"),
    ({"num_envs": 2.9}, TypeError, r"num_envs=2.9 must be an int, not float"),
    ({"compile": 1}, TypeError, r"compile=1 must be a bool, not int"),
    ({"num_envs": 0}, ValueError, r"in cpu.json: num_envs=0 must be an int >= 1"),
    ({"cuda_graphs": True}, ValueError, r"in cpu.json: cuda_graphs=True needs a CUDA GPU"),
    ({"batch": 3}, ValueError, r"in cpu.json: unknown settings \['batch'\]"),
])
def test_a_hand_edited_choice_is_refused_naming_the_key(edit, error, message):
    with pytest.raises(error, match=message):
        check_chosen_settings({**CHOSEN, **edit}, "cpu", "cpu.json")


def test_a_choice_missing_a_field_or_not_a_dict_is_refused():
    with pytest.raises(ValueError, match=r"in cpu.json lack \['precision'\]"):
        check_chosen_settings({k: v for k, v in CHOSEN.items() if k != "precision"}, "cpu", "cpu.json")
    with pytest.raises(TypeError, match="must be a dict of settings, not list"):
        check_chosen_settings([1], "cpu", "cpu.json")


@given(name=st.sampled_from(sorted(n for n, kind in KINDS.items() if kind is int)),
       value=st.one_of(st.booleans(), st.floats(), st.text(max_size=3)))
def test_an_int_setting_takes_ints_only(name, value):
    with pytest.raises(TypeError, match=f"{name}="):
        check_settings(PPOConfig, {name: value}, "settings")


@given(name=st.sampled_from(sorted(n for n, kind in KINDS.items() if kind is float)),
       value=st.one_of(st.integers(), st.floats()))
def test_a_float_setting_takes_any_number_and_leaves_its_value_to_the_config(name, value):
    assert check_settings(PPOConfig, {name: value}, "settings") == {name: value}
