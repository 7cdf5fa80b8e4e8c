"""gpu.memory (notebook 06): peak memory, and the search for the largest batch that fits."""

import gc
import math
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgpu_helpers.gpu.memory import (
    BatchSearch,
    check_largest_batch,
    find_max_batch_size,
    is_out_of_memory,
    peak_memory,
    try_to_fit,
    within_budget,
)


def rule_step(bytes_per_sample: int, fixed: int, limit_bytes: int):
    """A fake step with a known memory rule: it runs out of memory above ``limit_bytes``."""
    def step(batch):
        if fixed + bytes_per_sample * batch > limit_bytes:
            raise torch.OutOfMemoryError(f"batch {batch} does not fit")
    return step


def test_peak_memory_on_a_cpu_counts_what_a_call_allocates_and_holds_at_once():
    assert peak_memory(lambda: torch.empty(1_000_000, dtype=torch.uint8), "cpu") == 1_000_000

    def three_at_once():
        kept = [torch.empty(1000, dtype=torch.uint8) for _ in range(3)]
        del kept
        torch.empty(2000, dtype=torch.uint8)  # allocated after the three were freed
    assert peak_memory(three_at_once, "cpu") == 3000


def test_the_search_finds_a_limit_that_is_not_a_power_of_two_exactly():
    search = find_max_batch_size(rule_step(24, 100, 10_000), "cpu", budget_bytes=2**30)
    assert search.largest_fit == (10_000 - 100) // 24 == 412
    assert search.first_failure == 413
    assert search.trials[:10] == tuple((2**k, True) for k in range(9)) + ((512, False),)  # doubling first
    assert search.batch_size == math.floor(412 * 0.9)


@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
])
def test_a_library_s_allocation_failure_counts_as_not_fitting(error):
    def step(batch):
        if batch > 300:
            raise error
    assert is_out_of_memory(error)
    search = find_max_batch_size(step, "cpu", budget_bytes=2**30)
    assert search.largest_fit == 300 and search.first_failure == 301
    assert try_to_fit(lambda: step(301), "cpu") == (None, str(error).splitlines()[0])
    assert try_to_fit(lambda: step(3) or "ran", "cpu") == ("ran", None)


@pytest.mark.parametrize("error", [RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"),
                                   ValueError("CUBLAS_STATUS_ALLOC_FAILED in a ValueError is not the library's")])
def test_any_other_error_stops_the_search_as_it_is(error):
    def step(batch):
        if batch > 300:
            raise error
    assert not is_out_of_memory(error)
    with pytest.raises(type(error), match=str(error)[:20]):
        find_max_batch_size(step, "cpu", budget_bytes=2**30)


@settings(max_examples=8)
@given(per_sample=st.integers(1, 5000), fixed=st.integers(0, 10_000), room=st.integers(1, 200_000),
       start=st.integers(1, 64), margin=st.floats(0, 0.5))
def test_the_search_finds_every_known_limit(per_sample, fixed, room, start, margin):
    limit_bytes = fixed + room * per_sample  # a batch of `room` fits, `room + 1` does not
    search = find_max_batch_size(rule_step(per_sample, fixed, limit_bytes), "cpu", budget_bytes=2**40,
                                 start=start, margin=margin)
    if start > room:
        assert search.largest_fit is None and search.batch_size is None
    else:
        assert search.largest_fit == room and search.first_failure == room + 1
        assert search.batch_size == max(1, math.floor(room * (1 - margin)))
        # doubling, then bisecting the last gap: logarithmic in the limit
        assert len(search.trials) <= 2 * math.log2(room / start) + math.log2(start) + 3


def test_under_a_budget_real_allocations_decide_what_fits():
    def step(batch):  # 1,000 bytes per sample and 5,000 fixed, really allocated
        torch.empty(1000 * batch + 5000, dtype=torch.uint8)
    search = find_max_batch_size(step, "cpu", budget_bytes=777_000, margin=0.25)
    assert search.largest_fit == 772 and search.first_failure == 773
    assert search.batch_size == 579
    assert "budget" in str(search) and "not a real OOM" in str(search)
    budgeted = within_budget(step, 777_000, "cpu")
    assert budgeted(772) == 777_000
    with pytest.raises(torch.OutOfMemoryError, match="over the budget"):
        budgeted(773)


def test_max_batch_stops_the_doubling():
    search = find_max_batch_size(lambda batch: None, "cpu", budget_bytes=1000, start=3, max_batch=50)
    assert [b for b, _ in search.trials] == [3, 6, 12, 24, 48, 50]
    assert search.largest_fit == 50 and search.first_failure is None
    assert "everything up to max_batch=50 fit" in str(search)


