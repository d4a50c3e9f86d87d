"""The group committer's lanes on real PostgreSQL (dispatch/committer.py, "Lanes"): two
database threads overlap their transactions, yet a request that locks rows of jobs with another
request in flight (heartbeat, recovery, release, deferral) runs alone, so the worker's own
transactions never deadlock on each other; SQLite keeps one lane."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch import commit_requests, rate_gate, relay_requests
from dispatch.commit_requests import Heartbeat, OutboxRequest
from dispatch.committer import ALONE_BELOW, GroupCommitter
from dispatch.models import send_job
from dispatch.outbox_client import OutboxClient
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Lease, OutboxStore
from herald.db import create_engine
from tests.support.factories import key_of, new_job
from tests.support.outboxes import empty_outbox

PAST = datetime(2026, 1, 1, tzinfo=UTC)
IN_FLIGHT = 40  # jobs between T4 and T5 at once in the stress test
DEADLINE = 30.0  # seconds: any wait in these tests that takes longer is a failure, not a hang


def committer_for(engine: Engine, lanes: int | None = None, **options: Any) -> GroupCommitter:
    return GroupCommitter(
        engine,
        OutboxStore(engine.dialect.name),
        owner="w",
        lease_seconds=300,
        t4_margin_seconds=1,
        lanes=lanes,
        **options,
    )


def enqueue(engine: Engine, count: int, start: int = 0) -> None:
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.enqueue(conn, [new_job(key_of(f"j{i}"), due=PAST) for i in range(start, count)])


class Overlaps:
    """Wraps a committer's transactions: how many ran at once, and with what in them."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0  # most transactions in progress at one moment
        self.exclusive_beside_another = 0  # exclusive batches that saw another transaction
        self.exclusive_batches = 0
        original = committer._transaction

        def counted(batch: list[Any]) -> list[Any]:
            exclusive = any(p.request.exclusive for p in batch)
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
                if exclusive:
                    self.exclusive_batches += 1
                    self.exclusive_beside_another += self.running > 1
            try:
                result: list[Any] = original(batch)
                return result
            finally:
                with self.lock:
                    if exclusive:
                        self.exclusive_beside_another += self.running > 1
                    self.running -= 1

        committer._transaction = counted  # type: ignore[method-assign]


def test_postgres_gets_two_lanes_and_sqlite_one(pg: Engine, tmp_path: Path) -> None:
    assert committer_for(pg).lanes == 2
    sqlite = create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        assert committer_for(sqlite).lanes == 1
        with pytest.raises(ValueError, match="lanes must be 1 on SQLite"):
            committer_for(sqlite, lanes=2)
    finally:
        sqlite.dispose()


def test_two_lanes_overlap_their_transactions(pg: Engine) -> None:
    """A transaction that waits in the server does not hold up the next batch: the second
    lane commits it meanwhile (with one lane, the second claim would wait for the first). The
    claims are large enough to run beside one another ("Small batches wait")."""
    enqueue(pg, 2 * ALONE_BELOW)
    committer = committer_for(pg)
    overlaps = Overlaps(committer)
    second_committed = threading.Event()
    original = committer._apply
    calls: list[str] = []  # the lanes, in the order their transactions began
    began = threading.Event()

    def first_waits(conn: sa.Connection, batch: list[Any]) -> list[Any]:
        calls.append(threading.current_thread().name)
        began.set()
        if len(calls) == 1:  # the first transaction stays open until the second committed
            assert second_committed.wait(DEADLINE), "the other lane never ran a transaction"
        result: list[Any] = original(conn, batch)
        return result

    committer._apply = first_waits  # type: ignore[method-assign]

    async def main() -> None:
        client = OutboxClient(committer)
        committer.start()
        try:
            first = asyncio.ensure_future(client.claim(ALONE_BELOW))
            await asyncio.sleep(0)  # its batch is handed over in this turn
            assert await asyncio.to_thread(began.wait, DEADLINE)
            assert len(await asyncio.wait_for(client.claim(ALONE_BELOW), DEADLINE)) == ALONE_BELOW
            second_committed.set()
            assert len(await asyncio.wait_for(first, DEADLINE)) == ALONE_BELOW
        finally:
            second_committed.set()
            await asyncio.to_thread(committer.stop)

    asyncio.run(main())
    assert overlaps.most == 2
    assert len(set(calls)) == 2, calls


