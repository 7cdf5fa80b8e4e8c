"""The `bench accumulation` suite and the tables of notebook 07: what they measure on a CPU, and
that the measurements say what the lesson says (memory falls with K, the proof holds)."""

import pytest
import torch

from rlgpu_helpers.bench.accumulation import (
    GRADIENT_NAME,
    NAME,
    cost_table,
    forgotten_division,
    forgotten_division_table,
    make_net,
    measure_accumulation,
    ppo_gradient_table,
    ppo_update_difference,
    proof,
    proof_table,
    snake_batch,
    update_cost,
)
from rlgpu_helpers.measure.records import Record
from rlgpu_helpers.core.device import device_report, machine_label

LABEL = machine_label(device_report("cpu"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("RLGPU_QUICK", "1")


def test_the_suite_measures_memory_and_time_for_each_net_and_k_and_the_gradient_check():
    records = measure_accumulation("cpu", progress=False)
    assert all(r.machine == LABEL for r in records)
    costs = [r for r in records if r.name == NAME]
    assert {(r.variant, r.metric, r.unit, r.params["accumulation_steps"]) for r in costs} == {
        (net, metric, unit, k) for net in ("MLP", "CNN") for metric, unit in (("peak memory", "MiB"),
                                                                              ("time per update", "ms"))
        for k in (1, 4, 16)}
    assert {r.params["batch"] for r in costs} == {256} and {r.params["device"] for r in costs} == {"cpu"}
    assert all(r.value > 0 for r in costs)
    memory = {(r.variant, r.params["accumulation_steps"]): r.value for r in costs if r.metric == "peak memory"}
    assert memory[("CNN", 16)] < memory[("CNN", 4)] < memory[("CNN", 1)] / 2  # activations shrink with K
    gradients = {(r.variant, r.params["dtype"]): r for r in records if r.name == GRADIENT_NAME}
    assert set(gradients) == {(net, dtype) for net in ("MLP", "CNN") for dtype in ("float64", "float32")}
    assert all(r.unit == "x dtype epsilon" and 0 < r.value < 1000 for r in gradients.values())


def test_cost_table_sets_each_k_beside_k_1():
    records = [Record(NAME, "CNN", metric, value, unit, {"accumulation_steps": k, "batch": 10, "device": "cpu"},
                      None, "m")
               for k, memory, time in ((1, 8.0, 2.0), (3, 2.0, 3.0))
               for metric, unit, value in (("peak memory", "MiB", memory), ("time per update", "ms", time))]
    table = cost_table(records + [Record("other", "x", "y", 1.0, "z", {}, None, "m")])
    assert table.rows == [["m", "CNN", "10", "1", "10", "8.00", "1.00x", "2.00", "1.00x"],
                          ["m", "CNN", "10", "3", "4 + 2 x 3", "2.00", "0.25x", "3.00", "1.50x"]]


def test_update_cost_refuses_a_k_larger_than_the_batch():
    with pytest.raises(ValueError, match=r"^accumulation_steps=300 is larger than the batch \(256 rows\)"):
        update_cost("cpu", accumulation_steps=(1, 300), progress=False)


def test_the_proof_holds_for_both_networks():
    results = proof(batch_size=40, splits=[{"accumulation_steps": 3}, {"micro_batch_size": 16}])
    assert [(net, c.dtype) for net, c in results] == [
        (net, dtype) for net in ("MLP", "CNN") for dtype in (torch.float64, torch.float64, torch.float32, torch.float32)]
    for _, comparison in results:
        assert comparison.in_epsilons < 100, comparison
    table = proof_table(results)
    assert table.columns[:3] == ["network", "dtype", "micro-batches"]
    assert [row[2] for row in table.rows[:2]] == ["14 + 2 x 13", "2 x 16 + 8"]


def test_forgetting_to_divide_by_k():
    norm, rows = forgotten_division(accumulation_steps=4, updates=(1, 3), batch_size=64)
    assert norm > 0
    by_setup = {(row.optimizer, row.clipping.split(" = ")[0]): row.differences for row in rows}
    sgd = by_setup[("SGD (lr 0.1)", "none")]
    assert sgd[1] == pytest.approx(3.0, rel=1e-9)  # a step 4 times too long: 3 steps too many
    assert by_setup[("SGD (lr 0.1)", "at |g| / 2")][1] < 1e-4  # both clipped to the same length
    assert by_setup[("SGD (lr 0.1)", "at 2 |g|")][1] > 0.1  # only the mistake is clipped
    assert by_setup[("Adam (eps 1e-8, its default)", "none")][1] < 0.05  # nearly invisible
    table = forgotten_division_table(rows)
    assert table.columns == ["optimizer", "clipping", "after 1 update", "after 3 updates"]
    with pytest.raises(ValueError, match="^batch_size=30 must be divisible by accumulation_steps=4"):
        forgotten_division(batch_size=30)


def test_ppo_accumulation_tables():
    table = ppo_gradient_table((1, 3), num_envs=16, num_steps=8, num_minibatches=2, hidden=8)
    assert table.columns == ["K", "micro-batches", "normalized over the minibatch",
                             "normalized per micro-batch (mistake)"]
    assert table.rows[0] == ["1", "64", "0.00e+00", "0.00e+00"]
    right, mistake = (float(cell) for cell in table.rows[1][2:])
    assert table.rows[1][1] == "22 + 2 x 21" and right < 1e-12 and mistake > 1e-4
    assert ppo_update_difference(3, num_envs=16, num_steps=8, num_minibatches=2, hidden=8) < 1e-10


def test_snake_batch_is_seeded_real_play_and_make_net_picks_the_encoder():
    first, second = snake_batch(32, "grid", seed=3), snake_batch(32, "grid", seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    obs, actions, targets = first
    assert obs.shape == (32, 3, 10, 10) and actions.dtype == torch.int64 and targets.shape == (32,)
    assert isinstance(make_net("CNN").encoder[0], torch.nn.Conv2d)
    assert isinstance(make_net("MLP").encoder[0], torch.nn.Linear)
    with pytest.raises(ValueError, match="^net='RNN'"):
        make_net("RNN")
