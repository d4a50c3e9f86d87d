"""dispatch.wallclock.SendWindow: open/closed and the next opening, across DST changes in
Europe/Berlin and America/New_York, windows that cross midnight, and a property over random
windows, zones and instants: the next opening is never before the instant and is open."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dispatch.wallclock import SendWindow
from tests.support.examples import examples

WEEKDAYS = frozenset(range(5))
EVERY_DAY = frozenset(range(7))


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def hours(start: str, end: str) -> tuple[int, int]:
    def minutes(text: str) -> int:
        h, m = text.split(":")
        return int(h) * 60 + int(m)

    return minutes(start), minutes(end)


def window(days: frozenset[int], span: str, zone: str) -> SendWindow:
    start, end = hours(*span.split("-"))
    return SendWindow(days, start, end, zone)


# ---------------------------------------------------------------------- plain days


def test_office_hours_are_half_open_in_local_time() -> None:
    office = window(WEEKDAYS, "09:00-17:00", "Europe/Berlin")
    # Monday 2 March 2026, CET (UTC+1): 09:00 local is 08:00 UTC.
    assert office.contains(utc(2026, 3, 2, 8, 0))
    assert not office.contains(utc(2026, 3, 2, 7, 59, 59))
    assert office.contains(utc(2026, 3, 2, 15, 59, 59))
    assert not office.contains(utc(2026, 3, 2, 16, 0))  # 17:00 local: closed
    assert office.next_opening(utc(2026, 3, 2, 12, 0)) == utc(2026, 3, 2, 12, 0)
    assert office.next_opening(utc(2026, 3, 2, 16, 0)) == utc(2026, 3, 3, 8, 0)
    # Friday evening → Monday morning.
    assert office.next_opening(utc(2026, 3, 6, 18, 0)) == utc(2026, 3, 9, 8, 0)


def test_a_window_crossing_midnight_belongs_to_the_day_it_opens() -> None:
    late = window(frozenset({4}), "22:00-02:00", "UTC")  # Friday 22:00 to Saturday 02:00
    assert late.contains(utc(2026, 3, 6, 22, 0))  # Friday
    assert late.contains(utc(2026, 3, 7, 1, 59))  # Saturday, still Friday's opening
    assert not late.contains(utc(2026, 3, 7, 2, 0))
    assert not late.contains(utc(2026, 3, 7, 22, 30))  # Saturday's own evening: closed
    assert not late.contains(utc(2026, 3, 6, 1, 0))  # Thursday's night was never open
    assert late.next_opening(utc(2026, 3, 7, 3, 0)) == utc(2026, 3, 13, 22, 0)


def test_a_window_crossing_midnight_in_a_zone() -> None:
    nightly = window(EVERY_DAY, "23:30-00:30", "America/New_York")
    # 23:30 EST on 2 March is 04:30 UTC on 3 March.
    assert nightly.next_opening(utc(2026, 3, 3, 0, 0)) == utc(2026, 3, 3, 4, 30)
    assert nightly.contains(utc(2026, 3, 3, 5, 29))
    assert not nightly.contains(utc(2026, 3, 3, 5, 30))


def test_a_whole_day_is_written_00_00_24_00() -> None:
    sunday = window(frozenset({6}), "00:00-24:00", "Europe/Berlin")
    assert sunday.contains(utc(2026, 3, 7, 23, 0))  # Sunday 00:00 CET
    assert not sunday.contains(utc(2026, 3, 8, 23, 0))  # Monday 00:00 CET
    assert sunday.next_opening(utc(2026, 3, 9, 12, 0)) == utc(2026, 3, 14, 23, 0)


def test_an_empty_window_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        window(EVERY_DAY, "09:00-09:00", "UTC")
    with pytest.raises(ValueError, match="at least one day"):
        SendWindow(frozenset(), 0, 60, "UTC")


def test_json_round_trip() -> None:
    office = window(WEEKDAYS, "09:00-17:30", "America/New_York")
    assert SendWindow.from_json(office.to_json()) == office
    assert office.describe() == "mon,tue,wed,thu,fri 09:00-17:30 America/New_York"


# ---------------------------------------------------------------------- DST in Europe/Berlin


def test_berlin_spring_forward_a_window_inside_the_gap_does_not_open_that_day() -> None:
    # Sunday 29 March 2026: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    gap = window(EVERY_DAY, "02:00-03:00", "Europe/Berlin")
    assert not gap.contains(utc(2026, 3, 29, 1, 0))
    assert gap.next_opening(utc(2026, 3, 29, 0, 30)) == utc(2026, 3, 30, 0, 0)  # 02:00 CEST


def test_a_one_day_window_whose_opening_falls_in_the_gap_opens_the_week_after() -> None:
    sunday_night = window(frozenset({6}), "02:00-03:00", "Europe/Berlin")
    # From Monday 23 March: Sunday 29 March has no 02:00-03:00, so Sunday 5 April (CEST).
    assert sunday_night.next_opening(utc(2026, 3, 23, 12, 0)) == utc(2026, 4, 5, 0, 0)


def test_berlin_spring_forward_a_window_starting_in_the_gap_opens_after_it() -> None:
    window_ = window(EVERY_DAY, "02:30-04:00", "Europe/Berlin")
    assert window_.next_opening(utc(2026, 3, 29, 0, 45)) == utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    assert window_.contains(utc(2026, 3, 29, 1, 59))
    assert not window_.contains(utc(2026, 3, 29, 2, 0))  # 04:00 CEST
    # The hour before the jump is not inside the window: it is 01:xx local time.
    assert not window_.contains(utc(2026, 3, 29, 0, 59))


def test_berlin_fall_back_an_ambiguous_window_means_its_first_occurrence() -> None:
    # Sunday 25 October 2026: 03:00 CEST falls back to 02:00 CET (01:00 UTC).
    twice = window(EVERY_DAY, "02:00-02:30", "Europe/Berlin")
    assert twice.contains(utc(2026, 10, 25, 0, 0))  # 02:00 CEST, the first
    assert twice.contains(utc(2026, 10, 25, 0, 29))
    assert not twice.contains(utc(2026, 10, 25, 1, 10))  # 02:10 CET, the repeat
    assert twice.next_opening(utc(2026, 10, 25, 0, 40)) == utc(2026, 10, 26, 1, 0)  # 02:00 CET


def test_berlin_office_hours_follow_the_clock_change() -> None:
    office = window(WEEKDAYS, "09:00-17:00", "Europe/Berlin")
    # Friday 27 March (CET) → Monday 30 March (CEST): 09:00 local is 07:00 UTC.
    assert office.next_opening(utc(2026, 3, 27, 17, 0)) == utc(2026, 3, 30, 7, 0)
    # Friday 23 October (CEST) → Monday 26 October (CET): 09:00 local is 08:00 UTC.
    assert office.next_opening(utc(2026, 10, 23, 16, 0)) == utc(2026, 10, 26, 8, 0)


# ---------------------------------------------------------------------- DST in America/New_York


def test_new_york_spring_forward_shortens_a_window_across_the_gap() -> None:
    # Sunday 8 March 2026: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
    night = window(EVERY_DAY, "01:30-03:30", "America/New_York")
    assert night.next_opening(utc(2026, 3, 8, 5, 0)) == utc(2026, 3, 8, 6, 30)  # 01:30 EST
    assert night.contains(utc(2026, 3, 8, 7, 0))  # 03:00 EDT
    assert not night.contains(utc(2026, 3, 8, 7, 30))  # 03:30 EDT: one real hour later


def test_new_york_fall_back_lengthens_a_window_across_the_repeat() -> None:
    # Sunday 1 November 2026: 02:00 EDT falls back to 01:00 EST (06:00 UTC).
    night = window(EVERY_DAY, "00:30-02:00", "America/New_York")
    assert night.contains(utc(2026, 11, 1, 4, 30))  # 00:30 EDT
    assert night.contains(utc(2026, 11, 1, 6, 30))  # 01:30 EST, the repeated hour
    assert not night.contains(utc(2026, 11, 1, 7, 0))  # 02:00 EST
    assert night.next_opening(utc(2026, 11, 1, 7, 0)) == utc(2026, 11, 2, 5, 30)


def test_new_york_weekend_over_each_clock_change() -> None:
    office = window(WEEKDAYS, "09:00-17:00", "America/New_York")
    assert office.next_opening(utc(2026, 3, 6, 23, 0)) == utc(2026, 3, 9, 13, 0)  # → EDT
    assert office.next_opening(utc(2026, 10, 30, 21, 30)) == utc(2026, 11, 2, 14, 0)  # → EST


# ---------------------------------------------------------------------- the property

ZONES = sorted(available_timezones())
SPECIAL = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "UTC"]

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)


@st.composite
def open_windows(draw: st.DrawFn) -> SendWindow:
    start = draw(st.integers(0, 1439))
    end = draw(st.integers(0, 1440).filter(lambda e: e != start))
    days = draw(st.frozensets(st.integers(0, 6), min_size=1))
    zone = draw(st.one_of(st.sampled_from(SPECIAL), st.sampled_from(ZONES)))
    return SendWindow(days, start, end, zone)


@settings(max_examples=examples(400), deadline=None)
@given(window_=open_windows(), at=instants)
# An opening wholly inside a forward jump (Berlin's 02:00-03:00 on 29 March 2026), and the
# day Samoa skipped (Friday 30 December 2011 never happened in Pacific/Apia).
@example(window_=SendWindow(EVERY_DAY, 120, 180, "Europe/Berlin"), at=utc(2026, 3, 29, 0, 30))
@example(window_=SendWindow(frozenset({4}), 540, 600, "Pacific/Apia"), at=utc(2011, 12, 29, 0))
def test_the_next_opening_is_not_before_the_instant_and_is_open(
    window_: SendWindow, at: datetime
) -> None:
    opening = window_.next_opening(at)
    assert opening >= at
    assert window_.contains(opening)
    if window_.contains(at):
        assert opening == at
    # Nothing between the instant and the opening is open (checked at a few points).
    gap = opening - at
    for tenth in range(10):
        probe = at + gap * tenth / 10
        if probe < opening:
            assert not window_.contains(probe), (probe, opening)
    assert gap < timedelta(days=15)


def test_a_zone_name_is_looked_up_once_known_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """An audience's timezone column repeats one spelling row after row: a name the machine
    does not know (a search of every zone directory and an import of tzdata each time, about
    160 µs) is remembered as well as a known one."""
    from dispatch import wallclock

    looked_up: list[str] = []

    def counting(name: str) -> ZoneInfo:
        looked_up.append(name)
        return ZoneInfo(name)

    wallclock._known.cache_clear()
    monkeypatch.setattr(wallclock, "ZoneInfo", counting)
    try:
        for _ in range(3):
            with pytest.raises(wallclock.UnknownZone):
                wallclock.zone("CET+1")
            assert str(wallclock.zone("Europe/Berlin")) == "Europe/Berlin"
        with pytest.raises(wallclock.UnknownZone):
            wallclock.zone("../etc/passwd")  # refused before any lookup
    finally:
        wallclock._known.cache_clear()
    assert looked_up == ["CET+1", "Europe/Berlin"]