def test_on_a_gpu_each_trial_starts_from_an_empty_cache(monkeypatch):
    """An H200's search fit batch 83,886,079 after 83,886,080, whose blocks all have the same sizes, had failed:
    that trial ran from an empty cache (after a failure), the later ones found the previous trial's blocks cached.
    Here a step fits up to 1,000 from an empty cache and up to 1,200 with a warm one: a fresh run fits 1,000."""
    cache = {"warm": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cache.update(warm=False))

    def step(batch):
        if batch > (1200 if cache["warm"] else 1000):
            raise torch.OutOfMemoryError(f"batch {batch} does not fit (a test)")
        cache["warm"] = True

    search = find_max_batch_size(step, "cuda", start=16)
    assert (search.largest_fit, search.first_failure) == (1000, 1001)


def test_a_failed_step_leaves_nothing_alive():
    held = []

    def step(batch):
        big = torch.empty(batch)
        held.append(weakref.ref(big))
        if batch > 100:
            raise torch.OutOfMemoryError("too big")
    find_max_batch_size(step, "cpu", budget_bytes=2**30)
    gc.collect()
    assert all(ref() is None for ref in held)  # no traceback kept the failed steps' tensors


def test_other_errors_are_not_taken_for_out_of_memory():
    def step(batch):
        raise ValueError("a bug, not a full device")
    with pytest.raises(ValueError, match="a bug"):
        find_max_batch_size(step, "cpu", budget_bytes=1000)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"budget_bytes": None}, ValueError, "budget_bytes=None: on cpu"),
    ({"budget_bytes": 0}, ValueError, "budget_bytes=0"),
    ({"budget_bytes": -5}, ValueError, "budget_bytes=-5"),
    ({"budget_bytes": 1.5}, TypeError, "budget_bytes=1.5"),
    ({"budget_bytes": 100, "start": 0}, ValueError, "start=0"),
    ({"budget_bytes": 100, "start": -1}, ValueError, "start=-1"),
    ({"budget_bytes": 100, "start": 8, "max_batch": 4}, ValueError, "max_batch=4"),
    ({"budget_bytes": 100, "margin": 1.0}, ValueError, "margin=1.0"),
    ({"budget_bytes": 100, "margin": -0.1}, ValueError, "margin=-0.1"),
])
def test_bad_arguments_name_the_parameter(kwargs, error, match):
    with pytest.raises(error, match=match):
        find_max_batch_size(lambda batch: None, "cpu", **kwargs)


def test_bad_callables_and_budgets_are_refused():
    with pytest.raises(TypeError, match="step=3"):
        find_max_batch_size(3, "cpu", budget_bytes=100)
    with pytest.raises(TypeError, match="fn="):
        peak_memory("not callable", "cpu")
    with pytest.raises(ValueError, match="budget_bytes=0"):
        within_budget(lambda batch: None, 0, "cpu")
    assert isinstance(find_max_batch_size(lambda b: None, "cpu", budget_bytes=10, max_batch=1), BatchSearch)


def test_peak_memory_on_a_cpu_counts_the_free_of_what_the_previous_call_left():
    # like a training step's gradients: each call frees the last call's block, then allocates its own.
    # The profiler reports a free only for a block it saw allocated: without a profiled warm-up the
    # first free went uncounted and the peak read 4,001,000 instead of 1,000
    held = {}

    def replace():
        held["grads"] = None
        held["grads"] = torch.empty(4_000_000, dtype=torch.uint8)
        torch.empty(1000, dtype=torch.uint8)
    replace()  # outside any profiler, like the steps before a measurement
    assert peak_memory(replace, "cpu") == 1000
    assert peak_memory(replace, "cpu") == 1000  # and the same again: nothing depends on what ran before


def test_a_search_written_by_hand_gets_a_verdict():
    def doubling_only(step):
        batch, good = 1, None
        while True:
            try:
                step(batch)
            except torch.OutOfMemoryError:
                return good
            good, batch = batch, 2 * batch

    def one_by_one(step):
        batch = 1
        while True:
            try:
                step(batch)
            except torch.OutOfMemoryError:
                return batch - 1
            batch += 1

    def the_helper(step):
        return find_max_batch_size(step, "cpu", budget_bytes=2**62, start=1).largest_fit

    assert check_largest_batch(doubling_only).startswith("not yet: for a step that fits up to 412 samples your "
                                                         "search returned 256")
    assert check_largest_batch(one_by_one).startswith("right answers, but slow: 413 batches tried")
    assert check_largest_batch(the_helper, limits=(1, 412)).startswith("right: your search found all 2 limits")
    with pytest.raises(TypeError, match="search=3"):
        check_largest_batch(3)
    with pytest.raises(ValueError, match=r"limits\[1\]=0"):
        check_largest_batch(the_helper, limits=(5, 0))
