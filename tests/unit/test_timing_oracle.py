"""cron_fires against a brute-force oracle, and the properties a cursor relies on.

The oracle knows nothing of croniter or of Herald's parser: hypothesis builds each cron field
together with the set of values it means, and the oracle walks every UTC minute of the window,
reads the local wall clock, matches it by the Vixie rule, and collapses by the DST rule (a wall
time seen before is the repeat of a fall back; wall minutes jumped over by a spring forward fire
at the first instant after the jump).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.timing import Trigger, cron_fires
from tests.support.examples import examples

# Zones with DST forward and back, 30- and 45-minute offsets, a 30-minute shift (Lord Howe), a
# 2-hour shift (Troll), a negative "DST" (Dublin), southern hemisphere, and none at all.
ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Australia/Sydney",
    "America/St_Johns",
    "Pacific/Chatham",
    "Asia/Kathmandu",
    "Europe/Dublin",
    "Antarctica/Troll",
    "America/Santiago",
    "UTC",
]
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class FieldShape:
    low: int
    high: int
    names: tuple[str, ...] = ()


MINUTES = FieldShape(0, 59)
HOURS = FieldShape(0, 23)
DAYS = FieldShape(1, 31)
MONTHS = FieldShape(1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
                            "oct", "nov", "dec"))  # fmt: skip
WEEKDAYS = FieldShape(0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat"))


@st.composite
def value_text(draw: st.DrawFn, shape: FieldShape, value: int) -> str:
    if shape.names and value - shape.low < len(shape.names) and draw(st.booleans()):
        name = shape.names[value - shape.low]
        return name.upper() if draw(st.booleans()) else name
    return str(value)


@st.composite
def cron_field(draw: st.DrawFn, shape: FieldShape) -> tuple[str, frozenset[int]]:
    """A field's text and the values it means (7 not yet folded onto 0)."""
    kind = draw(st.sampled_from(["star", "star-step", "list"]))
    top = shape.high + 1
    span = 7 if shape is WEEKDAYS else top - shape.low  # the largest step cron accepts
    if kind == "star":
        return "*", frozenset(range(shape.low, top))
    if kind == "star-step":
        step = draw(st.integers(1, min(span, 30)))
        return f"*/{step}", frozenset(range(shape.low, top, step))
    texts, values = [], set()
    for _ in range(draw(st.integers(1, 3))):
        first = draw(st.integers(shape.low, shape.high))
        form = draw(st.sampled_from(["one", "range", "range-step"]))
        if form == "one":
            texts.append(draw(value_text(shape, first)))
            values.add(first)
            continue
        last = draw(st.integers(first, shape.high))
        text = f"{draw(value_text(shape, first))}-{draw(value_text(shape, last))}"
        step = draw(st.integers(1, min(span, 10))) if form == "range-step" else 1
        texts.append(f"{text}/{step}" if form == "range-step" else text)
        values |= set(range(first, last + 1, step))
    return ",".join(texts), frozenset(values)


@dataclass(frozen=True)
class Expected:
    """An expression and its meaning, built side by side."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_or: bool

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        day = wall.day in self.days
        weekday = wall.isoweekday() % 7 in self.weekdays
        return (day or weekday) if self.day_or else (day and weekday)


def _possible(days: frozenset[int], months: frozenset[int]) -> bool:
    lengths = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    return any(d <= lengths[m - 1] for m in months for d in days)


@st.composite
def expressions(draw: st.DrawFn) -> Expected:
    minute, hour = draw(cron_field(MINUTES)), draw(cron_field(HOURS))
    # Day fields: mostly "*" so that a short window still sees fires.
    day = draw(st.one_of(st.just(("*", frozenset(range(1, 32)))), cron_field(DAYS)))
    month = draw(st.one_of(st.just(("*", frozenset(range(1, 13)))), cron_field(MONTHS)))
    weekday = draw(st.one_of(st.just(("*", frozenset(range(8)))), cron_field(WEEKDAYS)))
    day_or = not day[0].startswith("*") and not weekday[0].startswith("*")
    if not day_or:  # the parser refuses a schedule that can never run: so do we
        assume(_possible(day[1], month[1]))
    return Expected(
        text=" ".join(f[0] for f in (minute, hour, day, month, weekday)),
        minutes=minute[1],
        hours=hour[1],
        days=day[1],
        months=month[1],
        weekdays=frozenset(0 if v == 7 else v for v in weekday[1]),
        day_or=day_or,
    )


@cache
def transitions(name: str) -> tuple[datetime, ...]:
    """The instants in 2025-2027 where the zone's offset changes (to the hour, bisected)."""
    tz = ZoneInfo(name)
    found = []
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    while moment < datetime(2028, 1, 1, tzinfo=UTC):
        nxt = moment + timedelta(hours=1)
        if moment.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            lo, hi = moment, nxt
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) / 2
                same = mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset()
                lo, hi = (mid, hi) if same else (lo, mid)
            found.append(hi.replace(second=0, microsecond=0))
        moment = nxt
    return tuple(found)


