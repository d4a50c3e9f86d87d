"""The claim reads the due index in order, even on a backlog PostgreSQL has no statistics for.

Without statistics (every launch, until autovacuum analyses the table) the planner estimates a
handful of pending rows and prefers a bitmap scan plus a sort: a plan that reads and sorts the
WHOLE backlog to lease a few rows, on every claim. The claim must never be planned that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from dispatch.states import State
from dispatch.store import Completion, NewJob, OutboxStore
from herald.db import POOLER_VARIABLE, create_engine
from tests.support.outboxes import new_job
from tests.support.plans import explained

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _jobs(count: int) -> Iterator[NewJob]:
    for i in range(count):
        # few rows a page: a backlog of many pages
        yield new_job(f"{i:064d}", EPOCH, payload=b"x" * 1800)


def _unanalysed_backlog(engine: Engine) -> OutboxStore:
    """4,000 pending jobs on PostgreSQL, in a table autovacuum never analyses."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL planner choice")
    store = OutboxStore("postgresql")
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE send_job SET (autovacuum_enabled = false)")
        store.enqueue(conn, list(_jobs(4000)))
    return store


def test_claim_never_sorts_the_backlog(engine: Engine) -> None:
    store = _unanalysed_backlog(engine)
    the_claim = explained(engine, lambda statement: "FOR UPDATE SKIP LOCKED" in statement)
    with the_claim as plans, engine.begin() as conn:
        claimed = store.claim(conn, owner="w", limit=50, lease_seconds=60)
        after = conn.exec_driver_sql(
            "SELECT current_setting('enable_sort'), current_setting('enable_bitmapscan')"
        ).one()
    assert [job.key for job in claimed] == [f"{i:064d}" for i in range(50)]
    (plan,) = plans
    assert "ix_send_job_due" in plan, plan
    assert "Sort" not in plan, plan
    assert "Bitmap" not in plan, plan
    assert tuple(after) == ("on", "on")  # the rest of the transaction is planned as usual


def test_prepared_outbox_statements_are_planned_once_and_well(engine: Engine) -> None:
    """Herald's PostgreSQL connections plan a prepared statement once, not at every execution
    (herald.db._generic_plans). The claim, T4 and T5, prepared by psycopg at their sixth run
    on a connection, must then run one generic plan each, good for any parameters: the claim
    reads the due index in order, T4 and T5 find their jobs by primary key, and none reads or
    sorts the table."""
    store = _unanalysed_backlog(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "force_generic_plan"
        conn.rollback()
        for _ in range(8):
            with conn.begin():
                leases = [
                    job.lease for job in store.claim(conn, owner="w", limit=5, lease_seconds=60)
                ]
                store.start_sends(conn, leases, margin_seconds=1, actor="w")
                outcomes = [Completion(lease, State.SENT, 250, "ok") for lease in leases]
                store.complete(conn, outcomes, actor="w")
        prepared = conn.exec_driver_sql(
            "SELECT name, statement, cardinality(parameter_types), generic_plans, custom_plans"
            " FROM pg_prepared_statements WHERE statement LIKE '%%send_job%%'"
        ).all()
        plans = {}
        for name, statement, parameters, generic, custom in prepared:
            assert (generic >= 1, custom) == (True, 0), (statement, generic, custom)
            # Without values: a generic plan holds for any (NULL stands for each parameter).
            arguments = f"({', '.join(['NULL'] * parameters)})" if parameters else ""
            rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE {name}{arguments}").all()
            plans[statement] = "\n".join(row[0] for row in rows)
        conn.rollback()
    assert len(plans) == 3, list(plans)  # the claim, T4 and T5
    for statement, plan in plans.items():
        assert "Seq Scan on send_job" not in plan, plan
        assert "Sort" not in plan, plan
        assert "Bitmap" not in plan, plan
        if "FOR UPDATE SKIP LOCKED" in statement:
            assert "Index Scan using ix_send_job_due" in plan, plan
        else:
            assert "Index Scan using send_job_pkey" in plan, plan


def test_through_a_transaction_pooler_nothing_is_set_in_the_session(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction pooler hands each transaction to any server session: Herald neither
    prepares there nor sets anything a session would keep (herald.db)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL setting")
    monkeypatch.setenv(POOLER_VARIABLE, "transaction")
    pooled = create_engine(db_url)
    try:
        with pooled.connect() as conn:
            assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "auto"
    finally:
        pooled.dispose()


def test_sqlite_claim_reads_the_due_index_in_order(engine: Engine) -> None:
    """SQLite has no statistics either: unhinted, it searched the state index and sorted every
    pending row on every claim, and found the picked rows by scanning that index again."""
    if engine.dialect.name != "sqlite":
        pytest.skip("a SQLite planner choice")
    store = OutboxStore("sqlite")
    with engine.begin() as conn:
        store.enqueue(conn, list(_jobs(400)))
    plans: list[str] = []

    def explain(conn: sa.Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "ORDER BY send_job.not_before" in statement:  # the claim, planned as it is about to run
            cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                rows = cur.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
            finally:
                cur.close()
            plans.append("\n".join(str(row[-1]) for row in rows))

    event.listen(engine, "before_cursor_execute", explain)
    try:
        with engine.begin() as conn:
            claimed = store.claim(conn, owner="w", limit=50, lease_seconds=60)
    finally:
        event.remove(engine, "before_cursor_execute", explain)
    assert [job.key for job in claimed] == [f"{i:064d}" for i in range(50)]
    (plan,) = plans
    assert "USING INDEX ix_send_job_due" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort of the backlog
    assert "ix_send_job_state_lease" not in plan, plan
    assert "SEARCH send_job USING INTEGER PRIMARY KEY" in plan, plan  # picked rows by rowid
