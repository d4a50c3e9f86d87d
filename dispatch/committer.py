"""Group commit: many concurrent sends' transitions share one transaction.

A commit costs about as much as everything else a job needs, so the worker never commits per
job. Send tasks submit requests (T4 for these leases, T5 for that one…) to one database thread;
it takes everything queued, groups it by request type, lets each type apply its group as one
batched statement inside a single transaction, commits, and only then resolves every request's
future. A send therefore starts only after its own T4 is durable, and a hundred T4s cost one
commit.

The committer knows no request by name: what a request carries and does is its class's business
(``dispatch/commit_requests.py``), and the worker reaches it through the typed ``OutboxClient``.

If a batch fails, every request in it gets the exception; callers decide what a failure means
(for T4: re-read the row before sending; for completions: retry while the lease lasts).

Per request the hand-over costs one future and one list append: the requests made during one
turn of the event loop cross to the database thread as one list (a thread wake-up per turn, not
per request). A database thread keeps its connection while transactions follow each other
closely, so a busy drain does not check one out of the pool (with PostgreSQL's pre-ping, a
round trip) per commit; after a pause or a failed transaction it takes a fresh one.

Lanes. On PostgreSQL two database threads ("lanes"), each with its own connection, take batches
from the same queue: while one lane's transaction is in the server, the other builds and sends
the next, so the server's work overlaps the worker's Python instead of alternating with it.
SQLite has one writer: one lane. Two lanes never deadlock on each other, because:

- an ordinary request (T4, T4 with its rate slots, outcomes, settle, claim, reads) locks only
  rows of jobs whose request it is, and a job has one request in flight at a time (its T5 is
  submitted after its T4 resolved, its T4 after its claim): two lanes' ordinary batches lock
  disjoint job rows. The claim skips locked rows. Shared rows are taken in one global order:
  campaign rows by name (the failure watch, with the outcomes), then rate cells by key
  (``SlotThenStart``, after the outcomes, one sorted pass), so no two lanes can each hold one
  the other waits for;
- a request that may lock rows of jobs with another request in flight, or shared rows in no
  fixed order (``exclusive``: heartbeat, release, deferral, recovery, relay hand-backs and
  reports), runs in a transaction alone: its lane waits until no other lane is in a
  transaction, and no lane starts one until it has committed (``dispatch.lane_turns``).

A deadlock with another process (a second worker's recovery) is what it was with one lane: the
batch fails, and every request in it sees the exception.

Sends on the wire first. A T4 is waited for by a send that holds one of the worker's slots (its
relay connection, between RCPT and DATA); an outcome, a claim or a read is not. When a lane's
batch holds both, the T4s (``urgent`` requests) go in a transaction of their own and the rest
goes back to the queue, marked whole, for the other lane (or this one, next): the slots free a
transaction sooner, and the two lanes' transactions run side by side. A batch of fewer than
``SPLIT_AT`` requests (``dispatch.commit_batch``) is not split, and a whole one never is, so
nothing put back is put back again behind newer T4s. Which requests share a transaction
changes, never which may run beside which (any two ordinary batches already could), so the
deadlock rules above are unchanged.
Measured: drain throughput +19 % in eight interleaved pairs (bench/profiles/drain-cpu.md,
session 24).

Small batches wait. A batch touching fewer than ``ALONE_BELOW`` jobs' rows does not start a
transaction beside another lane's running one: it waits for that one to end, then takes what
arrived meanwhile, and goes before any new work (``LaneTurns.wait_until_quiet``). A transaction
costs about the same for five requests as for thirty; when sends come at a relay's pace, two
lanes each committing a handful cost a transaction per four messages, against one per five or
six when the lanes take turns (bench/profiles/smtp.md, session 26). A drain's batches (hundreds
of T4s or outcomes, claims of a wave of jobs) are large and still run side by side. Waiting
only delays a transaction, it never changes which requests may run beside which, so the
deadlock rules above are unchanged.

Helpers on demand. Only the first lane waits on the queue; the others (helpers) sleep until a
list worth a transaction beside a running one is handed over (``ALONE_BELOW`` rows or more), a
split puts a rest back, or the committer stops, and then take what is queued at that moment. A
small list would only be held by a woken helper until the first lane's transaction ended: at a
relay's pace, with both lanes waiting on the queue, every handful of requests woke a thread that
then waited for its turn, and each such wake-up costs a context switch and an interpreter
hand-over on two busy cores (bench/profiles/smtp.md, session 28: 1,393 against 1,326 msg/s,
the same as one lane). Which lane runs a batch changes, never which batches may run beside
which, so the deadlock rules above are unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.commit_batch import (
    Pending,
    Whole,
    resolve_all,
    resolve_failed,
    touches_fewer,
    urgent_first,
)
from dispatch.commit_requests import CommitContext, OutboxRequest
from dispatch.failure_watch import FailureWatch
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.lane_turns import LaneTurns
from dispatch.store import OutboxStore

R = TypeVar("R")

MAX_BATCH = 2000  # requests per transaction; bounds statement size and lock time
# Database threads on PostgreSQL (measured: bench/README.md, "Where the time goes").
POSTGRES_LANES = 2
# Rows a batch must touch to get a transaction beside another lane's running one ("Small
# batches wait"); a smaller one waits for that transaction to end and grows meanwhile. A list
# this large is also what wakes a helper lane ("Helpers on demand"). 32 and 64 drained alike
# (bench/profiles/smtp.md, session 26); at 32, claims of a relay-paced refill woke the helper.
ALONE_BELOW = 64
# A connection idle this long goes back to the pool; the next transaction checks one out again
# (PostgreSQL: pre-pinged), so a connection the server dropped during a pause is not used.
HOLD_CONNECTION_SECONDS = 1.0


@dataclass
class CommitterStats:
    transactions: int = 0
    requests: int = 0
    failures: int = 0
    largest_batch: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class _Lane(threading.local):
    """A database thread's own: its connection between transactions."""

    conn: sa.Connection | None = None
    used = 0.0  # monotonic time its last transaction ended


