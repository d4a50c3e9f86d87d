"""An outbox in memory, honouring the same contract as ``SqlOutbox`` (for fast unit tests).

Leases, fencing tokens, conditional transitions and the journal behave as in the database:
every transition goes through ``_move``, which checks the job's state against the transition's
sources (``dispatch.states``) and appends the journal event. Time comes from ``clock`` (a
parameter, so a test can move it); a transaction (``begin()``) holds a lock and restores a
snapshot if its block raises, so a failed batch changes nothing, as a rollback would.

Not covered here: campaign versions (``dispatch.outbox.versions`` works on SQL only).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from dispatch.outbox.contract import Outbox
from dispatch.outbox.gate import CAMPAIGN_GATE, CampaignGate
from dispatch.outbox.jobs import (
    COMPLETION_TRANSITIONS,
    ClaimedJob,
    Completion,
    Lease,
    NewJob,
    RecoveryReport,
    payload_hash,
)
from dispatch.outbox.operator import CANCELLED, resolution
from dispatch.outbox.recovery import (
    EXHAUSTED,
    EXPIRED_BEFORE_SENDING,
    LOST_IN_SEND,
    POISON,
    POLICY_RESEND,
)
from dispatch.outbox.send import in_order
from dispatch.states import LEASED, State, T, Transition, performs

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class MemJob:
    id: int
    key: str
    key_tuple: str
    campaign: str
    step: str
    occurrence_at: datetime
    channel: str
    sender: str
    recipient: str
    mailbox: str
    message_id: str
    payload: bytes
    payload_hash: str
    not_before: datetime
    max_claims: int
    max_send_attempts: int
    in_doubt_policy: str
    state: str = State.PENDING.value
    claims: int = 0
    send_attempts: int = 0
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    send_started_at: datetime | None = None
    outcome_code: int | None = None
    outcome_text: str | None = None
    outcome_at: datetime | None = None
    in_doubt_reason: str | None = None
    resolution: str | None = None
    superseded_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class MemEvent:
    id: int
    job_id: int
    token: int
    from_state: str | None
    to_state: str
    actor: str
    detail: str | None
    at: datetime


@dataclass
class _Data:
    jobs: dict[int, MemJob] = field(default_factory=dict)
    events: list[MemEvent] = field(default_factory=list)
    campaigns: dict[str, str] = field(default_factory=dict)  # name -> status
    suppressed: dict[str, str] = field(default_factory=dict)  # mailbox -> reason
    next_id: int = 1


class MemoryTx:
    """One transaction: the data it may change and the outbox's clock."""

    def __init__(self, data: _Data, clock: Clock) -> None:
        self.data = data
        self.clock = clock


