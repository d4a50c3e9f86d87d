"""Times, weekdays and time zones the way a campaign file writes them: read, checked, written back.

Everything here turns text into the values dispatch.wallclock works with (weekday numbers with
0 = Monday, minutes after local midnight, IANA zone names, UTC instants), and local times become
instants with wallclock's DST rule, so these checks, the scheduler and the worker agree on what
"Monday 09:00 in Europe/Berlin" means. Every failure is an Invalid with a hint; nothing here lets
a library error through, whatever the text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, time
from functools import lru_cache
from zoneinfo import available_timezones

from campaigns.errors import excerpt
from campaigns.spec_fields import Invalid, describe
from dispatch.wallclock import DAY_NAMES, UnknownZone, resolve_wall, zone

# --- time zones ------------------------------------------------------------------------------

# The longest IANA name is about 30 characters; anything much longer is not a zone name.
MAX_ZONE_CHARS = 64
ZONE_EXAMPLES = "an IANA time zone name such as Europe/Berlin, America/New_York or UTC"
ZONE_HINT = f"use {ZONE_EXAMPLES}"
RECIPIENT_ZONE = "recipient"
CAMPAIGN_ZONE = "campaign"

# Names the zone database answers to that would not mean the same on every machine: the host's
# own zone, a placeholder, and the leap-second ("right/") and duplicate ("posix/") trees.
_MACHINE_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_MACHINE_PREFIXES = ("right/", "posix/")
_KEYWORD_PLACES = {RECIPIENT_ZONE: "steps and send_window", CAMPAIGN_ZONE: "send_window"}
_OFFSET = re.compile(r"(?:UTC|GMT)?\s*[+-]\s*\d{1,2}(?::?\d{2})?|Z", re.IGNORECASE)


@lru_cache(maxsize=1)
def _zone_names() -> tuple[str, ...]:
    return tuple(sorted(name for name in available_timezones() if name not in _MACHINE_ZONES))


def _zone_hint(value: str) -> str:
    if _OFFSET.fullmatch(value.strip()):
        return f"use {ZONE_EXAMPLES}, not an offset: an offset does not follow daylight saving"
    names = _zone_names()
    wanted = value.strip().replace(" ", "_").lower()
    same_but_case = [name for name in names if name.lower() == wanted]
    if same_but_case:
        return f"did you mean {same_but_case[0]!r}? (zone names are case-sensitive)"
    by_city = [name for name in names if name.lower().rsplit("/", 1)[-1] == wanted]
    close = by_city or difflib.get_close_matches(value, names, n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}?" if close else ZONE_HINT


def check_zone(value: object) -> str:
    """An IANA zone name the zone database knows; raises Invalid (hostile text included)."""
    if not isinstance(value, str):
        raise Invalid(f"expected a time zone name, got {describe(value)}", ZONE_HINT)
    if len(value) > MAX_ZONE_CHARS:
        raise Invalid(f"unknown time zone {excerpt(value, 40)}: too long for a name", ZONE_HINT)
    if value in _MACHINE_ZONES or value.startswith(_MACHINE_PREFIXES):
        raise Invalid(
            f"time zone {excerpt(value)} does not mean the same on every machine", ZONE_HINT
        )
    if value in _KEYWORD_PLACES:
        raise Invalid(
            f"{value!r} is not a zone name here",
            f"'{value}' is allowed on {_KEYWORD_PLACES[value]} only; {ZONE_HINT}",
        )
    try:
        zone(value)
    except UnknownZone:
        raise Invalid(f"unknown time zone {excerpt(value)}", _zone_hint(value)) from None
    return value


def check_step_zone(value: object) -> str:
    """A step's zone: an IANA name or 'recipient' (the recipient's `timezone` variable)."""
    return RECIPIENT_ZONE if value == RECIPIENT_ZONE else check_zone(value)


def check_window_zone(value: object) -> str:
    """A send window's zone: 'campaign' (the default), 'recipient' or an IANA name."""
    if value in (CAMPAIGN_ZONE, RECIPIENT_ZONE):
        return str(value)
    return check_zone(value)


# --- weekdays --------------------------------------------------------------------------------

