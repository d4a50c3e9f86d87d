"""The worker's relay-outage requests to the outbox (``dispatch.commit_requests`` has the
others): W4 hand-backs and ``relay_status`` reports, each group-committed like the rest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

import sqlalchemy as sa

from dispatch.commit_requests import CommitContext, OutboxRequest
from dispatch.store import Lease


@dataclass(frozen=True)
class RelayHandBack(OutboxRequest[set[int]]):
    """W4: give back claims that could not reach the relay, uncounted, due in ``retry_in``
    seconds; the ids handed back."""

    leases: tuple[Lease, ...]
    retry_in: float
    why: str
    kind: ClassVar[str] = "relay_hand_back"
    order: ClassVar[int] = 4  # with the other hand-backs (W1)
    exclusive: ClassVar[bool] = True  # many leases at once (dispatch/committer.py, "Lanes")

    def rows(self) -> int:
        return len(self.leases)

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        # Requests differ in delay and reason: one statement each (outages are rare).
        return [
            ctx.store.relay_unavailable_claims(
                conn, r.leases, retry_in=r.retry_in, why=r.why, actor=ctx.owner
            )
            for r in batch
        ]


@dataclass(frozen=True)
class RelayReport(OutboxRequest[bool]):
    """Record what this worker learnt about a relay; True if its recorded state changed."""

    relay: str
    reachable: bool
    error: str | None = None
    kind: ClassVar[str] = "relay_report"
    order: ClassVar[int] = 6
    # Reports of several relays lock their rows in the batch's order: not beside another lane.
    exclusive: ClassVar[bool] = True

    @classmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[bool]:
        return [
            ctx.store.record_relay(
                conn, r.relay, reachable=r.reachable, error=r.error, worker=ctx.owner
            )
            for r in batch
        ]
