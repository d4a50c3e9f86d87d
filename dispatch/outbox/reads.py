"""Reads for status displays, operators and the worker's idle checks. No transitions here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from dbtypes import UtcTimestamp, db_now, db_now_plus, seconds
from dispatch.models import CAMPAIGN_INDEXED, send_event
from dispatch.outbox.base import SqlBase
from dispatch.outbox.sqlcore import J
from dispatch.states import LEASED, State


class ReadOps(SqlBase):
    def counts(
        self, conn: sa.Connection, campaign: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        """(campaign, step, state, count) for status displays.

        Two parts, so each reads a partial index (dispatch/models.py): the states
        ``ix_send_job_campaign_state`` holds, and the few jobs in any other state (leased).
        """
        others = [s.value for s in State if s.value not in CAMPAIGN_INDEXED]
        parts = []
        for states in (CAMPAIGN_INDEXED, others):  # positive lists: each implies a predicate
            stmt = (
                sa.select(J.campaign, J.step, J.state, sa.func.count())
                .where(J.state.in_(states))
                .group_by(J.campaign, J.step, J.state)
            )
            if campaign is not None:
                stmt = stmt.where(J.campaign == campaign)
            parts.append(stmt)
        return [(r[0], r[1], r[2], r[3]) for r in conn.execute(sa.union_all(*parts))]

    def jobs_in_state(
        self,
        conn: sa.Connection,
        state: State,
        *,
        campaign: str | None = None,
        limit: int | None = None,
    ) -> list[Any]:
        """Rows with the attributes of ``dispatch.outbox.contract.JobView``, by id."""
        stmt = (
            sa.select(
                J.id,
                J.key,
                J.campaign,
                J.step,
                J.recipient,
                J.message_id,
                J.state,
                J.send_attempts,
                J.claims,
                J.outcome_code,
                J.outcome_text,
                J.in_doubt_reason,
                J.send_started_at,
                J.updated_at,
            )
            .where(J.state == state.value)
            .order_by(J.id)
        )
        if campaign is not None:
            stmt = stmt.where(J.campaign == campaign)
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(conn.execute(stmt))

    def events(self, conn: sa.Connection, job_ids: Sequence[int] | None = None) -> list[Any]:
        """Rows with the attributes of ``dispatch.outbox.contract.EventView``, in journal order."""
        E = send_event.c
        stmt = sa.select(
            E.job_id, E.token, E.from_state, E.to_state, E.actor, E.detail, E.at
        ).order_by(E.job_id, E.id)
        if job_ids is not None:
            stmt = stmt.where(E.job_id.in_(list(job_ids)))
        return list(conn.execute(stmt))

    def has_work(self, conn: sa.Connection, horizon_seconds: float = 0.0) -> bool:
        """Anything leased, or pending and due within ``horizon_seconds``?

        ``--until-idle`` exits when not: a retry due in a few seconds is waited for, a step
        scheduled days ahead is not.
        """
        leased = sa.exists().where(J.state.in_(sorted(s.value for s in LEASED)))
        due_soon = sa.exists().where(
            J.state == State.PENDING.value,
            J.not_before <= db_now_plus(seconds(horizon_seconds)),
            J.claims < J.max_claims,
            ~self.campaigns.not_active(),
        )
        return bool(conn.execute(sa.select(sa.or_(leased, due_soon))).scalar())

    def next_due_in(self, conn: sa.Connection) -> float | None:
        """Seconds until the earliest pending job is due (≤ 0 when one is due now)."""
        now = conn.execute(sa.select(db_now())).scalar_one()
        earliest = conn.execute(
            sa.select(sa.func.min(J.not_before)).where(
                J.state == State.PENDING.value, ~self.campaigns.not_active()
            )
        ).scalar()
        if earliest is None:
            return None
        if not isinstance(earliest, datetime):
            earliest = UtcTimestamp().process_result_value(earliest, conn.dialect)
        assert earliest is not None
        return float((earliest - now).total_seconds())

    def database_now(self, conn: sa.Connection) -> datetime:
        value: datetime = conn.execute(sa.select(db_now())).scalar_one()
        return value
