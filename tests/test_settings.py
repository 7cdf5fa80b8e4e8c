"""PPO's settings builder (issue 37): the presets as data, each step of ``ppo_settings`` over the ones
before it, the errors that name the value, and no settings dict merged anywhere else in the package."""

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from rlgpu_helpers.core.args import check_settings
from rlgpu_helpers.learn import settings as builder
from rlgpu_helpers.learn.ppo import PPOConfig
from rlgpu_helpers.learn.settings import (
    DERIVED,
    KINDS,
    load_preset,
    ppo_settings,
    preset_names,
    preset_reasons,
    preset_settings,
    settings_dict,
)

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {field.name for field in dataclasses.fields(PPOConfig)}

OLD_WIN_CPU = {"obs_type": "ego_grid", "net": "mlp", "hidden": 256, "mirror": True, "precision": "bf16",
               "compile": True, "cuda_graphs": False, "num_envs": 256, "num_steps": 128, "num_minibatches": 32,
               "update_epochs": 4, "learning_rate": 3e-4, "gamma": 0.999, "gae_lambda": 0.98, "reward_scale": 0.1,
               "bootstrap_truncated": False, "clip_coef": 0.1, "vf_coef": 1.0, "ent_coef": 0.02}
"""What ``learn.tune.win_settings("cpu")`` returned on a CPU with bf16 instructions, in its order."""
OLD_WIN_GPU = {**OLD_WIN_CPU, "cuda_graphs": True, "num_envs": 4096, "num_minibatches": 512}
"""What ``win_settings("cuda")`` returned for a GPU with native bf16 (and on a machine without a GPU)."""
OLD_START_GPU = {"num_envs": 8192, "num_steps": 32, "hidden": 128, "learning_rate": 1e-3}
"""What ``learn.tune.suggested_settings`` returned on a GPU (on a CPU: nothing, the defaults)."""


def rows(config: PPOConfig) -> int:
    return config.num_envs * config.num_steps // config.num_minibatches


def tables(document: dict):
    """``(kind, settings)`` of a parsed preset: ``[all]``, then each device kind's own table."""
    yield "all", document.get("all", {})
    for kind, path in KINDS.items():
        table = document
        for part in path:
            table = table.get(part, {})
        yield kind, {key: value for key, value in table.items() if not isinstance(value, dict)}


@pytest.fixture
def bf16_cpu(monkeypatch, request):
    """A CPU with (``request.param`` True) or without bf16 instructions."""
    traits = builder.device_traits("cpu")
    monkeypatch.setattr(builder, "device_traits",
                        lambda device: dataclasses.replace(traits, bf16_native=request.param))
    return request.param


# ---------------------------------------------------------------------------- the presets as data

@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("preset", preset_names())
def test_each_preset_loads_on_each_device_kind_and_its_values_make_a_config(preset, kind):
    values = preset_settings(preset, kind)
    check_settings(PPOConfig, values, f"{preset} on {kind}")
    on_this_cpu = {key: value for key, value in values.items() if key != "cuda_graphs"}
    PPOConfig(**on_this_cpu, device="cpu")  # PPOConfig's own checks; CUDA graphs need a GPU to build


@pytest.mark.parametrize("preset", preset_names())
def test_each_preset_builds_a_checked_config_on_a_cpu_with_its_values(preset):
    config = ppo_settings("cpu", preset)
    assert config.device == "cpu"
    assert dataclasses.asdict(config).items() >= preset_settings(preset, "cpu").items()


@pytest.mark.parametrize("preset", preset_names())
def test_a_preset_file_holds_only_the_known_tables(preset):
    document = load_preset(preset)
    assert set(document) <= {"all", "why", *(path[0] for path in KINDS.values())}
    for general in {path[0] for path in KINDS.values()}:
        nested = {key for key, value in document.get(general, {}).items() if isinstance(value, dict)}
        assert {f"{general}.{key}" for key in nested} <= set(KINDS), (preset, general, nested)


