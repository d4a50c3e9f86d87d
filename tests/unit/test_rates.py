"""Rate values and GCRA's arithmetic (dispatch.rates): parsing with clear errors, the domain
setting, and the property every shared cell relies on."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch import rates
from dispatch.rates import Rate, RateError, domain_of, parse_domain_rates, parse_rate


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("50/s", 50.0), ("300/m", 5.0), ("1800/h", 0.5), (" 2.5 / s ", 2.5), ("1/h", 1 / 3600)],
)
def test_rates_read_per_second_minute_and_hour(text: str, per_second: float) -> None:
    assert parse_rate(text).per_second == pytest.approx(per_second)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("50", "invalid rate '50'"),
        ("50/d", "invalid rate '50/d'"),
        ("0/s", "must be more than zero"),
        ("-1/s", "invalid rate '-1/s'"),
        ("fast", "invalid rate 'fast'"),
        (50, "expected a rate such as 50/s, got int 50"),
        ("1000000/s", "more than 100000 per second"),
        ("9" * 50 + "/s", "too long"),
    ],
)
def test_unreadable_rates_say_what_is_wrong_and_how_to_write_one(value: object, says: str) -> None:
    with pytest.raises(RateError, match=None) as caught:
        parse_rate(value)
    assert says in str(caught.value)
    assert "50/s" in caught.value.hint


def test_rates_print_as_written() -> None:
    assert str(Rate(50, "s")) == "50/s"
    assert str(Rate(2.5, "m")) == "2.5/m"


def test_domain_rates_default_and_are_overridden_extended_or_switched_off() -> None:
    defaults = parse_domain_rates(None)
    assert defaults["gmail.com"] == Rate(20, "s")
    assert defaults["hotmail.com"] == Rate(20, "s")
    assert {"yahoo.com", "outlook.com", "googlemail.com"} <= set(defaults)
    changed = parse_domain_rates(" Gmail.COM.=5/s, example.org=300/m ,yahoo.com=off,")
    assert changed["gmail.com"] == Rate(5, "s")
    assert changed["example.org"].per_second == 5.0
    assert "yahoo.com" not in changed
    assert changed["outlook.com"] == Rate(20, "s")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gmail.com", "invalid domain rate 'gmail.com'"),
        ("=5/s", "invalid domain rate '=5/s'"),
        ("a@gmail.com=5/s", "invalid domain rate"),
        ("gmail.com=5", "gmail.com: invalid rate '5'"),
    ],
)
def test_unreadable_domain_rates_name_the_item(text: str, says: str) -> None:
    with pytest.raises(RateError) as caught:
        parse_domain_rates(text)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("recipient", "domain"),
    [
        ("a@Gmail.COM", "gmail.com"),
        ("Alice <alice@Example.org.>", "example.org"),
        ('"a@b"@c.test', "c.test"),
        ("nobody", ""),
    ],
)
def test_the_domain_of_a_recipient(recipient: str, domain: str) -> None:
    assert domain_of(recipient) == domain


def test_the_burst_is_one_seconds_worth_and_at_least_one() -> None:
    assert rates.burst(20) == 20
    assert rates.burst(0.5) == 1
    assert rates.burst(2.5) == 2
    assert rates.tolerance(1) == 0
    assert rates.tolerance(0.01) == 0


def test_a_slowdown_lasts_until_its_end() -> None:
    assert rates.effective(20, 0.5, 100.0, 99.0) == 10
    assert rates.effective(20, 0.5, 100.0, 100.0) == 20
    assert rates.effective(20, 0.5, None, 0.0) == 20


# ---------------------------------------------------------------------- the GCRA property

per_seconds = st.one_of(
    st.floats(min_value=0.01, max_value=200, allow_nan=False), st.sampled_from([1.0, 5.0, 20.0])
)
gaps = st.lists(st.floats(min_value=0, max_value=3, allow_nan=False), min_size=1, max_size=300)


@given(per_second=per_seconds, gaps=gaps, start=st.floats(min_value=0, max_value=1e9))
def test_never_more_than_rate_times_t_plus_burst_in_any_window(
    per_second: float, gaps: list[float], start: float
) -> None:
    """Requests at arbitrary (non-decreasing) moments: the allowed ones, in ANY window
    [a, a + t], number at most rate * t + burst."""
    tat: float | None = None
    now = start
    allowed: list[float] = []
    for gap in gaps:
        now += gap
        ok, tat = rates.acquire(tat, now, per_second)
        if ok:
            allowed.append(now)
    burst = rates.burst(per_second)
    for i, first in enumerate(allowed):
        for j in range(i, len(allowed)):
            t = allowed[j] - first
            # EPSILON: the millisecond float noise is given (dispatch.rates).
            assert j - i + 1 <= per_second * (t + rates.EPSILON) + burst


@given(per_second=per_seconds, start=st.floats(min_value=0, max_value=1e9))
def test_a_patient_sender_gets_the_burst_then_exactly_the_rate(
    per_second: float, start: float
) -> None:
    """Asking at each refused request's next slot: the burst at once, then one per interval
    (the limit is used, not just respected)."""
    tat: float | None = None
    now = start
    granted = 0
    for _ in range(rates.burst(per_second)):
        ok, tat = rates.acquire(tat, now, per_second)
        granted += ok
    assert granted == rates.burst(per_second)
    ok, _ = rates.acquire(tat, now, per_second)
    assert not ok
    slot = rates.next_slot(tat, now, per_second)
    assert slot - now == pytest.approx(1 / per_second, abs=rates.EPSILON)
    ok, later = rates.acquire(tat, slot, per_second)
    assert ok
    assert later is not None
    assert math.isfinite(later)


@given(
    per_second=per_seconds,
    now=st.floats(min_value=0, max_value=1e6),
    behind=st.floats(min_value=-10, max_value=10),
    ahead=st.integers(min_value=0, max_value=50),
)
def test_the_slot_after_others_is_the_next_slot_once_they_took_theirs(
    per_second: float, now: float, behind: float, ahead: int
) -> None:
    """``slot_after`` is ``next_slot`` after ``ahead`` grants at ``now``, and ``granted`` is the
    TAT ``acquire`` leaves when it allows: the worker's estimate is the table's arithmetic."""
    start: float | None = now + behind if behind > -10 else None
    tat = start
    for _ in range(ahead):
        tat = rates.granted(tat, now, per_second)
    expected = rates.next_slot(tat, now, per_second)
    assert rates.slot_after(start, now, per_second, ahead) == pytest.approx(expected, abs=1e-6)
    ok, acquired = rates.acquire(start, now, per_second)
    if ok:
        assert acquired == rates.granted(start, now, per_second)
