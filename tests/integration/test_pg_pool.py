"""The reused PostgreSQL test databases (tests/support/pg_pool.py) start as a fresh clone would:
empty, sequences from 1, under a new name; a database a test changed otherwise is dropped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.store import OutboxStore
from tests.conftest import PG_HOST, PG_PORT, TEMPLATE_DB
from tests.support.outboxes import new_job
from tests.support.pg_pool import TABLES, DatabasePool


@pytest.fixture
def pool(pg_admin: Engine) -> Iterator[DatabasePool]:
    # A pool of this test's own: the session's pool may hold databases other tests gave back.
    own = DatabasePool(pg_admin, TEMPLATE_DB, f"postgresql://postgres@{PG_HOST}:{PG_PORT}")
    yield own
    own.close()


def engine_for(pool: DatabasePool, name: str) -> Engine:
    return sa.create_engine(
        pool.url(name).replace("postgresql://", "postgresql+psycopg://"),
        poolclass=sa.pool.NullPool,
    )


def use(pool: DatabasePool, name: str, *statements: str) -> None:
    """Jobs and their journal rows (sequences used), a temporary table, then ``statements``."""
    engine = engine_for(pool, name)
    with engine.begin() as conn:
        OutboxStore("postgresql").enqueue(
            conn, [new_job(f"k{i}", datetime.now(UTC)) for i in (1, 2)]
        )
        conn.exec_driver_sql("create temp table scratch (a int)")  # leaves a pg_temp schema
        for statement in statements:
            conn.exec_driver_sql(statement)
    engine.dispose()


def databases(pg_admin: Engine) -> set[str]:
    with pg_admin.connect() as conn:
        return set(conn.exec_driver_sql("select datname from pg_database").scalars())


def test_a_used_database_comes_back_empty_under_a_new_name(
    pool: DatabasePool, pg_admin: Engine
) -> None:
    first = pool.take()
    use(pool, first)
    pool.give_back(first)
    assert first not in databases(pg_admin)  # a leftover process cannot reach it any more
    assert len(pool.free) == 1

    second = pool.take()
    assert second != first
    engine = engine_for(pool, second)
    with engine.connect() as conn:
        tables = list(conn.exec_driver_sql(TABLES).scalars())
        assert "send_job" in tables
        for table in tables:
            assert conn.exec_driver_sql(f"select count(*) from {table}").scalar_one() == 0, table
        assert conn.exec_driver_sql("select count(*) from alembic_version").scalar_one() == 1
        used = conn.exec_driver_sql("select count(*) from pg_sequences where last_value > 0")
        assert used.scalar_one() == 0
    engine.dispose()
    use(pool, second)  # the same inserts work again from id 1
    pool.give_back(second)


@pytest.mark.parametrize(
    "change",
    [
        "alter table send_job add column extra int",
        "create index extra on send_job (recipient)",
        "alter sequence send_job_id_seq increment by 2",
        "create function extra() returns int language sql as 'select 1'",
        "analyze send_job",  # planner statistics: a clone has none
        "update alembic_version set version_num = 'other'",
    ],
)
def test_a_database_changed_beyond_its_rows_is_dropped(pool: DatabasePool, change: str) -> None:
    name = pool.take()
    use(pool, name, change)
    pool.give_back(name)
    assert pool.free == []  # dropped, not kept for the next test
