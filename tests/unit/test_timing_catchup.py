"""Catch-up after downtime (research scheduling.md §2): each policy fires exactly what it
promises, and every due occurrence comes back once, fired or skipped with a reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.timing import (
    CatchUp,
    CatchUpDecision,
    Trigger,
    apply_catch_up,
    default_max_age,
    due_after,
)
from tests.support.examples import examples

HOUR = timedelta(hours=1)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def hhmm(times: list[datetime]) -> list[str]:
    return [f"{t:%d %H:%M}" for t in times]


def covers_once(decision: CatchUpDecision, due: list[datetime]) -> bool:
    decided = decision.fire + [nominal for nominal, _ in decision.skip]
    return sorted(decided) == sorted(due) and len(set(decided)) == len(decided)


HOURLY = Trigger(kind="cron", expr="0 * * * *", zone="UTC")
# The scheduler last fired 09:00, then was down for three periods.
CURSOR = utc("2026-03-02 09:00")


def downtime(now: datetime) -> list[datetime]:
    return HOURLY.fires(CURSOR, now)


@pytest.mark.parametrize(
    ("policy", "max_age", "fired", "skipped"),
    [
        # 12:10: 10:00, 11:00 and 12:00 all missed (12:00 by 10 minutes, beyond the grace)
        ("latest", HOUR, ["02 12:00"], ["02 10:00", "02 11:00"]),
        ("latest", 3 * HOUR, ["02 12:00"], ["02 10:00", "02 11:00"]),
        ("all", HOUR, ["02 12:00"], ["02 10:00", "02 11:00"]),
        ("all", 3 * HOUR, ["02 10:00", "02 11:00", "02 12:00"], []),
        ("none", 3 * HOUR, [], ["02 10:00", "02 11:00", "02 12:00"]),
    ],
)
def test_three_missed_periods(
    policy: CatchUp, max_age: timedelta, fired: list[str], skipped: list[str]
) -> None:
    now = utc("2026-03-02 12:10")
    due = downtime(now)
    assert hhmm(due) == ["02 10:00", "02 11:00", "02 12:00"]
    decision = apply_catch_up(policy, due, now, max_age=max_age)
    assert hhmm(decision.fire) == fired
    assert hhmm([nominal for nominal, _ in decision.skip]) == skipped
    assert covers_once(decision, due)
    assert all(reason for _, reason in decision.skip)


@pytest.mark.parametrize(
    ("policy", "fired", "skipped"),
    [
        # 12:03: 12:00 is on time (within the 5-minute grace) and fires under every policy
        ("latest", ["02 12:00"], ["02 10:00", "02 11:00"]),
        ("all", ["02 10:00", "02 11:00", "02 12:00"], []),
        ("none", ["02 12:00"], ["02 10:00", "02 11:00"]),
    ],
)
def test_an_on_time_occurrence_always_fires(
    policy: CatchUp, fired: list[str], skipped: list[str]
) -> None:
    now = utc("2026-03-02 12:03")
    decision = apply_catch_up(policy, downtime(now), now, max_age=3 * HOUR)
    assert hhmm(decision.fire) == fired
    assert hhmm([nominal for nominal, _ in decision.skip]) == skipped


def test_skip_reasons_say_why() -> None:
    now = utc("2026-03-02 12:10")
    latest = dict(apply_catch_up("latest", downtime(now), now, max_age=3 * HOUR).skip)
    assert latest[utc("2026-03-02 10:00")] == (
        "missed by 2h 10m; catch_up: latest sends only 2026-03-02 12:00:00Z"
    )
    too_old = dict(apply_catch_up("all", downtime(now), now, max_age=HOUR).skip)
    assert too_old[utc("2026-03-02 11:00")] == (
        "missed by 1h 10m, longer than max_catch_up_age (1h)"
    )
    none = dict(apply_catch_up("none", downtime(now), now, max_age=HOUR).skip)
    assert none[utc("2026-03-02 12:00")] == "missed by 10m (catch_up: none)"


def test_all_keeps_the_newest_up_to_the_cap() -> None:
    now = utc("2026-03-02 15:30")
    due = downtime(now)  # 10:00 .. 15:00
    decision = apply_catch_up("all", due, now, max_age=24 * HOUR, cap=2)
    assert hhmm(decision.fire) == ["02 14:00", "02 15:00"]
    assert len(decision.skip) == 4
    assert all("more than 2 occurrences" in reason for _, reason in decision.skip)


def test_a_daily_schedule_down_over_a_dst_change() -> None:
    """Berlin 09:00 daily, down from Friday to Monday 10:00 across the spring change."""
    daily = Trigger(kind="cron", expr="0 9 * * *", zone="Europe/Berlin")
    cursor = utc("2026-03-27 08:00")  # Friday 09:00 CET
    now = utc("2026-03-30 08:00")  # Monday 10:00 CEST
    max_age = daily.default_max_age()
    assert max_age == 24 * HOUR
    due = daily.fires(cursor, now)
    assert hhmm(due) == ["28 08:00", "29 07:00", "30 07:00"]
    decision = apply_catch_up("latest", due, now, max_age=max_age)
    assert hhmm(decision.fire) == ["30 07:00"]
    assert covers_once(decision, due)
    # Bounded by due_after, the pass never even looks at what could only be skipped for age.
    start = due_after(cursor, now, max_age=max_age)
    assert start == utc("2026-03-29 08:00")
    assert hhmm(daily.fires(start, now)) == ["30 07:00"]


def test_due_after_keeps_the_grace_when_the_period_is_shorter() -> None:
    now = utc("2026-03-02 12:00")
    minutely_age = default_max_age(timedelta(minutes=1))
    assert due_after(utc("2026-03-01"), now, max_age=minutely_age) == now - timedelta(minutes=5)
    assert due_after(now - HOUR, now, max_age=24 * HOUR) == now - HOUR


def test_default_max_age_is_one_period_at_most_a_day() -> None:
    assert default_max_age(timedelta(minutes=15)) == timedelta(minutes=15)
    assert default_max_age(timedelta(days=7)) == timedelta(hours=24)
    with pytest.raises(ValueError, match="positive"):
        default_max_age(timedelta(0))


def test_bad_calls_are_refused() -> None:
    now = utc("2026-03-02 12:00")
    with pytest.raises(ValueError, match="catch_up must be one of latest, all, none"):
        apply_catch_up("sometimes", [], now, max_age=HOUR)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not due yet"):
        apply_catch_up("all", [now + HOUR], now, max_age=HOUR)
    with pytest.raises(ValueError, match="cap"):
        apply_catch_up("all", [], now, max_age=HOUR, cap=0)
    with pytest.raises(ValueError, match="aware"):
        apply_catch_up("all", [datetime(2026, 3, 2)], now, max_age=HOUR)


def test_nothing_due_decides_nothing() -> None:
    assert apply_catch_up("latest", [], utc("2026-03-02"), max_age=HOUR) == CatchUpDecision()


@settings(max_examples=examples(150), deadline=None)
@given(
    st.sampled_from(["latest", "all", "none"]),
    st.lists(st.integers(0, 72 * 60), max_size=40, unique=True),
    st.integers(0, 48 * 60),
    st.integers(0, 10),
    st.integers(1, 50),
)
def test_every_due_occurrence_is_decided_exactly_once(
    policy: CatchUp, ages: list[int], max_age: int, grace: int, cap: int
) -> None:
    now = utc("2026-03-02 12:00")
    due = [now - timedelta(minutes=age) for age in ages]
    decision = apply_catch_up(
        policy,
        due,
        now,
        max_age=timedelta(minutes=max_age),
        grace=timedelta(minutes=grace),
        cap=cap,
    )
    assert covers_once(decision, due)
    assert decision.fire == sorted(decision.fire)
    on_time = [t for t in due if now - t <= timedelta(minutes=grace)]
    assert set(on_time) <= set(decision.fire)  # on time always fires
    missed_fired = [t for t in decision.fire if t not in on_time]
    assert all(now - t <= timedelta(minutes=max_age) for t in missed_fired)
    if policy == "none":
        assert missed_fired == []
    if policy == "latest":
        assert len(missed_fired) <= 1
        assert not (missed_fired and on_time)
    if policy == "all":
        assert len(missed_fired) <= cap