async def drive(
    client: OutboxClient, jobs: list[ClaimedJob], rng: random.Random, rounds: int
) -> tuple[set[int], int]:
    """Each job T4 then T5 (its own task, in a shuffled order) while heartbeats over every
    lease, in another shuffled order, and recovery passes run beside them."""
    leases: list[Lease] = [(j.id, j.token) for j in jobs]
    done = asyncio.Event()
    progress = asyncio.Condition()
    finished = 0

    async def one(index: int, lease: Lease) -> bool:
        nonlocal finished
        async with progress:  # at most IN_FLIGHT jobs at once, as a worker's concurrency does
            await progress.wait_for(lambda: finished >= index - IN_FLIGHT)
        ok = await client.start_send(lease) is not None and await client.complete(
            Completion(lease, State.SENT, 250, "ok")
        )
        async with progress:
            finished += 1
            progress.notify_all()
        return ok

    async def beat() -> int:
        """A heartbeat (in two halves) and a recovery pass every few finished jobs: often
        enough to meet many batches, not so often that ordinary batches always wait."""
        beats = 0
        while not done.is_set() or beats < rounds:
            order = leases[:]
            rng.shuffle(order)
            for part in (order[: len(order) // 2], order[len(order) // 2 :]):
                await client.heartbeat(part)
                beats += 1
            await client.recover(0.0)
            until = finished + 10
            async with progress:
                await progress.wait_for(lambda: finished >= until or done.is_set())  # noqa: B023
        return beats

    beating = asyncio.ensure_future(beat())
    order = leases[:]
    rng.shuffle(order)
    try:
        results = await asyncio.gather(*(one(i, lease) for i, lease in enumerate(order)))
    finally:
        done.set()
        async with progress:
            progress.notify_all()
    beats = await beating
    return {lease[0] for lease, ok in zip(order, results, strict=True) if ok}, beats


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_heartbeats_and_recovery_beside_batched_transitions_never_deadlock(
    pg: Engine, seed: int
) -> None:
    """Heartbeats lock every held lease's row, in whatever order the plan visits them; the
    transitions of a batch lock theirs in the batch's order. Were the two in separate lanes at
    once, each could hold a row the other waits for (PostgreSQL would abort one: 40P01). They
    never are: every batch commits, every job is sent once, the journal has each step once."""
    with pg.begin() as conn:  # hypothesis runs every example in the same database
        empty_outbox(conn)
    enqueue(pg, 300)
    committer = committer_for(pg)
    overlaps = Overlaps(committer)
    rng = random.Random(seed)

    async def main() -> tuple[set[int], int]:
        client = OutboxClient(committer)
        committer.start()
        try:
            jobs = await client.claim(300)
            assert len(jobs) == 300
            return await asyncio.wait_for(drive(client, jobs, rng, rounds=4), DEADLINE)
        finally:
            await asyncio.to_thread(committer.stop)

    sent, beats = asyncio.run(main())
    assert committer.stats.failures == 0
    assert len(sent) == 300
    assert beats >= 4
    assert overlaps.exclusive_batches > 0
    assert overlaps.exclusive_beside_another == 0
    with pg.connect() as conn:
        states = conn.execute(sa.select(send_job.c.state)).scalars().all()
        steps = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT (job_id, to_state)) FROM send_event"
                " WHERE to_state IN ('sending', 'sent')"
            )
        ).one()
    assert states == ["sent"] * 300
    assert tuple(steps) == (600, 600)


class PausingStore(OutboxStore):
    """Holds a T4 batch for ``job_id`` (its transaction already holding the rows its
    completions locked) until ``ready()`` says the heartbeat is blocked, one way or another."""

    def __init__(self, job_id: int, ready: Callable[[], bool]) -> None:
        super().__init__("postgresql")
        self.job_id = job_id
        self.ready = ready
        self.paused = threading.Event()

    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]:
        if any(lease[0] == self.job_id for lease in leases) and not self.paused.is_set():
            self.paused.set()
            deadline = time.monotonic() + DEADLINE
            while not self.ready():
                assert time.monotonic() < deadline, "the heartbeat never blocked"
                time.sleep(0.01)
        return super().start_sends(conn, leases, margin_seconds=margin_seconds, actor=actor)


