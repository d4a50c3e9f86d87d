"""Recovery (R1–R4): what becomes of leases that expired on the database clock, of jobs with
nothing left to spend, and of in-doubt jobs whose channel may safely be sent to again.

Every statement takes only rows no other transaction holds (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL; SQLite has one writer, so nothing else can hold a row). A worker frozen in the
middle of a transaction (stopped, swapped out, its host paused) keeps its rows locked until it
resumes or its connection dies; a recovery that waited for them would hold every other worker
still, since recovery runs in a transaction alone (``dispatch/committer.py``, "Lanes"), and so
would every worker's next pass. A locked row is left for a later pass instead: whatever holds
it is still deciding its fate, and a row is taken only once its lock is gone and it still
qualifies (tests/integration/test_recovery_locked_rows.py).
"""

from __future__ import annotations

import sqlalchemy as sa

from dbtypes import UtcTimestamp, db_now, db_now_plus, seconds
from dispatch.models import send_job
from dispatch.outbox.base import SqlBase
from dispatch.outbox.jobs import HeldLeases, RecoveryReport
from dispatch.outbox.sqlcore import J, guard, journal, journal_each, returned
from dispatch.states import State, T, Transition, performs

EXPIRED_BEFORE_SENDING = "lease expired before sending"
POISON = "poison: lease expired before sending on every claim"
LOST_IN_SEND = "lease expired during send"
EXHAUSTED = "attempts exhausted"
# Claims run out only for jobs claimed again and again without a send completing (poison, or
# pre-DATA retries such as greylisting); hand-backs (W1, W2, W4: shutdown, send window, relay
# outage) never count one. Said as such, so a dead letter with no attempt does not read
# "attempts exhausted".
CLAIMS_EXHAUSTED = "claims exhausted: claimed too often without a send"
POLICY_RESEND = "policy: resend"


