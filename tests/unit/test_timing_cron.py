"""Cron fire times across DST (research scheduling.md §1.5 and §6), and cron input checking.

The golden tables are worked out by hand from the rule: a local time that happens twice fires
at the first; a local time skipped by a forward jump fires at the first instant after the gap;
fire times are deduplicated in UTC. No clock is read anywhere: the window is a parameter.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from campaigns.cron import CronError, cron_period, parse_cron
from scheduler.timing import cron_fires, cron_warnings, validate_cron

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
KOLKATA = ZoneInfo("Asia/Kolkata")


def utc(text: str) -> datetime:
    """'2026-03-29 01:00' read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expr: str, tz: ZoneInfo, after: str, until: str) -> list[str]:
    return [f"{f:%Y-%m-%d %H:%M}" for f in cron_fires(expr, tz, utc(after), utc(until))]


# (zone, expression, after, until, expected UTC fire times): each window is a whole week or a
# day around a 2026 transition, so a skipped or doubled occurrence changes the list.
GOLDEN = [
    pytest.param(
        BERLIN, "30 2 * * *", "2026-03-25 22:00", "2026-04-01 22:00",
        ["2026-03-26 01:30", "2026-03-27 01:30", "2026-03-28 01:30",
         "2026-03-29 01:00",  # 02:30 does not exist: 03:00 CEST, the end of the gap
         "2026-03-30 00:30", "2026-03-31 00:30", "2026-04-01 00:30"],
        id="berlin-spring-daily-0230",
    ),
    pytest.param(
        BERLIN, "30 1 * * *", "2026-03-25 22:00", "2026-04-01 22:00",
        ["2026-03-26 00:30", "2026-03-27 00:30", "2026-03-28 00:30", "2026-03-29 00:30",
         "2026-03-29 23:30", "2026-03-30 23:30", "2026-03-31 23:30"],
        id="berlin-spring-daily-0130",
    ),
    pytest.param(
        BERLIN, "30 2 * * *", "2026-10-21 22:00", "2026-10-28 23:00",
        ["2026-10-22 00:30", "2026-10-23 00:30", "2026-10-24 00:30",
         "2026-10-25 00:30",  # 02:30 happens twice: the first (CEST) only
         "2026-10-26 01:30", "2026-10-27 01:30", "2026-10-28 01:30"],
        id="berlin-fall-daily-0230",
    ),
    pytest.param(
        BERLIN, "30 1 * * *", "2026-10-21 22:00", "2026-10-28 23:00",
        ["2026-10-21 23:30", "2026-10-22 23:30", "2026-10-23 23:30", "2026-10-24 23:30",
         "2026-10-26 00:30", "2026-10-27 00:30", "2026-10-28 00:30"],
        id="berlin-fall-daily-0130",
    ),
    pytest.param(
        BERLIN, "0 * * * *", "2026-03-28 22:00", "2026-03-29 03:00",
        ["2026-03-28 23:00", "2026-03-29 00:00",
         "2026-03-29 01:00",  # 02:00 (gap) and 03:00 CEST are the same instant: once
         "2026-03-29 02:00", "2026-03-29 03:00"],
        id="berlin-spring-hourly",
    ),
    pytest.param(
        BERLIN, "0 * * * *", "2026-10-24 21:00", "2026-10-25 03:00",
        ["2026-10-24 22:00", "2026-10-24 23:00", "2026-10-25 00:00",
         # no 01:00Z: that is the second 02:00 (CET), already run at 00:00Z
         "2026-10-25 02:00", "2026-10-25 03:00"],
        id="berlin-fall-hourly",
    ),
    pytest.param(
        BERLIN, "*/30 2 * * *", "2026-03-27 22:00", "2026-03-30 22:00",
        ["2026-03-28 01:00", "2026-03-28 01:30",
         "2026-03-29 01:00",  # 02:00 and 02:30 both fall in the gap: one send at 03:00
         "2026-03-30 00:00", "2026-03-30 00:30"],
        id="berlin-spring-half-hourly-at-2",
    ),
    pytest.param(
        BERLIN, "*/30 2 * * *", "2026-10-23 22:00", "2026-10-26 22:00",
        ["2026-10-24 00:00", "2026-10-24 00:30",
         "2026-10-25 00:00", "2026-10-25 00:30",  # the first 02:00 and 02:30 only
         "2026-10-26 01:00", "2026-10-26 01:30"],
        id="berlin-fall-half-hourly-at-2",
    ),
    pytest.param(
        BERLIN, "30 2 * * sun", "2026-03-14 22:00", "2026-04-12 22:00",
        ["2026-03-15 01:30", "2026-03-22 01:30", "2026-03-29 01:00",
         "2026-04-05 00:30", "2026-04-12 00:30"],
        id="berlin-spring-weekly",
    ),
    pytest.param(
        BERLIN, "30 2 * * 7", "2026-10-10 22:00", "2026-11-01 22:00",
        ["2026-10-11 00:30", "2026-10-18 00:30", "2026-10-25 00:30", "2026-11-01 01:30"],
        id="berlin-fall-weekly-sunday-as-7",
    ),
    pytest.param(
        NEW_YORK, "0 * * * *", "2026-03-08 04:00", "2026-03-08 10:00",
        ["2026-03-08 05:00", "2026-03-08 06:00",
         "2026-03-08 07:00",  # 02:00 EST does not exist: 03:00 EDT, once
         "2026-03-08 08:00", "2026-03-08 09:00", "2026-03-08 10:00"],
        id="new-york-spring-hourly",
    ),
    pytest.param(
        NEW_YORK, "0 * * * *", "2026-11-01 03:00", "2026-11-01 09:00",
        ["2026-11-01 04:00", "2026-11-01 05:00",
         # no 06:00Z (01:00 EST, the repeat)
         "2026-11-01 07:00", "2026-11-01 08:00", "2026-11-01 09:00"],
        id="new-york-fall-hourly",
    ),
    pytest.param(
        NEW_YORK, "30 2 * * *", "2026-03-05 00:00", "2026-03-11 12:00",
        ["2026-03-05 07:30", "2026-03-06 07:30", "2026-03-07 07:30", "2026-03-08 07:00",
         "2026-03-09 06:30", "2026-03-10 06:30", "2026-03-11 06:30"],
        id="new-york-spring-daily-0230",
    ),
    pytest.param(
        NEW_YORK, "30 1 * * *", "2026-03-06 00:00", "2026-03-09 12:00",
        ["2026-03-06 06:30", "2026-03-07 06:30", "2026-03-08 06:30", "2026-03-09 05:30"],
        id="new-york-spring-daily-0130",
    ),
    pytest.param(
        NEW_YORK, "30 1 * * *", "2026-10-29 00:00", "2026-11-04 12:00",
        ["2026-10-29 05:30", "2026-10-30 05:30", "2026-10-31 05:30", "2026-11-01 05:30",
         "2026-11-02 06:30", "2026-11-03 06:30", "2026-11-04 06:30"],
        id="new-york-fall-daily-0130",
    ),
    pytest.param(
        NEW_YORK, "30 2 * * *", "2026-10-30 12:00", "2026-11-02 12:00",
        ["2026-10-31 06:30", "2026-11-01 07:30", "2026-11-02 07:30"],
        id="new-york-fall-daily-0230",
    ),
    pytest.param(
        NEW_YORK, "0 9 * * 0", "2026-10-17 12:00", "2026-11-08 18:00",
        ["2026-10-18 13:00", "2026-10-25 13:00", "2026-11-01 14:00", "2026-11-08 14:00"],
        id="new-york-fall-weekly",
    ),
    pytest.param(
        NEW_YORK, "*/30 2 * * *", "2026-03-07 00:00", "2026-03-09 12:00",
        ["2026-03-07 07:00", "2026-03-07 07:30", "2026-03-08 07:00",
         "2026-03-09 06:00", "2026-03-09 06:30"],
        id="new-york-spring-half-hourly-at-2",
    ),
    pytest.param(
        LORD_HOWE, "45 1 * * *", "2026-04-02 12:00", "2026-04-06 12:00",
        ["2026-04-02 14:45", "2026-04-03 14:45",
         "2026-04-04 14:45",  # 01:45 happens twice (30-minute fall back): the first only
         "2026-04-05 15:15"],
        id="lord-howe-fall-0145",
    ),
    pytest.param(
        LORD_HOWE, "15 2 * * *", "2026-10-01 12:00", "2026-10-05 12:00",
        ["2026-10-01 15:45", "2026-10-02 15:45",
         "2026-10-03 15:30",  # 02:15 falls in the 02:00-02:30 gap: 02:30
         "2026-10-04 15:15"],
        id="lord-howe-spring-0215",
    ),
    pytest.param(
        LORD_HOWE, "0 * * * *", "2026-10-03 13:00", "2026-10-03 17:00",
        ["2026-10-03 13:30", "2026-10-03 14:30", "2026-10-03 15:30", "2026-10-03 16:00",
         "2026-10-03 17:00"],
        id="lord-howe-spring-hourly",
    ),
    pytest.param(
        LORD_HOWE, "0 * * * *", "2026-04-04 12:00", "2026-04-04 17:00",
        ["2026-04-04 13:00", "2026-04-04 14:00", "2026-04-04 15:30", "2026-04-04 16:30"],
        id="lord-howe-fall-hourly",
    ),
    pytest.param(
        KOLKATA, "30 2 * * *", "2026-03-27 00:00", "2026-03-31 00:00",
        ["2026-03-27 21:00", "2026-03-28 21:00", "2026-03-29 21:00", "2026-03-30 21:00"],
        id="kolkata-daily-no-dst",
    ),
    pytest.param(
        KOLKATA, "0 * * * *", "2026-03-29 00:00", "2026-03-29 03:00",
        ["2026-03-29 00:30", "2026-03-29 01:30", "2026-03-29 02:30"],
        id="kolkata-hourly-half-hour-offset",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("tz", "expr", "after", "until", "expected"), GOLDEN)
def test_golden_dst_tables(
    tz: ZoneInfo, expr: str, after: str, until: str, expected: list[str]
) -> None:
    assert fires(expr, tz, after, until) == expected


@pytest.mark.parametrize(
    ("tz", "day", "count"),
    [
        (BERLIN, "2026-03-29", 23),  # 23 real hours, each fires once
        (BERLIN, "2026-10-25", 24),  # 25 real hours, 24 wall-clock hours: the repeat is skipped
        (NEW_YORK, "2026-03-08", 23),
        (NEW_YORK, "2026-11-01", 24),
        (KOLKATA, "2026-03-29", 24),
    ],
)
def test_hourly_fires_once_per_wall_clock_hour_on_a_transition_day(
    tz: ZoneInfo, day: str, count: int
) -> None:
    start = datetime.fromisoformat(day).replace(tzinfo=tz).astimezone(UTC)
    end = (datetime.fromisoformat(day) + timedelta(days=1)).replace(tzinfo=tz).astimezone(UTC)
    found = cron_fires("0 * * * *", tz, start - timedelta(seconds=1), end - timedelta(seconds=1))
    assert len(found) == count
    assert all(later - earlier >= timedelta(minutes=30) for earlier, later in pairwise(found))


def test_the_window_is_open_at_the_start_and_closed_at_the_end() -> None:
    at_nine = utc("2026-01-05 09:00")
    assert cron_fires("0 9 * * *", UTC_ZONE, at_nine, at_nine + timedelta(days=1)) == [
        at_nine + timedelta(days=1)
    ]
    assert cron_fires("0 9 * * *", UTC_ZONE, at_nine - timedelta(seconds=1), at_nine) == [at_nine]
    assert cron_fires("0 9 * * *", UTC_ZONE, at_nine, at_nine) == []


UTC_ZONE = ZoneInfo("UTC")


def test_limit_keeps_the_earliest() -> None:
    found = cron_fires("* * * * *", UTC_ZONE, utc("2026-01-01 00:00"), utc("2026-02-01"), limit=3)
    assert found == [utc("2026-01-01 00:01"), utc("2026-01-01 00:02"), utc("2026-01-01 00:03")]
    assert cron_fires("* * * * *", UTC_ZONE, utc("2026-01-01"), utc("2026-02-01"), limit=0) == []


def test_fire_times_are_whole_seconds_even_for_a_window_with_microseconds() -> None:
    after = datetime(2026, 1, 1, 8, 59, 59, 999_999, tzinfo=UTC)
    (fire,) = cron_fires("0 9 * * *", UTC_ZONE, after, after + timedelta(hours=1))
    assert fire == utc("2026-01-01 09:00")
    assert fire.microsecond == 0
    assert fire.tzinfo is UTC


def test_the_window_may_be_given_in_any_zone_but_not_naive() -> None:
    after = datetime(2026, 1, 1, 10, 0, tzinfo=BERLIN)  # 09:00Z
    assert cron_fires("0 9 * * *", UTC_ZONE, after - timedelta(seconds=1), after) == [
        utc("2026-01-01 09:00")
    ]
    with pytest.raises(ValueError, match="aware"):
        cron_fires("0 9 * * *", UTC_ZONE, datetime(2026, 1, 1), utc("2026-01-02"))


def test_vixie_day_fields_either_matches_when_both_are_set() -> None:
    # the 1st and 15th, and every Friday, January 2026 (the 2nd, 9th, 16th, 23rd, 30th)
    found = fires("0 9 1,15 * fri", UTC_ZONE, "2026-01-01 00:00", "2026-01-31 23:00")
    days = [int(f[8:10]) for f in found]
    assert days == [1, 2, 9, 15, 16, 23, 30]


def test_a_day_field_starting_with_a_star_restricts_together_with_the_other() -> None:
    # Vixie: "*/2" does not count as set, so the days are ANDed: Mondays that are odd days.
    found = fires("0 9 */2 * mon", UTC_ZONE, "2026-01-01 00:00", "2026-02-28 23:00")
    assert [f[:10] for f in found] == ["2026-01-05", "2026-01-19", "2026-02-09", "2026-02-23"]


def test_a_full_range_day_field_still_counts_as_set() -> None:
    # "1-31" is restricted (it does not start with "*"): every day OR Mondays = every day.
    assert len(fires("0 9 1-31 * mon", UTC_ZONE, "2026-01-01 00:00", "2026-01-31 23:00")) == 31


def test_names_macros_and_sunday_spellings() -> None:
    window = ("2026-01-01 00:00", "2026-01-31 23:59")
    sundays = fires("0 9 * * sun", UTC_ZONE, *window)
    assert len(sundays) == 4
    assert fires("0 9 * * 0", UTC_ZONE, *window) == sundays
    assert fires("0 9 * * 7", UTC_ZONE, *window) == sundays
    assert fires("0 9 * JAN SUN", UTC_ZONE, *window) == sundays
    assert fires("@daily", UTC_ZONE, *window) == fires("0 0 * * *", UTC_ZONE, *window)
    assert fires("@weekly", UTC_ZONE, *window) == fires("0 0 * * 0", UTC_ZONE, *window)
    assert fires("0 9 * * fri-sun", UTC_ZONE, *window) == fires("0 9 * * 5-7", UTC_ZONE, *window)


def test_ranges_with_steps() -> None:
    assert parse_cron("5-59/15 * * * *").minutes == {5, 20, 35, 50}
    assert parse_cron("*/20 * * * *").minutes == {0, 20, 40}
    assert parse_cron("0 */7 * * *").hours == {0, 7, 14, 21}
    assert parse_cron("0 0 * * */2").weekdays == {0, 2, 4, 6}
    assert parse_cron("0 0 * * 1-7/2").weekdays == {1, 3, 5, 0}
    assert parse_cron("0 0 * jan-dec/3 *").months == {1, 4, 7, 10}
    assert parse_cron("7-7 * * * *").minutes == {7}  # croniter would read every minute
    assert parse_cron("0 0 * * sat-sun").weekdays == {6, 0}
    assert parse_cron("0 0 * * sun-sun").weekdays == {0}


def test_a_leap_day_schedule_runs_every_four_years() -> None:
    found = fires("0 0 29 2 *", UTC_ZONE, "2026-01-01 00:00", "2033-01-01 00:00")
    assert found == ["2028-02-29 00:00", "2032-02-29 00:00"]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("0 9 * *", "has 4"),
        ("0 0 9 * * *", "seconds"),  # a leading seconds field (Quartz, Spring)
        ("0 0 9 * * * 2026", "seconds and year"),
        ("60 * * * *", "minute 60 is out of range (0-59)"),
        ("0 24 * * *", "hour 24 is out of range (0-23)"),
        ("0 0 0 * *", "day-of-month 0 is out of range (1-31)"),
        ("0 0 32 * *", "day-of-month 32 is out of range"),
        ("0 0 * 13 *", "month 13 is out of range (1-12)"),
        ("0 0 * * 8", "day-of-week 8 is out of range (0-7)"),
        ("0 0 * foo *", "neither a number nor a name (jan-dec)"),
        ("0 0 * * funday", "neither a number nor a name (sun-sat)"),
        ("x * * * *", "minute 'x' is not a number"),
        ("*/0 * * * *", "step must be between 1 and 60, not 0"),
        ("*/61 * * * *", "step must be between 1 and 60, not 61"),
        ("5/15 * * * *", "write 5-59/15"),
        ("50-10 * * * *", "minute range '50-10' runs backwards"),
        ("0 0 * * wed-mon", "runs backwards"),
        ("1,,2 * * * *", "empty item"),
        ("-5 * * * *", "not a value, a range"),
        ("0 0 L * *", "extension"),
        ("0 0 15W * *", "'15W'"),
        ("0 0 ? * *", "'?' is not standard cron syntax"),
        ("0 0 * * 1#2", "'#' is not standard cron syntax"),
        ("H * * * *", "extension"),
        ("0 0 30 2 *", "never runs: day 30 does not occur in feb"),
        ("0 0 31 4,6,9,11 *", "never runs: day 31 does not occur in apr,jun,sep,nov"),
        ("@reboot", "not a cron shorthand"),
        ("0 9 * * 1-5 America/Chicago", "time zone goes in the schedule's timezone:"),
        ("CRON_TZ=Europe/Berlin 0 9 * * *", "time zone goes in"),
        ("0 9 * * * Etc/GMT+5", "time zone goes in"),
        ("99999999999999999999 * * * *", "minute '9999999999"),
        ("*/99999999999999999999 * * * *", "not '9999999999"),
        ("² * * * *", "not standard cron syntax"),  # a digit only in Unicode
        ("ſ * * * *", "not standard cron syntax"),  # long s: a letter only in Unicode
        ("x" * 5000, "has 1"),
    ],
)
def test_bad_expressions_are_explained(expr: str, message: str) -> None:
    error = validate_cron(expr)
    assert error is not None
    assert message in error
    assert len(error) < 300  # a short excerpt of the input, never all of it
    with pytest.raises(CronError) as raised:
        cron_fires(expr, UTC_ZONE, utc("2026-01-01"), utc("2026-01-02"))
    assert str(raised.value) == error