@st.composite
def windows(draw: st.DrawFn) -> tuple[ZoneInfo, datetime, datetime]:
    """A zone and a window of up to three days, usually around one of its transitions."""
    name = draw(st.sampled_from(ZONES))
    near = transitions(name)
    around_a_transition = draw(st.integers(0, 3)) > 0  # three times in four
    if near and around_a_transition:
        centre = draw(st.sampled_from(near))
    else:
        centre = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=draw(st.integers(0, 8760)))
    after = centre + timedelta(seconds=draw(st.integers(-2 * 86400, 86400)))
    until = after + timedelta(seconds=draw(st.integers(0, 3 * 86400)))
    return ZoneInfo(name), after, until


def oracle(expr: Expected, tz: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    """Every UTC minute from a day before the window: its local wall time, matched, collapsed."""
    fires: set[datetime] = set()
    moment = after.replace(second=0, microsecond=0) - timedelta(days=1)
    newest_wall: datetime | None = None
    while moment <= until:
        wall = moment.astimezone(tz).replace(tzinfo=None)
        assert wall.second == 0
        if newest_wall is None or wall > newest_wall:
            skipped = newest_wall + MINUTE if newest_wall is not None else wall
            while skipped < wall:  # wall minutes a forward jump passed over
                if expr.matches(skipped):
                    fires.add(moment)  # the first instant after the gap
                    break
                skipped += MINUTE
            if expr.matches(wall):
                fires.add(moment)
            newest_wall = wall
        # else: a wall time seen before (the repeat after a fall back) never fires again
        moment += MINUTE
    return sorted(f for f in fires if after < f <= until)


@settings(max_examples=examples(60), deadline=None)
@given(expressions(), windows())
def test_cron_fires_equals_the_brute_force_oracle(
    expr: Expected, window: tuple[ZoneInfo, datetime, datetime]
) -> None:
    tz, after, until = window
    assert cron_fires(expr.text, tz, after, until) == oracle(expr, tz, after, until)


@settings(max_examples=examples(40), deadline=None)
@given(expressions(), windows(), st.floats(0, 1))
def test_fires_strictly_increase_and_split_windows_add_up(
    expr: Expected, window: tuple[ZoneInfo, datetime, datetime], cut: float
) -> None:
    """A cursor may stop anywhere: two passes see exactly what one pass sees."""
    tz, after, until = window
    whole = cron_fires(expr.text, tz, after, until)
    assert all(earlier < later for earlier, later in pairwise(whole))
    assert all(f.microsecond == 0 and f.second == 0 and f.tzinfo is UTC for f in whole)
    middle = after + (until - after) * cut
    assert cron_fires(expr.text, tz, after, middle) + cron_fires(expr.text, tz, middle, until) == (
        whole
    )
    if whole:  # a cursor at each fire sees the next one next
        trigger = Trigger(kind="cron", expr=expr.text, zone=str(tz.key))
        assert trigger.next_after(after, len(whole)) == whole
        for earlier, later in pairwise(whole):
            assert trigger.next_after(earlier) == [later]