class GroupCommitter:
    def __init__(
        self,
        engine: Engine,
        store: OutboxStore,
        *,
        owner: str,
        lease_seconds: float,
        t4_margin_seconds: float,
        instrumentation: Instrumentation = NULL_INSTRUMENTATION,
        failure_watch: FailureWatch | None = None,
        lanes: int | None = None,
        alone_below: int = ALONE_BELOW,
    ) -> None:
        """``lanes``: database threads (default: two on PostgreSQL, one on SQLite);
        ``alone_below``: rows a batch must touch to run beside another lane's transaction
        ("Small batches wait"; 0: every batch may)."""
        self.engine = engine
        self.store = store
        self.owner = owner
        self.context = CommitContext(
            store=store,
            owner=owner,
            lease_seconds=lease_seconds,
            t4_margin_seconds=t4_margin_seconds,
            instrumentation=instrumentation,
            failure_watch=failure_watch,
        )
        self.stats = CommitterStats()
        self._stats_lock = threading.Lock()
        self._queue: queue.SimpleQueue[list[Pending] | None] = queue.SimpleQueue()
        if lanes is None:  # SQLite has a single writer
            lanes = POSTGRES_LANES if engine.dialect.name == "postgresql" else 1
        if lanes < 1 or (lanes > 1 and engine.dialect.name == "sqlite"):
            raise ValueError(f"lanes must be 1 on SQLite and at least 1 elsewhere, not {lanes}")
        self.lanes = lanes
        self.alone_below = alone_below
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"herald-db-{i}", daemon=True)
            for i in range(lanes)
        ]
        # Each lane's own flag (written by it alone): waiting for its next list (``quiet``).
        self._waiting_for_work = [False] * lanes
        # Set when a helper lane is wanted: a large list was handed over, a split put a rest
        # back, or the committer stops ("Helpers on demand").
        self._help = threading.Event()
        self._stopping = False
        self._turns = LaneTurns() if lanes > 1 else None
        self._lane = _Lane()
        # Requests made during the current turn of each event loop, not yet handed over.
        self._outgoing: dict[asyncio.AbstractEventLoop, list[Pending]] = {}

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping = True  # before the stops are queued: a helper then waits for its own
        for _ in self._threads:  # one each: a lane that takes it ends after its batch
            self._queue.put(None)
        self._help.set()
        for thread in self._threads:
            thread.join()

    # ------------------------------------------------------------ async API

    async def submit(self, request: OutboxRequest[R]) -> R:
        """Queue ``request`` for the next transaction; its result once that has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        outgoing = self._outgoing.get(loop)
        if outgoing is None:  # the first request of this turn: hand the turn's list over after it
            outgoing = self._outgoing[loop] = []
            loop.call_soon(self._hand_over, loop)
        outgoing.append(Pending(request, future, loop))
        return await future

    def quiet(self) -> bool:
        """Whether every lane is waiting for its next list: no transaction of this worker is
        open. The chaos suite freezes a worker only then, so that the zombie holds no row lock:
        the other workers' recovery skips held rows, and would leave its claims to it
        (tests/chaos/instruments.py)."""
        return all(self._waiting_for_work)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        handed = self._outgoing.pop(loop)
        self._queue.put(handed)
        if self.lanes > 1 and not touches_fewer(handed, self.alone_below):
            self._help.set()

    # ------------------------------------------------------------ the database thread

    def _run(self, lane: int) -> None:
        try:
            self._connect_early()
            self._serve(lane, self._queue.get if lane == 0 else self._when_helped)
        finally:
            self._release_connection()

    def _connect_early(self) -> None:
        """Check this lane's connection out as the worker starts, while the other lane runs
        the first claim, rather than in front of the first recovery pass. A database that
        cannot be reached yet is met again by the first transaction, which fails as usual."""
        with contextlib.suppress(Exception):
            self._lane.conn = self.engine.connect()
            self._lane.used = time.monotonic()

    def _when_helped(self) -> list[Pending] | None:
        """A helper lane's next list, once a helper is wanted (``_help``): whatever is queued
        then (``_serve`` takes the rest of it). It looks only when told, so a helper that has
        just started or committed does not take the first lane's work; once the committer
        stops it waits on the queue like the first lane, where a stop is queued for it."""
        while not self._stopping:
            self._help.wait()
            self._help.clear()
            with contextlib.suppress(queue.Empty):  # the first lane took it meanwhile
                return self._queue.get_nowait()
        return self._queue.get()

    def _serve(self, lane: int, next_list: Callable[[], list[Pending] | None]) -> None:
        carried: list[Pending] = []  # the part of a list that did not fit the last batch
        while True:
            if carried:
                batch, carried = carried, []
                stop = whole = False
            else:
                if self._turns is not None:
                    self._turns.let_holders_in()
                self._waiting_for_work[lane] = True
                first = next_list()
                self._waiting_for_work[lane] = False
                if first is None:
                    self._serve_leftovers()
                    return
                batch, stop, whole = first, False, isinstance(first, Whole)
            stop, whole = self._take_queued(batch, stop, whole)
            let_in = False
            if self._turns is not None and not stop and touches_fewer(batch, self.alone_below):
                # Too small to be worth a transaction beside a running one ("Small batches
                # wait"): once that one has ended, this batch takes what arrived meanwhile.
                let_in = self._turns.wait_until_quiet()
                if let_in:
                    stop, whole = self._take_queued(batch, stop, whole)
            if len(batch) > MAX_BATCH:
                batch, carried = batch[:MAX_BATCH], batch[MAX_BATCH:]
            if self.lanes > 1 and not stop and not whole:
                batch, rest = urgent_first(batch)
                if rest is not None:
                    self._queue.put(rest)
                    self._help.set()
            self._execute(batch, let_in=let_in)
            if stop:
                while carried:
                    batch, carried = carried[:MAX_BATCH], carried[MAX_BATCH:]
                    self._execute(batch)
                return

    def _take_queued(self, batch: list[Pending], stop: bool, whole: bool) -> tuple[bool, bool]:
        """Add what is queued to ``batch`` without waiting, up to ``MAX_BATCH`` (a list is taken
        whole: the caller carries what does not fit); whether a stop was met, and whether the
        batch now holds a put-back (``Whole``) list."""
        while len(batch) < MAX_BATCH and not stop:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                stop = True
                break
            whole = whole or isinstance(item, Whole)
            batch.extend(item)  # each list is the database thread's once queued
        return stop, whole

    def _serve_leftovers(self) -> None:
        """At this lane's stop: run what is still queued (the rest of a split batch can land
        behind the stops when ``stop`` is called mid-drain), and leave the other lanes' stops
        for them. Nothing accepted is left unresolved."""
        stops = 0
        left: list[Pending] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                stops += 1
            else:
                left.extend(item)
        for _ in range(stops):  # a stopping helper waits on the queue (``_when_helped``)
            self._queue.put(None)
        for start in range(0, len(left), MAX_BATCH):
            self._execute(left[start : start + MAX_BATCH])

    def _execute(self, batch: list[Pending], *, let_in: bool = False) -> None:
        try:
            if self._turns is None:
                results = self._transaction(batch)
            else:
                exclusive = any(pending.request.exclusive for pending in batch)
                with self._turns.turn(exclusive, let_in=let_in):
                    results = self._transaction(batch)
        except Exception as exc:  # every request learns its batch failed; none is resolved OK
            with self._stats_lock:
                self.stats.failures += 1
            for pending in batch:
                resolve_failed(pending, exc=exc)
            return
        with self._stats_lock:
            stats = self.stats
            stats.transactions += 1
            stats.requests += len(batch)
            stats.largest_batch = max(stats.largest_batch, len(batch))
            for pending in batch:
                kind = pending.request.kind
                stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
        resolve_all(batch, results)

    def _transaction(self, batch: list[Pending]) -> list[Any]:
        """One transaction for the whole batch; returns only once it is committed."""
        conn = self._connection()
        try:
            with conn.begin():
                results = self._apply(conn, batch)
        except BaseException:
            # The connection may be broken or its state unknown: the next batch takes another.
            self._release_connection()
            raise
        self._lane.used = time.monotonic()
        return results

    def _connection(self) -> sa.Connection:
        lane = self._lane
        if lane.conn is not None and time.monotonic() - lane.used > HOLD_CONNECTION_SECONDS:
            self._release_connection()
        if lane.conn is None:
            lane.conn = self.engine.connect()
        return lane.conn

    def _release_connection(self) -> None:
        lane = self._lane
        conn, lane.conn = lane.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is discarded all the same
                conn.close()

    def _apply(self, conn: sa.Connection, batch: list[Pending]) -> list[Any]:
        results: list[Any] = [None] * len(batch)
        by_type: dict[type[OutboxRequest[Any]], list[int]] = {}
        for index, pending in enumerate(batch):
            by_type.setdefault(type(pending.request), []).append(index)
        for request_type in sorted(by_type, key=lambda t: t.order):
            indexes = by_type[request_type]
            group = [batch[i].request for i in indexes]
            answers = request_type.apply(self.context, conn, group)
            for i, answer in zip(indexes, answers, strict=True):
                results[i] = answer
        return results
