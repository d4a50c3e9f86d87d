"""Wall-clock times in IANA zones, and send windows (docs/design.md §12).

Herald owns its DST rule instead of inheriting a library's (each one differs;
``../shared/research/scheduling.md`` §1): a local time that exists twice (autumn) means the
FIRST of the two; a local time that does not exist (spring) means the first instant after the
gap. Mapped this way local times never go backwards in UTC, so a cursor over them works.

A send window lives here, below the scheduler, because the worker re-checks it when it claims a
job (a retry's backoff can move a job out of its window); the scheduler uses the same function
to place a job's first ``not_before``. Everything here is pure: the clock is a parameter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, reset_tzpath

# Zone rules from the pinned ``tzdata`` wheel, never the host's files: schedulers on hosts with
# different system tzdata would otherwise compute different nominal fire times (and keys).
reset_tzpath(to=())

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HORIZON_DAYS = 15  # how far next_opening looks ahead


class UnknownZone(ValueError):
    """Not an IANA time zone name this machine's zone database knows."""


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises UnknownZone (also for a path-like or empty name)."""
    if not name or name.startswith(("/", ".")) or ".." in name or "\\" in name or "\x00" in name:
        raise UnknownZone(f"unknown time zone {name!r}")
    found = _known(name)
    if found is None:
        raise UnknownZone(f"unknown time zone {name!r}")
    return found


@lru_cache(maxsize=512)
def _known(name: str) -> ZoneInfo | None:
    """The zone, or None: a name this machine does not know is remembered too. Looking one up
    searches every zone directory and tries to import the tzdata package (about 160 µs), and
    an audience's timezone column repeats the same unknown spelling row after row."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def resolve_wall(naive: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of the local wall time ``naive`` in ``tz`` (seconds precision).

    Ambiguous (it happens twice) → the first; nonexistent (skipped by a forward jump) → the
    first instant after the gap.
    """
    naive = naive.replace(microsecond=0, tzinfo=None)
    first = naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == naive:
        return first
    second = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    lo, hi = min(first, second), max(first, second)  # the transition lies in (lo, hi]
    after = hi.astimezone(tz).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def local_at(day: date, at: time, tz: ZoneInfo) -> datetime:
    """``day`` at wall time ``at`` in ``tz``, as a UTC instant (the DST rule above)."""
    return resolve_wall(datetime.combine(day, at), tz)


@dataclass(frozen=True)
class SendWindow:
    """When a message may go out: on ``days`` (0 = Monday), from ``start`` to ``end`` minutes
    after local midnight in ``zone``. ``end <= start`` crosses midnight: the opening belongs to
    the day it starts on (``fri 22:00-02:00`` is open from Friday 22:00 to Saturday 02:00)."""

    days: frozenset[int]
    start: int
    end: int
    zone: str = "UTC"

    def __post_init__(self) -> None:
        if not self.days or not self.days <= set(range(7)):
            raise ValueError("a send window needs at least one day (0..6)")
        if not (0 <= self.start < 1440 and 0 <= self.end <= 1440):
            raise ValueError("window hours must lie within a day")
        if self.start == self.end:  # a whole day is written 00:00-24:00
            raise ValueError("a send window that opens and closes at the same time is empty")
        zone(self.zone)

    def _openings(self, around: datetime, days_after: int) -> Iterator[tuple[datetime, datetime]]:
        """The openings of the local days from the day before ``around`` to ``days_after``
        days after it, in order.

        An opening that lies wholly inside a forward jump (``02:00-03:00`` on the night
        Berlin skips that hour, or a day a zone skipped altogether) does not exist that day:
        both ends resolve to the first instant after the gap, and the empty span is left out.
        """
        tz = zone(self.zone)
        today = around.astimezone(tz).date()
        length = (self.end - self.start) % 1440 or 1440
        for offset in range(-1, days_after + 1):
            day = today + timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            midnight = datetime.combine(day, time())
            opens = resolve_wall(midnight + timedelta(minutes=self.start), tz)
            closes = resolve_wall(midnight + timedelta(minutes=self.start + length), tz)
            if opens < closes:
                yield opens, closes

    def contains(self, at: datetime) -> bool:
        # Only the day before (an opening that crosses midnight) and the day itself can hold
        # ``at``; the day after is there for the odd zone whose dates jump.
        return any(opens <= at < closes for opens, closes in self._openings(at, 1))

    def next_opening(self, at: datetime) -> datetime:
        """``at`` itself when the window is open then, else the moment it next opens."""
        at = at.astimezone(UTC)
        # A window open on one weekday only, whose opening one week does not exist (inside a
        # DST gap, or a skipped day), opens again within two weeks.
        for opens, closes in self._openings(at, _HORIZON_DAYS):
            if opens <= at < closes:
                return at
            if opens > at:
                return opens
        raise AssertionError(f"a window with at least one day opens within {_HORIZON_DAYS} days")

    def to_json(self) -> str:
        return json.dumps(
            {"days": sorted(self.days), "start": self.start, "end": self.end, "zone": self.zone},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> SendWindow:
        data = json.loads(text)
        return cls(frozenset(data["days"]), int(data["start"]), int(data["end"]), data["zone"])

    def in_zone(self, name: str) -> SendWindow:
        return SendWindow(self.days, self.start, self.end, name)

    def describe(self) -> str:
        days = ",".join(DAY_NAMES[d] for d in sorted(self.days))
        end = self.end if self.end else 1440
        hours = f"{self.start // 60:02d}:{self.start % 60:02d}-{end // 60:02d}:{end % 60:02d}"
        return f"{days} {hours} {self.zone}"