class RecoveryOps(SqlBase):
    @performs(T.EXPIRED_CLAIM, T.POISON, T.LOST_IN_SEND, T.EXHAUSTED, T.POLICY_RESEND)
    def recover(self, conn: sa.Connection, *, grace_seconds: float, actor: str) -> RecoveryReport:
        """Recover only leases that expired on the database clock: unstarted claims as soon as
        they have, started sends only more than ``grace`` ago (docs/design.md §5)."""
        report = RecoveryReport()
        # An expired claim is dead to its holder: its heartbeat never revives an expired lease
        # and T4 needs the lease to run t4_margin longer, so no grace is owed before R1.
        claim_expired = J.lease_expires_at < db_now()
        # A started send's holder may be alive with its outcome (T5) or heartbeat waiting in its
        # committer's batch or on a row lock: the grace spares it a needless in_doubt.
        send_expired = J.lease_expires_at < db_now_plus(seconds(-grace_seconds))

        # R1 (R1p for poison jobs): claimed, never started. One statement, two targets: each
        # returned row's state says which of the two transitions it took.
        poison = J.claims >= J.max_claims
        stmt = (
            sa.update(send_job)
            .where(self._unlocked(T.EXPIRED_CLAIM, claim_expired))
            .values(
                state=sa.case((poison, T.POISON.target.value), else_=T.EXPIRED_CLAIM.target.value),
                outcome_text=sa.case((poison, POISON), else_=J.outcome_text),
                outcome_at=sa.case((poison, db_now()), else_=J.outcome_at),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token, J.state)
        )
        rows = list(conn.execute(stmt))
        journal_each(
            conn,
            [
                (
                    t,
                    returned(
                        [r for r in rows if r.state == t.target.value], EXPIRED_BEFORE_SENDING
                    ),
                )
                for t in (T.EXPIRED_CLAIM, T.POISON)
            ],
            actor,
        )
        report.released = sum(1 for r in rows if r.state == T.EXPIRED_CLAIM.target.value)
        report.dead += sum(1 for r in rows if r.state == T.POISON.target.value)
        report.details += [(r.id, r.state, EXPIRED_BEFORE_SENDING) for r in rows]

        # R2: started, outcome unknown. Never resent automatically for email.
        stmt = (
            sa.update(send_job)
            .where(self._unlocked(T.LOST_IN_SEND, send_expired))
            .values(
                state=T.LOST_IN_SEND.target.value,
                in_doubt_reason=LOST_IN_SEND,
                lease_owner=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        lost = returned(conn.execute(stmt), LOST_IN_SEND)
        journal(conn, T.LOST_IN_SEND, lost, actor)
        report.in_doubt = len(lost)
        report.details += [(i, T.LOST_IN_SEND.target.value, LOST_IN_SEND) for i, _, _ in lost]

        # R3: pending jobs with nothing left to spend, each with the budget that ran out. The
        # source state is a literal and each statement repeats one arm of the partial
        # ix_send_job_exhausted's OR term for term, so both databases read only that (nearly
        # empty) index instead of every pending job (migration 0008).
        attempts_out = J.send_attempts >= J.max_send_attempts
        claims_out = J.claims >= J.max_claims
        for exhausted, why in (
            (attempts_out, EXHAUSTED),
            (sa.and_(claims_out, sa.not_(attempts_out)), CLAIMS_EXHAUSTED),
        ):
            stmt = (
                sa.update(send_job)
                .where(self._unlocked(T.EXHAUSTED, exhausted))
                .values(
                    state=T.EXHAUSTED.target.value,
                    outcome_text=why,
                    outcome_at=db_now(),
                    updated_at=db_now(),
                )
                .returning(J.id, J.lease_token)
            )
            dead = returned(conn.execute(stmt), why)
            journal(conn, T.EXHAUSTED, dead, actor)
            report.dead += len(dead)
            report.details += [(i, T.EXHAUSTED.target.value, why) for i, _, _ in dead]

        # R4, channel policy: receivers that dedupe on Idempotency-Key may be sent to again.
        stmt = (
            sa.update(send_job)
            .where(
                self._unlocked(
                    T.POLICY_RESEND,
                    J.in_doubt_policy == "resend",
                    J.send_attempts < J.max_send_attempts,
                    J.superseded_at.is_(None),
                )
            )
            .values(
                state=T.POLICY_RESEND.target.value, resolution=POLICY_RESEND, updated_at=db_now()
            )
            .returning(J.id, J.lease_token)
        )
        resent = returned(conn.execute(stmt), POLICY_RESEND)
        journal(conn, T.POLICY_RESEND, resent, actor)
        report.resent = len(resent)
        report.held = self.held_leases(conn)
        return report

    def _unlocked(
        self, transition: Transition, *conditions: sa.ColumnElement[bool]
    ) -> sa.ColumnElement[bool]:
        """The rows in ``transition``'s source state meeting ``conditions`` that no other
        transaction holds, locked for this statement (see the module's docstring).

        The search names the state literally, so each statement reads its state's partial index
        (the lease index for R1 and R2, ix_send_job_exhausted for R3); the UPDATE repeats the
        guard and the conditions on the rows it was handed, so a row that changed between the
        search and its lock is taken only if it still qualifies.
        """
        found = (
            sa.select(J.id).where(guard(transition), *conditions).with_for_update(skip_locked=True)
        )
        return sa.and_(self.forms.picked(found), guard(transition, bound=True), *conditions)

    def held_leases(self, conn: sa.Connection) -> HeldLeases:
        """Seconds on the database clock until the earliest lease still held in each leased
        state expires (≤ 0 if one already has), None for a state with no job leased.

        The states are rendered literally so that PostgreSQL can prove the partial
        ix_send_job_state_lease (migration 0007) covers each subquery even under a generic
        plan; each then reads its state's lowest ``lease_expires_at`` from the index.
        """

        def earliest(state: State) -> sa.ScalarSelect[object]:
            query = sa.select(sa.func.min(J.lease_expires_at)).where(J.state == state.value)
            return query.scalar_subquery()

        row = conn.execute(
            sa.select(earliest(State.CLAIMED), earliest(State.SENDING), db_now())
        ).one()
        claimed, sending, now = (UtcTimestamp().process_result_value(v, conn.dialect) for v in row)
        if now is None:
            return HeldLeases()
        return HeldLeases(
            claimed_in=None if claimed is None else (claimed - now).total_seconds(),
            sending_in=None if sending is None else (sending - now).total_seconds(),
        )
