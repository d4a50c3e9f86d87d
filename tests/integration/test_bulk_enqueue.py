"""The COPY enqueue (dispatch.outbox.bulk_enqueue) writes exactly what the portable one does.

PostgreSQL enqueues by COPY into a staging table and one INSERT … SELECT; the portable path
(SQLite's, and PostgreSQL's before) is a multi-row INSERT … VALUES. For any batch - hostile
spellings, repeated keys and mailboxes, jobs that exist already, pending or not, with and
without ``replace_pending`` - both must leave the same send_job rows and the same journal.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest import mock

import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.outbox import NewJob, bulk_enqueue
from dispatch.store import OutboxStore
from tests.support.job_strategies import AT, new_jobs
from tests.support.outboxes import empty_outbox


def _outcome(
    engine: Engine,
    before: list[NewJob],
    taken: set[str],
    batch: list[NewJob],
    replace_pending: bool,
    *,
    copy: bool,
) -> tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Enqueue ``before`` (then mark the keys in ``taken`` claimed), then ``batch``; the rows
    and journal it leaves. Rolled back: every example starts from an empty outbox."""
    store = OutboxStore("postgresql")
    with mock.patch.object(bulk_enqueue, "usable", return_value=copy), engine.connect() as conn:
        try:
            store.enqueue(conn, before)
            conn.execute(
                sa.update(send_job).where(send_job.c.key.in_(taken)).values(state="claimed")
            )
            created = store.enqueue(conn, batch, replace_pending=replace_pending)
            skip = {"id", "created_at", "updated_at"}
            columns = [c for c in send_job.c if c.name not in skip]
            rows = sorted(tuple(row) for row in conn.execute(sa.select(*columns)))
            events = sorted(
                tuple(row)
                for row in conn.execute(
                    sa.select(
                        send_job.c.key,
                        send_event.c.token,
                        send_event.c.from_state,
                        send_event.c.to_state,
                        send_event.c.actor,
                        send_event.c.detail,
                    ).join(send_job, send_job.c.id == send_event.c.job_id)
                )
            )
            # One journal row per job, each with the id of a job that exists.
            assert len(events) == len(rows)
            return created, rows, events
        finally:
            conn.rollback()


def _job(payload: bytes, after: int) -> NewJob:
    return NewJob(
        key="k0",
        key_tuple="k0",
        campaign="c",
        step="s",
        occurrence_at=AT,
        channel="email",
        sender="from@x.test",
        recipient="a@x.test",
        message_id="<k0@x.test>",
        payload=payload,
        not_before=AT + timedelta(seconds=after),
        mailbox="m0",
    )


@settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(new_jobs(), max_size=6),
    taken=st.sets(st.sampled_from(["k0", "k1", "k2"])),
    batch=st.lists(new_jobs(), min_size=1, max_size=14),
    replace_pending=st.booleans(),
)
# A pending job given two new versions in one batch: the per-row UPDATE's outcome depends on
# the order (the second matches the stored payload's hash, so it changes nothing).
@example(
    before=[_job(b"one", 0)],
    taken=set(),
    batch=[_job(b"two", 1), _job(b"one", 2)],
    replace_pending=True,
)
# A key first refused for its mailbox (another key holds it), then staged again with a free
# mailbox: the later row gets the job (send_key decides; a job follows the row that went in).
@example(
    before=[replace(_job(b"x", 0), key="k1")],
    taken=set(),
    batch=[_job(b"a", 0), replace(_job(b"b", 0), mailbox="m1"), _job(b"c", 0)],
    replace_pending=False,
)
def test_copy_enqueue_leaves_exactly_the_rows_and_journal_of_the_portable_insert(
    pg_engine: Engine,
    before: list[NewJob],
    taken: set[str],
    batch: list[NewJob],
    replace_pending: bool,
) -> None:
    portable = _outcome(pg_engine, before, taken, batch, replace_pending, copy=False)
    copied = _outcome(pg_engine, before, taken, batch, replace_pending, copy=True)
    assert copied == portable


def _fresh(key: str, mailbox: str, campaign: str = "optimistic") -> NewJob:
    return NewJob(
        key=key,
        key_tuple=key,
        campaign=campaign,
        step="s",
        occurrence_at=AT,
        channel="email",
        sender="from@x.test",
        recipient=f"{mailbox}@x.test",
        message_id=f"<{key}@x.test>",
        payload=b"p",
        not_before=AT,
        mailbox=mailbox,
    )