class MemoryOutbox:
    """Implements ``dispatch.outbox.contract.Outbox[MemoryTx]``."""

    def __init__(self, *, clock: Clock = system_clock, gate: CampaignGate = CAMPAIGN_GATE) -> None:
        self.clock = clock
        self.gate = gate
        self._data = _Data()
        self._lock = threading.RLock()

    @contextmanager
    def begin(self) -> Iterator[MemoryTx]:
        with self._lock:
            snapshot = copy.deepcopy(self._data)
            try:
                yield MemoryTx(self._data, self.clock)
            except BaseException:
                self._data = snapshot
                raise

    def set_campaign_status(self, tx: MemoryTx, campaign: str, status: str) -> None:
        """What the ``campaigns`` package's table holds in SQL."""
        tx.data.campaigns[campaign] = status

    # ------------------------------------------------------------ helpers

    def _move(
        self,
        tx: MemoryTx,
        job: MemJob,
        transition: Transition,
        actor: str,
        detail: str | None,
        **changes: Any,
    ) -> None:
        source = State(job.state)
        transition.check(source)
        now = tx.clock()
        for name, value in changes.items():
            setattr(job, name, value)
        job.state = transition.target.value
        job.updated_at = now
        self._event(tx, job, source, transition, actor, detail)

    @staticmethod
    def _event(
        tx: MemoryTx,
        job: MemJob,
        source: State | None,
        transition: Transition,
        actor: str,
        detail: str | None,
    ) -> None:
        event = MemEvent(
            len(tx.data.events) + 1,
            job.id,
            job.lease_token,
            None if source is None else source.value,
            transition.target.value,
            actor,
            detail,
            tx.clock(),
        )
        tx.data.events.append(event)

    def _active(self, tx: MemoryTx, job: MemJob) -> bool:
        # A campaign the table does not know is not inactive (SQL: NOT IN inactive names).
        return tx.data.campaigns.get(job.campaign, self.gate.active) == self.gate.active

    @staticmethod
    def _leased(tx: MemoryTx, leases: Sequence[Lease]) -> list[MemJob]:
        found = (tx.data.jobs.get(job_id) for job_id, _ in leases)
        tokens = dict(leases)
        return [j for j in found if j is not None and j.lease_token == tokens[j.id]]

    # ------------------------------------------------------------ scheduler

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
                )
            )
        return claimed

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
    ) -> set[int]:
        now = conn.clock()
        started = set()
        for j in self._leased(conn, leases):
            if (
                j.state in {s.value for s in T.START_SEND.sources}
                and j.lease_expires_at is not None
                and j.lease_expires_at > now + timedelta(seconds=margin_seconds)
                and j.send_attempts < j.max_send_attempts
                and j.superseded_at is None
                and j.mailbox not in conn.data.suppressed
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
                started.add(j.id)
        return started

    @performs(T.UNSTARTABLE_CANCELLED, T.UNSTARTABLE_FAILED, T.UNSTARTABLE_RELEASED)
    def settle_unstartable(
        self, conn: MemoryTx, leases: Sequence[Lease], *, actor: str
    ) -> dict[int, State]:
        rules: list[tuple[Callable[[MemJob], bool], Transition, str]] = [
            (lambda j: j.superseded_at is not None, T.UNSTARTABLE_CANCELLED, "superseded"),
            (
                lambda j: j.mailbox in conn.data.suppressed,
                T.UNSTARTABLE_FAILED,
                "recipient is suppressed",
            ),
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

    def lease_state(self, conn: MemoryTx, leases: Sequence[Lease]) -> dict[int, str]:
        return {j.id: j.state for j in self._leased(conn, leases)}

    # ------------------------------------------------------------ recovery

    @performs(T.EXPIRED_CLAIM, T.POISON, T.LOST_IN_SEND, T.EXHAUSTED, T.POLICY_RESEND)
    def recover(self, conn: MemoryTx, *, grace_seconds: float, actor: str) -> RecoveryReport:
        report = RecoveryReport()
        now = conn.clock()
        limit = now - timedelta(seconds=grace_seconds)
        jobs = sorted(conn.data.jobs.values(), key=lambda j: j.id)

        def expired(j: MemJob) -> bool:
            return j.lease_expires_at is not None and j.lease_expires_at < limit

        for j in [j for j in jobs if j.state == State.CLAIMED.value and expired(j)]:
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
        for j in [j for j in jobs if j.state == State.SENDING.value and expired(j)]:
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
                self._move(
                    conn, j, T.EXHAUSTED, actor, EXHAUSTED, outcome_text=EXHAUSTED, outcome_at=now
                )
                report.dead += 1
                report.details.append((j.id, j.state, EXHAUSTED))
        for j in [j for j in jobs if j.state == State.IN_DOUBT.value]:
            if (
                j.in_doubt_policy == "resend"
                and j.send_attempts < j.max_send_attempts
                and j.superseded_at is None
            ):
                self._move(conn, j, T.POLICY_RESEND, actor, POLICY_RESEND, resolution=POLICY_RESEND)
                report.resent += 1
        return report

    # ------------------------------------------------------------ operators

    @staticmethod
    def _selected(
        tx: MemoryTx, state: State, keys: Sequence[str] | None, campaign: str | None
    ) -> list[MemJob]:
        return [
            j
            for j in sorted(tx.data.jobs.values(), key=lambda j: j.id)
            if j.state == state.value
            and (keys is None or j.key in keys)
            and (campaign is None or j.campaign == campaign)
        ]

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

    def suppress(self, conn: MemoryTx, mailbox: str, reason: str) -> bool:
        if mailbox in conn.data.suppressed:
            return False
        conn.data.suppressed[mailbox] = reason
        return True

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
