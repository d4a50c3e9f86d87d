"""Five-field cron expressions: checked, read, and turned into UTC fire times.

One reader for everyone: the campaign spec checks a ``cron:`` with ``validate_cron`` and the
scheduler enumerates it with ``cron_fires`` (re-exported by ``scheduler.timing``), so what the
spec accepts is exactly what the scheduler runs. It lives in ``campaigns`` because the spec
cannot import the scheduler (the layers point down).

Herald reads only standard (Vixie) cron: numbers, month and weekday names, ``*``, ranges
``a-b``, lists ``a,b`` and steps ``/n``; 0 and 7 are Sunday; when both day fields are restricted
the schedule runs on days matching EITHER (a day field whose text starts with ``*``, such as
``*/2``, does not count as restricted: Vixie's own rule). Herald expands the fields itself and
hands croniter plain lists of numbers: croniter's parser has changed readings between releases
(``59/15`` in 7.0) and reads some strings oddly (``5-5`` as every minute), and with plain lists
no such reading can change a schedule.

Fire times follow ``../shared/research/scheduling.md`` §1.5: enumerate NAIVE local wall-clock
matches (croniter never sees a zone, so its DST code is never used), map each to UTC with
``dispatch.wallclock.resolve_wall`` (a time that happens twice → the first; a time skipped by a
forward jump → the first instant after the gap) and drop repeats. The mapping never goes
backwards, so fire times strictly increase and a cursor over them works. Everything is pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from campaigns.errors import excerpt
from dispatch.wallclock import resolve_wall

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # cron numbering: 0 = Sunday
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February: its leap-year length
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Enumeration starts this long before the window's local time: it never begins halfway into a
# repeated hour (research §1.5; the longest DST shift in use is 2 h, Antarctica/Troll).
LEAD = timedelta(hours=3)
# The period estimate looks at this many fires from a fixed Monday, the same in every process.
PERIOD_SAMPLE = 64
PERIOD_EPOCH = datetime(2001, 1, 1)


class CronError(ValueError):
    """A cron expression Herald does not accept; the message is for the person who wrote it."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0  # the number of names[0]


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, MONTH_NAMES, 1),
    _Field("day-of-week", 0, 7, WEEKDAY_NAMES, 0),  # 7 is Sunday too
)
_FLAGS = re.IGNORECASE | re.ASCII
_ITEM = re.compile(r"^(?:(\*)|([a-z0-9]+)(?:-([a-z0-9]+))?)(?:/([0-9]+))?$", _FLAGS)
_EXTENSION = re.compile(r"^(l|lw|w|h|[0-9]+[lw]|l-?[0-9]+|w[0-9]+)$", _FLAGS)
_ZONE = re.compile(r"^((cron_)?tz=.*|[a-z_]{2,}/[a-z_][a-z0-9_/+\-]+)$", _FLAGS)  # TZ=, Area/City
_MAX_DIGITS = 4  # no field value or step has more; longer digit runs are out of range


@dataclass(frozen=True)
class CronSchedule:
    """A checked expression: the set of values each field allows (weekday 0 = Sunday)."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool  # the day-of-month text does not start with "*"
    weekdays_restricted: bool

    @property
    def day_or(self) -> bool:
        """Both day fields restricted: a day matching either one runs (Vixie)."""
        return self.days_restricted and self.weekdays_restricted

    def matches(self, naive: datetime) -> bool:
        """Whether the local wall-clock minute ``naive`` is one the expression names."""
        if naive.minute not in self.minutes or naive.hour not in self.hours:
            return False
        if naive.month not in self.months:
            return False
        day_ok = naive.day in self.days
        weekday_ok = (naive.weekday() + 1) % 7 in self.weekdays
        return (day_ok or weekday_ok) if self.day_or else (day_ok and weekday_ok)

    def croniter_expr(self) -> tuple[str, bool]:
        """The expression as plain lists for croniter, and croniter's ``day_or``."""
        every_day = self.day_or and (len(self.days) == 31 or len(self.weekdays) == 7)
        days = "*" if every_day else _list(self.days, 31)
        weekdays = "*" if every_day else _list(self.weekdays, 7)
        fields = (_list(self.minutes, 60), _list(self.hours, 24), days, _list(self.months, 12))
        return " ".join((*fields, weekdays)), self.day_or and not every_day


def _list(values: frozenset[int], size: int) -> str:
    return "*" if len(values) == size else ",".join(str(v) for v in sorted(values))


