"""The scheduler's time maths: when a trigger fires, and when a step falls due. Pure: no I/O,
and the clock is always a parameter.

- Triggers (``Trigger``): ``cron`` is a wall-clock schedule in a zone (``campaigns.cron``, one
  reader shared with the spec; the DST rule of ``../shared/research/scheduling.md`` §1.5);
  ``every`` is elapsed UTC time, ``start + n * every``, so its wall-clock time drifts by the
  DST shift; ``once`` is one instant. Fire times are nominal, whole seconds, UTC: they go into
  the occurrence key.
- Catch-up after downtime: ``scheduler.catchup`` (research §2).
- Steps (``plan_step``, research §4 "Herald drip semantics"): ``after`` is elapsed time from the
  anchor. With ``at`` the whole days of ``after`` are CALENDAR days in the step's zone (Braze:
  Monday 21:00 + 1 day at 09:00 is Tuesday 09:00) and any remainder is waited first: the step
  goes at ``at`` on the first local day, ``after``'s days past the date of ``anchor +
  remainder``, that is not before that moment and whose weekday is in ``on``. A send window
  then moves the time to the window's next opening.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from itertools import islice
from typing import Literal
from zoneinfo import ZoneInfo

from campaigns.cron import (
    CronError,
    CronSchedule,
    as_utc,
    cron_fires,
    cron_period,
    cron_warnings,
    iter_cron,
    parse_cron,
    validate_cron,
)
from dispatch.wallclock import SendWindow, local_at, zone
from scheduler.catchup import (
    CATCH_UP_POLICIES,
    CatchUp,
    CatchUpDecision,
    apply_catch_up,
    default_max_age,
    due_after,
)

__all__ = [
    "CATCH_UP_POLICIES",
    "CatchUp",
    "CatchUpDecision",
    "CronError",
    "CronSchedule",
    "StepTiming",
    "Trigger",
    "TriggerKind",
    "apply_catch_up",
    "cron_fires",
    "cron_period",
    "cron_warnings",
    "default_max_age",
    "due_after",
    "interval_fires",
    "iter_cron",
    "iter_interval",
    "parse_cron",
    "plan_chain",
    "plan_step",
    "validate_cron",
]

TriggerKind = Literal["cron", "every", "once"]
DAY = timedelta(days=1)
ONE_MICROSECOND = timedelta(microseconds=1)


def interval_fires(
    every: timedelta,
    anchor: datetime,
    after: datetime,
    until: datetime,
    *,
    limit: int = 10_000,
) -> list[datetime]:
    """``anchor + n * every`` (n >= 0) in (after, until], at most ``limit`` (the earliest).

    Elapsed UTC time: across a DST change the local time of day shifts by the change. The
    anchor's fraction of a second is dropped, so fire times are whole seconds."""
    until = as_utc(until, "until")
    fires: list[datetime] = []
    for fire in iter_interval(every, anchor, after):
        if fire > until or len(fires) >= limit:
            break
        fires.append(fire)
    return fires


def iter_interval(every: timedelta, anchor: datetime, after: datetime) -> Iterator[datetime]:
    """``anchor + n * every`` (n >= 0) strictly after ``after``, without end."""
    _check_every(every)
    anchor = as_utc(anchor, "anchor").replace(microsecond=0)
    after = as_utc(after, "after")
    n = 0 if after < anchor else (after - anchor) // every + 1
    while True:
        yield anchor + n * every
        n += 1


def _check_every(every: timedelta) -> None:
    if every <= timedelta(0):
        raise ValueError(f"every must be a positive duration, not {every}")
    if every.microseconds:
        raise ValueError(f"every must be whole seconds, not {every}")