ALL_DAYS = frozenset(range(7))
_FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_NUMBERS = {name: number for number, name in enumerate(DAY_NAMES)} | {
    name: number for number, name in enumerate(_FULL_DAY_NAMES)
}
DAYS_HINT = "name days mon, tue, wed, thu, fri, sat, sun: e.g. mon-fri, [mon, wed, fri] or sat,sun"
_MAX_DAYS_CHARS = 200


def _day(name: str) -> int:
    number = _DAY_NUMBERS.get(name.strip().lower())
    if number is None:
        close = difflib.get_close_matches(name.strip().lower(), list(_DAY_NUMBERS), n=1)
        hint = f"did you mean {DAY_NAMES[_DAY_NUMBERS[close[0]]]!r}?" if close else DAYS_HINT
        raise Invalid(f"unknown day {excerpt(name)}", hint)
    return number


def _day_span(item: str) -> set[int]:
    """'wed' or a range 'mon-fri'; a range may wrap round the week: 'fri-mon' is fri..mon."""
    if "-" not in item:
        return {_day(item)}
    first, _, last = item.partition("-")
    if "-" in last or not first.strip() or not last.strip():
        raise Invalid(f"invalid day range {excerpt(item)}", DAYS_HINT)
    start, end = _day(first), _day(last)
    return {(start + offset) % 7 for offset in range((end - start) % 7 + 1)}


def _day_items(value: object) -> Iterable[str]:
    if isinstance(value, str):
        if len(value) > _MAX_DAYS_CHARS:
            raise Invalid(f"days {excerpt(value, 40)} is too long", DAYS_HINT)
        return [part for part in re.split(r"[\s,]+", re.sub(r"\s*-\s*", "-", value)) if part]
    if isinstance(value, (list, tuple, set, frozenset)):
        if len(value) > 7 * 4:
            raise Invalid(f"too many days ({len(value)})", DAYS_HINT)
        for item in value:
            if not isinstance(item, str):
                raise Invalid(f"expected a day name, got {describe(item)}", DAYS_HINT)
        return list(value)
    raise Invalid(f"expected days, got {describe(value)}", DAYS_HINT)


def parse_days(value: object) -> frozenset[int]:
    """'mon-fri', 'sat,sun', ['mon', 'wed'] (names or ranges, any case) -> {0..6}, 0 = Monday.

    A set of day numbers is the model's own form (Python, or after parsing) and is taken as is.
    """
    if isinstance(value, (set, frozenset)) and all(
        isinstance(day, int) and not isinstance(day, bool) for day in value
    ):
        days = frozenset(value)
        if not days <= ALL_DAYS:
            raise Invalid(f"day numbers must be 0 (Monday) to 6, got {sorted(days)}")
    else:
        days = frozenset(day for item in _day_items(value) for day in _day_span(item))
    if not days:
        raise Invalid("no days given", DAYS_HINT)
    return days


def format_days(days: frozenset[int]) -> str:
    """The shortest text parse_days reads back: runs of three or more days become ranges."""
    parts: list[str] = []
    ordered = sorted(days)
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = DAY_NAMES[ordered[index]], DAY_NAMES[ordered[end]]
        if end - index >= 2:
            parts.append(f"{first}-{last}")
        else:
            parts += [DAY_NAMES[day] for day in ordered[index : end + 1]]
        index = end + 1
    return ",".join(parts)


# --- times of day and opening hours ----------------------------------------------------------

MINUTES_PER_DAY = 24 * 60
AT_HINT = 'write a time of day as "HH:MM" in quotes, e.g. at: "09:00"'
HOURS_HINT = (
    'write opening hours as "HH:MM-HH:MM", e.g. "09:00-17:00"; they may cross midnight'
    ' ("22:00-02:00"); a whole day is "00:00-24:00"'
)
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
_MAX_CLOCK_CHARS = 40


def _sexagesimal_hint(number: int, hint: str) -> str:
    """YAML 1.1 reads an unquoted 10:00 as 600 (base 60): say so, with the text to write."""
    hours, minutes = divmod(number, 60)
    if 60 <= number < MINUTES_PER_DAY:
        return (
            f"YAML reads an unquoted {hours}:{minutes:02d} as the number {number};"
            f' write "{hours:02d}:{minutes:02d}" in quotes'
        )
    return hint


