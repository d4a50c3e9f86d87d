"""What to do with the occurrences a scheduler finds due, after downtime or a slow pass.

``../shared/research/scheduling.md`` §2: everything works on NOMINAL fire times. An occurrence
is on time when ``now - nominal <= grace`` and always fires. The others were missed, and the
policy decides:

- ``latest``: only the newest missed one fires, if it is within ``max_age`` and no on-time
  occurrence supersedes it; the rest are skipped (one digest after an outage, not a burst).
- ``all``: every missed one within ``max_age`` fires, oldest first; past ``cap`` the oldest
  are skipped (the newest ``cap`` are kept).
- ``none``: every missed one is skipped.

Every occurrence handed in comes back exactly once, fired or skipped with a reason, so the
caller records each as a row and the newest nominal time is its cursor. Pure: ``now`` is a
parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, get_args

from campaigns.cron import as_utc

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: tuple[str, ...] = get_args(CatchUp)
DEFAULT_GRACE = timedelta(minutes=5)
DEFAULT_CAP = 1000
MAX_DEFAULT_AGE = timedelta(hours=24)


@dataclass(frozen=True)
class CatchUpDecision:
    """``fire``: nominal times to materialise, oldest first. ``skip``: (nominal, reason)."""

    fire: list[datetime] = field(default_factory=list)
    skip: list[tuple[datetime, str]] = field(default_factory=list)


def default_max_age(period: timedelta) -> timedelta:
    """How late a missed occurrence may still go out by default: one period, at most a day."""
    if period <= timedelta(0):
        raise ValueError(f"a schedule's period must be positive, not {period}")
    return min(period, MAX_DEFAULT_AGE)


def due_after(
    cursor: datetime, now: datetime, *, max_age: timedelta, grace: timedelta = DEFAULT_GRACE
) -> datetime:
    """Where to start looking for due occurrences: after ``cursor``, but no further back than
    the oldest one that could still fire. Older ones are never enumerated (they could only be
    skipped for age), which bounds a pass after a long outage."""
    return max(as_utc(cursor), as_utc(now) - max(max_age, grace))


def apply_catch_up(
    policy: CatchUp,
    due: Iterable[datetime],
    now: datetime,
    *,
    max_age: timedelta,
    grace: timedelta = DEFAULT_GRACE,
    cap: int = DEFAULT_CAP,
) -> CatchUpDecision:
    """Split the due nominal times (all at or before ``now``) into fired and skipped."""
    if policy not in CATCH_UP_POLICIES:
        raise ValueError(f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, not {policy!r}")
    if max_age < timedelta(0) or grace < timedelta(0) or cap < 1:
        raise ValueError("max_age and grace must not be negative, and cap must be at least 1")
    now = as_utc(now)
    times = sorted({as_utc(moment) for moment in due})
    if times and times[-1] > now:
        raise ValueError(f"occurrence {_show(times[-1])} is not due yet (now is {_show(now)})")
    on_time = [t for t in times if now - t <= grace]
    missed = [t for t in times if now - t > grace]
    skip = [(t, _too_old(now - t, max_age)) for t in missed if now - t > max_age]
    fresh = [t for t in missed if now - t <= max_age]
    if policy == "none":
        chosen: list[datetime] = []
        skip += [(t, f"missed by {_span(now - t)} (catch_up: none)") for t in fresh]
    elif policy == "latest":
        # An on-time occurrence is the latest one: it supersedes every missed one.
        chosen = [] if on_time else fresh[-1:]
        newest = (on_time or fresh or [now])[-1]
        skip += [
            (t, f"missed by {_span(now - t)}; catch_up: latest sends only {_show(newest)}")
            for t in fresh
            if t not in chosen
        ]
    else:
        chosen = fresh[-cap:]
        skip += [
            (t, f"missed; more than {cap} occurrences to catch up, only the newest {cap} are sent")
            for t in fresh[:-cap]
        ]
    return CatchUpDecision(fire=chosen + on_time, skip=sorted(skip))


def _too_old(late: timedelta, max_age: timedelta) -> str:
    return f"missed by {_span(late)}, longer than max_catch_up_age ({_span(max_age)})"


def _span(delta: timedelta) -> str:
    """A duration for people: '2d 3h', '1h 5m', '4m 10s'."""
    seconds = int(delta.total_seconds())
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    shown = [f"{value}{unit}" for value, unit in parts if value][:2]
    return " ".join(shown) or "0s"


def _show(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
