"""Small batches wait and helpers on demand (dispatch/committer.py): with two lanes, a batch
touching fewer than ``alone_below`` jobs' rows does not start a transaction beside a running one;
it waits for that one to end, takes what was queued meanwhile, and goes before the lane that just
committed takes new work; and only a list that large wakes the second (helper) lane. A large batch
still runs beside.

The store records which transaction each call ran in (``TransactionRecorder``), and holds the
first call's transaction open until the test lets it go, so each test sees what the other lane
did meanwhile; no job rows are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.commit_batch import Pending, touches_fewer
from dispatch.commit_requests import Claim, Heartbeat, OutboxRequest, Release, StartSend
from dispatch.committer import ALONE_BELOW, GroupCommitter
from dispatch.outbox_client import OutboxClient
from dispatch.store import ClaimedJob
from tests.integration.test_committer_urgent import TransactionRecorder

DEADLINE = 30.0  # seconds: any wait here that takes longer is a failure, not a hang


class HoldsFirstClaim(TransactionRecorder):
    """Keeps the first claim's transaction open until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.go = threading.Event()

    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        jobs = super().claim(conn, owner=owner, limit=limit, lease_seconds=lease_seconds)
        if not self.holding.is_set():
            self.holding.set()
            assert self.go.wait(DEADLINE), "the test never let the first transaction go"
        return jobs


def two_lanes(engine: Engine, store: TransactionRecorder, **options: Any) -> GroupCommitter:
    committer = GroupCommitter(
        engine, store, owner="w", lease_seconds=300, t4_margin_seconds=1, lanes=2, **options
    )
    assert committer._turns is not None
    return committer


def until(condition: Callable[[], bool]) -> None:
    """Wait (on a deadline, not a fixed sleep) until ``condition`` holds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


async def handed_over(client: OutboxClient, limit: int) -> asyncio.Future[list[ClaimedJob]]:
    """A claim submitted and handed to the lanes (its list is queued once this returns)."""
    claim = asyncio.ensure_future(client.claim(limit))
    await asyncio.sleep(0)  # the claim runs to its await; the turn's list is queued after it
    await asyncio.sleep(0)
    return claim


@contextlib.asynccontextmanager
async def first_held(
    committer: GroupCommitter, store: HoldsFirstClaim, limit: int = 1
) -> AsyncIterator[tuple[OutboxClient, asyncio.Future[list[ClaimedJob]]]]:
    """The committer started and a first claim of ``limit`` held open in its transaction; at
    the end the claim is let go and the committer stopped."""
    client = OutboxClient(committer)
    committer.start()
    try:
        first = await handed_over(client, limit)
        assert await asyncio.to_thread(store.holding.wait, DEADLINE)
        yield client, first
    finally:
        store.go.set()
        await asyncio.to_thread(committer.stop)


@pytest.mark.parametrize(
    "first_limit", [1, ALONE_BELOW], ids=["the helper lane asleep", "the helper lane woken"]
)
def test_a_small_batch_waits_for_the_running_transaction_and_takes_what_came_meanwhile(
    pg: Engine, first_limit: int
) -> None:
    """A transaction is held open. A small claim does not start a transaction beside it: it
    stays queued (no helper lane is woken for it), or, if the other lane is awake (the held
    claim was large enough to wake it) and takes it, that lane holds it. A claim submitted
    meanwhile joins it, and once the held transaction ends both run in one transaction, not
    one each."""
    for _ in range(3):  # a lane that took new work first would win some rounds by chance
        store = HoldsFirstClaim()
        committer = two_lanes(pg, store)
        claims = asyncio.run(small_claims_while_one_is_held(committer, store, first_limit))
        assert claims == [0, 0, 0]
        (_, first_tx, first_limits), (_, second_tx, second_limits) = store.calls
        assert first_tx != second_tx
        assert (first_limits, second_limits) == ([first_limit], [2])  # as one statement
        assert committer.stats.transactions == 2


async def small_claims_while_one_is_held(
    committer: GroupCommitter, store: HoldsFirstClaim, first_limit: int
) -> list[int]:
    turns = committer._turns
    assert turns is not None
    async with first_held(committer, store, first_limit) as (client, first):
        second = await handed_over(client, 1)
        # Held by the other lane, or still queued for the lane that holds the transaction.
        await asyncio.to_thread(
            until,
            lambda: turns._holding == 1 or committer._queue.qsize() > 0 or len(store.calls) > 1,
        )
        assert len(store.calls) == 1, "a small batch ran beside the held transaction"
        third = await handed_over(client, 1)
        store.go.set()
        return [len(await asyncio.wait_for(c, DEADLINE)) for c in (first, second, third)]


class NamesLanes(HoldsFirstClaim):
    """Also notes which lane (database thread) ran each claim."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes: list[str] = []

    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        self.lanes.append(threading.current_thread().name)
        return super().claim(conn, owner=owner, limit=limit, lease_seconds=lease_seconds)


