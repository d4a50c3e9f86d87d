"""Intervals, triggers and step planning (research scheduling.md §1.5, §4 "Herald drip
semantics"): `every` is elapsed UTC time; `at` pins calendar days in the step's zone."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.wallclock import SendWindow, UnknownZone, local_at
from scheduler.timing import (
    StepTiming,
    Trigger,
    interval_fires,
    plan_chain,
    plan_step,
)
from tests.support.examples import examples

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
MON_FRI = frozenset(range(5))
NINE = time(9, 0)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str, tz: ZoneInfo = BERLIN) -> datetime:
    """A wall time that exists once, as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=tz).astimezone(UTC)


def wall(moment: datetime, tz: ZoneInfo = BERLIN) -> str:
    return f"{moment.astimezone(tz):%a %Y-%m-%d %H:%M %Z}"


# --- every: elapsed time -------------------------------------------------------------------


def test_every_six_hours_is_elapsed_time_across_spring_forward() -> None:
    anchor = local("2026-03-28 06:00")  # 05:00Z
    found = interval_fires(6 * HOUR, anchor, anchor - HOUR, utc("2026-03-29 12:00"))
    assert [f"{f:%d %H:%M}" for f in found] == [
        "28 05:00", "28 11:00", "28 17:00", "28 23:00", "29 05:00", "29 11:00",
    ]  # fmt: skip
    assert [f"{f.astimezone(BERLIN):%H:%M}" for f in found] == [
        "06:00", "12:00", "18:00", "00:00", "07:00", "13:00",  # the wall clock moves an hour
    ]  # fmt: skip


def test_every_six_hours_across_fall_back_in_new_york() -> None:
    anchor = local("2026-10-31 18:00", NEW_YORK)  # 22:00Z
    found = interval_fires(6 * HOUR, anchor, anchor, utc("2026-11-01 16:00"))
    assert [f"{f:%d %H:%M}" for f in found] == ["01 04:00", "01 10:00", "01 16:00"]
    assert [f"{f.astimezone(NEW_YORK):%H:%M}" for f in found] == ["00:00", "05:00", "11:00"]


def test_interval_window_bounds_and_anchor() -> None:
    anchor = utc("2026-01-01 00:00")
    assert interval_fires(HOUR, anchor, anchor - DAY, anchor) == [anchor]  # n = 0 included
    assert interval_fires(HOUR, anchor, anchor, anchor + HOUR) == [anchor + HOUR]
    assert interval_fires(HOUR, anchor, anchor + 90 * timedelta(minutes=1), anchor + 3 * HOUR) == [
        anchor + 2 * HOUR,
        anchor + 3 * HOUR,
    ]
    assert len(interval_fires(timedelta(minutes=1), anchor, anchor, anchor + DAY, limit=5)) == 5
    fractional = anchor + timedelta(microseconds=500)
    assert interval_fires(HOUR, fractional, anchor - DAY, anchor) == [anchor]


@pytest.mark.parametrize("every", [timedelta(0), -HOUR, timedelta(seconds=1.5)])
def test_bad_intervals(every: timedelta) -> None:
    with pytest.raises(ValueError, match="every must be"):
        interval_fires(every, utc("2026-01-01"), utc("2026-01-01"), utc("2026-01-02"))


# --- triggers ------------------------------------------------------------------------------


def test_cron_trigger_bounds_are_inclusive() -> None:
    trigger = Trigger(
        kind="cron",
        expr="0 9 * * *",
        zone="Europe/Berlin",
        start=local("2026-03-02 09:00"),
        end=local("2026-03-04 09:00"),
    )
    found = trigger.fires(utc("2026-01-01"), utc("2027-01-01"))
    assert [wall(f) for f in found] == [
        "Mon 2026-03-02 09:00 CET", "Tue 2026-03-03 09:00 CET", "Wed 2026-03-04 09:00 CET",
    ]  # fmt: skip
    assert trigger.next_after(utc("2026-03-03 07:59"), 5) == found[1:]
    assert trigger.next_after(found[1], 5) == found[2:]
    assert trigger.next_after(utc("2026-03-05"), 5) == []


def test_every_trigger_counts_from_its_start_rounded_up_to_a_second() -> None:
    start = utc("2026-01-01 10:00") + timedelta(microseconds=1)
    trigger = Trigger(kind="every", every=6 * HOUR, start=start)
    assert trigger.next_after(start - DAY, 2) == [
        utc("2026-01-01 10:00:01"),
        utc("2026-01-01 16:00:01"),
    ]
    assert trigger.period == 6 * HOUR
    assert trigger.default_max_age() == 6 * HOUR


def test_once_trigger() -> None:
    at = local("2026-03-09 09:00")
    trigger = Trigger(kind="once", at=at, zone="Europe/Berlin")
    assert trigger.next_after(at - DAY, 3) == [at]
    assert trigger.next_after(at) == []
    assert trigger.fires(at - DAY, at) == [at]
    assert trigger.fires(at - DAY, at - HOUR) == []
    assert trigger.period is None
    assert trigger.default_max_age() == 24 * HOUR