@lru_cache(maxsize=1024)  # a scheduler pass reads the same few expressions again and again
def parse_cron(expr: str) -> CronSchedule:
    """The schedule ``expr`` names; raises CronError with a message in plain English."""
    text = " ".join(expr.split())
    if not text:
        raise CronError("the cron expression is empty")
    if text.startswith("@"):
        if text.lower() not in MACROS:
            known = ", ".join(MACROS)
            raise CronError(f"{excerpt(text)} is not a cron shorthand Herald knows ({known})")
        text = MACROS[text.lower()]
    parts = text.split(" ")
    if any(_ZONE.match(part) for part in parts):
        raise CronError("a time zone goes in the schedule's timezone:, not in the cron expression")
    if len(parts) != 5:
        raise CronError(_count_message(text, len(parts)))
    sets = [_parse_field(part, field) for part, field in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(0 if v == 7 else v for v in sets[4])
    schedule = CronSchedule(
        expr=expr.strip(),
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=weekdays,
        days_restricted=not parts[2].startswith("*"),
        weekdays_restricted=not parts[4].startswith("*"),
    )
    if not schedule.day_or and not _possible_dates(schedule):
        months = ",".join(MONTH_NAMES[m - 1] for m in sorted(schedule.months))
        days = ",".join(str(d) for d in sorted(schedule.days))
        raise CronError(f"the schedule never runs: day {days} does not occur in {months}")
    return schedule


def _count_message(expr: str, count: int) -> str:
    base = (
        "a cron expression has 5 fields (minute hour day-of-month month day-of-week); "
        f"{excerpt(expr)} has {count}"
    )
    if count == 6:
        return base + ": Herald schedules to the minute, so a seconds (or year) field is not used"
    if count == 7:
        return base + ": seconds and year fields are not used, Herald schedules to the minute"
    return base


def _possible_dates(schedule: CronSchedule) -> set[tuple[int, int]]:
    """The (month, day) pairs the month and day-of-month fields allow together; with the
    weekdays ANDed in, each pair still falls on every weekday in some year."""
    return {(m, d) for m in schedule.months for d in schedule.days if d <= MONTH_DAYS[m - 1]}


def _parse_field(text: str, field: _Field) -> frozenset[int]:
    odd = sorted(set(re.sub(r"[A-Za-z0-9*,/\-]", "", text)))
    if odd:
        raise CronError(
            f"{field.name} {excerpt(text)}: {excerpt(''.join(odd))} is not standard cron syntax; "
            "Herald accepts "
            "numbers, names, *, ranges a-b, lists a,b and steps /n"
        )
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{field.name} {excerpt(text)} has an empty item in its list")
        values |= _parse_item(item, field)
    return frozenset(values)


def _parse_item(item: str, field: _Field) -> set[int]:
    match = _ITEM.match(item)
    if match is None:
        raise CronError(f"{field.name} {excerpt(item)} is not a value, a range a-b or a step /n")
    star, first, last, step_text = match.groups()
    span = field.high - field.low + (0 if field.name == "day-of-week" else 1)
    step = 1
    if step_text is not None:
        step = int(step_text) if len(step_text) <= _MAX_DIGITS else span + 1
        if not 1 <= step <= span:
            raise CronError(
                f"{field.name} {excerpt(item)}: the step must be between 1 and {span}, "
                f"not {_number(step_text)}"
            )
    if star:
        return set(range(field.low, field.low + span, step))
    low = _value(first, field)
    if last is None:
        if step_text is not None:
            raise CronError(
                f"{field.name} {excerpt(item)} is read differently by different cron versions: "
                f"write {first}-{field.high}/{step} for every {step} from {first}"
            )
        return {low}
    high = _value(last, field)
    if field.name == "day-of-week" and high == 0 < low:
        high = 7  # "fri-sun" ends on the Sunday that closes the week
    if high < low:
        raise CronError(
            f"{field.name} range {excerpt(item)} runs backwards; write it as a list or two ranges"
        )
    return set(range(low, high + 1, step))


def _value(token: str, field: _Field) -> int:
    if token.isdigit():  # ASCII only: the item pattern let nothing else through
        number = int(token) if len(token) <= _MAX_DIGITS else field.high + 1
        if not field.low <= number <= field.high:
            raise CronError(
                f"{field.name} {_number(token)} is out of range ({field.low}-{field.high})"
            )
        return number
    if token.lower() in field.names:
        return field.names.index(token.lower()) + field.name_base
    if _EXTENSION.match(token):
        raise CronError(
            f"{field.name} {excerpt(token)} uses an extension of some cron versions "
            "(L, W, #, ?, H); "
            "Herald accepts numbers, names, *, ranges, lists and steps"
        )
    if field.names:
        hint = f"{field.names[0]}-{field.names[-1]}"
        raise CronError(f"{field.name} {excerpt(token)} is neither a number nor a name ({hint})")
    raise CronError(f"{field.name} {excerpt(token)} is not a number")


def _number(digits: str) -> str:
    return digits if len(digits) <= _MAX_DIGITS else excerpt(digits, 12)


def validate_cron(expr: str) -> str | None:
    """None for a usable 5-field expression, else what is wrong with it, in plain English."""
    try:
        parse_cron(expr)
    except CronError as error:
        return str(error)
    return None


def cron_warnings(expr: str) -> list[str]:
    """Readings of a valid expression that surprise people (empty for an invalid one)."""
    try:
        schedule = parse_cron(expr)
    except CronError:
        return []
    text = " ".join(expr.split())
    parts = MACROS.get(text.lower(), text).split(" ")
    found = []
    if schedule.day_or:
        found.append(
            f"day-of-month {excerpt(parts[2])} and day-of-week {excerpt(parts[4])} are both set: "
            "the schedule runs on days when EITHER matches (Vixie cron), not only when both do"
        )
    for index, cycle in ((2, "month (the 31st and the 1st can both match)"), (4, "week")):
        if not parts[index].startswith("*/"):
            continue
        other = parts[4 if index == 2 else 2]
        name = _FIELDS[index].name
        if not other.startswith("*"):
            found.append(
                f"{name} {excerpt(parts[index])} starts with '*', so as in Vixie cron it does not "
                f"count as set: the schedule runs only on days matching BOTH it and "
                f"{excerpt(other)}"
            )
        found.append(
            f"{name} {excerpt(parts[index])} starts again every {cycle}; for an exact cadence use "
            "every: instead of cron:"
        )
    if not schedule.day_or and _possible_dates(schedule) == {(2, 29)}:
        found.append("the schedule runs only on 29 February, once every four years")
    return found


def iter_cron(schedule: CronSchedule, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Nominal UTC fire times strictly after ``after``, in order, without end."""
    after = as_utc(after, "after")
    expr, day_or = schedule.croniter_expr()
    start = after.astimezone(tz).replace(tzinfo=None) - LEAD
    matches = croniter(expr, start, day_or=day_or)
    last = after
    while True:
        try:
            naive: datetime = matches.get_next(datetime)
        except CroniterBadDateError:  # no match in croniter's horizon (decades): the end
            return
        fire = resolve_wall(naive, tz)
        if fire > last:  # earlier ones lie before the window or collapsed onto the last fire
            last = fire
            yield fire


def cron_fires(
    expr: str, tz: ZoneInfo, after: datetime, until: datetime, *, limit: int = 10_000
) -> list[datetime]:
    """Nominal UTC fire times in (after, until], strictly increasing, whole seconds; at most
    ``limit`` (the earliest). Raises CronError for an expression ``validate_cron`` refuses."""
    until = as_utc(until, "until")
    fires: list[datetime] = []
    if limit <= 0:
        return fires
    for fire in iter_cron(parse_cron(expr), tz, after):
        if fire > until:
            break
        fires.append(fire)
        if len(fires) >= limit:
            break
    return fires


@lru_cache(maxsize=1024)
def cron_period(expr: str) -> timedelta:
    """An estimate of how often ``expr`` runs: the shortest gap between consecutive local
    wall-clock matches among the first few from a fixed date (zone-free, so every process
    computes the same value)."""
    schedule = parse_cron(expr)
    cron_text, day_or = schedule.croniter_expr()
    matches = croniter(cron_text, PERIOD_EPOCH, day_or=day_or)
    times: list[datetime] = []
    try:
        for _ in range(PERIOD_SAMPLE):
            times.append(matches.get_next(datetime))
    except CroniterBadDateError:
        pass
    if len(times) < 2:
        return timedelta(days=366 * 4)
    return min(b - a for a, b in pairwise(times))


def as_utc(moment: datetime, name: str = "time") -> datetime:
    """``moment`` in UTC; a naive datetime is refused (its zone would be a guess)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (UTC), not naive {moment!r}")
    return moment.astimezone(UTC)