@dataclass(frozen=True)
class Trigger:
    """When a campaign fires. ``cron``: ``expr`` in ``zone``; ``every``: from ``start`` (the
    anchor: the caller passes the launch time when the campaign gives none); ``once``: ``at``.
    No fire before ``start`` or after ``end`` (both inclusive). Datetimes are aware."""

    kind: TriggerKind
    expr: str | None = None
    every: timedelta | None = None
    zone: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None
    at: datetime | None = None
    _schedule: CronSchedule | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        zone(self.zone)  # UnknownZone for a name the zone database does not know
        for name in ("start", "end", "at"):
            moment = getattr(self, name)
            if moment is not None:
                as_utc(moment, name)
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError("a trigger's end lies before its start")
        extra = {"cron": ("every", "at"), "every": ("expr", "at"), "once": ("expr", "every")}
        stray = [name for name in extra.get(self.kind, ()) if getattr(self, name) is not None]
        if stray:
            raise ValueError(f"a {self.kind} trigger takes no {' or '.join(stray)}")
        if self.kind == "cron":
            if self.expr is None:
                raise ValueError("a cron trigger needs an expression")
            object.__setattr__(self, "_schedule", parse_cron(self.expr))
        elif self.kind == "every":
            if self.every is None or self.start is None:
                raise ValueError("an every trigger needs a duration and a start (its anchor)")
            _check_every(self.every)
        elif self.kind == "once":
            if self.at is None:
                raise ValueError("a once trigger needs its time (at)")
        else:
            raise ValueError(f"unknown trigger kind {self.kind!r}")

    @property
    def tz(self) -> ZoneInfo:
        return zone(self.zone)

    @property
    def period(self) -> timedelta | None:
        """How often it fires (cron: an estimate); None for a one-shot trigger."""
        if self.kind == "cron":
            assert self.expr is not None
            return cron_period(self.expr)
        return self.every if self.kind == "every" else None

    def default_max_age(self) -> timedelta:
        """min(period, 24 h); a one-shot trigger: 24 h."""
        period = self.period
        return default_max_age(period) if period is not None else default_max_age(DAY)

    def iter_after(self, instant: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``instant``, in order, within start and end."""
        after = as_utc(instant, "instant")
        if self.start is not None:
            after = max(after, as_utc(self.start, "start") - ONE_MICROSECOND)
        for fire in self._unbounded(after):
            if self.end is not None and fire > self.end:
                return
            yield fire

    def _unbounded(self, after: datetime) -> Iterator[datetime]:
        if self._schedule is not None:
            yield from iter_cron(self._schedule, self.tz, after)
        elif self.kind == "every":
            assert self.every is not None
            assert self.start is not None
            anchor = _ceil_second(as_utc(self.start, "start"))
            yield from iter_interval(self.every, anchor, after)
        else:
            assert self.at is not None
            at = _ceil_second(as_utc(self.at, "at"))
            if at > after:
                yield at

    def fires(self, after: datetime, until: datetime, limit: int = 10_000) -> list[datetime]:
        """Fire times in (after, until], at most ``limit`` (the earliest)."""
        until = as_utc(until, "until")
        found: list[datetime] = []
        for fire in self.iter_after(after):
            if fire > until or len(found) >= limit:
                break
            found.append(fire)
        return found

    def next_after(self, instant: datetime, n: int = 1) -> list[datetime]:
        """The next ``n`` fire times after ``instant`` (fewer when the trigger ends)."""
        return list(islice(self.iter_after(instant), max(n, 0)))


@dataclass(frozen=True)
class StepTiming:
    """When a step goes, relative to its anchor: ``after`` elapsed; optionally at wall time
    ``at`` on weekdays ``on`` (0 = Monday, as ``SendWindow``) in ``zone``."""

    after: timedelta = timedelta(0)
    at: time | None = None
    on: frozenset[int] | None = None
    zone: ZoneInfo | None = None

    def plan(self, anchor: datetime, window: SendWindow | None = None) -> datetime:
        return plan_step(
            anchor, after=self.after, at=self.at, on=self.on, tz=self.zone, window=window
        )


def plan_step(
    anchor: datetime,
    *,
    after: timedelta,
    at: time | None = None,
    on: frozenset[int] | None = None,
    tz: ZoneInfo | None = None,
    window: SendWindow | None = None,
) -> datetime:
    """When a step anchored at ``anchor`` is due (the rule in this module's docstring)."""
    anchor = as_utc(anchor, "anchor")
    if after < timedelta(0):
        raise ValueError(f"after must not be negative, not {after}")
    if on is not None and at is None:
        raise ValueError("on: needs at: (a weekday pins a time of day)")
    if on is not None and (not on or not on <= frozenset(range(7))):
        raise ValueError("on: needs at least one weekday, 0 (Monday) to 6 (Sunday)")
    if at is None:
        due = anchor + after
    else:
        if tz is None:
            raise ValueError("at: needs a time zone (the step's timezone or the campaign's)")
        days, remainder = divmod(after, DAY)
        earliest = anchor + remainder
        day = earliest.astimezone(tz).date() + timedelta(days=days)
        for _ in range(16):  # at most two days for "earliest", then a week for "on"
            due = local_at(day, at, tz)
            if due >= earliest and (on is None or day.weekday() in on):
                break
            day += DAY
        else:
            raise AssertionError("a step with a weekday falls due within 16 days")
    return window.next_opening(due) if window is not None else due


def plan_chain(
    anchor: datetime, steps: Sequence[StepTiming], *, window: SendWindow | None = None
) -> list[datetime]:
    """Due times of a broadcast's steps: each step is planned from the previous step's due
    time (after the window moved it), the first from ``anchor`` (the occurrence)."""
    due_times: list[datetime] = []
    current = as_utc(anchor, "anchor")
    for step in steps:
        current = step.plan(current, window)
        due_times.append(current)
    return due_times


def _ceil_second(moment: datetime) -> datetime:
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)
