"""The bytes one VecSnake step touches per game: a hand count, and element sizes read from the env."""

import pytest
import torch

from rlgpu_helpers.snake.step_bytes import step_bytes
from rlgpu_helpers.snake.vec import VecSnake


def test_features_on_10x10_match_a_hand_count():
    env = VecSnake(4, obs_type="features")
    s, c, i = env._stamp.element_size(), env._clock.element_size(), env._head.element_size()
    e, k, f = env._episode_steps.element_size(), env._env_keys.element_size(), env._row_free.element_size()
    r, o = env._ring.element_size(), env._features.element_size()
    # read: actions, clock, length/head/direction/food/steps, episode steps, 4 offsets, keys, row counts x2
    reads = 8 + c + 5 * i + e + 4 * env._stamp_at.element_size() + k + 2 * 10 * f
    writes = c + 5 * i + e + 10 * f + 2 * 11 * o + 4 + 4 + i + e  # state, 2 obs, reward, 4 flags, score, length
    scattered = 4 * s + r + s + r  # stamps at and ahead of the head, the tail's slot; head's stamp and slot
    counted = step_bytes(env)
    assert counted.touched == reads + writes + scattered
    assert counted.sectors == reads + writes + 32 * 7
    assert (counted.touched, counted.sectors) == (360, 556)  # today's dtypes: int32 stamps, int64 clock, int32 rest


def test_grid_streams_every_stamp_and_its_observation():
    counted = step_bytes(VecSnake(4, obs_type="grid"))
    parts = {(name, way): touched for name, way, touched, _ in counted.parts}
    assert parts[("_stamp", "read")] == 12 * 11 * 4  # int32 stamps
    assert parts[("obs", "write")] == parts[("final_obs", "write")] == 3 * 100 * 4
    assert ("final_obs", "read") not in parts  # both written from the stamps, as the fused step does
    assert counted.sectors - counted.touched == (32 - 4) + (32 - 4) + (32 - 4)  # scattered: the tail's slot; head's stamp, slot
    assert (counted.touched, counted.sectors) == (3192, 3276)


class FakeEnv:
    """The attributes step_bytes reads, with every dtype chosen."""

    def __init__(self, obs_type, stamp, small, clock, obs=torch.float32):
        self.obs_type, self.height, self.width, self._rows, self._pitch = obs_type, 10, 10, 12, 11
        for name in ("_stamp",):
            setattr(self, name, torch.empty(0, dtype=stamp))
        for name in ("_clock", "_episode_steps", "_env_keys", "_grid_obs_at"):
            setattr(self, name, torch.empty(0, dtype=clock))
        for name in ("_length", "_head", "_direction", "_food", "_steps_since_food", "_stamp_at", "_ring_at",
                     "_row_free_at", "_first_row", "_row_free", "_start_row_free", "_ring"):
            setattr(self, name, torch.empty(0, dtype=small))
        self._features = self._start_grid = torch.empty(0, dtype=obs)


@pytest.mark.parametrize("obs_type", ["features", "grid"])
def test_the_count_follows_the_element_sizes(obs_type):
    wide = step_bytes(FakeEnv(obs_type, torch.int64, torch.int64, torch.int64))
    narrow = step_bytes(FakeEnv(obs_type, torch.int32, torch.int16, torch.int32, torch.bfloat16))
    assert narrow.touched < wide.touched and narrow.sectors < wide.sectors
    by_part = {(n, w): t for n, w, t, _ in narrow.parts}
    assert by_part[("_clock", "read")] == 4 and by_part[("_head", "write")] == 2
    assert by_part[("_row_free", "read")] == 10 * 2 and by_part[("obs", "write")] == (11 if obs_type == "features" else 300) * 2
    stamps = 4 * (12 * 11 if obs_type == "grid" else 4)
    assert by_part[("_stamp", "read")] == stamps


def test_other_observation_types_are_refused():
    with pytest.raises(ValueError, match="features"):
        step_bytes(VecSnake(2, obs_type="ego_grid"))
