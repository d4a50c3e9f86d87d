"""An outbox in memory, honouring the same contract as ``SqlOutbox`` (for fast unit tests).

Leases, fencing tokens, conditional transitions and the journal behave as in the database:
every transition goes through ``_move``, which checks the job's state against the transition's
sources (``dispatch.states``) and appends the journal event. Time comes from ``clock`` (a
parameter, so a test can move it); a transaction (``begin()``) holds a lock and restores a
snapshot if its block raises, so a failed batch changes nothing, as a rollback would.

Not covered here: campaign versions (``dispatch.outbox.versions`` works on SQL only).
The pieces: ``memory_base`` (data, clock, transactions, ``_move``), ``memory_worker`` (scheduler
and worker operations) and, here, recovery, operators and readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dispatch.models import GLOBAL_SCOPE
from dispatch.outbox.contract import Outbox
from dispatch.outbox.jobs import RecoveryReport
from dispatch.outbox.memory_base import (
    Clock,
    MemEvent,
    MemJob,
    MemoryBase,
    MemoryTx,
    system_clock,
)
from dispatch.outbox.memory_rates import MemoryRateOps
from dispatch.outbox.memory_relay import MemoryRelayOps
from dispatch.outbox.memory_worker import MemoryWorkerOps
from dispatch.outbox.operator import CANCELLED, resolution
from dispatch.outbox.recovery import (
    CLAIMS_EXHAUSTED,
    EXHAUSTED,
    EXPIRED_BEFORE_SENDING,
    LOST_IN_SEND,
    POISON,
    POLICY_RESEND,
)
from dispatch.outbox.send import in_order
from dispatch.states import LEASED, State, T, performs


class MemoryOutbox(MemoryRateOps, MemoryWorkerOps, MemoryRelayOps):
    """Implements ``dispatch.outbox.contract.Outbox[MemoryTx]``: ``MemoryOutbox(clock=…)``."""

    # ------------------------------------------------------------ recovery

    @performs(T.EXPIRED_CLAIM, T.POISON, T.LOST_IN_SEND, T.EXHAUSTED, T.POLICY_RESEND)
    def recover(self, conn: MemoryTx, *, grace_seconds: float, actor: str) -> RecoveryReport:
        report = RecoveryReport()
        now = conn.clock()
        jobs = sorted(conn.data.jobs.values(), key=lambda j: j.id)

        def expired(j: MemJob, grace: float) -> bool:
            limit = now - timedelta(seconds=grace)
            return j.lease_expires_at is not None and j.lease_expires_at < limit

        # As RecoveryOps.recover: unstarted claims at expiry, started sends after the grace.
        for j in [j for j in jobs if j.state == State.CLAIMED.value and expired(j, 0)]:
            if j.claims >= j.max_claims:
                self._move(
                    conn,
                    j,
                    T.POISON,
                    actor,
                    EXPIRED_BEFORE_SENDING,
                    outcome_text=POISON,
                    outcome_at=now,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                report.dead += 1
            else:
                self._move(
                    conn,
                    j,
                    T.EXPIRED_CLAIM,
                    actor,
                    EXPIRED_BEFORE_SENDING,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                report.released += 1
            report.details.append((j.id, j.state, EXPIRED_BEFORE_SENDING))
        for j in [j for j in jobs if j.state == State.SENDING.value and expired(j, grace_seconds)]:
            self._move(
                conn,
                j,
                T.LOST_IN_SEND,
                actor,
                LOST_IN_SEND,
                in_doubt_reason=LOST_IN_SEND,
                lease_owner=None,
            )
            report.in_doubt += 1
            report.details.append((j.id, j.state, LOST_IN_SEND))
        for j in [j for j in jobs if j.state == State.PENDING.value]:
            if j.send_attempts >= j.max_send_attempts or j.claims >= j.max_claims:
                why = EXHAUSTED if j.send_attempts >= j.max_send_attempts else CLAIMS_EXHAUSTED
                self._move(conn, j, T.EXHAUSTED, actor, why, outcome_text=why, outcome_at=now)
                report.dead += 1
                report.details.append((j.id, j.state, why))
        for j in [j for j in jobs if j.state == State.IN_DOUBT.value]:
            if (
                j.in_doubt_policy == "resend"
                and j.send_attempts < j.max_send_attempts
                and j.superseded_at is None
            ):
                self._move(conn, j, T.POLICY_RESEND, actor, POLICY_RESEND, resolution=POLICY_RESEND)
                report.resent += 1
        report.held = self.held_leases(conn)
        return report

    # ------------------------------------------------------------ operators

    @performs(T.CANCEL)
    def cancel_campaign(self, conn: MemoryTx, campaign: str, *, actor: str) -> int:
        total = 0
        for source in in_order(T.CANCEL.sources):
            for j in self._selected(conn, source, None, campaign):
                self._move(
                    conn,
                    j,
                    T.CANCEL,
                    actor,
                    CANCELLED,
                    lease_owner=None,
                    lease_expires_at=None,
                    outcome_text=CANCELLED,
                    outcome_at=conn.clock(),
                )
                total += 1
        return total

    @performs(T.RESOLVE_SENT, T.RESOLVE_RESEND, T.RESOLVE_FAILED)
    def resolve_in_doubt(
        self,
        conn: MemoryTx,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        target: State,
        actor: str,
        why: str,
    ) -> list[tuple[int, str]]:
        transition = resolution(target)
        done = []
        for j in self._selected(conn, State.IN_DOUBT, keys, campaign):
            changes: dict[str, Any] = {}
            if transition is T.RESOLVE_RESEND:
                if j.superseded_at is not None:
                    continue  # a superseded payload is never re-armed
                changes = {
                    "max_send_attempts": max(j.max_send_attempts, j.send_attempts + 1),
                    "not_before": conn.clock(),
                }
            self._move(
                conn,
                j,
                transition,
                actor,
                why,
                resolution=f"{actor}: {why}",
                lease_owner=None,
                lease_expires_at=None,
                **changes,
            )
            done.append((j.id, j.key))
        return done

    @performs(T.DEAD_RETRY)
    def retry_dead(
        self, conn: MemoryTx, *, keys: Sequence[str] | None, campaign: str | None, actor: str
    ) -> list[tuple[int, str]]:
        done = []
        for j in self._selected(conn, State.FAILED, keys, campaign):
            if j.superseded_at is not None:
                continue
            self._move(
                conn,
                j,
                T.DEAD_RETRY,
                actor,
                "dead retry",
                max_send_attempts=j.send_attempts + j.max_send_attempts,
                max_claims=j.claims + j.max_claims,
                not_before=conn.clock(),
                resolution=f"{actor}: dead retry",
            )
            done.append((j.id, j.key))
        return done

    def suppress(
        self,
        conn: MemoryTx,
        mailbox: str,
        reason: str,
        *,
        scope: str = GLOBAL_SCOPE,
        source: str = "manual",
    ) -> bool:
        if (mailbox, scope) in conn.data.suppressed:
            return False
        conn.data.suppressed[mailbox, scope] = reason
        return True

    def suppress_many(
        self, conn: MemoryTx, entries: Sequence[tuple[str, str, str]], *, source: str
    ) -> int:
        return sum(
            self.suppress(conn, mailbox, reason, scope=scope, source=source)
            for mailbox, scope, reason in entries
        )

    def unsuppress(self, conn: MemoryTx, mailbox: str, *, scope: str = GLOBAL_SCOPE) -> bool:
        return conn.data.suppressed.pop((mailbox, scope), None) is not None

    # ------------------------------------------------------------ readers

    def counts(
        self, conn: MemoryTx, campaign: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        tally: dict[tuple[str, str, str], int] = {}
        for j in conn.data.jobs.values():
            if campaign is None or j.campaign == campaign:
                group = (j.campaign, j.step, j.state)
                tally[group] = tally.get(group, 0) + 1
        return [(*group, n) for group, n in tally.items()]

    def jobs_in_state(
        self, conn: MemoryTx, state: State, *, campaign: str | None = None, limit: int | None = None
    ) -> list[Any]:
        found = [replace(j) for j in self._selected(conn, state, None, campaign)]
        return found if limit is None else found[:limit]

    def events(self, conn: MemoryTx, job_ids: Sequence[int] | None = None) -> list[Any]:
        chosen = (
            conn.data.events
            if job_ids is None
            else [e for e in conn.data.events if e.job_id in set(job_ids)]
        )
        return sorted(chosen, key=lambda e: (e.job_id, e.id))

    def has_work(self, conn: MemoryTx, horizon_seconds: float = 0.0) -> bool:
        horizon = conn.clock() + timedelta(seconds=horizon_seconds)
        return any(
            State(j.state) in LEASED
            or (
                j.state == State.PENDING.value
                and j.not_before <= horizon
                and j.claims < j.max_claims
                and self._active(conn, j)
            )
            for j in conn.data.jobs.values()
        )

    def next_due_in(self, conn: MemoryTx) -> float | None:
        due = [
            j.not_before
            for j in conn.data.jobs.values()
            if j.state == State.PENDING.value and self._active(conn, j)
        ]
        if not due:
            return None
        return (min(due) - conn.clock()).total_seconds()

    def database_now(self, conn: MemoryTx) -> datetime:
        return conn.clock()


if TYPE_CHECKING:  # mypy proves the class honours the contract
    _conforms: type[Outbox[MemoryTx]] = MemoryOutbox


__all__ = ["Clock", "MemEvent", "MemJob", "MemoryBase", "MemoryOutbox", "MemoryTx", "system_clock"]
