"""The guides' claims and the one verdict rule: held / partly / did not hold / within noise."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlgpu_helpers.measure.claims import (
    CLAIMS,
    HELD,
    NOT_HELD,
    NOT_TESTED,
    OUTCOMES,
    PARTLY,
    WITHIN_NOISE,
    Claim,
    claims_table,
    judge,
    relative_noise,
    speedup_spread,
    verdicts_table,
)

ABOUT_500 = Claim("k", "a guide", "~500 FPS", 500, 500, "steps/s", "figure", "one env", "01")
ABOUT_15_PERCENT = Claim("k", "a guide", "~15% faster", 1.15, 1.15, "x", "speedup", "acting", "02")
FASTER = Claim("k", "a guide", "keep data on the GPU", 1, math.inf, "x", "speedup", "sampling", "05")
TWO_TO_THREE_X = Claim("k", "a guide", "2-3x faster", 2, 3, "x", "speedup", "pinned memory", "05")


def test_every_claim_is_well_formed():
    assert len(CLAIMS) == len({claim.key for claim in CLAIMS.values()})
    for key, claim in CLAIMS.items():
        assert key == claim.key and claim.lesson.isdigit() and len(claim.lesson) == 2
        assert claim.low <= claim.high and claim.source.endswith("(guide)")


def test_the_table_of_fps_claims_is_all_there():
    figures = {key: CLAIMS[key].low for key in ("single-env-fps", "cpu-16-envs-fps", "gpu-64-envs-fps",
                                                "gpu-256-envs-fps")}
    assert figures == {"single-env-fps": 500, "cpu-16-envs-fps": 6_000, "gpu-64-envs-fps": 35_000,
                       "gpu-256-envs-fps": 120_000}
    assert CLAIMS["loop-tunings"].low == pytest.approx(4.71, abs=0.01)
    assert CLAIMS["replay-on-gpu"].figure == "faster than 1.00 x (no figure given)"


@pytest.mark.parametrize("claim, measured, spread, outcome", [
    (ABOUT_500, 500, 0, HELD),
    (ABOUT_500, 620, 0, HELD),          # within 25% of the figure
    (ABOUT_500, 700, 50, PARTLY),       # 650 does not reach the range's top, 625
    (ABOUT_500, 700, 80, HELD),         # 620 does: the spread decides
    (ABOUT_500, 900, 0, PARTLY),        # within a factor of 2 of the range
    (ABOUT_500, 155_000, 2_000, NOT_HELD),
    (ABOUT_500, 100, 10, NOT_HELD),
    (ABOUT_15_PERCENT, 1.15, 0.01, HELD),
    (ABOUT_15_PERCENT, 1.18, 0.01, HELD),       # the gain, 0.15, give or take 25%: 1.11x to 1.19x
    (ABOUT_15_PERCENT, 1.05, 0.01, PARTLY),     # faster, by less
    (ABOUT_15_PERCENT, 0.95, 0.01, NOT_HELD),   # a slowdown never holds a claimed speedup
    (TWO_TO_THREE_X, 2.5, 0.1, HELD),
    (TWO_TO_THREE_X, 1.4, 0.1, PARTLY),  # faster, as claimed, but less
    (TWO_TO_THREE_X, 9.0, 0.5, PARTLY),  # faster, more than claimed
    (TWO_TO_THREE_X, 0.7, 0.1, NOT_HELD),  # slower
    (TWO_TO_THREE_X, 1.05, 0.1, WITHIN_NOISE),
    (TWO_TO_THREE_X, 1.8, 0.9, WITHIN_NOISE),  # the noise reaches 1: cannot tell a change from none
    (FASTER, 4.0, 0.5, HELD),
    (FASTER, 0.5, 0.1, NOT_HELD),
    (FASTER, 1.02, 0.1, WITHIN_NOISE),
])
def test_verdicts_by_hand(claim, measured, spread, outcome):
    assert judge(claim, measured, spread).outcome == outcome


@given(measured=st.floats(0.01, 1e6), spread=st.floats(0, 1e5), extra=st.floats(0, 1e5),
       low=st.floats(0.1, 1e4), width=st.floats(0, 1e4), kind=st.sampled_from(["figure", "speedup"]))
def test_more_uncertainty_never_makes_a_verdict_stronger(measured, spread, extra, low, width, kind):
    """Widening the spread can turn "partly" or "did not hold" into "held" or "can't tell", but
    never turns "held" into a refusal: a noisier measurement never disproves a claim."""
    claim = Claim("k", "a guide", "words", low, low + width, "x", kind, "something", "00")
    narrow, wide = judge(claim, measured, spread).outcome, judge(claim, measured, spread + extra).outcome
    assert narrow in OUTCOMES and wide in OUTCOMES
    if narrow == HELD:
        assert wide in (HELD, WITHIN_NOISE)
    if narrow == WITHIN_NOISE:
        assert wide == WITHIN_NOISE


@given(measured=st.floats(0.01, 1e6), low=st.floats(0.1, 1e4), width=st.floats(0, 1e4))
def test_a_measurement_inside_the_claimed_range_holds(measured, low, width):
    claim = Claim("k", "a guide", "words", low, low + width, "steps/s", "figure", "x", "00")
    lowest, highest = claim.covers
    inside = lowest <= measured <= highest
    assert (judge(claim, measured).outcome == HELD) == inside


def test_a_gpu_claim_measured_off_a_gpu_gets_no_verdict():
    """A CPU's figure neither holds nor refutes a claim about a GPU: it stands beside it, untested."""
    claim = CLAIMS["gpu-256-envs-million-steps"]  # "~8 sec" for a million steps on a GPU
    assert claim.gpu
    on_cpu = judge(claim, 8.0, 0.5, device="cpu")
    assert on_cpu.outcome == NOT_TESTED and (on_cpu.measured, on_cpu.spread) == (8.0, 0.5)
    assert judge(claim, 30.0, device="mps").outcome == NOT_TESTED
    assert judge(claim, 8.0, 0.5, device="cuda:1").outcome == HELD
    assert judge(claim, 30.0, device="cuda").outcome == NOT_HELD
    assert judge(claim, 8.0).outcome == HELD  # the device left unsaid: judged as given
    cpu_claim = CLAIMS["single-env-fps"]
    assert not cpu_claim.gpu and judge(cpu_claim, 500, device="cpu").outcome == HELD
    assert judge(cpu_claim, 500, device="cuda").outcome == HELD  # a CPU claim is judged anywhere it is measured
    assert NOT_TESTED in str(verdicts_table([on_cpu]))


