"""How the fan-out writes its batches: one transaction each, in audience order.

Each batch's transaction inserts its jobs (T1, journalled) and advances the occurrence's cursor
to the batch's last position, so a crash resumes after the last committed batch.

``SerialWriter`` runs each batch's transaction whole before the next batch is read: SQLite
(one writer), a new version's batches, and any database the COPY enqueue cannot use.

``PipelinedWriter`` (PostgreSQL, a launch or an occurrence's first fan-out): while batch N is
inserted and committed on one connection (a helper thread; psycopg waits for the server
without the GIL), batch N+1 is read from the spool and streamed by COPY into the other
connection's staging table. Batch N+1's insert starts only once batch N has committed, so:

- batches commit in audience order, each with its cursor, exactly as ``SerialWriter`` commits
  them; of two spellings of one mailbox in different batches the earlier still keeps the job;
- no batch's insert ever waits for a row of a later batch (a later batch has inserted nothing
  while an earlier one is uncommitted), so the two connections cannot deadlock;
- a batch that fails (a changed definition, a database error) is rolled back with the batch
  staged behind it, and the error reaches the caller as it would have from ``SerialWriter``.

Measured on 2 cores (bench/profiles/fanout.md, session 24): the fan-out's Python and COPY
overlap the previous batch's ``INSERT … SELECT``, which was the fan-out's whole wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Protocol

from sqlalchemy.engine import Connection, Engine, RootTransaction

from dispatch.outbox import bulk_enqueue
from dispatch.store import NewJob

# (connection, jobs, position of the batch's last entry) -> new jobs: the rest of the batch's
# transaction after its jobs are staged (PipelinedWriter) or from the start (SerialWriter).
Commit = Callable[[Connection, Sequence[NewJob], int], int]
# (jobs in the batch, new jobs): told after each batch has committed, in order.
Committed = Callable[[int, int], None]


class BatchWriter(Protocol):
    def write(self, jobs: Sequence[NewJob], position: int) -> None: ...
    def finish(self) -> None: ...
    def close(self) -> None: ...


class SerialWriter:
    """Each batch in its own transaction, committed before ``write`` returns."""

    def __init__(self, engine: Engine, enqueue: Commit, committed: Committed) -> None:
        self._engine = engine
        self._enqueue = enqueue
        self._committed = committed

    def write(self, jobs: Sequence[NewJob], position: int) -> None:
        with self._engine.begin() as conn:
            created = self._enqueue(conn, jobs, position)
        self._committed(len(jobs), created)

    def finish(self) -> None:
        return None

    def close(self) -> None:
        return None


def pipelined(engine: Engine, *, replace_pending: bool) -> bool:
    """Whether the fan-out's batches can be pipelined on ``engine``."""
    return not replace_pending and bulk_enqueue.usable(engine)


class PipelinedWriter:
    """Batch N+1 staged (COPY) on one connection while batch N is inserted and committed on
    the other; see the module's docstring for why the order and the rules hold."""

    def __init__(self, engine: Engine, insert_staged: Commit, committed: Committed) -> None:
        self._insert_staged = insert_staged
        self._committed = committed
        self._connections = [engine.connect(), engine.connect()]
        self._turn = 0
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="herald-fanout")
        self._in_flight: tuple[Future[int], int] | None = None

    def write(self, jobs: Sequence[NewJob], position: int) -> None:
        conn = self._connections[self._turn]
        self._turn ^= 1
        transaction = conn.begin()
        try:
            bulk_enqueue.stage(conn, jobs)
            self._settle()  # the previous batch commits before this one inserts
        except BaseException:
            transaction.rollback()
            raise
        done = self._helper.submit(self._finish_batch, conn, transaction, jobs, position)
        self._in_flight = (done, len(jobs))

    def _finish_batch(
        self, conn: Connection, transaction: RootTransaction, jobs: Sequence[NewJob], position: int
    ) -> int:
        try:
            created = self._insert_staged(conn, jobs, position)
            transaction.commit()
        except BaseException:
            transaction.rollback()
            raise
        return created

    def _settle(self) -> None:
        if self._in_flight is None:
            return
        done, count = self._in_flight
        self._in_flight = None
        self._committed(count, done.result())

    def finish(self) -> None:
        """Wait for the last batch's commit (its error, if it failed)."""
        self._settle()

    def close(self) -> None:
        """Let a batch in flight end (its commit cannot be taken back half-way), then give the
        connections back; an error of that batch was already the caller's, or is moot."""
        if self._in_flight is not None:
            with suppress(Exception):
                self._in_flight[0].result()
            self._in_flight = None
        self._helper.shutdown(wait=True)
        for conn in self._connections:
            with suppress(Exception):
                conn.close()
