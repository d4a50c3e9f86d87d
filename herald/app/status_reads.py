"""The reads behind ``herald status`` beyond the outbox counts: triggers, fires, enrollments and
when pending work falls due. Each is one grouped query over all campaigns (or one), whatever
their number: status stays a handful of statements.

"Now" is a bound parameter from the caller's clock (``--now`` included), never the database's:
the due-time histogram answers "what if it were then?" as well as "what now?".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

import sqlalchemy as sa

from campaigns.models import campaign_table
from dispatch.models import send_job
from dispatch.states import State
from scheduler.models import enrollment_table, trigger_fire_table

C = campaign_table.c
J = send_job.c
F = trigger_fire_table.c
E = enrollment_table.c

#: Buckets of pending jobs by when they fall due (``not_before``), from the caller's now: due
#: now or overdue, then within an hour, a day, a week, and later.
DUE_BUCKETS: Final = ("now", "within_1h", "within_24h", "within_7d", "later")
_BOUNDS: Final = (
    ("now", timedelta(0)),
    ("within_1h", timedelta(hours=1)),
    ("within_24h", timedelta(days=1)),
    ("within_7d", timedelta(days=7)),
)
FIRE_STATES: Final = ("due", "done", "skipped")
ENROLLMENT_STATES: Final = ("active", "left", "ended", "done")


def zero_buckets() -> dict[str, int]:
    return dict.fromkeys(DUE_BUCKETS, 0)


@dataclass(frozen=True)
class TriggerRow:
    """The scheduler's columns of a campaign row (migration 0005)."""

    trigger: str  # launch | start_at | schedule | enrollment (None stored = launch)
    scheduler_note: str | None
    spec: str | None  # the YAML as launched: only read for campaigns whose next fire we compute


@dataclass
class FireSummary:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIRE_STATES, 0))
    cursor: datetime | None = None  # the newest nominal_at, skipped fires included
    last_fired: datetime | None = None  # the newest nominal_at that was (or is being) fanned out


@dataclass
class EnrollmentSummary:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENROLLMENT_STATES, 0))
    last_enrolled: datetime | None = None


Query = TypeVar("Query", bound=sa.Select[Any])


def _only(stmt: Query, column: sa.ColumnElement[str], campaign: str | None) -> Query:
    return stmt if campaign is None else stmt.where(column == campaign)


def trigger_rows(
    conn: sa.Connection, campaign: str | None, *, spec_for: frozenset[str]
) -> dict[str, TriggerRow]:
    """Per campaign: its trigger kind and scheduler note; its stored spec if its kind is in
    ``spec_for`` (the spec can be large: it is not read for the others)."""
    wants_spec = sa.case((C.trigger.in_(sorted(spec_for)), C.spec), else_=sa.null())
    stmt = _only(sa.select(C.name, C.trigger, C.scheduler_note, wants_spec), C.name, campaign)
    return {
        name: TriggerRow(trigger or "launch", note, spec)
        for name, trigger, note, spec in conn.execute(stmt)
    }


def fire_summaries(conn: sa.Connection, campaign: str | None) -> dict[str, FireSummary]:
    stmt = _only(
        sa.select(F.campaign, F.state, sa.func.count(), sa.func.max(F.nominal_at)).group_by(
            F.campaign, F.state
        ),
        F.campaign,
        campaign,
    )
    summaries: dict[str, FireSummary] = {}
    for name, state, n, newest in conn.execute(stmt):
        summary = summaries.setdefault(name, FireSummary())
        summary.counts[state] = summary.counts.get(state, 0) + n
        summary.cursor = _later(summary.cursor, newest)
        if state != "skipped":
            summary.last_fired = _later(summary.last_fired, newest)
    return summaries


def enrollment_summaries(conn: sa.Connection, campaign: str | None) -> dict[str, EnrollmentSummary]:
    stmt = _only(
        sa.select(E.campaign, E.state, sa.func.count(), sa.func.max(E.enrolled_at)).group_by(
            E.campaign, E.state
        ),
        E.campaign,
        campaign,
    )
    summaries: dict[str, EnrollmentSummary] = {}
    for name, state, n, newest in conn.execute(stmt):
        summary = summaries.setdefault(name, EnrollmentSummary())
        summary.counts[state] = summary.counts.get(state, 0) + n
        summary.last_enrolled = _later(summary.last_enrolled, newest)
    return summaries


def due_histograms(
    conn: sa.Connection, campaign: str | None, now: datetime
) -> dict[str, dict[str, int]]:
    """Pending jobs per campaign by bucket of ``not_before`` relative to ``now`` (DUE_BUCKETS)."""
    bucket = sa.case(
        *((J.not_before <= now + bound, name) for name, bound in _BOUNDS), else_="later"
    )
    # Grouped outside a subquery: PostgreSQL cannot tell that the CASE in GROUP BY, with its
    # own parameters, is the one in the select list.
    pending = _only(
        sa.select(J.campaign.label("campaign"), bucket.label("bucket")).where(
            J.state == State.PENDING.value
        ),
        J.campaign,
        campaign,
    ).subquery()
    stmt = sa.select(pending.c.campaign, pending.c.bucket, sa.func.count()).group_by(
        pending.c.campaign, pending.c.bucket
    )
    histograms: dict[str, dict[str, int]] = {}
    for name, where, n in conn.execute(stmt):
        histograms.setdefault(name, zero_buckets())[where] += n
    return histograms


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
