"""A drip pass costs its own page of enrollments, not all of them, even before any ANALYZE.

Herald plans generically on PostgreSQL (herald.db), and a drip's launch enrolls its whole
audience long before autovacuum analyses the table. Two statements were then planned as scans
of every active enrollment, once per page of 500, so a pass grew with the square of the drip
(a 20,000-recipient launch spent 5 of its 10 s there):
- the guarded UPDATE that moves a page's enrollments (``id IN (…) AND state = …``) took the
  state index and tested each active enrollment against the page's ids; the batch's ids are
  now one bound array (``id = ANY(:ids)``), read by primary key;
- the page itself (``campaign = … AND state = … AND id > … ORDER BY id LIMIT 500``) read and
  sorted every active enrollment to keep 500; the index on (campaign, state) has ``id`` as its
  third column since migration 0010, so a page is one ordered range of it. The page now holds
  only the enrollments whose wait ended (``scheduler.drip_ready``), each found by probes of
  send_key's and send_job's indexes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple
from dispatch.store import OutboxStore
from scheduler.drip_ready import ReadyPages
from scheduler.enrollment_store import EnrollmentStore, NewEnrollment
from tests.support.outboxes import new_job
from tests.support.plans import generic_plans

ENROLLMENTS = 3000
PAGE = 100
AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)


def _unanalysed(engine: Engine) -> EnrollmentStore:
    """3,000 active enrollments on PostgreSQL, in a table autovacuum never analyses."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL planner choice")
    store = EnrollmentStore("postgresql")
    entries = [
        NewEnrollment(f"p{i}@example.com", f"p{i}@example.com", None, {}, None, "audience")
        for i in range(ENROLLMENTS)
    ]
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE enrollment SET (autovacuum_enabled = false)")
        store.enroll(conn, "drip", entries, enrolled_at=AT)
    return store


def test_a_pass_reads_and_moves_its_pages_by_index(engine: Engine) -> None:
    store = _unanalysed(engine)
    pages = ReadyPages()
    with engine.connect() as conn:
        after, moved, finished = 0, 0, 0
        for _ in range(8):  # prepared at the sixth
            with conn.begin():
                page = pages.page(conn, "drip", ["welcome"], after_id=after, limit=PAGE)
                after = page[-1].id
                half = len(page) // 2
                store.lock(conn, [row.id for row in page])
                moved += len(store.advance_many(conn, [(r.id, r.next_step) for r in page[:half]]))
                finished += len(store.finish_many(conn, [r.id for r in page[half:]], "done"))
        read = generic_plans(conn, "SELECT enrollment.id, enrollment.campaign,%LIMIT%")
        locks = generic_plans(conn, "SELECT enrollment.id%FOR UPDATE%")
        updates = generic_plans(conn, "UPDATE enrollment %")
        conn.rollback()
    assert (moved, finished) == (400, 400)
    assert read
    for plan in read:  # one ordered range of (campaign, state, id): no sort of them all
        assert "ix_enrollment_state" in plan, plan
        assert "Sort" not in plan, plan
    assert locks
    assert len(updates) == 2  # the advance and the finish
    for plan in locks + updates:  # the batch's ids, by primary key
        assert "enrollment_pkey" in plan, plan
        assert "ix_enrollment_state" not in plan, plan
        assert "Seq Scan on enrollment" not in plan, plan


def test_a_ready_page_probes_each_previous_job_by_index(engine: Engine) -> None:
    """The page that lets through only the enrollments whose wait ended probes send_key's
    unique index and send_job's primary key once per enrollment (a SubPlan), never a join that
    reads all of either."""
    _unanalysed(engine)
    pages, outbox = ReadyPages(), OutboxStore("postgresql")
    with engine.begin() as conn:
        for table in ("send_job", "send_key"):
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        conn.exec_driver_sql("UPDATE enrollment SET next_step = 1")
        jobs = [
            replace(
                new_job(KeyTuple("drip", "welcome", AT, mailbox).key(), AT, campaign="drip"),
                step="welcome",
                recipient=mailbox,
                mailbox=mailbox,
            )
            for mailbox in (f"p{i}@example.com" for i in range(ENROLLMENTS))
        ]
        outbox.enqueue(conn, jobs)
        conn.exec_driver_sql("UPDATE send_job SET state = 'sent' WHERE id %% 2 = 0")
    with engine.connect() as conn:
        after, read = 0, 0
        for _ in range(8):  # prepared at the sixth
            page = pages.page(conn, "drip", ["welcome", "tips"], after_id=after, limit=PAGE)
            after, read = page[-1].id, read + len(page)
        plans = generic_plans(conn, "SELECT enrollment.id, enrollment.campaign,%count(*)%")
        conn.rollback()
    assert read == 8 * PAGE
    assert plans
    for plan in plans:
        assert "ix_enrollment_state" in plan, plan  # the page: one ordered range
        assert "SubPlan" in plan, plan  # each enrollment: its own probes
        assert "ux_send_key_mailbox" in plan, plan
        assert "send_job_pkey" in plan, plan
        assert "Sort" not in plan, plan
        assert "Seq Scan" not in plan, plan
        assert "Hash" not in plan, plan