def _minutes(clock: re.Match[str], text: str, *, may_be_midnight_end: bool) -> int:
    hours, minutes = int(clock[1]), int(clock[2])
    value = hours * 60 + minutes
    if may_be_midnight_end and value == MINUTES_PER_DAY:
        return value
    if hours > 23 or minutes > 59:
        raise Invalid(f"no such time of day in {excerpt(text)}", "hours are 00-23, minutes 00-59")
    return value


def _text_of(value: object, what: str, hint: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise Invalid(f"expected {what} in quotes, got {describe(value)}", hint)
    if isinstance(value, int):
        hint = _sexagesimal_hint(value, hint)
        raise Invalid(f"expected {what} in quotes, got the number {value}", hint)
    if len(value) > _MAX_CLOCK_CHARS:
        raise Invalid(f"invalid {what} {excerpt(value, 40)}", hint)
    return value.strip()


def parse_clock(value: object) -> time:
    """A step's `at`: "09:00" (or "9:00") -> time(9, 0)."""
    if isinstance(value, time) and value.tzinfo is None:
        return value.replace(second=0, microsecond=0)
    text = _text_of(value, "a time of day", AT_HINT)
    match = _CLOCK.fullmatch(text)
    if match is None:
        raise Invalid(f"invalid time of day {excerpt(text)}", AT_HINT)
    minutes = _minutes(match, text, may_be_midnight_end=False)
    return time(*divmod(minutes, 60))


def format_clock(at: time) -> str:
    return f"{at.hour:02d}:{at.minute:02d}"


def parse_hours(value: object) -> tuple[int, int]:
    """A window's `hours`: "09:00-17:00" -> (540, 1020) minutes after local midnight.

    The end may be 24:00 (1440); an end at or before the start crosses midnight; equal ends
    would never open and are refused. A (start, end) tuple is the model's own form.
    """
    if isinstance(value, tuple) and len(value) == 2 and all(type(m) is int for m in value):
        start, end = value
        text = str(value)
        if not (0 <= start < MINUTES_PER_DAY and 0 <= end <= MINUTES_PER_DAY):
            raise Invalid(f"hours {text} do not lie within a day", HOURS_HINT)
    else:
        text = _text_of(value, "opening hours", HOURS_HINT)
        opens, dash, closes = text.partition("-")
        first, last = _CLOCK.fullmatch(opens.strip()), _CLOCK.fullmatch(closes.strip())
        if not dash or first is None or last is None:
            raise Invalid(f"invalid hours {excerpt(text)}", HOURS_HINT)
        start = _minutes(first, text, may_be_midnight_end=False)
        end = _minutes(last, text, may_be_midnight_end=True)
    if start == end:
        raise Invalid(
            f"hours {excerpt(text)} open and close at the same time: the window never opens",
            'a whole day is "00:00-24:00"',
        )
    return start, end


def format_hours(hours: tuple[int, int]) -> str:
    start, end = hours
    return f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"


# --- instants --------------------------------------------------------------------------------

# Wide enough for any campaign, narrow enough that no zone arithmetic can overflow a datetime.
EARLIEST_YEAR, LATEST_YEAR = 1970, 2999
INSTANT_HINT = (
    "write e.g. 2026-05-04 09:00 (local time in the campaign's time zone) or"
    " 2026-05-04T09:00:00+02:00"
)
_MAX_INSTANT_CHARS = 64


def _moment(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime.combine(value, time())
    if not isinstance(value, str):
        raise Invalid(f"expected a date and time, got {describe(value)}", INSTANT_HINT)
    text = value.strip()
    if len(text) > _MAX_INSTANT_CHARS:
        raise Invalid(f"invalid date and time {excerpt(text, 40)}", INSTANT_HINT)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(f"invalid date and time {excerpt(text)}", INSTANT_HINT) from None


def parse_instant(value: object, zone_name: str) -> datetime:
    """A moment as aware UTC, whole seconds. A date or a time without offset is local wall time
    in ``zone_name`` (wallclock's DST rule: a repeated time is the first, a skipped one the first
    instant after the gap); a date alone is local midnight."""
    moment = _moment(value)
    if not EARLIEST_YEAR <= moment.year <= LATEST_YEAR:
        raise Invalid(
            f"{moment.isoformat()} is out of range",
            f"use a year from {EARLIEST_YEAR} to {LATEST_YEAR}",
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        return resolve_wall(moment.replace(tzinfo=None), zone(zone_name))
    return moment.astimezone(UTC).replace(microsecond=0)
