"""The fan-out's pipelined writer (scheduler.fanout_writer) leaves what the serial one does.

On PostgreSQL a launch stages batch N+1 by COPY while batch N is inserted and committed on
another connection. For any sequence of batches - keys and mailboxes repeated within and across
batches, hostile text - both writers must leave the same jobs in the same order (ids follow the
audience), commit the batches in order, and report the same counts. A batch that fails takes
the batch staged behind it down with it, and nothing of either is left.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

from dispatch.models import send_event, send_job
from dispatch.outbox import NewJob, bulk_enqueue
from dispatch.store import OutboxStore
from scheduler.fanout_writer import PipelinedWriter, SerialWriter, pipelined
from tests.support.factories import new_job
from tests.support.job_strategies import AT, new_jobs
from tests.support.outboxes import empty_outbox

# How long a test waits for the other connection before it calls the writer serial.
OVERLAP_DEADLINE_SECONDS = 30.0


class Recorder:
    """What a writer did: the positions each batch's transaction advanced to (in commit
    order, as the transaction saw them) and the (jobs, new) counts it reported."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.reported: list[tuple[int, int]] = []
        self.store = OutboxStore("postgresql")

    def enqueue(self, conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        created = self.store.enqueue(conn, jobs)
        self.positions.append(position)
        return created

    def insert_staged(self, conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        created = bulk_enqueue.insert_staged(conn, jobs)
        self.positions.append(position)
        return created

    def committed(self, count: int, created: int) -> None:
        self.reported.append((count, created))


def _write(writer: Any, batches: list[list[NewJob]]) -> None:
    try:
        position = 0
        for batch in batches:
            position += len(batch)
            writer.write(batch, position)
        writer.finish()
    finally:
        writer.close()


def _outbox(engine: Engine) -> list[tuple[Any, ...]]:
    """Every job in id order (the audience's order), and each one's single T1 journal row."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                send_job.c.key,
                send_job.c.recipient,
                send_job.c.mailbox,
                send_job.c.payload,
                send_job.c.key_tuple,
            ).order_by(send_job.c.id)
        ).all()
        events = conn.execute(
            sa.select(send_event.c.to_state, sa.func.count())
            .join(send_job, send_job.c.id == send_event.c.job_id)
            .group_by(send_event.c.to_state)
        ).all()
    assert events == ([("pending", len(rows))] if rows else [])
    return [tuple(row) for row in rows]


def _checked_out(engine: Engine) -> int:
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


def _emptied(engine: Engine) -> None:
    with engine.begin() as conn:
        empty_outbox(conn)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=st.lists(st.lists(new_jobs(), min_size=1, max_size=5), min_size=1, max_size=6))
def test_pipelined_batches_leave_what_serial_batches_leave(
    pg_engine: Engine, batches: list[list[NewJob]]
) -> None:
    _emptied(pg_engine)
    serial = Recorder()
    _write(SerialWriter(pg_engine, serial.enqueue, serial.committed), batches)
    expected = _outbox(pg_engine)
    _emptied(pg_engine)
    piped = Recorder()
    _write(PipelinedWriter(pg_engine, piped.insert_staged, piped.committed), batches)
    assert _outbox(pg_engine) == expected
    assert piped.positions == serial.positions == sorted(serial.positions)
    assert piped.reported == serial.reported
    assert _checked_out(pg_engine) == 0  # both connections given back


def _jobs(prefix: str, count: int) -> list[NewJob]:
    # The mailbox is the recipient's identity (new_job's), so each key has a mailbox of its own.
    return [new_job(f"{prefix}{i}", due=AT) for i in range(count)]


def test_the_next_batch_is_staged_while_the_previous_one_commits(pg_engine: Engine) -> None:
    """The overlap itself: the first batch's transaction does not finish until the second
    batch has been staged on the other connection (a serial writer would wait forever)."""
    _emptied(pg_engine)
    second_staged = threading.Event()
    recorder = Recorder()
    staged = 0
    original_stage = bulk_enqueue.stage

    def insert_staged(conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        if position == 3:
            assert second_staged.wait(OVERLAP_DEADLINE_SECONDS), "the next batch was not staged"
        return recorder.insert_staged(conn, jobs, position)

    def stage(conn: Connection, jobs: Sequence[NewJob]) -> None:
        nonlocal staged
        original_stage(conn, jobs)
        staged += 1
        if staged == 2:
            second_staged.set()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bulk_enqueue, "stage", stage)
        _write(
            PipelinedWriter(pg_engine, insert_staged, recorder.committed),
            [_jobs("a", 3), _jobs("b", 3)],
        )
    assert recorder.positions == [3, 6]
    assert [row[0] for row in _outbox(pg_engine)] == ["a0", "a1", "a2", "b0", "b1", "b2"]


class Refused(Exception):
    pass


def test_a_failed_batch_takes_the_batch_staged_behind_it_down(pg_engine: Engine) -> None:
    _emptied(pg_engine)
    recorder = Recorder()

    def insert_staged(conn: Connection, jobs: Sequence[NewJob], position: int) -> int:
        created = recorder.insert_staged(conn, jobs, position)
        if position == 4:  # the second batch, after its jobs went in (uncommitted)
            raise Refused("campaign changed while launching")
        return created

    writer = PipelinedWriter(pg_engine, insert_staged, recorder.committed)
    batches = [_jobs("a", 2), _jobs("b", 2), _jobs("c", 2), _jobs("d", 2)]
    with pytest.raises(Refused):
        _write(writer, batches)
    assert [row[0] for row in _outbox(pg_engine)] == ["a0", "a1"]
    assert recorder.reported == [(2, 2)]
    assert _checked_out(pg_engine) == 0
    with pg_engine.connect() as conn:  # no transaction of the writer's is left open
        open_transactions = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%'"
            )
        ).scalar_one()
    assert open_transactions == 0


def test_only_a_first_fan_out_on_postgresql_is_pipelined(engine: Engine) -> None:
    postgres = engine.dialect.name == "postgresql"
    assert pipelined(engine, replace_pending=False) is postgres
    assert pipelined(engine, replace_pending=True) is False
