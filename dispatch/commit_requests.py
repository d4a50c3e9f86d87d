"""What a worker may ask of the outbox, one frozen class per kind of request.

Each request knows how to apply itself *in a batch*: ``apply`` receives every queued request of
its kind and runs them as one call to the store (one statement, mostly) inside the group
commit's transaction, returning one result per request in order. The committer therefore knows
no kind by name (``dispatch/committer.py``), and a reader sees at the class what each request
carries, what it returns, and which store operation it is.

Requests are slotted, not frozen, dataclasses: two are made per job, and a frozen dataclass's
``__init__`` costs about a microsecond per field (``object.__setattr__`` each). Nothing changes a
request once it is made; the committer only reads it.

``order`` fixes the sequence inside one transaction: outcomes first, then T4s, then claims last,
so a slot freed in this batch can be refilled by the claim in the same transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Generic, Self, TypeVar

import sqlalchemy as sa

from dispatch.failure_watch import FailureWatch
from dispatch.instrumentation import Instrumentation
from dispatch.states import State
from dispatch.store import (
    ClaimedJob,
    Completion,
    Deferral,
    Lease,
    LeaseRow,
    OutboxStore,
    RecoveryReport,
)

R = TypeVar("R")


@dataclass(frozen=True)
class CommitContext:
    """What every request of one worker shares: its store, identity and lease settings."""

    store: OutboxStore
    owner: str
    lease_seconds: float
    t4_margin_seconds: float
    instrumentation: Instrumentation
    # Told, in the batch's transaction, which jobs just failed permanently (None: nobody).
    failure_watch: FailureWatch | None = None


class OutboxRequest(ABC, Generic[R]):
    """One request; ``R`` is what its caller gets back once the transaction has committed."""

    kind: ClassVar[str]  # a name for statistics (``CommitterStats.by_kind``), nothing else
    order: ClassVar[int]  # position of this kind inside a transaction (lowest first)
    # True: it may lock rows of jobs that have another request in flight (many leases at once,
    # or anyone's expired ones), so its transaction runs with no other lane in one: see
    # dispatch/committer.py, "Lanes". False: it touches only its own jobs' rows.
    exclusive: ClassVar[bool] = False
    # True: a send holding one of the worker's slots (its relay connection) waits for it. With
    # two lanes such requests get a transaction of their own (dispatch/committer.py, "Sends on
    # the wire first").
    urgent: ClassVar[bool] = False

    def rows(self) -> int:
        """About how many jobs' rows it touches (a batch's size, for "Small batches wait" in
        dispatch/committer.py)."""
        return 1

    @classmethod
    @abstractmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[R]:
        """Apply every request of the batch in ``conn``'s transaction; one result each."""


@dataclass(slots=True)
class Complete(OutboxRequest[bool]):
    """T5–T8 (and T6 before DATA): record an outcome. True if it applied under our lease."""

    completion: Completion
    kind: ClassVar[str] = "complete"
    order: ClassVar[int] = 0

    @classmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[bool]:
        done = ctx.store.complete(conn, [r.completion for r in batch], actor=ctx.owner)
        if ctx.failure_watch is not None:
            failed = [
                r.completion.lease[0]
                for r in batch
                if r.completion.target is State.FAILED and r.completion.lease[0] in done
            ]
            if failed:  # the common batch (no failure) costs nothing more
                ctx.failure_watch.after_failures(conn, failed)
        return [r.completion.lease[0] in done for r in batch]


@dataclass(slots=True)
class StartSend(OutboxRequest[datetime | None]):
    """T4, claimed → sending: the only door to a send. Once it is committed, the moment the
    job crossed (database clock: the message's Date); None if the guard refused."""

    lease: Lease
    kind: ClassVar[str] = "t4"
    order: ClassVar[int] = 1
    urgent: ClassVar[bool] = True

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[datetime | None]:
        leases = [r.lease for r in batch]
        started = ctx.store.start_sends(
            conn, leases, margin_seconds=ctx.t4_margin_seconds, actor=ctx.owner
        )
        if started:
            ctx.instrumentation.before_t4_commit([lease for lease in leases if lease[0] in started])
        return [started.get(lease[0]) for lease in leases]


