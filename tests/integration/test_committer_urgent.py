"""Sends on the wire first (dispatch/committer.py): with two lanes, the T4s a lane's batch holds
get a transaction of their own, the rest goes back whole, and nothing put back is split again.

The store records which transaction each call ran in (PostgreSQL's own transaction id), so the
tests see the grouping the server saw; no job rows are needed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

import dispatch.committer as committer_module
from dispatch.commit_batch import SPLIT_AT, Pending, Whole, urgent_first
from dispatch.commit_requests import Complete, LeaseState, StartSend
from dispatch.committer import GroupCommitter
from dispatch.rate_requests import SlotThenStart
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Lease, OutboxStore

STARTED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class TransactionRecorder(OutboxStore):
    """Answers T4s, outcomes and claims without touching a row; notes each call's transaction."""

    def __init__(self) -> None:
        super().__init__("postgresql")
        self.lock = threading.Lock()
        self.calls: list[tuple[str, int, list[Any]]] = []

    def _note(self, conn: sa.Connection, what: str, items: list[Any]) -> None:
        txid = conn.exec_driver_sql("SELECT txid_current()").scalar_one()
        with self.lock:
            self.calls.append((what, txid, items))

    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        self._note(conn, "t4", [lease[0] for lease in leases])
        return {lease[0]: STARTED for lease in leases}

    def complete(
        self, conn: sa.Connection, completions: Sequence[Completion], *, actor: str
    ) -> set[int]:
        self._note(conn, "complete", [c.lease[0] for c in completions])
        return {c.lease[0] for c in completions}

    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        self._note(conn, "claim", [limit])
        return []


def committer_for(engine: Engine, store: OutboxStore) -> GroupCommitter:
    committer = GroupCommitter(
        engine, store, owner="w", lease_seconds=300, t4_margin_seconds=1, lanes=2
    )
    assert committer.lanes == 2
    return committer


async def submitted_in_one_turn(committer: GroupCommitter, requests: list[Any]) -> list[Any]:
    """Every request queued in one turn of the loop before any lane runs, then the results."""
    tasks = [asyncio.ensure_future(committer.submit(r)) for r in requests]
    await asyncio.sleep(0)  # each task runs up to its await; the turn's list is handed over
    await asyncio.sleep(0)
    committer.start()
    try:
        return await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    finally:
        await asyncio.to_thread(committer.stop)


def mixed(first_id: int, count: int) -> list[Any]:
    """``count`` requests, alternately an outcome and a T4, for jobs from ``first_id`` on."""
    return [
        Complete(Completion((i, 7), State.SENT)) if i % 2 == 0 else StartSend((i, 7))
        for i in range(first_id, first_id + count)
    ]


def by_transaction(store: TransactionRecorder) -> list[list[tuple[str, list[Any]]]]:
    grouped: dict[int, list[tuple[str, list[Any]]]] = {}
    for what, txid, items in store.calls:
        grouped.setdefault(txid, []).append((what, items))
    return sorted(grouped.values())


def test_t4s_commit_in_a_transaction_of_their_own(pg: Engine) -> None:
    store = TransactionRecorder()
    committer = committer_for(pg, store)
    requests = mixed(0, SPLIT_AT)
    results = asyncio.run(submitted_in_one_turn(committer, requests))
    assert results == [True if isinstance(r, Complete) else STARTED for r in requests]
    assert by_transaction(store) == [
        [("complete", list(range(0, SPLIT_AT, 2)))],
        [("t4", list(range(1, SPLIT_AT, 2)))],
    ]
    assert committer.stats.transactions == 2  # the outcomes were not split from each other


def test_a_batch_too_small_for_two_transactions_is_not_split(pg: Engine) -> None:
    store = TransactionRecorder()
    committer = committer_for(pg, store)
    asyncio.run(submitted_in_one_turn(committer, mixed(0, SPLIT_AT - 1)))
    assert len(by_transaction(store)) == 1
    assert committer.stats.transactions == 1


def test_a_batch_put_back_whole_is_not_split_again(pg: Engine) -> None:
    store = TransactionRecorder()
    committer = committer_for(pg, store)
    loop = asyncio.new_event_loop()
    requests = mixed(0, 2 * SPLIT_AT)
    try:
        futures = [loop.create_future() for _ in requests]
        committer._queue.put(
            Whole(Pending(r, f, loop) for r, f in zip(requests, futures, strict=True))
        )
        committer.start()
        results = loop.run_until_complete(asyncio.wait_for(asyncio.gather(*futures), 30))
    finally:
        committer.stop()
        loop.close()
    assert results == [True if isinstance(r, Complete) else STARTED for r in requests]
    assert len(by_transaction(store)) == 1
    assert committer.stats.transactions == 1


def test_one_lane_never_splits(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    store = TransactionRecorder()
    committer = GroupCommitter(engine, store, owner="w", lease_seconds=300, t4_margin_seconds=1)
    assert committer.lanes == 1
    store._note = lambda conn, what, items: store.calls.append((what, 0, items))  # type: ignore[method-assign]
    asyncio.run(submitted_in_one_turn(committer, mixed(0, 2 * SPLIT_AT)))
    assert committer.stats.transactions == 1


def _pending(request: Any) -> Pending:
    return Pending(request, None, None)  # type: ignore[arg-type]


kinds = st.sampled_from(
    [
        lambda i: StartSend((i, 1)),
        lambda i: SlotThenStart((i, 1), ("domain:x",)),
        lambda i: Complete(Completion((i, 1), State.SENT)),
        lambda i: LeaseState((i, 1)),
    ]
)


@given(st.lists(kinds, max_size=2 * SPLIT_AT))
def test_a_split_loses_nothing_and_keeps_the_order(makers: list[Any]) -> None:
    batch = [_pending(make(i)) for i, make in enumerate(makers)]
    now, rest = urgent_first(batch)
    urgent = [p for p in batch if p.request.urgent]
    others = [p for p in batch if not p.request.urgent]
    if urgent and others and len(batch) >= SPLIT_AT:
        assert now == urgent
        assert isinstance(rest, Whole)
        assert list(rest) == others
    else:
        assert now is batch
        assert rest is None


def test_a_rest_put_back_behind_the_stops_is_still_committed(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stop`` called while a lane splits a batch: the rest lands behind both lanes' stops,
    and is run before the lanes end instead of leaving its requests unresolved."""
    store = TransactionRecorder()
    committer = committer_for(pg, store)
    split = urgent_first

    def split_as_the_stops_arrive(batch: list[Pending]) -> tuple[list[Pending], Whole | None]:
        for _ in range(committer.lanes):
            committer._queue.put(None)
        return split(batch)

    monkeypatch.setattr(committer_module, "urgent_first", split_as_the_stops_arrive)
    loop = asyncio.new_event_loop()
    requests = mixed(0, SPLIT_AT)
    try:
        futures = [loop.create_future() for _ in requests]
        committer._queue.put([Pending(r, f, loop) for r, f in zip(requests, futures, strict=True)])
        committer.start()
        results = loop.run_until_complete(asyncio.wait_for(asyncio.gather(*futures), 30))
        for thread in committer._threads:  # both lanes end: each took one stop
            thread.join(timeout=30)
            assert not thread.is_alive()
    finally:
        loop.close()
    assert results == [True if isinstance(r, Complete) else STARTED for r in requests]
    assert committer.stats.transactions == 2