def test_cron_trigger_period_and_default_age() -> None:
    assert Trigger(kind="cron", expr="*/10 * * * *").default_max_age() == timedelta(minutes=10)
    assert Trigger(kind="cron", expr="0 9 * * mon").default_max_age() == 24 * HOUR


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"kind": "cron"}, ValueError, "needs an expression"),
        ({"kind": "cron", "expr": "0 9 * *"}, ValueError, "has 4"),
        ({"kind": "cron", "expr": "0 9 * * *", "zone": "Mars/Base"}, UnknownZone, "Mars"),
        ({"kind": "every", "every": HOUR}, ValueError, "needs a duration and a start"),
        ({"kind": "every", "every": timedelta(0), "start": utc("2026-01-01")}, ValueError, "every"),
        ({"kind": "once"}, ValueError, "needs its time"),
        ({"kind": "once", "at": datetime(2026, 1, 1)}, ValueError, "aware"),
        ({"kind": "weekly"}, ValueError, "unknown trigger kind"),
        ({"kind": "cron", "expr": "0 9 * * *", "every": HOUR}, ValueError, "takes no every"),
        ({"kind": "once", "at": utc("2026-01-01"), "expr": "* * * * *"}, ValueError, "no expr"),
        (
            {"kind": "cron", "expr": "0 9 * * *", "start": utc("2026-02-01"),
             "end": utc("2026-01-01")},
            ValueError,
            "end lies before its start",
        ),
    ],
)  # fmt: skip
def test_bad_triggers(fields: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Trigger(**fields)  # type: ignore[arg-type]


# --- plan_step -----------------------------------------------------------------------------


def test_monday_evening_plus_one_day_at_nine_is_tuesday_nine() -> None:
    due = plan_step(local("2026-03-02 21:00"), after=DAY, at=NINE, tz=BERLIN)
    assert wall(due) == "Tue 2026-03-03 09:00 CET"


@pytest.mark.parametrize(
    ("anchor", "expected"),
    [
        ("2026-03-02 08:00", "Mon 2026-03-02 09:00 CET"),  # not passed yet: the same day
        ("2026-03-02 09:00", "Mon 2026-03-02 09:00 CET"),  # exactly then: now
        ("2026-03-02 09:30", "Tue 2026-03-03 09:00 CET"),  # passed: the next day
    ],
)
def test_after_zero_at_nine(anchor: str, expected: str) -> None:
    assert wall(plan_step(local(anchor), after=timedelta(0), at=NINE, tz=BERLIN)) == expected


def test_weekdays_roll_forward() -> None:
    friday_evening = local("2026-03-06 21:00")
    due = plan_step(friday_evening, after=DAY, at=NINE, on=MON_FRI, tz=BERLIN)
    assert wall(due) == "Mon 2026-03-09 09:00 CET"
    saturday = frozenset({5})
    # Braze's "next Saturday": entered on a Saturday after the time, a week later
    due = plan_step(local("2026-03-07 10:00"), after=timedelta(0), at=NINE, on=saturday, tz=BERLIN)
    assert wall(due) == "Sat 2026-03-14 09:00 CET"
    due = plan_step(local("2026-03-07 08:00"), after=timedelta(0), at=NINE, on=saturday, tz=BERLIN)
    assert wall(due) == "Sat 2026-03-07 09:00 CET"


def test_a_remainder_of_hours_is_waited_before_the_calendar_days() -> None:
    monday_morning = local("2026-03-02 08:00")
    due = plan_step(monday_morning, after=12 * HOUR, at=NINE, tz=BERLIN)
    assert wall(due) == "Tue 2026-03-03 09:00 CET"  # at least 12 h, then the next 09:00
    due = plan_step(local("2026-03-02 21:00"), after=DAY + 12 * HOUR, at=NINE, tz=BERLIN)
    assert wall(due) == "Wed 2026-03-04 09:00 CET"  # Tue 09:00, then one calendar day


def test_without_at_after_is_elapsed_time_across_dst() -> None:
    saturday_nine = local("2026-03-28 09:00")  # 08:00Z, CET
    assert wall(plan_step(saturday_nine, after=DAY)) == "Sun 2026-03-29 10:00 CEST"
    assert wall(plan_step(saturday_nine, after=DAY, at=NINE, tz=BERLIN)) == (
        "Sun 2026-03-29 09:00 CEST"  # calendar day: 23 hours later
    )


def test_at_in_the_spring_gap_and_the_fall_repeat() -> None:
    gap = plan_step(local("2026-03-28 12:00"), after=DAY, at=time(2, 30), tz=BERLIN)
    assert gap == utc("2026-03-29 01:00")  # 03:00 CEST, the end of the gap
    repeat = plan_step(local("2026-10-24 12:00"), after=DAY, at=time(2, 30), tz=BERLIN)
    assert repeat == utc("2026-10-25 00:30")  # the first 02:30 (CEST)
    assert wall(repeat) == "Sun 2026-10-25 02:30 CEST"


def test_the_step_zone_decides_the_instant() -> None:
    anchor = utc("2026-03-02 12:00")
    berlin = plan_step(anchor, after=DAY, at=NINE, tz=BERLIN)
    new_york = plan_step(anchor, after=DAY, at=NINE, tz=NEW_YORK)
    assert berlin == utc("2026-03-03 08:00")
    assert new_york == utc("2026-03-03 14:00")


def test_a_window_moves_the_step_to_its_next_opening() -> None:
    office = SendWindow(days=MON_FRI, start=9 * 60, end=17 * 60, zone="Europe/Berlin")
    friday_four = local("2026-03-06 16:00")
    assert wall(plan_step(friday_four, after=2 * HOUR, window=office)) == (
        "Mon 2026-03-09 09:00 CET"
    )
    assert plan_step(friday_four, after=HOUR / 2, window=office) == friday_four + HOUR / 2


@pytest.mark.parametrize(
    ("anchor", "expected"),
    [
        # 29 March: the 01:00-03:00 window lasts one real hour (02:00-03:00 does not exist)
        ("2026-03-28 23:30", "2026-03-29 00:00"),  # 00:30 CET: waits for 01:00 CET
        ("2026-03-29 00:30", "2026-03-29 00:30"),  # 01:30 CET: open
        ("2026-03-29 01:00", "2026-03-29 23:00"),  # 03:00 CEST: closed until tomorrow 01:00
        # 25 October: three real hours (02:00-03:00 happens twice)
        ("2026-10-24 22:30", "2026-10-24 23:00"),  # 00:30 CEST: waits for 01:00 CEST
        ("2026-10-25 01:30", "2026-10-25 01:30"),  # the second 02:30 (CET): still open
        ("2026-10-25 02:00", "2026-10-26 00:00"),  # 03:00 CET: closed until tomorrow 01:00
    ],
)
def test_a_night_window_across_dst(anchor: str, expected: str) -> None:
    night = SendWindow(days=frozenset(range(7)), start=60, end=180, zone="Europe/Berlin")
    assert plan_step(utc(anchor), after=timedelta(0), window=night) == utc(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"after": -HOUR}, "must not be negative"),
        ({"after": DAY, "at": NINE}, "at: needs a time zone"),
        ({"after": DAY, "on": MON_FRI}, "on: needs at:"),
        ({"after": DAY, "at": NINE, "tz": BERLIN, "on": frozenset()}, "at least one weekday"),
        ({"after": DAY, "at": NINE, "tz": BERLIN, "on": frozenset({7})}, "at least one weekday"),
    ],
)
def test_bad_steps(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_step(utc("2026-03-02 12:00"), **kwargs)  # type: ignore[arg-type]


def test_plan_chain_follows_the_planned_times() -> None:
    """Customer.io's example: Mon 18:00 + 2 d is Wed 18:00, the window moves it to Thu 09:00,
    and the next step counts from there."""
    office = SendWindow(days=MON_FRI, start=9 * 60, end=17 * 60, zone="Europe/Berlin")
    steps = [
        StepTiming(),
        StepTiming(after=2 * DAY),
        StepTiming(after=DAY),
        StepTiming(after=DAY, at=time(10, 0), on=frozenset({0}), zone=BERLIN),
    ]
    due = plan_chain(local("2026-03-02 18:00"), steps, window=office)
    assert [wall(d) for d in due] == [
        "Tue 2026-03-03 09:00 CET",  # Monday 18:00 is after hours
        "Thu 2026-03-05 09:00 CET",
        "Fri 2026-03-06 09:00 CET",
        "Mon 2026-03-09 10:00 CET",
    ]
    assert plan_chain(local("2026-03-02 18:00"), []) == []


# --- properties ----------------------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]


@settings(max_examples=examples(150), deadline=None)
@given(
    anchor=st.datetimes(datetime(2025, 1, 1), datetime(2028, 1, 1), timezones=st.just(UTC)),
    after_minutes=st.integers(0, 10 * 24 * 60),
    at=st.times(),
    on=st.none() | st.frozensets(st.integers(0, 6), min_size=1),
    zone_name=st.sampled_from(ZONES),
)
def test_a_step_with_at_is_the_first_allowed_day(
    anchor: datetime, after_minutes: int, at: time, on: frozenset[int] | None, zone_name: str
) -> None:
    tz = ZoneInfo(zone_name)
    after = timedelta(minutes=after_minutes)
    due = plan_step(anchor, after=after, at=at, on=on, tz=tz)
    days, remainder = divmod(after, DAY)
    earliest = anchor + remainder
    first_day = earliest.astimezone(tz).date() + timedelta(days=days)
    day = due.astimezone(tz).date()
    if due.astimezone(tz).time() != at.replace(microsecond=0):  # only in a spring gap
        day = (due - timedelta(seconds=1)).astimezone(tz).date()
    assert due == local_at(day, at, tz)
    assert due >= earliest
    assert day >= first_day
    assert on is None or day.weekday() in on
    # no earlier allowed day would have done
    candidate = first_day
    while candidate < day:
        assert local_at(candidate, at, tz) < earliest or (
            on is not None and candidate.weekday() not in on
        )
        candidate += DAY
    # and a later anchor never plans an earlier step
    assert plan_step(anchor + HOUR, after=after, at=at, on=on, tz=tz) >= due
