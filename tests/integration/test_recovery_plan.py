"""Recovery's R3 (pending jobs with nothing left to spend) reads the small partial
ix_send_job_exhausted (migration 0008), never every pending job, on SQLite and PostgreSQL; and
it still finds both kinds of exhausted job among a backlog with budget left."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.store import NewJob, OutboxStore
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _jobs(count: int) -> Iterator[NewJob]:
    for i in range(count):
        yield new_job(f"{i:064d}", EPOCH, payload=b"x" * 1800)


def _plan(conn: Any, statement: str, params: Any, dialect: str) -> str:
    prefix = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(prefix + statement, params)
        return "\n".join(str(row[-1] if dialect == "sqlite" else row[0]) for row in cursor)
    finally:
        cursor.close()


def test_exhausted_pending_jobs_are_found_through_their_own_index(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.enqueue(conn, list(_jobs(3000)))
        # Two jobs out of budget among 3,000 with budget left: one out of attempts, one out of
        # claims (raw SQL: what retries and releases leave behind).
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.id == sa.select(sa.func.min(send_job.c.id)).scalar_subquery())
            .values(send_attempts=send_job.c.max_send_attempts)
        )
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.id == sa.select(sa.func.max(send_job.c.id)).scalar_subquery())
            .values(claims=send_job.c.max_claims)
        )
    plans: list[str] = []

    def explain(conn: sa.Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "UPDATE send_job" in statement and "'pending'" in statement:  # R3, literal source
            plans.append(_plan(conn, statement, params, engine.dialect.name))

    event.listen(engine, "before_cursor_execute", explain)
    try:
        with engine.begin() as conn:
            report = store.recover(conn, grace_seconds=0, actor="r")
    finally:
        event.remove(engine, "before_cursor_execute", explain)
    assert report.dead == 2
    assert sorted(why for _, _, why in report.details) == [
        "attempts exhausted",
        "claims exhausted: claimed too often without a send",
    ]
    assert len(plans) == 2, plans  # one statement per budget
    for plan in plans:
        assert "ix_send_job_exhausted" in plan, plan