def test_every_claim_that_names_a_gpu_is_marked_as_one():
    for claim in CLAIMS.values():
        if "GPU" in claim.about or "GPU" in claim.quote.replace("CPU-GPU", ""):
            assert claim.gpu, claim.key
    assert {key for key, claim in CLAIMS.items() if not claim.gpu} == {
        "single-env-fps", "cpu-16-envs-fps", "single-env-million-steps", "loop-tunings", "loop-baseline-fps",
        "loop-optimized-fps", "inference-mode", "set-to-none", "array-batches", "learn-every-4", "all-cores"}


def test_tables_show_the_claims_and_the_verdicts():
    verdict = judge(CLAIMS["single-env-fps"], 155_000, 3_000)
    table = verdicts_table([verdict], machine="cpu-x-2c")
    text = str(table)
    assert "~500 steps/s" in text and "155,000 ± 3,000 steps/s" in text and "did not hold" in text
    assert "measured on cpu-x-2c" in text
    assert "~500 steps/s" in str(claims_table([CLAIMS["single-env-fps"]]))
    assert str(verdict).startswith("single-env-fps: claimed ~500 steps/s, measured 155,000 ± 3,000 steps/s")


def test_noise_helpers():
    assert relative_noise(100, 110) == pytest.approx(10 / 105)
    assert relative_noise(0, 0) == 0.0
    assert speedup_spread(2.0, 0.03, 0.04) == pytest.approx(2.0 * 0.05)
    assert speedup_spread(2.0) == 0.0


@pytest.mark.parametrize("call, error, message", [
    (lambda: judge(ABOUT_500, 0), ValueError, "measured=0 must be a finite number > 0"),
    (lambda: judge(ABOUT_500, 10, -1), ValueError, "spread=-1 must be a finite number >= 0"),
    (lambda: judge(ABOUT_500, math.nan), ValueError, "measured=nan"),
    (lambda: judge("single-env-fps", 10), TypeError, "must be a Claim"),
    (lambda: judge(ABOUT_500, 10, device="my gpu"), ValueError, "device='my gpu' must name a device"),
    (lambda: judge(ABOUT_500, 10, device=""), ValueError, "device='' must name a device"),
    (lambda: Claim("k", "s", "q", 1, 2, "x", "speedup", "a", "00", gpu="yes"), TypeError, "gpu='yes' must be True"),
    (lambda: Claim("k", "s", "q", 3, 2, "x", "speedup", "a", "00"), ValueError, "high=2 must be a finite number >= 3"),
    (lambda: Claim("k", "s", "q", 1, 2, "x", "ratio", "a", "00"), ValueError, "kind='ratio' must be one of"),
    (lambda: verdicts_table(["held"]), TypeError, "only Verdict objects"),
    (lambda: relative_noise(-1, 1), ValueError, "first=-1 must be a finite number >= 0"),
])
def test_bad_input_raises(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_record_ratio_adds_both_relative_spreads_in_quadrature():
    from rlgpu_helpers.measure.claims import record_ratio
    from rlgpu_helpers.measure.records import Record

    top = Record("b", "top", "throughput", 30.0, "x/s", {}, 3.0, "m")  # 10% spread
    bottom = Record("b", "bottom", "throughput", 10.0, "x/s", {}, None, "m")  # no spread: exact
    assert record_ratio(top, bottom) == pytest.approx((3.0, 0.3))
    bottom.spread = 1.0  # 10% too
    assert record_ratio(top, bottom)[1] == pytest.approx(3.0 * math.sqrt(0.02))