def test_small_lists_never_wake_the_helper_lane(pg: Engine) -> None:
    """Helpers on demand: while the first lane's transaction is held open, small requests
    wait for that lane (a woken helper would take them, hold them, and run them itself): at a
    relay's pace, one lane does all the work and no thread wakes for nothing."""
    store = NamesLanes()
    committer = two_lanes(pg, store)

    async def main() -> None:
        async with first_held(committer, store) as (client, first):
            later = [await handed_over(client, 1) for _ in range(5)]
            await asyncio.to_thread(until, lambda: committer._queue.qsize() >= 5)
            store.go.set()
            for claim in (first, *later):
                assert await asyncio.wait_for(claim, DEADLINE) == []

    asyncio.run(main())
    assert store.lanes == ["herald-db-0", "herald-db-0"]  # the five small claims: one statement
    assert [limits for _, _, limits in store.calls] == [[1], [5]]


@pytest.mark.parametrize(
    ("limit", "alone_below"),
    [(ALONE_BELOW, ALONE_BELOW), (1, 0)],
    ids=["a claim of alone_below jobs", "the rule turned off"],
)
def test_a_large_enough_batch_runs_beside_the_running_transaction(
    pg: Engine, limit: int, alone_below: int
) -> None:
    """A claim of ``alone_below`` jobs is worth a transaction of its own beside a running one,
    and with ``alone_below=0`` so is any: it commits while the first is still held open."""
    store = HoldsFirstClaim()
    committer = two_lanes(pg, store, alone_below=alone_below)

    async def main() -> None:
        async with first_held(committer, store) as (client, first):
            second = await handed_over(client, limit)
            assert await asyncio.wait_for(second, DEADLINE) == []
            assert not first.done()
            store.go.set()
            assert await asyncio.wait_for(first, DEADLINE) == []

    asyncio.run(main())
    assert [limits for _, _, limits in store.calls] == [[1], [limit]]


def test_a_batch_is_as_large_as_the_rows_it_touches() -> None:
    """A claim weighs the jobs it may lease, a request over many leases weighs them all, a
    request about one job weighs one."""
    leases = tuple((i, 1) for i in range(5))
    assert Claim(40).rows() == 40
    assert Heartbeat(leases).rows() == 5
    assert Release(leases).rows() == 5
    assert StartSend((1, 1)).rows() == 1


requests = st.one_of(
    st.integers(0, 300).map(Claim),
    st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), max_size=40).map(
        lambda leases: Heartbeat(tuple(leases))
    ),
    st.just(StartSend((1, 1))),
)


@given(batch=st.lists(requests, max_size=60), below=st.integers(0, 400))
def test_a_batch_is_small_exactly_when_its_rows_add_up_to_less(
    batch: list[OutboxRequest[Any]], below: int
) -> None:
    pending = [Pending(request, None, None) for request in batch]  # type: ignore[arg-type]
    assert touches_fewer(pending, below) == (sum(r.rows() for r in batch) < below)