@pytest.mark.parametrize(
    "expr",
    ["0 9 * * mon-fri", "*/5 * * * *", "0 0 1 1 *", "@hourly", "  0   9 * * *  ", "0 0 31 2 sun"],
)
def test_good_expressions_pass(expr: str) -> None:
    assert validate_cron(expr) is None


def test_warnings() -> None:
    assert cron_warnings("0 9 * * mon") == []
    assert cron_warnings("not cron") == []
    (either,) = cron_warnings("0 9 1,15 * fri")
    assert "EITHER" in either
    assert "Vixie" in either
    both, cycle = cron_warnings("0 9 */2 * mon")
    assert "BOTH" in both
    assert "starts again every month" in cycle
    (week,) = cron_warnings("0 9 * * */2")
    assert "starts again every week" in week
    assert cron_warnings("0 0 29 2 *") == [
        "the schedule runs only on 29 February, once every four years"
    ]


@pytest.mark.parametrize(
    ("expr", "period"),
    [
        ("* * * * *", timedelta(minutes=1)),
        ("*/5 * * * *", timedelta(minutes=5)),
        ("0 * * * *", timedelta(hours=1)),
        ("0 9 * * *", timedelta(days=1)),
        ("0 9 * * mon-fri", timedelta(days=1)),
        ("0 9 * * mon", timedelta(days=7)),
        ("0 9,17 * * *", timedelta(hours=8)),
        ("0 9 1 * *", timedelta(days=28)),
        ("0 0 29 2 *", timedelta(days=1461)),
    ],
)
def test_period_is_the_shortest_gap(expr: str, period: timedelta) -> None:
    assert cron_period(expr) == period
