"""The dashboard's own reads: what the use cases do not already return (sends over time, the
evidence of a held job, a stored message, a campaign's step order). Reads only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from campaigns.models import campaign_table
from dispatch.models import send_event, send_job, send_key
from dispatch.outbox.keyed import K, job_of
from dispatch.states import State
from herald.app.status_timing import stored_spec

J = send_job.c
MAX_ROWS = 500  # a page lists at most this many jobs or entries (and says so)
RATE_WINDOW = timedelta(minutes=5)


def step_order(conn: sa.Connection, campaign: str) -> list[str]:
    """The step ids as the stored campaign lists them (empty if it cannot be read)."""
    text = conn.execute(
        sa.select(campaign_table.c.spec).where(campaign_table.c.name == campaign)
    ).scalar()
    spec = stored_spec(text)
    return [] if spec is None else [step.id for step in spec.steps]


def recent_sends(conn: sa.Connection, campaign: str, since: datetime) -> dict[str, int]:
    """Sends per step since ``since`` (the rate column)."""
    rows = conn.execute(
        sa.select(J.step, sa.func.count())
        .where(J.campaign == campaign, J.state == State.SENT.value, J.outcome_at >= since)
        .group_by(J.step)
    )
    return {step: n for step, n in rows}


@dataclass(frozen=True)
class Buckets:
    start: datetime  # the first bucket's start (UTC)
    width: timedelta
    counts: list[int]  # sends per bucket, oldest first, gaps included as 0


def _epoch(conn: sa.Connection) -> sa.ColumnElement[float]:
    if conn.dialect.name == "sqlite":  # UtcTimestamp is epoch seconds there
        return sa.type_coerce(J.outcome_at, sa.Float())
    return sa.cast(sa.extract("epoch", J.outcome_at), sa.Float())


def _width(span: timedelta) -> timedelta:
    for width in (timedelta(minutes=1), timedelta(hours=1)):
        if span <= width * 180:
            return width
    return timedelta(days=1)


def sends_over_time(conn: sa.Connection, campaign: str) -> Buckets | None:
    """Sends of ``campaign`` bucketed per minute, hour or day (at most ~180 buckets), counted
    by the database; None before the first send."""
    sent = sa.and_(J.campaign == campaign, J.state == State.SENT.value, J.outcome_at.is_not(None))
    first, last = conn.execute(
        sa.select(sa.func.min(J.outcome_at), sa.func.max(J.outcome_at)).where(sent)
    ).one()
    if first is None or last is None:
        return None
    width = _width(last - first)
    seconds = int(width.total_seconds())
    scaled = _epoch(conn) / seconds
    index: sa.ColumnElement[Any] = (
        sa.cast(scaled, sa.Integer) if conn.dialect.name == "sqlite" else sa.func.floor(scaled)
    )
    rows = conn.execute(sa.select(index, sa.func.count()).where(sent).group_by(index))
    by_index = {int(i): n for i, n in rows}
    low, high = min(by_index), max(by_index)
    counts = [by_index.get(i, 0) for i in range(low, high + 1)]
    return Buckets(datetime.fromtimestamp(low * seconds, UTC), width, counts)


_EVIDENCE = (
    J.id,
    J.key,
    J.campaign,
    J.step,
    J.recipient,
    J.state,
    J.send_attempts,
    J.max_send_attempts,
    J.claims,
    J.max_claims,
    J.lease_owner,
    J.lease_expires_at,
    J.send_started_at,
    J.outcome_code,
    J.outcome_text,
    J.outcome_at,
    J.in_doubt_reason,
    J.superseded_at,
    J.updated_at,
)


@dataclass(frozen=True)
class HeldJob:
    row: Any  # the _EVIDENCE columns
    events: list[Any]  # its journal, oldest first (the last few)


def held_jobs(conn: sa.Connection, state: State, *, events: int = 4) -> list[HeldJob]:
    """Jobs in ``state`` (in doubt, failed) with the evidence an operator decides on."""
    rows = list(
        conn.execute(
            sa.select(*_EVIDENCE).where(J.state == state.value).order_by(J.id).limit(MAX_ROWS)
        )
    )
    E = send_event.c
    journal: dict[int, list[Any]] = {}
    ids = [r.id for r in rows]
    for start in range(0, len(ids), 200):
        found = conn.execute(
            sa.select(E.job_id, E.from_state, E.to_state, E.actor, E.detail, E.at)
            .where(E.job_id.in_(ids[start : start + 200]))
            .order_by(E.job_id, E.id)
        )
        for event in found:
            journal.setdefault(event.job_id, []).append(event)
    return [HeldJob(r, journal.get(r.id, [])[-events:]) for r in rows]


def stored_jobs(
    conn: sa.Connection, campaign: str, step: str, recipient: str, mailbox: str | None
) -> list[Any]:
    """The jobs of ``recipient`` (as written, or its mailbox) for that step, latest first."""
    who = J.recipient == recipient
    if mailbox is not None:
        who = sa.or_(who, J.mailbox == mailbox)
    return list(
        conn.execute(
            sa.select(
                J.key,
                J.campaign,
                J.step,
                J.recipient,
                J.channel,
                J.occurrence_at,
                J.state,
                J.message_id,
                J.payload,
            )
            # By send_key's (campaign, step, …) index: send_job has none on those columns.
            .join(send_key, K.job_id == J.id)
            .where(K.campaign == campaign, K.step == step, who)
            .order_by(J.occurrence_at.desc(), J.id.desc())
            .limit(20)
        )
    )


def job_by_key(conn: sa.Connection, key: str) -> Any:
    return conn.execute(
        sa.select(J.key, J.campaign, J.step, J.recipient).where(J.id == job_of(key))
    ).first()