@pytest.mark.parametrize("preset", preset_names())
def test_every_setting_has_a_one_line_reason_and_every_reason_names_a_setting(preset):
    made = {key for _, table in tables(load_preset(preset)) for key in table}
    reasons = preset_reasons(preset)
    assert made == set(reasons), f"without a reason: {sorted(made - set(reasons))}; a reason for nothing set: " \
                                 f"{sorted(set(reasons) - made)}"
    assert set(reasons) <= FIELDS | set(DERIVED)
    for key, reason in reasons.items():
        assert isinstance(reason, str) and reason.strip() and "\n" not in reason, key


@pytest.mark.parametrize("bf16_cpu, precision", [(True, "bf16"), (False, "fp32")], indirect=["bf16_cpu"])
def test_the_win_preset_on_a_cpu_is_what_win_settings_gave_in_the_same_order(bf16_cpu, precision):
    """On this CPU (a device: its bf16 instructions decide); ``"cpu"``, the kind, is a CPU with them."""
    on_this_cpu = preset_settings("win", torch.device("cpu"))
    assert list(on_this_cpu.items()) == list({**OLD_WIN_CPU, "precision": precision}.items())
    assert preset_settings("win", "cpu") == OLD_WIN_CPU


def test_the_win_preset_for_a_gpu_is_what_win_settings_gave_on_a_machine_without_one():
    assert list(preset_settings("win", "cuda").items()) == list(OLD_WIN_GPU.items())


def test_a_t4_kind_gets_fp16_and_otherwise_the_gpus_settings():
    t4, gpu = preset_settings("win", "cuda.below_8_0"), preset_settings("win", "cuda")
    assert t4["precision"] == "fp16" and {**t4, "precision": gpu["precision"]} == gpu
    assert preset_settings("win", "cpu.without_bf16")["precision"] == "fp32"


def test_the_start_preset_is_what_suggested_settings_gave():
    assert preset_settings("start", "cpu") == {} and ppo_settings("cpu") == PPOConfig(device="cpu")
    assert preset_settings("start", "cuda") == OLD_START_GPU


# ---------------------------------------------------------------------------- the builder

def test_each_step_wins_over_the_ones_before_it():
    defaults, win = PPOConfig(), ppo_settings("cpu", "win")
    assert (win.gamma, win.obs_type) == (0.999, "ego_grid") != (defaults.gamma, defaults.obs_type)  # preset > defaults
    given_ = ppo_settings("cpu", "win", obs="grid", size=8, envs=64)
    assert (given_.obs_type, given_.height, given_.width, given_.num_envs) == ("grid", 8, 8, 64)  # obs, size, envs
    over = ppo_settings("cpu", "win", obs="grid", size=8, envs=64,
                        overrides={"obs_type": "features", "height": 6, "num_envs": 32, "gamma": 0.9})
    assert (over.obs_type, over.height, over.width, over.num_envs, over.gamma) == ("features", 6, 8, 32, 0.9)
    assert ppo_settings("cpu", overrides=[("hidden", 8), ("hidden", 16)]).hidden == 16  # pairs, in order
    assert ppo_settings("cpu", overrides={"device": "cpu"}).device == "cpu"


def test_the_presets_minibatch_rows_are_kept_when_the_games_change_and_an_explicit_count_wins():
    assert rows(ppo_settings("cpu", "win")) == 1024 and ppo_settings("cpu", "win").num_minibatches == 32
    assert ppo_settings("cpu", "win", envs=512).num_minibatches == 64
    assert ppo_settings("cpu", "win", overrides={"num_envs": 512}).num_minibatches == 64
    assert ppo_settings("cpu", "win", overrides={"num_steps": 64}).num_minibatches == 16
    assert ppo_settings("cpu", "win", envs=4).num_minibatches == 1  # 512 rows: one minibatch of them all
    assert ppo_settings("cpu", "win", envs=512, overrides={"num_minibatches": 2}).num_minibatches == 2


