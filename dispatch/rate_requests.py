"""The group commit's requests for rate limits (``dispatch.rate_gate`` makes them).

``SlotThenStart`` is T4 for a job under rate limits: its slots and its T4 in ONE transaction,
so the moment a job may be sent and the moment its slot was granted are one database moment.
``RateLimited`` is W3 for claims handed back at the claim, no slot asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, NamedTuple, Self

import sqlalchemy as sa

from dispatch.commit_requests import CommitContext, OutboxRequest
from dispatch.store import Deferral, Lease, Refusal, SlotAsk


class Slotted(NamedTuple):
    """What ``SlotThenStart`` did for one job: ``started`` is T4's moment (the job may go out);
    ``due`` says it got no slot and was handed back (W3) until then; both None: its T4 guard
    refused (the lease is no longer ours, or the job was cancelled: settle it). With ``due``,
    ``refusal`` says which of its keys refused the slot, and so which slots it spent."""

    started: datetime | None
    due: datetime | None
    refusal: Refusal | None = None


@dataclass(slots=True)
class SlotThenStart(OutboxRequest[Slotted]):
    """T4 for a job under rate limits: take a slot of each of ``keys``, then T4 in the same
    transaction; a job refused a slot is handed back (W3) instead, due at its slot."""

    lease: Lease
    keys: tuple[str, ...]
    kind: ClassVar[str] = "t4_slot"
    order: ClassVar[int] = 1  # with the plain T4s: after the outcomes, before the claims
    urgent: ClassVar[bool] = True  # like a plain T4: its send holds a slot meanwhile

    @classmethod
    def apply(cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]) -> list[Slotted]:
        refused = ctx.store.acquire_slots(conn, [SlotAsk(r.lease, r.keys) for r in batch])
        handed: set[int] = set()
        if refused:
            deferrals = [
                Deferral(r.lease, refused[r.lease[0]].due) for r in batch if r.lease[0] in refused
            ]
            handed = ctx.store.rate_limited_claims(conn, deferrals, actor=ctx.owner)
        granted = [r.lease for r in batch if r.lease[0] not in refused]
        started: dict[int, datetime] = {}
        if granted:
            started = ctx.store.start_sends(
                conn, granted, margin_seconds=ctx.t4_margin_seconds, actor=ctx.owner
            )
            if started:
                ctx.instrumentation.before_t4_commit([g for g in granted if g[0] in started])
        return [
            _slotted(r.lease[0], started, refused if r.lease[0] in handed else {}) for r in batch
        ]


def _slotted(job_id: int, started: dict[int, datetime], refused: dict[int, Refusal]) -> Slotted:
    refusal = refused.get(job_id)
    return Slotted(started.get(job_id), None if refusal is None else refusal.due, refusal)


@dataclass(slots=True)
class RateLimited(OutboxRequest[set[int]]):
    """W3 without a slot asked: claims the worker expects no slot for soon (``admit``); the
    ids handed back (the batch's whole set, to each)."""

    deferrals: tuple[Deferral, ...]
    kind: ClassVar[str] = "rate_limited"
    order: ClassVar[int] = 11  # after the claim: it is about claims already made

    @classmethod
    def apply(
        cls, ctx: CommitContext, conn: sa.Connection, batch: Sequence[Self]
    ) -> list[set[int]]:
        deferrals = [d for r in batch for d in r.deferrals]
        handed = ctx.store.rate_limited_claims(conn, deferrals, actor=ctx.owner)
        return [handed for _ in batch]