@dataclass(slots=True)
class Settle(OutboxRequest[State | None]):
    """A claimed job whose T4 was refused: where it goes instead (None: not our lease)."""

    lease: Lease
    kind: ClassVar[str] = "settle"
    order: ClassVar[int] = 2

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[State | None]:
        settled = ctx.store.settle_unstartable(conn, [r.lease for r in batch], actor=ctx.owner)
        return [settled.get(r.lease[0]) for r in batch]


@dataclass(slots=True)
class Heartbeat(OutboxRequest[set[int]]):
    """Extend these leases; the ids still alive (every requester gets the batch's whole set)."""

    leases: tuple[Lease, ...]
    kind: ClassVar[str] = "heartbeat"
    order: ClassVar[int] = 3
    exclusive: ClassVar[bool] = True

    def rows(self) -> int:
        return len(self.leases)

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        leases = [lease for r in batch for lease in r.leases]
        alive = ctx.store.heartbeat(conn, leases, lease_seconds=ctx.lease_seconds)
        return [alive for _ in batch]


@dataclass(slots=True)
class Release(OutboxRequest[set[int]]):
    """Give unstarted claims back; the ids released (the batch's whole set, to each)."""

    leases: tuple[Lease, ...]
    kind: ClassVar[str] = "release"
    order: ClassVar[int] = 4
    exclusive: ClassVar[bool] = True

    def rows(self) -> int:
        return len(self.leases)

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        leases = [lease for r in batch for lease in r.leases]
        released = ctx.store.release_claims(conn, leases, actor=ctx.owner)
        return [released for _ in batch]


@dataclass(slots=True)
class Defer(OutboxRequest[set[int]]):
    """Hand back claims whose send window is closed, due at its next opening (W2); the ids
    handed back (the batch's whole set, to each)."""

    deferrals: tuple[Deferral, ...]
    kind: ClassVar[str] = "defer"
    order: ClassVar[int] = 5
    exclusive: ClassVar[bool] = True

    def rows(self) -> int:
        return len(self.deferrals)

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        deferrals = [d for r in batch for d in r.deferrals]
        deferred = ctx.store.defer_claims(conn, deferrals, actor=ctx.owner)
        return [deferred for _ in batch]


@dataclass(slots=True)
class LeaseState(OutboxRequest[LeaseRow | None]):
    """The job's state and ``send_started_at`` if it still carries this lease's token
    (re-reading an unknown commit)."""

    lease: Lease
    kind: ClassVar[str] = "lease_state"
    order: ClassVar[int] = 6

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[LeaseRow | None]:
        rows = ctx.store.lease_rows(conn, [r.lease for r in batch])
        return [rows.get(r.lease[0]) for r in batch]


@dataclass(slots=True)
class Recover(OutboxRequest[RecoveryReport]):
    """One recovery pass over expired leases (each request runs its own)."""

    grace_seconds: float
    kind: ClassVar[str] = "recover"
    order: ClassVar[int] = 7
    exclusive: ClassVar[bool] = True

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[RecoveryReport]:
        return [
            ctx.store.recover(conn, grace_seconds=r.grace_seconds, actor=ctx.owner) for r in batch
        ]


@dataclass(slots=True)
class HasWork(OutboxRequest[bool]):
    """Is anything running, or due within ``horizon_seconds``? (``--until-idle``)"""

    horizon_seconds: float
    kind: ClassVar[str] = "has_work"
    order: ClassVar[int] = 8

    @classmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[bool]:
        return [ctx.store.has_work(conn, r.horizon_seconds) for r in batch]


@dataclass(slots=True)
class NextDueIn(OutboxRequest[float | None]):
    """Seconds until the next pending job is due (None: nothing pending)."""

    kind: ClassVar[str] = "next_due"
    order: ClassVar[int] = 9

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[float | None]:
        due = ctx.store.next_due_in(conn)
        return [due for _ in batch]


@dataclass(slots=True)
class Claim(OutboxRequest[list[ClaimedJob]]):
    """Lease up to ``limit`` due jobs. Last in the transaction: it refills freed slots."""

    limit: int
    kind: ClassVar[str] = "claim"
    order: ClassVar[int] = 10

    def rows(self) -> int:
        return self.limit

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[list[ClaimedJob]]:
        jobs = ctx.store.claim(
            conn,
            owner=ctx.owner,
            limit=sum(r.limit for r in batch),
            lease_seconds=ctx.lease_seconds,
        )
        shares: list[list[ClaimedJob]] = []
        for r in batch:
            shares.append(jobs[: r.limit])
            jobs = jobs[r.limit :]
        return shares
