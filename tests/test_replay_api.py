"""Every replay buffer answers the one API alike: wrap-around, uniform draws (chi-square), states
that load into any buffer, and bad input refused with nothing written."""

import pytest
import torch

from rlgpu_helpers.gpu.sync import audit_syncs
from rlgpu_helpers.replay import KINDS, make_buffer
from rlgpu_helpers.replay.base import _BAD, FIELDS

UNIFORM = [kind for kind in KINDS if kind != "prioritized"]


def transitions(start, count, obs_shape=(2,)):
    """Transition ``i`` carries ``i`` in every field, so a row tells which transition it is."""
    ids = torch.arange(start, start + count, dtype=torch.float32)
    obs = ids.view(-1, *[1] * len(obs_shape)).expand(count, *obs_shape).clone()
    return dict(obs=obs, actions=ids.long() % 3, rewards=ids, next_obs=-obs, terminated=ids % 2 == 0)


def chi_square_p_value(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """P-value of Pearson's chi-square test of ``counts`` against ``expected`` counts."""
    statistic = ((counts - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64),
                                         statistic.double() / 2))


def draw_counts(buffer, draws, slots, batch_size=4096, seed=0):
    generator = torch.Generator(buffer.storage_device).manual_seed(seed)
    counts = torch.zeros(slots, dtype=torch.float64)
    for _ in range(draws // batch_size):
        ids = buffer.sample(batch_size, generator)["rewards"].long().cpu()
        counts += torch.bincount(ids, minlength=slots)[:slots]
    return counts


@pytest.mark.parametrize("kind", KINDS)
def test_adding_wraps_around_and_keeps_the_newest(kind):
    buffer = make_buffer(kind, 5, (2,))
    buffer.add(**transitions(0, 3))
    buffer.add(**transitions(3, 4))  # 5 and 6 overwrite the two oldest, 0 and 1
    assert len(buffer) == 5
    state = buffer.state_dict()
    assert state["size"] == 5
    assert state["rewards"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]  # oldest first
    assert state["obs"][:, 1].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert state["next_obs"][:, 0].tolist() == [-2.0, -3.0, -4.0, -5.0, -6.0]
    assert state["terminated"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert state["actions"].tolist() == [2, 0, 1, 2, 0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_as_large_as_the_buffer_replaces_everything(kind):
    buffer = make_buffer(kind, 4, (2,))
    buffer.add(**transitions(0, 3))
    buffer.add(**transitions(10, 4))
    assert sorted(buffer.state_dict()["rewards"].tolist()) == [10.0, 11.0, 12.0, 13.0]


@pytest.mark.parametrize("kind", UNIFORM)
def test_uniform_sampling_is_uniform_chi_square(kind):
    buffer = make_buffer(kind, 32, (2,))
    buffer.add(**transitions(100, 20))
    buffer.add(**transitions(0, 20))  # wrapped: slots hold transitions 0..19 and 108..119
    stored = sorted(buffer.state_dict()["rewards"].long().tolist())
    counts = draw_counts(buffer, 40 * 4096, 120)
    assert set(torch.nonzero(counts).flatten().tolist()) == set(stored)  # only what is stored
    observed = counts[stored]
    assert chi_square_p_value(observed, torch.full_like(observed, observed.sum() / len(stored))) > 1e-3


def test_the_chi_square_test_tells_a_skewed_draw_from_a_uniform_one():
    counts = torch.tensor([1100.0, 1000.0, 1000.0, 900.0])
    assert chi_square_p_value(counts, torch.full((4,), 1000.0)) < 1e-3
    assert chi_square_p_value(torch.tensor([1010.0, 990.0, 1005.0, 995.0]), torch.full((4,), 1000.0)) > 0.5


@pytest.mark.parametrize("kind", KINDS)
def test_a_sample_is_whole_transitions_on_the_device_in_the_stored_dtypes(kind):
    buffer = make_buffer(kind, 16, (3, 2))
    buffer.add(**transitions(0, 10, (3, 2)))
    batch = buffer.sample(64, torch.Generator().manual_seed(1))
    assert {*FIELDS, "indices"} <= set(batch)
    assert batch["obs"].shape == (64, 3, 2) and batch["rewards"].shape == (64,)
    assert [batch[name].dtype for name in FIELDS] == [torch.float32, torch.int64, torch.float32,
                                                      torch.float32, torch.float32]
    ids = batch["rewards"]
    assert torch.equal(batch["obs"][:, 2, 1], ids) and torch.equal(batch["next_obs"][:, 0, 0], -ids)
    assert torch.equal(batch["actions"], ids.long() % 3)
    assert torch.equal(batch["terminated"], (ids % 2 == 0).float())
    again = buffer.gather(batch["indices"])
    assert all(torch.equal(again[name], batch[name]) for name in FIELDS)


@pytest.mark.parametrize("source", KINDS)
@pytest.mark.parametrize("target", ["tensor", "deque", "prioritized"])
def test_a_state_loads_into_any_kind_of_buffer(source, target):
    buffer = make_buffer(source, 6, (2,))
    buffer.add(**transitions(0, 4))
    buffer.add(**transitions(4, 4))  # wrapped
    state = buffer.state_dict()
    other = make_buffer(target, 8, (2,))
    other.add(**transitions(50, 3))
    other.load_state_dict(state)
    assert len(other) == 6
    assert other.state_dict()["rewards"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    other.add(**transitions(8, 3))  # continues after the loaded transitions: 8 slots, 9 transitions
    assert other.state_dict()["rewards"].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]


def snapshot(buffer):
    return len(buffer), buffer.state_dict()


def assert_unchanged(buffer, before):
    size, state = snapshot(buffer)
    assert size == before[0]
    assert all(torch.equal(state[name], before[1][name]) for name in FIELDS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("field, value, error, message", [
    ("next_obs", torch.zeros(3, 5), ValueError, r"next_obs has shape \(3, 5\), expected \(3, 2\)"),
    ("next_obs", torch.zeros(2, 2), ValueError, r"next_obs has shape \(2, 2\), expected \(3, 2\)"),
    ("rewards", torch.zeros(3, 1), ValueError, r"rewards has shape \(3, 1\), expected \(3,\)"),
    ("terminated", [True, False, True], TypeError, "terminated must be a torch.Tensor, not list"),
    ("actions", torch.zeros(3), TypeError, "actions must be an integer tensor, not torch.float32"),
    ("actions", torch.zeros(3, dtype=torch.bool), TypeError, "actions must be an integer tensor, not torch.bool"),
    ("rewards", torch.zeros(3, dtype=torch.complex64), TypeError, "rewards must be a real tensor"),
    ("obs", torch.zeros(3, 3), ValueError, r"obs has shape \(3, 3\), expected \(3, 2\)"),
])
def test_a_malformed_add_writes_nothing(kind, field, value, error, message):
    """Every field is checked before the first write: obs must not land when next_obs is bad."""
    buffer = make_buffer(kind, 8, (2,))
    buffer.add(**transitions(0, 3))
    before = snapshot(buffer)
    with pytest.raises(error, match=message):
        buffer.add(**(transitions(10, 3) | {field: value}))
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_sizes_and_generators_are_refused(kind):
    with pytest.raises(ValueError, match="capacity=0 must be an int >= 1"):
        make_buffer(kind, 0, (2,))
    with pytest.raises(TypeError, match=r"capacity=10.0 must be an int"):
        make_buffer(kind, 10.0, (2,))
    with pytest.raises(ValueError, match=r"obs_shape=\(2, 0\)"):
        make_buffer(kind, 10, (2, 0))
    with pytest.raises(ValueError, match="device='tpu' is not a device"):
        make_buffer(kind, 10, (2,), device="tpu")
    buffer = make_buffer(kind, 4, (2,))
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        buffer.sample(2)
    before = snapshot(buffer)
    with pytest.raises(ValueError, match="a batch of 5 transitions does not fit in capacity 4"):
        buffer.add(**transitions(0, 5))
    assert_unchanged(buffer, before)
    buffer.add(**transitions(0, 3))
    with pytest.raises(ValueError, match="batch_size=0 must be an int >= 1"):
        buffer.sample(0)
    with pytest.raises(TypeError, match="batch_size=2.5 must be an int"):
        buffer.sample(2.5)
    with pytest.raises(TypeError, match="generator=7 must be a torch.Generator"):
        buffer.sample(2, generator=7)
    with pytest.raises(ValueError, match=r"indices\[1\]=3 must be in \[0, 2\]"):
        buffer.gather(torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="indices must be a 1-d integer tensor"):
        buffer.gather(torch.tensor([0.0]))


def test_a_generator_on_another_device_is_refused():
    buffer = make_buffer("tensor", 4, (2,))
    buffer.add(**transitions(0, 2))
    buffer.storage_device = torch.device("cuda", 0)  # as on a GPU (checked before anything is drawn)
    with pytest.raises(ValueError, match=r"generator is on cpu: this buffer draws its indices on .*cuda:0"):
        buffer.sample(2, generator=torch.Generator())


def stored_state(kind="tensor"):
    buffer = make_buffer(kind, 4, (2,))
    buffer.add(**transitions(0, 3))
    return buffer.state_dict()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change, error, message", [
    (lambda s: s.update(size=5), ValueError, r"state\['size'\]=5 must be an int in \[0, 4\]"),
    (lambda s: s.update(size=2.0), TypeError, r"state\['size'\]=2.0 must be an int"),
    (lambda s: s.update(obs=torch.zeros(3, 7)), ValueError, r"state\['obs'\] has shape \(3, 7\), expected \(3, 2\)"),
    (lambda s: s.update(rewards=torch.zeros(2)), ValueError, r"state\['rewards'\] has shape \(2,\), expected \(3,\)"),
    (lambda s: s.update(actions=[0, 1, 2]), TypeError, r"state\['actions'\] must be a torch.Tensor"),
    (lambda s: s.update(rewards=torch.tensor([0.0, float("nan"), 1.0])), ValueError, "rewards.*not finite"),
    (lambda s: s.update(terminated=torch.tensor([0.0, 2.0, 1.0])), ValueError, "only 0 and 1"),
    (lambda s: s.pop("actions"), ValueError, r"missing \['actions'\]"),
])
def test_a_bad_state_dict_is_refused_and_the_buffer_left_alone(kind, change, error, message):
    state = stored_state()
    change(state)
    buffer = make_buffer(kind, 4, (2,))
    buffer.add(**transitions(10, 2))
    before = snapshot(buffer)
    with pytest.raises(error, match=message):
        buffer.load_state_dict(state)
    assert_unchanged(buffer, before)


def test_a_state_dict_must_be_a_dict():
    with pytest.raises(TypeError, match="state must be a dict"):
        make_buffer("tensor", 4, (2,)).load_state_dict([1, 2])


def test_make_buffer_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="kind='ring' must be one of"):
        make_buffer("ring", 4, (2,))


@pytest.mark.parametrize("kind", ["tensor", "host", "pinned", "prioritized"])
def test_the_sync_audit_finds_no_sync_in_add_and_sample(kind):
    buffer = make_buffer(kind, 1000, (11,))
    batch = transitions(0, 64, (11,))
    buffer.add(**batch)
    assert audit_syncs(lambda: buffer.add(**batch), "cpu").total == 0
    report = audit_syncs(lambda: buffer.sample(256), "cpu")
    assert report.total == 0, report


@pytest.mark.parametrize("kind", KINDS)
def test_memory_bytes_counts_the_storage(kind):
    buffer = make_buffer(kind, 100, (11,))
    buffer.add(**transitions(0, 100, (11,)))
    memory = buffer.memory_bytes()
    row = (2 * 11 + 3) * 4 + 4  # obs and next_obs, reward, terminated (float32), action (int64)
    assert set(memory) <= {"host", "pinned", "device", "files"} and len(memory) == 1
    assert sum(memory.values()) >= 100 * row


@pytest.mark.parametrize("kind", KINDS)
def test_every_buffer_closes_the_same_way(kind):
    buffer = make_buffer(kind, 8, (2,))
    buffer.add(**transitions(0, 3))
    buffer.close()
    assert buffer.closed if kind == "memmap" else len(buffer) == 3  # in memory: nothing to release


BAD_ROWS = [
    ("obs", lambda t: t["obs"].index_fill_(0, torch.tensor([1]), float("nan")), "obs that are not finite"),
    ("next_obs", lambda t: t["next_obs"].index_fill_(0, torch.tensor([1]), float("inf")),
     "next_obs that are not finite"),
    ("rewards", lambda t: t["rewards"].index_fill_(0, torch.tensor([1]), float("nan")), "a reward that is not finite"),
    ("terminated", lambda t: t.update(terminated=torch.tensor([0.0, 0.5, 1.0])), "terminated that is not 0 or 1"),
    ("actions", lambda t: t["actions"].index_fill_(0, torch.tensor([1]), -4), r"action -4 \(must be in \[0, 2\]\)"),
    ("actions", lambda t: t["actions"].index_fill_(0, torch.tensor([1]), 3), r"action 3 \(must be in \[0, 2\]\)"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("field, spoil, message", BAD_ROWS)
def test_add_and_load_state_dict_refuse_the_same_transitions(kind, field, spoil, message):
    buffer = make_buffer(kind, 4, (2,), num_actions=3)
    buffer.add(**transitions(10, 2))
    before = snapshot(buffer)
    bad = transitions(0, 3)
    spoil(bad)
    with pytest.raises(ValueError, match=f"row 1 of the latest add holds {message}"):
        buffer.add(**bad)
    assert_unchanged(buffer, before)  # checked before anything was written
    state = {**{name: bad[name] for name in FIELDS}, "size": 3}
    with pytest.raises(ValueError, match=rf"state\[{field!r}\]"):
        buffer.load_state_dict(state)
    assert_unchanged(buffer, before)
    buffer.add(**transitions(0, 3))  # and it goes on
    fresh = make_buffer(kind, 4, (2,), num_actions=3)
    fresh.load_state_dict(buffer.state_dict())  # what add accepted, a state loads
    assert snapshot(fresh)[1]["rewards"].tolist() == snapshot(buffer)[1]["rewards"].tolist()


def test_without_num_actions_any_action_from_0_up_is_valid():
    buffer = make_buffer("tensor", 4, (2,))
    buffer.add(**{**transitions(0, 2), "actions": torch.tensor([0, 7])})
    with pytest.raises(ValueError, match=r"row 0 of the latest add holds action -1 \(must be >= 0\)"):
        buffer.add(**{**transitions(0, 2), "actions": torch.tensor([-1, 0])})
    assert buffer.state_dict()["actions"].tolist() == [0, 7]


@pytest.mark.parametrize("kind", KINDS)
def test_a_capacity_that_cannot_fit_is_refused_naming_the_bytes(kind):
    where = "disk space" if kind == "memmap" else "memory"
    with pytest.raises(ValueError, match=rf"capacity=10000000000000 needs 1,0[48]0,000,000,000,000 bytes .* of "
                                         rf".*{where}.*, but [\d,]+ bytes .* are available"):
        make_buffer(kind, 10**13, (11,))


def note_a_bad_row_late(buffer, row):
    """What the value check of an add from a GPU does, on any machine: its note of a bad
    ``terminated`` in ``row`` of the latest add reaches the host after that add has returned
    (here it is recorded on the buffer's host check by hand, so no call has raised it yet)."""
    bad = torch.arange(buffer.size) == row
    code = 1 << _BAD.index("terminated that is not 0 or 1")
    buffer._value_checks[torch.device("cpu")].record(bad, torch.full((buffer.size,), code))


LATER_CALLS = {"state_dict": lambda buffer: buffer.state_dict(), "sample": lambda buffer: buffer.sample(4),
               "gather": lambda buffer: buffer.gather(torch.arange(2)),
               "add": lambda buffer: buffer.add(**transitions(0, 2))}
"""The calls that must raise once a bad transition may have been stored."""


@pytest.mark.parametrize("first", LATER_CALLS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_row_noted_after_its_add_is_raised_by_any_later_call_until_a_state_is_loaded(kind, first):
    buffer = make_buffer(kind, 8, (2,), num_actions=3)
    buffer.add(**transitions(0, 3))
    note_a_bad_row_late(buffer, 1)
    with pytest.raises(ValueError, match="row 1 of the latest add holds terminated that is not 0 or 1"):
        LATER_CALLS[first](buffer)
    for call in LATER_CALLS.values():
        with pytest.raises(ValueError, match="this buffer holds a bad transition"):
            call(buffer)
    clean = make_buffer(kind, 8, (2,), num_actions=3)
    clean.add(**transitions(0, 3))
    buffer.load_state_dict(clean.state_dict())  # a state replaces the bad row
    assert len(buffer.sample(4)["rewards"]) == 4


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "prioritized", "pinned", "host"])
def test_on_a_gpu_add_checks_later_and_a_bad_state_is_never_saved(kind):
    buffer = make_buffer(kind, 64, (2,), "cuda", num_actions=3)
    good = {name: value.cuda() for name, value in transitions(0, 8).items()}
    buffer.add(**good)
    bad = {name: value.clone() for name, value in good.items()}
    bad["terminated"] = bad["terminated"].float()  # 0.5 in a bool tensor would be True, a valid value
    bad["terminated"][5] = 0.5
    # One add, no warm-up call: a second bad add would raise the first one's note.
    report = audit_syncs(lambda: buffer.add(**bad), "cuda", warmup=0)
    # The host buffer's add waits for its copies into pageable memory, one per field, by design
    # (replay/tensor.py's docstring); the others never wait.
    waits = [row.where.split(":")[0] for row in report.rows for _ in range(row.count)]
    assert waits == (["tensor.py"] * len(FIELDS) if kind == "host" else []), report
    with pytest.raises(ValueError, match="row 5 of the latest add holds terminated that is not 0 or 1"):
        buffer.state_dict()  # waits for the check: a checkpoint never holds the bad row
    for call in (buffer.state_dict, lambda: buffer.sample(4), lambda: buffer.add(**good)):
        with pytest.raises(ValueError, match="this buffer holds a bad transition"):
            call()
    clean = make_buffer(kind, 64, (2,), "cuda", num_actions=3)
    clean.add(**good)
    buffer.load_state_dict(clean.state_dict())  # a state replaces the bad row
    assert len(buffer.sample(4)["rewards"]) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_transitions_are_the_rows_of_the_state(kind):
    buffer = make_buffer(kind, 4, (2,))
    buffer.add(**transitions(0, 3))
    buffer.add(**transitions(3, 3))  # wrapped
    rows, state = buffer.transitions(), buffer.state_dict()
    assert set(rows) == set(FIELDS) and all(torch.equal(rows[name], state[name]) for name in FIELDS)
