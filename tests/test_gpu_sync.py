"""The sync audit flags every operator that would wait for a GPU, and nothing else; the deferred
check raises a device-side failure without waiting."""

import inspect

import pytest
import torch

from rlgpu_helpers.gpu.sync import (
    MULTINOMIAL,
    DeferredCheck,
    SyncReport,
    SyncRow,
    audit_syncs,
    multinomial_synchronizes,
)

x = torch.arange(10.0)
mask = x > 4
index = torch.tensor([1, 3])


def flagged(fn):
    return audit_syncs(fn, "cpu", warmup=0)


SYNCING = {
    "item": (lambda: x[0].item(), "Tensor.item()"),
    "if on a tensor": (lambda: 1 if x.any() else 0, "bool(tensor)"),
    "int()": (lambda: int(x[1]), "int(tensor)"),
    "float()": (lambda: float(x[1]), "float(tensor)"),
    "a Python index": (lambda: [0, 1, 2][x.long()[1]], "Python index"),
    "tolist": (lambda: x.tolist(), "Tensor.tolist()"),
    "numpy": (lambda: x.numpy(), "Tensor.numpy()"),
    "cpu": (lambda: x.cpu(), "Tensor.cpu()"),
    "to('cpu')": (lambda: x.to("cpu"), "Tensor.to('cpu')"),
    "print": (lambda: repr(x[:2]), "printing a tensor"),
    "f-string": (lambda: f"{x.sum():.1f}", "formatting a tensor"),
    "mask indexing": (lambda: x[mask], "boolean-mask indexing"),
    "mask assignment": (lambda: x.clone().__setitem__(mask, x.sum()), "boolean-mask assignment"),
    "nonzero": (lambda: mask.nonzero(), "nonzero"),
    "where(mask)": (lambda: torch.where(mask), "nonzero"),
    "masked_select": (lambda: x.masked_select(mask), "masked_select"),
    "unique": (lambda: torch.unique(x), "unique"),
    "equal": (lambda: torch.equal(x, x), "torch.equal"),
    "bincount": (lambda: torch.bincount(index), "bincount"),
    "repeat_interleave": (lambda: torch.repeat_interleave(x, torch.ones(10, dtype=torch.long)), "repeat_interleave"),
    "one_hot without num_classes": (lambda: torch.nn.functional.one_hot(index), "value read on the host"),
}

CLEAN = {
    "arithmetic": lambda: (x * 2 + 1).sum(),
    "integer-index gather": lambda: x[index],
    "integer-index write": lambda: x.clone().__setitem__(index, 0.0),
    "mask assignment of a number": lambda: x.clone().__setitem__(mask, 1.0),
    "where(cond, a, b)": lambda: torch.where(mask, x, -x),
    "masked_fill": lambda: x.masked_fill(mask, 0.0),
    "any() kept on the device": lambda: mask.any(),
    "non_blocking copy": lambda: x.to("cpu", non_blocking=True),
    "to(dtype)": lambda: x.to(torch.float64),
    "to(torch.device)": lambda: x.to(torch.device("cpu")),
    "repeat_interleave with output_size": lambda: torch.repeat_interleave(
        x, torch.ones(10, dtype=torch.long), output_size=10),
    "randperm": lambda: torch.randperm(20),
}


@pytest.mark.parametrize("name", SYNCING)
def test_each_syncing_operator_is_flagged_once_where_it_is_called(name):
    fn, operator = SYNCING[name]
    report = flagged(fn)
    assert report.method == "rules"
    assert len(report.rows) == 1, report
    row, = report.rows
    assert operator in row.operator
    line = inspect.getsourcelines(fn)[1]
    assert row.where == f"tests/test_gpu_sync.py:{line} (<lambda>)", row


@pytest.mark.parametrize("name", CLEAN)
def test_operators_that_never_wait_are_not_flagged(name):
    report = flagged(CLEAN[name])
    assert report.total == 0, report


def test_multinomial_counts_only_where_this_torch_reads_its_check_on_the_host(monkeypatch):
    # torch 2.4 checked the probabilities with .item(); torch 2.5 and later with a device-side assert.
    version = tuple(int(part) for part in torch.__version__.split(".")[:2])
    assert multinomial_synchronizes() == (version < (2, 5))
    draw = lambda: torch.multinomial(torch.ones(3), 1)
    assert flagged(draw).total == int(multinomial_synchronizes())
    monkeypatch.setattr("rlgpu_helpers.gpu.sync.multinomial_synchronizes", lambda: True)
    report = flagged(draw)
    assert [(row.operator, row.count) for row in report.rows] == [(MULTINOMIAL, 1)]


@pytest.mark.gpu
def test_the_multinomial_rule_agrees_with_the_cuda_runtime():
    probs = torch.ones(4, 3, device="cuda")
    report = audit_syncs(lambda: torch.multinomial(probs, 1), "cuda")
    assert (report.total > 0) == multinomial_synchronizes(), report