def lock_waits(engine: Engine) -> int:
    """Backends of this database waiting for a row lock."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def test_a_heartbeat_waits_for_the_other_lane_instead_of_deadlocking_with_it(pg: Engine) -> None:
    """The interleaving that deadlocks two lanes, forced: lane A's batch completes job 2 (row
    locked), then before its T4 of job 1 waits until the heartbeat of jobs 1 and 2 in lane B is
    blocked. Were the heartbeat an ordinary request, it would lock job 1 (the plan visits ids in
    order), wait for job 2, and A's T4 would wait for job 1: PostgreSQL aborts one (40P01).
    As an exclusive request it waits for A's transaction to end, and everything commits. (Small
    batches do not wait here, or the heartbeat would wait before it even asked for its turn.)"""
    enqueue(pg, 2)
    committer = committer_for(pg, alone_below=0)
    turns = committer._turns
    assert turns is not None
    store = PausingStore(
        job_id=0, ready=lambda: turns._waiting > 0 or lock_waits(pg) > 0
    )  # job set below
    committer.store = store
    committer.context = dataclasses.replace(committer.context, store=store)

    async def main() -> tuple[bool, datetime | None, set[int]]:
        client = OutboxClient(committer)
        committer.start()
        try:
            first, second = sorted(await client.claim(2), key=lambda j: j.id)
            one, two = (first.id, first.token), (second.id, second.token)
            store.job_id = first.id
            assert await client.start_send(two) is not None
            # One turn of the loop: one list, one lane (A).
            completed = asyncio.ensure_future(client.complete(Completion(two, State.SENT, 250)))
            started = asyncio.ensure_future(client.start_send(one))
            await asyncio.sleep(0)
            # A holds job 2's row: now the heartbeat (lane B).
            assert await asyncio.to_thread(store.paused.wait, DEADLINE)
            alive = await asyncio.wait_for(client.heartbeat([one, two]), DEADLINE)
            return await completed, await started, alive
        finally:
            await asyncio.to_thread(committer.stop)

    completed, started, alive = asyncio.run(main())
    assert committer.stats.failures == 0
    assert completed
    assert started is not None
    assert alive == {store.job_id}  # job 2 is sent: no lease left to extend


def test_a_deadlock_abort_fails_only_its_batch_and_the_worker_carries_on(pg: Engine) -> None:
    """Another process can still deadlock with a lane (a second worker's recovery): the
    aborted batch's requests see the error, and the next batch commits as before."""
    enqueue(pg, 2)
    committer = committer_for(pg)
    failed_once = threading.Event()
    original = committer._apply

    def deadlocks_once(conn: sa.Connection, batch: list[Any]) -> list[Any]:
        if any(isinstance(p.request, Heartbeat) for p in batch) and not failed_once.is_set():
            failed_once.set()
            # What PostgreSQL raises in the transaction it picks as the deadlock's victim.
            conn.exec_driver_sql(
                "DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END $$"
            )
        result: list[Any] = original(conn, batch)
        return result

    committer._apply = deadlocks_once  # type: ignore[method-assign]

    async def main() -> None:
        client = OutboxClient(committer)
        committer.start()
        try:
            jobs = await client.claim(2)
            leases = [(j.id, j.token) for j in jobs]
            with pytest.raises(sa.exc.OperationalError, match="deadlock detected"):
                await client.heartbeat(leases)
            assert await client.heartbeat(leases) == {j.id for j in jobs}
            assert all(await asyncio.gather(*(client.start_send(lease) for lease in leases)))
        finally:
            await asyncio.to_thread(committer.stop)

    asyncio.run(main())
    assert committer.stats.failures == 1


def test_which_requests_run_alone() -> None:
    """The requests that may lock rows of jobs with another request in flight, or shared rows
    in no fixed order. Ordinary ones lock their own jobs' rows, campaign rows in name order
    (the failure watch, with the outcomes) and rate cells in key order (``SlotThenStart``, after
    the outcomes)."""
    kinds = [
        k
        for module in (commit_requests, relay_requests, rate_gate)
        for k in vars(module).values()
        if isinstance(k, type) and issubclass(k, OutboxRequest) and k is not OutboxRequest
    ]
    assert {k.kind for k in kinds if k.exclusive} == {
        "heartbeat",
        "release",
        "defer",
        "recover",
        "relay_hand_back",
        "relay_report",
    }
    assert {k.kind for k in kinds if not k.exclusive} == {
        "complete",
        "t4",
        "settle",
        "lease_state",
        "has_work",
        "next_due",
        "claim",
        "t4_slot",
        "rate_limited",
    }