def test_copy_enqueue_twice_in_one_transaction_and_again_after_commit(pg_engine: Engine) -> None:
    """The staging table is emptied after each batch (a new version enqueues many batches in
    one transaction) and at commit; nothing of one batch leaks into the next."""
    jobs = [_fresh(f"t{i}", f"r{i}", campaign="twice") for i in range(6)]
    store = OutboxStore("postgresql")
    try:
        with pg_engine.begin() as conn:
            assert bulk_enqueue.usable(conn)
            assert store.enqueue(conn, jobs[:3]) == 3
            assert store.enqueue(conn, jobs[3:]) == 3
        with pg_engine.begin() as conn:
            assert store.enqueue(conn, jobs) == 0
            assert store.enqueue(conn, [jobs[0], jobs[0]]) == 0
            count = sa.select(sa.func.count()).select_from(send_job)
            assert conn.execute(count.where(send_job.c.campaign == "twice")).scalar_one() == 6
            events = sa.select(sa.func.count()).select_from(send_event)
            assert conn.execute(events).scalar_one() == 6
    finally:
        with pg_engine.begin() as conn:
            empty_outbox(conn)


def test_batches_in_one_transaction_leave_nothing_in_the_staging_table(pg_engine: Engine) -> None:
    """Emptied by DELETE, the staging table kept every earlier batch's rows, dead, until the
    transaction ended, and each later batch's scans read them all again: a new version of
    100,000 jobs (one transaction) took 34 s, growing with the square of the audience. Emptied
    by TRUNCATE, it holds no page after a batch, however many came before."""
    store = OutboxStore("postgresql")
    size = sa.text(f"SELECT pg_relation_size('{bulk_enqueue.STAGE}')")
    try:
        with pg_engine.begin() as conn:
            for batch in range(5):
                jobs = [
                    _fresh(f"b{batch}-{i}", f"r{batch}-{i}", campaign="many") for i in range(200)
                ]
                assert store.enqueue(conn, jobs) == 200
                assert conn.execute(size).scalar_one() == 0, batch
            # Again, every key taken: the conflicting path empties it as well.
            assert store.enqueue(conn, jobs, replace_pending=True) == 0
            assert conn.execute(size).scalar_one() == 0
    finally:
        with pg_engine.begin() as conn:
            empty_outbox(conn)


def test_new_keys_go_in_without_on_conflict_and_a_taken_one_falls_back(
    pg_engine: Engine,
) -> None:
    """A batch of new keys is inserted by the plain statement; a batch holding a key already
    there rolls that attempt back and goes in with ON CONFLICT DO NOTHING, in the same
    transaction, which stays usable; its later batches (one mailbox twice here) go straight to
    ON CONFLICT, and the next transaction tries the plain statement again."""
    attempts: list[int | None] = []
    real = bulk_enqueue._insert_new

    def spying(conn: sa.Connection, cursor: Any) -> int | None:
        attempts.append(real(conn, cursor))
        return attempts[-1]

    store = OutboxStore("postgresql")
    count = sa.select(sa.func.count()).select_from(send_job)
    try:
        with mock.patch.object(bulk_enqueue, "_insert_new", spying), pg_engine.begin() as conn:
            assert store.enqueue(conn, [_fresh("o1", "m1"), _fresh("o2", "m2")]) == 2
            assert store.enqueue(conn, [_fresh("o3", "m3"), _fresh("o1", "m1")]) == 1
            assert store.enqueue(conn, [_fresh("o4", "m4"), _fresh("o5", "m4")]) == 1
            assert conn.execute(count).scalar_one() == 4
        assert attempts == [2, None]
        with mock.patch.object(bulk_enqueue, "_insert_new", spying), pg_engine.begin() as conn:
            assert store.enqueue(conn, [_fresh("o6", "m6")]) == 1
        assert attempts == [2, None, 1]
        with pg_engine.connect() as conn:
            keys = conn.execute(sa.select(send_job.c.key).order_by(send_job.c.id)).scalars()
            assert list(keys) == ["o1", "o2", "o3", "o4", "o6"]  # the first spelling keeps it
            journal = sa.select(sa.func.count()).select_from(send_event)
            assert conn.execute(journal).scalar_one() == 5
    finally:
        with pg_engine.begin() as conn:
            empty_outbox(conn)