def test_counts_add_up_over_a_loop_and_the_table_shows_them():
    def three_items():
        return [x[i].item() for i in range(3)]

    report = flagged(three_items)
    assert report.total == 3 and report.rows[0].count == 3
    text = str(report)
    assert text.startswith("3 host-device synchronization(s) found (rules):")
    # where: the line of the comprehension (its frame is <listcomp> before Python 3.12, three_items since)
    assert "Tensor.item()" in text and "count (syncs)" in text
    assert f"test_gpu_sync.py:{three_items.__code__.co_firstlineno + 1} (" in text
    assert "<table>" in report._repr_html_()
    assert str(flagged(lambda: x + 1)) == "no host-device synchronizations found (rules)"


def test_code_run_from_a_string_is_located_by_its_line_in_the_string():
    """Notebook 04 audits a snippet given as a string: its rows name the line within it."""
    snippet = "y = x * 2\nif y.any():\n    total = y.sum().item()\n"
    report = flagged(lambda: exec(snippet, {"x": x}))
    assert {(row.operator.split(",")[0], row.where) for row in report.rows} == {
        ("bool(tensor)", "<string>:2 (<module>)"), ("Tensor.item()", "<string>:3 (<module>)")}
    named = flagged(lambda: exec(compile(snippet, "<snippet>", "exec"), {"x": x}))
    assert {row.where for row in named.rows} == {"<snippet>:2 (<module>)", "<snippet>:3 (<module>)"}


def test_the_optimizer_reading_its_host_side_step_counter_is_not_a_sync():
    """torch.optim keeps step counters on the host on every device: reading them never waits."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([weight])

    def step():
        weight.grad = torch.ones(3)
        optimizer.step()

    assert flagged(step).total == 0
    with torch.no_grad():
        assert flagged(lambda: weight.sum().item()).total == 1  # but a user's item() is


def test_warmup_calls_run_outside_the_audit():
    calls = []

    def fn():
        calls.append(len(calls))
        if len(calls) == 1:
            x[0].item()  # only in the first call

    assert audit_syncs(fn, "cpu", warmup=1).total == 0
    assert calls == [0, 1]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(fn=3), TypeError, "fn=3 is not callable"),
    (dict(fn=lambda: None, method="gpu"), ValueError, r"method='gpu' must be one of \('cuda', 'rules'\)"),
    (dict(fn=lambda: None, method="cuda"), ValueError, "method='cuda' needs a CUDA device"),
    (dict(fn=lambda: None, warmup=-1), ValueError, "warmup=-1 must be an int >= 0"),
    (dict(fn=lambda: None, device="tpu"), ValueError, "device='tpu' is not a device"),
])
def test_bad_arguments_raise(kwargs, error, message):
    kwargs.setdefault("device", "cpu")
    with pytest.raises(error, match=message):
        audit_syncs(**kwargs)


def test_a_report_totals_its_rows():
    report = SyncReport("rules", [SyncRow("a", 2, "f.py:1"), SyncRow("b", 3, "f.py:2")])
    assert report.total == 5


# -- the deferred check ---------------------------------------------------------------------------

def describe(index, value, calls_ago):
    return f"values[{index}] = {value}, {calls_ago} call(s) ago"


def test_a_deferred_check_raises_the_first_failure_once_then_clears():
    check = DeferredCheck("cpu", describe)
    good, bad = torch.tensor([0, 1, 2]), torch.tensor([0, 9, -4])
    assert not check.record(good > 2, good)
    check.raise_if_failed()  # nothing recorded: no error
    assert check.record((bad < 0) | (bad > 2), bad)  # pending from the failure on
    with pytest.raises(ValueError, match=r"values\[1\] = 9, 0 call\(s\) ago"):
        check.raise_if_failed()
    check.raise_if_failed()  # raised once: clear again
    assert not check.record(good > 2, good)


def test_a_deferred_check_keeps_the_first_failure_while_it_is_pending():
    check = DeferredCheck("cpu", describe)
    first, second = torch.tensor([5, 0]), torch.tensor([0, 0, 0])
    check.record(first > 2, first)
    assert check.record(torch.tensor([False, True, False]), second)  # still pending, first kept
    with pytest.raises(ValueError, match=r"values\[0\] = 5, 1 call\(s\) ago"):
        check.raise_if_failed()


def test_recording_never_waits():
    check = DeferredCheck("cpu", describe)
    values = torch.tensor([0, 7, 1])
    assert audit_syncs(lambda: check.record(values > 2, values), "cpu").total == 0


def test_a_deferred_check_refuses_to_run_inside_a_cuda_graph_capture(monkeypatch):
    """Inside a capture its event query would be illegal, and replays would report nothing: a clear error instead."""
    check = DeferredCheck("cpu", describe)
    values = torch.tensor([0, 7, 1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for call in (lambda: check.record(values > 2, values), check.raise_if_failed):
        with pytest.raises(RuntimeError, match=r"^a DeferredCheck cannot run inside a CUDA graph capture.*"
                                               r"VecSnake\(check_action_values=False\)"):
            call()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert check.record(values > 2, values)  # outside a capture it works as before


def test_a_number_written_through_a_mask_never_excuses_a_tensor_written_later():
    # y[mask] = 0 lifts the 0 into a tensor and frees it; a tensor made later can get its id.
    def step():
        for _ in range(50):
            y = x.clone()
            y[mask] = 0
            y[mask] = x.flip(0)[mask]
    counts = {row.operator: row.count for row in flagged(step).rows}
    assert counts == {"boolean-mask indexing x[mask]": 50, "boolean-mask assignment x[mask] = tensor": 50}, counts