@hypothesis_settings(max_examples=50)
@given(games=st.integers(min_value=1, max_value=512).map(lambda k: 8 * k))
def test_any_multiple_of_8_games_keeps_the_win_presets_1024_row_minibatches_on_a_cpu(games):
    config = ppo_settings("cpu", "win", envs=games)
    assert config.num_envs == games and rows(config) == 1024


@hypothesis_settings(max_examples=30)
@given(changes=st.dictionaries(st.sampled_from(["hidden", "update_epochs", "seed", "max_steps_without_food"]),
                               st.integers(min_value=1, max_value=64), max_size=4))
def test_overrides_always_win_over_the_preset(changes):
    config = ppo_settings("cpu", "win", overrides=changes)
    assert {key: getattr(config, key) for key in changes} == changes


@pytest.mark.parametrize("call, error, message", [
    (lambda: ppo_settings("cpu", "fast"), ValueError, r"preset='fast' is not a preset; the presets are \["),
    (lambda: preset_settings("fast", "cpu"), ValueError, r"preset='fast' is not a preset"),
    (lambda: ppo_settings("cpu", overrides={"batch": 3}), ValueError, r"overrides: unknown settings \['batch'\]"),
    (lambda: ppo_settings("cpu", overrides={"num_envs": "8"}), TypeError,
     r"overrides: num_envs='8' must be an int, not str"),
    (lambda: ppo_settings("cpu", overrides={"compile": 1}), TypeError, r"compile=1 must be a bool, not int"),
    (lambda: ppo_settings("cpu", overrides={"num_envs": 0}), ValueError, r"num_envs=0 must be an int >= 1"),
    (lambda: ppo_settings("cpu", "win", envs=100), ValueError,
     r"num_envs \* num_steps \(12,800\) is not a multiple of the preset's minibatch_rows \(1,024\)"),
    (lambda: ppo_settings("cpu", overrides={"cuda_graphs": True}), ValueError, r"cuda_graphs=True needs a CUDA GPU"),
])
def test_a_bad_name_or_value_is_an_error_naming_it(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_preset_file_with_a_wrong_type_or_an_unknown_setting_is_refused_naming_it(tmp_path, monkeypatch):
    (tmp_path / "typo.toml").write_text('[all]\nnum_envs = "8"\n')
    (tmp_path / "unknown.toml").write_text("[cpu]\nbatch = 8\n")
    monkeypatch.setattr(builder, "PRESET_FOLDER", tmp_path)
    load_preset.cache_clear()
    try:
        assert preset_names() == ("typo", "unknown")
        with pytest.raises(TypeError, match=r"the preset 'typo': num_envs='8' must be an int, not str"):
            ppo_settings("cpu", "typo")
        with pytest.raises(ValueError, match=r"the preset 'unknown': unknown settings \['batch'\]"):
            ppo_settings("cpu", "unknown")
    finally:
        load_preset.cache_clear()


def test_settings_dict_gives_the_configs_keyword_arguments_less_those_left_out():
    config = ppo_settings("cpu", "win", size=6, envs=16)
    assert PPOConfig(**settings_dict(config)) == config
    assert set(settings_dict(config, without=("device", "seed"))) == FIELDS - {"device", "seed"}
    assert dataclasses.replace(config, num_envs=32).num_envs == 32  # a choice applied to a built config


# ---------------------------------------------------------------------------- one builder

NAMED = re.compile(r"(?i)settings|preset")
"""A name that holds PPO settings: ``settings``, ``PROOF_SETTINGS``, ``batch.settings``, ``preset``..."""
REMOVED = ("suggested_settings", "ours_settings", "win_settings", "win_precision", "WIN_MINIBATCH_ROWS", "PRESETS")
"""The builders of ``learn.tune`` that the presets and ``ppo_settings`` replaced."""
CONFIG_CALLS = {"PPOConfig": 0, "ppo_with_rollout": 1}
"""The calls that make a ``PPOConfig`` of their keyword arguments, and the positional arguments they take
first (``ppo_with_rollout``'s dtype)."""


def _identifiers(node: ast.AST):
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            yield child.id
        elif isinstance(child, ast.Attribute):
            yield child.attr


def settings_merges(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each PPO settings dict merged in ``source``, read from its AST.

    A dict display that spreads (``{**x, ...}``) something whose names say settings or preset; a
    ``PPOConfig`` call (or one of :data:`CONFIG_CALLS`) given a spread dict display or ``dict(...)``
    (``PPOConfig(**{...})``), or a spread beside other arguments (``PPOConfig(device=d, **settings)``;
    ``ppo_with_rollout``'s dtype aside). A spread of anything else (a record's ``params``,
    ``os.environ``, a state dict) is no settings merge.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            spread = [value for key, value in zip(node.keys, node.values) if key is None]
            if any(NAMED.search(name) for value in spread for name in _identifiers(value)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) or
                                             getattr(node.func, "attr", None)) in CONFIG_CALLS:
            first = CONFIG_CALLS[getattr(node.func, "id", None) or node.func.attr]
            stars = [keyword.value for keyword in node.keywords if keyword.arg is None]
            built = any(isinstance(value, ast.Dict) or (isinstance(value, ast.Call) and
                                                         getattr(value.func, "id", None) == "dict") for value in stars)
            if stars and (built or max(len(node.args) - first, 0) + len(node.keywords) > 1):
                found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.parametrize("code", [
    "config = PPOConfig(**{**settings, 'device': str(device)})",
    "config = PPOConfig(device=str(device), seed=seed, **settings)",
    "learner = PPO(PPOConfig(**dict(base, seed=1)))",
    "settings = {**suggested_settings(device), **preset}",
    "settings = {**PROOF_SETTINGS, **config}",
    "chosen = {**start, **batch.settings, **precision.settings}",
    "learner = ppo_with_rollout(dtype, **{**PPO_DEMO, **config})",
    "learner = ppo.ppo_with_rollout(dtype, **config, accumulation_steps=k)",
])
def test_the_search_finds_a_merged_settings_dict(code):
    assert settings_merges(code)


@pytest.mark.parametrize("code", [
    "params = {**params, 'seed': 3}",
    "env = {**os.environ, 'PYTHONPATH': path}",
    "state = {**super().state_dict(), 'model': model}",
    "learner = PPO(PPOConfig(**config))",
    "config = ppo_settings(device, 'win', envs=8, overrides=settings)",
    "config = PPOConfig(num_envs=8, hidden=16)",
    "learner = ppo_with_rollout(torch.float64, **settings_dict(proof))",
    "learner = ppo_with_rollout(dtype, **config)",
])
def test_the_search_leaves_other_merges_and_the_builders_calls_alone(code):
    assert not settings_merges(code)


def test_no_ppo_settings_dict_is_merged_outside_the_builder():
    """Issue 37: ``learn.settings.ppo_settings`` builds PPO's settings; everywhere else a config is built by it,
    and a choice applied with ``dataclasses.replace``. Only ``learn/settings.py`` merges them."""
    builder_file = ROOT / "rlgpu_helpers" / "learn" / "settings.py"
    found = [f"{path.relative_to(ROOT)}:{line}: {code}"
             for path in sorted([*(ROOT / "rlgpu_helpers").rglob("*.py"), *(ROOT / "tools").rglob("*.py")])
             if path != builder_file for line, code in settings_merges(path.read_text())]
    assert not found, "PPO settings merged outside learn/settings.py:\n" + "\n".join(found)


def test_the_old_settings_builders_are_gone_from_the_package_the_tools_and_the_notebooks():
    removed = re.compile(rf"\b({'|'.join(REMOVED)})\b")
    texts = {path: path.read_text() for path in [*(ROOT / "rlgpu_helpers").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]}
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        texts[path] = "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])
    found = [f"{path.relative_to(ROOT)}: {match}" for path, text in texts.items() for match in removed.findall(text)]
    assert not found, found
