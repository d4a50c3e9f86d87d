"""The memory outbox: what the scheduler and the worker (through its committer) ask of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from dispatch.outbox.jobs import (
    COMPLETION_TRANSITIONS,
    SUPPRESSED,
    ClaimedJob,
    Completion,
    Deferral,
    HeldLeases,
    Lease,
    LeaseRow,
    NewJob,
    payload_hash,
)
from dispatch.outbox.memory_base import MemJob, MemoryBase, MemoryTx
from dispatch.states import LEASED, State, T, Transition, performs


class MemoryWorkerOps(MemoryBase):
    @performs(T.ENQUEUE)
    def enqueue(
        self, conn: MemoryTx, jobs: Sequence[NewJob], *, replace_pending: bool = False
    ) -> int:
        data, now = conn.data, conn.clock()
        by_key = {j.key: j for j in data.jobs.values()}
        identities = {(j.campaign, j.step, j.occurrence_at, j.mailbox) for j in data.jobs.values()}
        inserted = 0
        for new in jobs:
            identity = (new.campaign, new.step, new.occurrence_at, new.mailbox_identity)
            digest = payload_hash(new.payload)
            old = by_key.get(new.key)
            if old is not None or identity in identities:
                if (
                    replace_pending
                    and old is not None
                    and old.recipient == new.recipient
                    and old.state == State.PENDING.value
                    and old.payload_hash != digest
                ):
                    old.payload, old.payload_hash = new.payload, digest
                    old.not_before, old.max_send_attempts = new.not_before, new.max_send_attempts
                    old.send_window, old.list_scope = new.send_window, new.list_scope
                    old.updated_at = now
                continue
            job = MemJob(
                id=data.next_id,
                key=new.key,
                key_tuple=new.key_tuple,
                campaign=new.campaign,
                step=new.step,
                occurrence_at=new.occurrence_at,
                channel=new.channel,
                sender=new.sender,
                recipient=new.recipient,
                mailbox=new.mailbox_identity,
                message_id=new.message_id,
                payload=new.payload,
                payload_hash=digest,
                not_before=new.not_before,
                max_claims=new.max_claims,
                max_send_attempts=new.max_send_attempts,
                in_doubt_policy=new.in_doubt_policy,
                send_window=new.send_window,
                list_scope=new.list_scope,
                state=T.ENQUEUE.target.value,
                created_at=now,
                updated_at=now,
            )
            data.next_id += 1
            data.jobs[job.id] = job
            by_key[job.key] = job
            identities.add(identity)
            self._event(conn, job, None, T.ENQUEUE, "scheduler", None)
            inserted += 1
        return inserted

    # ------------------------------------------------------------ worker

    @performs(T.CLAIM)
    def claim(
        self, conn: MemoryTx, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        now = conn.clock()
        due = sorted(
            (
                j
                for j in conn.data.jobs.values()
                if j.state in {s.value for s in T.CLAIM.sources}
                and j.not_before <= now
                and j.claims < j.max_claims
                and self._active(conn, j)
            ),
            key=lambda j: (j.not_before, j.id),
        )[:limit]
        claimed = []
        for j in due:
            self._move(
                conn,
                j,
                T.CLAIM,
                owner,
                None,
                lease_token=j.lease_token + 1,
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                claims=j.claims + 1,
            )
            claimed.append(
                ClaimedJob(
                    j.id,
                    j.lease_token,
                    j.key,
                    j.campaign,
                    j.step,
                    j.channel,
                    j.sender,
                    j.recipient,
                    j.message_id,
                    j.payload,
                    j.claims,
                    j.send_attempts,
                    j.max_send_attempts,
                    j.send_window,
                )
            )
        return claimed

    @performs(T.WITHDRAWN)
    def withdraw(self, conn: MemoryTx, keys: Sequence[str], *, reason: str, actor: str) -> int:
        wanted = set(keys)
        total = 0
        for j in sorted(conn.data.jobs.values(), key=lambda j: j.id):
            if j.key in wanted and State(j.state) in T.WITHDRAWN.sources:
                self._move(
                    conn,
                    j,
                    T.WITHDRAWN,
                    actor,
                    reason,
                    lease_owner=None,
                    lease_expires_at=None,
                    outcome_text=reason,
                    outcome_at=conn.clock(),
                )
                total += 1
        return total

    def heartbeat(
        self, conn: MemoryTx, leases: Sequence[Lease], *, lease_seconds: float
    ) -> set[int]:
        now = conn.clock()
        alive = set()
        for j in self._leased(conn, leases):
            if (
                State(j.state) in LEASED
                and j.lease_expires_at is not None
                and j.lease_expires_at > now
            ):
                j.lease_expires_at = now + timedelta(seconds=lease_seconds)
                alive.add(j.id)
        return alive

    @performs(T.START_SEND)
    def start_sends(
        self, conn: MemoryTx, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        now = conn.clock()
        started: dict[int, datetime] = {}
        for j in self._leased(conn, leases):
            if (
                j.state in {s.value for s in T.START_SEND.sources}
                and j.lease_expires_at is not None
                and j.lease_expires_at > now + timedelta(seconds=margin_seconds)
                and j.send_attempts < j.max_send_attempts
                and j.superseded_at is None
                and not self._suppressed(conn, j)
                and self._active(conn, j)
            ):
                self._move(
                    conn,
                    j,
                    T.START_SEND,
                    actor,
                    None,
                    send_attempts=j.send_attempts + 1,
                    send_started_at=now,
                )
                started[j.id] = now
        return started

    @performs(T.UNSTARTABLE_CANCELLED, T.UNSTARTABLE_FAILED, T.UNSTARTABLE_RELEASED)
    def settle_unstartable(
        self, conn: MemoryTx, leases: Sequence[Lease], *, actor: str
    ) -> dict[int, State]:
        rules: list[tuple[Callable[[MemJob], bool], Transition, str]] = [
            (lambda j: j.superseded_at is not None, T.UNSTARTABLE_CANCELLED, "superseded"),
            (lambda j: self._suppressed(conn, j), T.UNSTARTABLE_CANCELLED, SUPPRESSED),
            (
                lambda j: conn.data.campaigns.get(j.campaign) == self.gate.cancelled,
                T.UNSTARTABLE_CANCELLED,
                "campaign cancelled",
            ),
            (
                lambda j: j.send_attempts >= j.max_send_attempts,
                T.UNSTARTABLE_FAILED,
                "send attempts exhausted",
            ),
            (lambda j: True, T.UNSTARTABLE_RELEASED, "released before sending"),
        ]
        settled: dict[int, State] = {}
        for j in self._leased(conn, leases):
            if State(j.state) not in T.UNSTARTABLE_RELEASED.sources:
                continue
            _, transition, why = next(r for r in rules if r[0](j))
            outcome: dict[str, Any] = {}
            if transition.target is not State.PENDING:
                outcome = {"outcome_text": why, "outcome_at": conn.clock()}
            self._move(
                conn,
                j,
                transition,
                actor,
                why,
                lease_owner=None,
                lease_expires_at=None,
                **outcome,
            )
            settled[j.id] = transition.target
        return settled

    @performs(*COMPLETION_TRANSITIONS)
    def complete(
        self, conn: MemoryTx, completions: Sequence[Completion], *, actor: str
    ) -> set[int]:
        now = conn.clock()
        applied: set[int] = set()
        for c in completions:
            transition = c.transition  # raises for an outcome the machine does not have
            (job,) = self._leased(conn, [c.lease]) or (None,)
            if job is None or State(job.state) not in transition.sources or job.id in applied:
                continue
            changes: dict[str, Any] = {
                "outcome_code": c.code,
                "outcome_text": c.text,
                "outcome_at": now,
                "lease_owner": None,
            }
            if transition.target in (State.SENT, State.FAILED, State.PENDING):
                changes["lease_expires_at"] = None
            if transition.target is State.PENDING:
                changes["not_before"] = now + timedelta(seconds=c.retry_in)
            if transition.target is State.IN_DOUBT:
                changes["in_doubt_reason"] = c.in_doubt_reason or c.text
            self._move(conn, job, transition, actor, c.detail, **changes)
            applied.add(job.id)
        return applied

    @performs(T.RELEASE)
    def release_claims(self, conn: MemoryTx, leases: Sequence[Lease], *, actor: str) -> set[int]:
        done = set()
        for j in self._leased(conn, leases):
            if State(j.state) in T.RELEASE.sources:
                self._move(
                    conn,
                    j,
                    T.RELEASE,
                    actor,
                    "released at shutdown",
                    claims=j.claims - 1,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                done.add(j.id)
        return done

    @performs(T.OUTSIDE_WINDOW)
    def defer_claims(
        self, conn: MemoryTx, deferrals: Sequence[Deferral], *, actor: str
    ) -> set[int]:
        return self._hand_back_until(
            conn, deferrals, T.OUTSIDE_WINDOW, "outside send window", actor
        )

    def lease_state(self, conn: MemoryTx, leases: Sequence[Lease]) -> dict[int, str]:
        return {j.id: j.state for j in self._leased(conn, leases)}

    def lease_rows(self, conn: MemoryTx, leases: Sequence[Lease]) -> dict[int, LeaseRow]:
        return {j.id: LeaseRow(j.state, j.send_started_at) for j in self._leased(conn, leases)}

    def held_leases(self, conn: MemoryTx) -> HeldLeases:
        """As ``RecoveryOps.held_leases``: seconds until the earliest held lease of each
        leased state expires."""
        now = conn.clock()

        def earliest(state: State) -> float | None:
            held = [
                j.lease_expires_at
                for j in conn.data.jobs.values()
                if j.state == state.value and j.lease_expires_at is not None
            ]
            return (min(held) - now).total_seconds() if held else None

        return HeldLeases(claimed_in=earliest(State.CLAIMED), sending_in=earliest(State.SENDING))
