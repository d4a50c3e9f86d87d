"""The group committer as a generic batcher of typed requests (no database needed: the store
is a recording stand-in; the transaction is an in-memory SQLite one)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from dispatch.committer import GroupCommitter
from dispatch.outbox_client import OutboxClient
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Lease, OutboxStore

STARTED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # when T4 committed, as the store says


def claimed(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, 1, f"k{job_id}", "c", "s", "email", "a@x", "b@x", "<m>", b"", 1, 0, 5)


class RecordingStore(OutboxStore):
    def __init__(self) -> None:
        super().__init__("sqlite")
        self.calls: list[tuple[str, Any]] = []
        self.fail_complete = False

    def complete(
        self, conn: sa.Connection, completions: Sequence[Completion], *, actor: str
    ) -> set[int]:
        self.calls.append(("complete", [c.lease for c in completions]))
        if self.fail_complete:
            raise RuntimeError("connection lost")
        return {c.lease[0] for c in completions if c.target is State.SENT}

    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        self.calls.append(("start_sends", list(leases)))
        return {leases[0][0]: STARTED}  # only the first may go out

    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        self.calls.append(("claim", limit))
        return [claimed(100 + i) for i in range(4)]  # fewer than asked


async def one_batch(committer: GroupCommitter, calls: Sequence[Awaitable[Any]]) -> list[Any]:
    """Queue every call before the database thread starts, so they share one transaction."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    await asyncio.sleep(0)  # each task runs up to its await: its request is queued
    committer.start()
    try:
        return await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await asyncio.to_thread(committer.stop)


def make() -> tuple[RecordingStore, GroupCommitter, OutboxClient]:
    store = RecordingStore()
    engine = sa.create_engine("sqlite://")
    committer = GroupCommitter(engine, store, owner="w", lease_seconds=30, t4_margin_seconds=1)
    return store, committer, OutboxClient(committer)


def test_requests_are_grouped_by_type_in_one_transaction_outcomes_first_claims_last() -> None:
    store, committer, client = make()
    results = asyncio.run(
        one_batch(
            committer,
            [
                client.claim(2),
                client.start_send((1, 7)),
                client.complete(Completion((2, 7), State.SENT)),
                client.start_send((3, 7)),
                client.complete(Completion((4, 7), State.FAILED)),
                client.claim(3),
            ],
        )
    )
    assert store.calls == [
        ("complete", [(2, 7), (4, 7)]),
        ("start_sends", [(1, 7), (3, 7)]),
        ("claim", 5),
    ]
    first_claim, t4_first, done, t4_second, not_done, second_claim = results
    assert [job.id for job in first_claim] == [100, 101]
    assert [job.id for job in second_claim] == [102, 103]
    assert (t4_first, t4_second, done, not_done) == (STARTED, None, True, False)
    assert committer.stats.transactions == 1
    assert committer.stats.by_kind == {"claim": 2, "t4": 2, "complete": 2}


def test_a_failed_batch_fails_every_request_in_it() -> None:
    store, committer, client = make()
    store.fail_complete = True
    results = asyncio.run(
        one_batch(
            committer, [client.start_send((1, 7)), client.complete(Completion((2, 7), State.SENT))]
        )
    )
    assert all(isinstance(r, RuntimeError) for r in results), results
    assert committer.stats.failures == 1
    assert committer.stats.transactions == 0


@pytest.mark.parametrize("limit", [0, 1])
def test_a_claim_gets_no_more_than_it_asked_for(limit: int) -> None:
    _, committer, client = make()
    (jobs,) = asyncio.run(one_batch(committer, [client.claim(limit)]))
    assert len(jobs) == limit
