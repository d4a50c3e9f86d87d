"""Explicit human decisions: cancel a campaign's unsent jobs (T10), resolve in-doubt jobs (T9),
re-arm dead ones (D1), suppress a mailbox (and lift it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from dbtypes import db_now
from dispatch.models import GLOBAL_SCOPE, send_job, suppression
from dispatch.outbox.base import SqlBase
from dispatch.outbox.prune import payload_kept
from dispatch.outbox.send import in_order
from dispatch.outbox.sqlcore import J, guard, journal, returned, selection
from dispatch.states import State, T, Transition, performs

CANCELLED = "campaign cancelled"

#: An operator's verdict on an in-doubt job -> the transition it performs.
RESOLUTIONS: dict[State, Transition] = {
    State.SENT: T.RESOLVE_SENT,
    State.PENDING: T.RESOLVE_RESEND,
    State.FAILED: T.RESOLVE_FAILED,
}


def resolution(target: State) -> Transition:
    found = RESOLUTIONS.get(target)
    if found is None:
        raise ValueError(f"an in-doubt job cannot be resolved to {target}")
    return found


class OperatorOps(SqlBase):
    @performs(T.CANCEL)
    def cancel_campaign(self, conn: sa.Connection, campaign: str, *, actor: str) -> int:
        """Cancel everything not yet past T4. A job already sending goes out."""
        stmt = (
            sa.update(send_job)
            .where(J.campaign == campaign, guard(T.CANCEL))
            .values(
                state=T.CANCEL.target.value,
                lease_owner=None,
                lease_expires_at=None,
                outcome_text=CANCELLED,
                outcome_at=db_now(),
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        total = 0
        # One statement per source state, so each journal row names where the job came from.
        for source in in_order(T.CANCEL.sources):
            rows = returned(conn.execute(stmt.where(J.state == source.value)), CANCELLED)
            journal(conn, T.CANCEL, rows, actor, source=source)
            total += len(rows)
        return total

    @performs(*RESOLUTIONS.values())
    def resolve_in_doubt(
        self,
        conn: sa.Connection,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        target: State,
        actor: str,
        why: str,
    ) -> list[tuple[int, str]]:
        """T9: an operator's explicit decision for in-doubt jobs. Returns (id, key) changed."""
        transition = resolution(target)
        values: dict[str, Any] = {
            "state": transition.target.value,
            "resolution": f"{actor}: {why}",
            "updated_at": db_now(),
            "lease_owner": None,
            "lease_expires_at": None,
        }
        if transition is T.RESOLVE_RESEND:
            # Re-arming grants one more transmission, recorded in the journal with who and why.
            values.update(
                max_send_attempts=self.forms.greatest(J.max_send_attempts, J.send_attempts + 1),
                not_before=db_now(),
            )
        # A superseded payload is never re-armed (dispatch.outbox.versions); deciding it is.
        # Nor one whose payload retention pruned (dispatch.outbox.prune): it no longer exists.
        rearmable = (
            [J.superseded_at.is_(None), payload_kept()] if transition is T.RESOLVE_RESEND else []
        )
        stmt = (
            sa.update(send_job)
            .where(
                guard(transition, bound=keys is not None), *rearmable, *selection(keys, campaign)
            )
            .values(**values)
            .returning(J.id, J.lease_token, J.key)
        )
        rows = list(conn.execute(stmt))
        journal(conn, transition, returned(rows, why), actor)
        return [(r.id, r.key) for r in rows]

    @performs(T.DEAD_RETRY)
    def retry_dead(
        self,
        conn: sa.Connection,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        actor: str,
    ) -> list[tuple[int, str]]:
        """Re-arm failed jobs: fresh attempt and claim budgets, due now."""
        stmt = (
            sa.update(send_job)
            .where(
                guard(T.DEAD_RETRY, bound=keys is not None),  # by key: see guard
                J.superseded_at.is_(None),  # never re-arm a replaced version's payload
                payload_kept(),  # nor a pruned one: there is no message left to send
                *selection(keys, campaign),
            )
            .values(
                state=T.DEAD_RETRY.target.value,
                max_send_attempts=J.send_attempts + J.max_send_attempts,
                max_claims=J.claims + J.max_claims,
                not_before=db_now(),
                resolution=f"{actor}: dead retry",
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token, J.key)
        )
        rows = list(conn.execute(stmt))
        journal(conn, T.DEAD_RETRY, returned(rows, "dead retry"), actor)
        return [(r.id, r.key) for r in rows]

    def suppress(
        self,
        conn: sa.Connection,
        mailbox: str,
        reason: str,
        *,
        scope: str = GLOBAL_SCOPE,
        source: str = "manual",
    ) -> bool:
        """Never send to ``mailbox`` again in ``scope``: its canonical identity, which the
        caller computes (campaigns.suppression). True if it was not suppressed before."""
        stmt = (
            self.forms.insert(suppression)
            .values(address=mailbox, scope=scope, reason=reason, source=source)
            .on_conflict_do_nothing(index_elements=["address", "scope"])
            .returning(suppression.c.address)
        )
        return conn.execute(stmt).first() is not None

    def suppress_many(
        self,
        conn: sa.Connection,
        entries: Sequence[tuple[str, str, str]],
        *,
        source: str,
    ) -> int:
        """``suppress`` for many (mailbox, scope, reason) at once, in the caller's transaction
        (an import is all or nothing). Returns how many were not suppressed before."""
        if not entries:
            return 0
        stmt = (
            self.forms.insert(suppression)
            .on_conflict_do_nothing(index_elements=["address", "scope"])
            .returning(suppression.c.address)
        )
        params = [
            {"address": mailbox, "scope": scope, "reason": reason, "source": source}
            for mailbox, scope, reason in entries
        ]
        return len(conn.execute(stmt, params).all())

    def unsuppress(self, conn: sa.Connection, mailbox: str, *, scope: str = GLOBAL_SCOPE) -> bool:
        """Lift ``mailbox``'s suppression in ``scope`` (only that scope). True if there was one.

        Jobs the suppression already cancelled stay cancelled: lifting it is not a resend.
        """
        stmt = sa.delete(suppression).where(
            suppression.c.address == mailbox, suppression.c.scope == scope
        )
        return conn.execute(stmt).rowcount > 0
