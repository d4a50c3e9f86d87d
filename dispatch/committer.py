"""Group commit: many concurrent sends' transitions share one transaction.

A commit costs about as much as everything else a job needs, so the worker never commits per
job. Send tasks submit requests (T4 for these leases, T5 for that one…) to one database thread;
it takes everything queued, runs each kind as one batched statement inside a single transaction,
commits, and only then resolves every request's future. A send therefore starts only after its
own T4 is durable, and a hundred T4s cost one commit.

If a batch fails, every request in it gets the exception; callers decide what a failure means
(for T4: re-read the row before sending; for completions: retry while the lease lasts).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, Lease, OutboxStore, RecoveryReport

T = TypeVar("T")

MAX_BATCH = 2000  # requests per transaction; bounds statement size and lock time


@dataclass
class _Request:
    kind: str
    payload: Any
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


@dataclass
class CommitterStats:
    transactions: int = 0
    requests: int = 0
    failures: int = 0
    largest_batch: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class GroupCommitter:
    def __init__(
        self,
        engine: Engine,
        store: OutboxStore,
        *,
        owner: str,
        lease_seconds: float,
        t4_margin_seconds: float,
    ) -> None:
        self.engine = engine
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.t4_margin_seconds = t4_margin_seconds
        self.stats = CommitterStats()
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="herald-db", daemon=True)
        # Test hook: lets a test break the guard of T4 to prove the suites catch duplicates.
        self.unguarded_t4: Callable[[sa.Connection, Sequence[Lease]], set[int]] | None = None
        # Crash-point seam: runs after the T4 UPDATE, before its COMMIT.
        self.before_t4_commit: Callable[[], None] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    # ------------------------------------------------------------ async API

    def _submit(self, kind: str, payload: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Request(kind, payload, future, loop))
        return future

    async def claim(self, limit: int) -> list[ClaimedJob]:
        result: list[ClaimedJob] = await self._submit("claim", limit)
        return result

    async def start_send(self, lease: Lease) -> bool:
        """T4. True only once the transition is committed."""
        result: bool = await self._submit("t4", lease)
        return result

    async def complete(self, completion: Completion) -> bool:
        result: bool = await self._submit("complete", completion)
        return result

    async def settle(self, lease: Lease) -> State | None:
        result: State | None = await self._submit("settle", lease)
        return result

    async def heartbeat(self, leases: Sequence[Lease]) -> set[int]:
        result: set[int] = await self._submit("heartbeat", list(leases))
        return result

    async def release(self, leases: Sequence[Lease]) -> set[int]:
        result: set[int] = await self._submit("release", list(leases))
        return result

    async def lease_state(self, lease: Lease) -> str | None:
        result: str | None = await self._submit("lease_state", lease)
        return result

    async def recover(self, grace_seconds: float) -> RecoveryReport:
        result: RecoveryReport = await self._submit("recover", grace_seconds)
        return result

    async def call(self, fn: Callable[[sa.Connection], T]) -> T:
        """Run an arbitrary read/write in the next transaction (status checks, idle checks)."""
        result: T = await self._submit("call", fn)
        return result

    # ------------------------------------------------------------ the database thread

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._execute(batch)
            if stop:
                return

    def _execute(self, batch: list[_Request]) -> None:
        try:
            results = self._transaction(batch)
        except Exception as exc:  # every request learns its batch failed; none is resolved OK
            self.stats.failures += 1
            for request in batch:
                _resolve(request, exc=exc)
            return
        self.stats.transactions += 1
        self.stats.requests += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        for request in batch:
            self.stats.by_kind[request.kind] = self.stats.by_kind.get(request.kind, 0) + 1
        _resolve_all(batch, results)

    def _transaction(self, batch: list[_Request]) -> list[Any]:
        """One transaction for the whole batch; returns only once it is committed."""
        with self.engine.begin() as conn:
            return self._apply(conn, batch)

    def _apply(self, conn: sa.Connection, batch: list[_Request]) -> list[Any]:
        results: list[Any] = [None] * len(batch)
        by_kind: dict[str, list[int]] = {}
        for index, request in enumerate(batch):
            by_kind.setdefault(request.kind, []).append(index)
        store = self.store

        # Outcomes first, then T4s, then claims: a slot freed in this batch can be refilled
        # by the claim in the same transaction.
        if "complete" in by_kind:
            idx = by_kind["complete"]
            done = store.complete(conn, [batch[i].payload for i in idx], actor=self.owner)
            for i in idx:
                results[i] = batch[i].payload.lease[0] in done
        if "t4" in by_kind:
            idx = by_kind["t4"]
            leases = [batch[i].payload for i in idx]
            if self.unguarded_t4 is not None:
                started = self.unguarded_t4(conn, leases)
            else:
                started = store.start_sends(
                    conn, leases, margin_seconds=self.t4_margin_seconds, actor=self.owner
                )
            for i in idx:
                results[i] = batch[i].payload[0] in started
            if started and self.before_t4_commit is not None:
                self.before_t4_commit()
        if "settle" in by_kind:
            idx = by_kind["settle"]
            settled = store.settle_unstartable(
                conn, [batch[i].payload for i in idx], actor=self.owner
            )
            for i in idx:
                results[i] = settled.get(batch[i].payload[0])
        if "heartbeat" in by_kind:
            idx = by_kind["heartbeat"]
            leases = [lease for i in idx for lease in batch[i].payload]
            alive = store.heartbeat(conn, leases, lease_seconds=self.lease_seconds)
            for i in idx:
                results[i] = alive
        if "release" in by_kind:
            idx = by_kind["release"]
            leases = [lease for i in idx for lease in batch[i].payload]
            released = store.release_claims(conn, leases, actor=self.owner)
            for i in idx:
                results[i] = released
        if "lease_state" in by_kind:
            idx = by_kind["lease_state"]
            states = store.lease_state(conn, [batch[i].payload for i in idx])
            for i in idx:
                results[i] = states.get(batch[i].payload[0])
        for i in by_kind.get("recover", []):
            results[i] = store.recover(conn, grace_seconds=batch[i].payload, actor=self.owner)
        for i in by_kind.get("call", []):
            results[i] = batch[i].payload(conn)
        claims = by_kind.get("claim", [])
        if claims:
            total = sum(batch[i].payload for i in claims)
            jobs = store.claim(
                conn, owner=self.owner, limit=total, lease_seconds=self.lease_seconds
            )
            for i in claims:
                take = batch[i].payload
                results[i], jobs = jobs[:take], jobs[take:]
        return results


def _resolve(request: _Request, *, result: Any = None, exc: BaseException | None = None) -> None:
    def settle() -> None:
        if request.future.done():  # the waiter was cancelled
            return
        if exc is not None:
            request.future.set_exception(exc)
        else:
            request.future.set_result(result)

    # RuntimeError: the loop is closed, so nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        request.loop.call_soon_threadsafe(settle)


def _resolve_all(batch: list[_Request], results: list[Any]) -> None:
    """One wake-up per event loop for the whole batch, not one per request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Request, Any]]] = {}
    for request, result in zip(batch, results, strict=True):
        by_loop.setdefault(request.loop, []).append((request, result))

    def settle(pairs: list[tuple[_Request, Any]]) -> None:
        for request, result in pairs:
            if not request.future.done():  # the waiter was cancelled
                request.future.set_result(result)

    for loop, pairs in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, pairs)
