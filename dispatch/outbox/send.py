"""The worker's transitions on its own leases: T4 start send (and settling a refused T4), the
outcomes T5–T8, and handing unstarted claims back (W1; W2 when their send window is closed).
All fenced by (id, token)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from dbtypes import ForeignText, db_now, db_now_plus
from dispatch.models import send_job
from dispatch.outbox.base import SqlBase
from dispatch.outbox.dialect import Column
from dispatch.outbox.jobs import (
    COMPLETION_TRANSITIONS,
    SUPPRESSED,
    Completion,
    Deferral,
    Lease,
    LeaseRow,
)
from dispatch.outbox.sqlcore import (
    J,
    guard,
    hand_back_until,
    journal,
    leases_in,
    returned,
    suppressed,
)
from dispatch.states import LEASED, State, T, Transition, performs


def in_order(states: frozenset[State]) -> list[State]:
    """A transition's sources in the state machine's order (deterministic statement order)."""
    return [s for s in State if s in states]


class SendOps(SqlBase):
    @performs(T.START_SEND)
    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        """claimed → sending: the only door to a send. Returns the ids that may go out, each
        with the moment it crossed (``send_started_at``, on the database clock): the message's
        ``Date``."""
        if not leases:
            return {}
        batch = self.forms.batch(leases, {})

        def build() -> sa.Update:
            return (
                sa.update(send_job)
                .where(
                    batch.where(),
                    guard(T.START_SEND, bound=True),
                    J.lease_expires_at > db_now_plus(sa.bindparam("t4_margin", type_=sa.Float())),
                    J.send_attempts < J.max_send_attempts,
                    J.superseded_at.is_(None),  # a replaced version's payload never goes out
                    ~suppressed(),
                    self.campaigns.active(),
                )
                .values(
                    state=T.START_SEND.target.value,
                    send_attempts=J.send_attempts + 1,
                    send_started_at=db_now(),
                    updated_at=db_now(),
                )
            )

        rows = self.forms.journalled(
            conn,
            "start_sends",
            build,
            T.START_SEND,
            actor=actor,
            batch=batch,
            returning=(J.send_started_at,),
            params={"t4_margin": float(margin_seconds)},
        )
        # By position (id, lease_token, send_started_at): a Row's lookup by name is slow.
        return {row[0]: row[2] for row in rows}

    @performs(T.UNSTARTABLE_CANCELLED, T.UNSTARTABLE_FAILED, T.UNSTARTABLE_RELEASED)
    def settle_unstartable(
        self, conn: sa.Connection, leases: Sequence[Lease], *, actor: str
    ) -> dict[int, State]:
        """Decide what happens to claimed jobs whose T4 guard failed, most final reason first.

        Superseded by a new version → cancelled; suppressed (global or the job's list) →
        cancelled, reason ``suppressed``; campaign cancelled → cancelled; attempts used up →
        failed; anything else (campaign paused, too little lease left) → back to pending
        untouched. Jobs whose lease is no longer ours match none of these and are left alone.
        """
        remaining = list(leases)
        settled: dict[int, State] = {}
        rules: list[tuple[sa.ColumnElement[bool], Transition, str]] = [
            (J.superseded_at.is_not(None), T.UNSTARTABLE_CANCELLED, "superseded"),
            # Suppression is a decision about the recipient, not a failure of the job: it
            # ends cancelled, like a withdrawn job, and nothing about it is retried.
            (suppressed(), T.UNSTARTABLE_CANCELLED, SUPPRESSED),
            (
                self.campaigns.has_status(self.campaigns.gate.cancelled),
                T.UNSTARTABLE_CANCELLED,
                "campaign cancelled",
            ),
            (
                J.send_attempts >= J.max_send_attempts,
                T.UNSTARTABLE_FAILED,
                "send attempts exhausted",
            ),
            (sa.true(), T.UNSTARTABLE_RELEASED, "released before sending"),
        ]
        for condition, transition, why in rules:
            if not remaining:
                break
            values: dict[str, Any] = {
                "state": transition.target.value,
                "lease_owner": None,
                "lease_expires_at": None,
                "updated_at": db_now(),
            }
            if transition.target is not State.PENDING:
                values.update(outcome_text=why, outcome_at=db_now())
            stmt = (
                sa.update(send_job)
                .where(leases_in(remaining), guard(transition, bound=True), condition)
                .values(**values)
                .returning(J.id, J.lease_token)
            )
            done = returned(conn.execute(stmt), why)
            journal(conn, transition, done, actor)
            for job_id, _, _ in done:
                settled[job_id] = transition.target
            remaining = [lease for lease in remaining if lease[0] not in settled]
        return settled

    @performs(*COMPLETION_TRANSITIONS)
    def complete(
        self, conn: sa.Connection, completions: Sequence[Completion], *, actor: str
    ) -> set[int]:
        """Apply worker outcomes; each transition is one guarded UPDATE per source state.
        Returns the ids applied.

        T5 (→ sent) accepts ``sending`` or ``in_doubt``: a 250 that arrives after recovery
        marked the job in doubt still proves delivery. Every other outcome needs ``sending``
        (T7, T8) or ``claimed`` (T6, for failures before DATA) with the same token.
        """
        applied: set[int] = set()
        by_transition: dict[Transition, list[Completion]] = {}
        for c in completions:
            by_transition.setdefault(c.transition, []).append(c)
        for transition, group in by_transition.items():
            for source in in_order(transition.sources):
                pending = [c for c in group if c.lease[0] not in applied]
                if not pending:
                    break
                applied |= self._apply(conn, pending, transition, source, actor)
        return applied

    def _apply(
        self,
        conn: sa.Connection,
        group: Sequence[Completion],
        transition: Transition,
        source: State,
        actor: str,
    ) -> set[int]:
        detail = {c.lease[0]: c.detail for c in group}  # computed once: journal and batch
        target = transition.target
        # Only the values this target's statement reads (``build``; ``detail``: PostgreSQL's
        # journal CTE): every column is encoded, bound and unpacked for every job of the batch.
        columns = {
            "code": Column(sa.Integer(), {c.lease[0]: c.code for c in group}),
            "text": Column(ForeignText(), {c.lease[0]: c.text for c in group}),
            "detail": Column(ForeignText(), detail),
        }
        if target is State.PENDING:
            columns["retry_in"] = Column(sa.Float(), {c.lease[0]: float(c.retry_in) for c in group})
        if target is State.IN_DOUBT:
            columns["reason"] = Column(
                ForeignText(), {c.lease[0]: c.in_doubt_reason or c.text for c in group}
            )
        batch = self.forms.batch([c.lease for c in group], columns)

        def build() -> sa.Update:
            values: dict[str, Any] = {
                "state": target.value,
                "updated_at": db_now(),
                "outcome_code": batch.value("code"),
                "outcome_text": batch.value("text"),
                "outcome_at": db_now(),
            }
            if target not in LEASED:
                values["lease_owner"] = None
            if target in (State.SENT, State.FAILED, State.PENDING):
                values["lease_expires_at"] = None
            if target is State.PENDING:
                values["not_before"] = db_now_plus(batch.value("retry_in"))
            if target is State.IN_DOUBT:
                values["in_doubt_reason"] = batch.value("reason")
            return (
                sa.update(send_job)
                .where(batch.where(), guard(transition, source, bound=True))
                .values(**values)
            )

        rows = self.forms.journalled(
            conn,
            "complete",
            build,
            transition,
            actor=actor,
            batch=batch,
            detail=detail,
            source=source,
        )
        return {row[0] for row in rows}  # by position (id first): a Row's lookup by name is slow

    def lease_state(self, conn: sa.Connection, leases: Sequence[Lease]) -> dict[int, str]:
        """Current state of the rows that still carry these tokens (for commit-unknown checks)."""
        return {job_id: row.state for job_id, row in self.lease_rows(conn, leases).items()}

    def lease_rows(self, conn: sa.Connection, leases: Sequence[Lease]) -> dict[int, LeaseRow]:
        """State and ``send_started_at`` of the rows that still carry these tokens."""
        if not leases:
            return {}
        rows = conn.execute(sa.select(J.id, J.state, J.send_started_at).where(leases_in(leases)))
        return {row.id: LeaseRow(row.state, row.send_started_at) for row in rows}

    @performs(T.RELEASE)
    def release_claims(
        self, conn: sa.Connection, leases: Sequence[Lease], *, actor: str
    ) -> set[int]:
        """Give unstarted claims back at once (graceful shutdown, or a transport that cannot
        be used as configured), guarded by token.

        The claim is not counted: ``claims`` limits jobs that keep killing the workers that
        claim them (poison), and a job handed back untried has done nothing of the sort.
        Counted, ten runs of a worker with a wrong relay setting would dead-letter every job.
        """
        if not leases:
            return set()
        stmt = (
            sa.update(send_job)
            .where(leases_in(leases), guard(T.RELEASE, bound=True))
            .values(
                state=T.RELEASE.target.value,
                claims=J.claims - 1,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        done = returned(conn.execute(stmt), "released at shutdown")
        journal(conn, T.RELEASE, done, actor)
        return {i for i, _, _ in done}

    @performs(T.OUTSIDE_WINDOW)
    def defer_claims(
        self, conn: sa.Connection, deferrals: Sequence[Deferral], *, actor: str
    ) -> set[int]:
        """Hand back claims whose send window is closed, each due again at its window's next
        opening, guarded by token. Like W1, the claim is not counted: waiting for a window is
        not a sign of a job that kills its workers.
        """
        return hand_back_until(conn, deferrals, T.OUTSIDE_WINDOW, "outside send window", actor)
