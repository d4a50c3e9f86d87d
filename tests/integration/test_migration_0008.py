"""Migration 0008 (the partial index on exhausted pending jobs) on a populated 0007 database:
the jobs stay as they were, the index exists after upgrade, and downgrade removes it."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.store import OutboxStore
from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to
from tests.integration.test_migration_0006 import downgrade_to
from tests.integration.test_migration_0007 import _job
from tests.support.before_0009 import enqueue_before_0009


def _indexes(conn: sa.Connection) -> set[str]:
    return {str(index["name"]) for index in sa.inspect(conn).get_indexes("send_job")}


def test_0008_adds_the_exhausted_index_and_keeps_every_job(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0007")
    store = OutboxStore(bare_engine.dialect.name)
    with bare_engine.begin() as conn:
        assert enqueue_before_0009(conn, [_job(i) for i in range(20)]) == 20
        conn.execute(
            sa.text("UPDATE send_job SET send_attempts = max_send_attempts WHERE id % 4 = 0")
        )
    with bare_engine.connect() as conn:
        before = conn.execute(sa.text("SELECT * FROM send_job ORDER BY id")).all()
        assert "ix_send_job_exhausted" not in _indexes(conn)

    upgrade_to(bare_engine, "0008")
    with bare_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT * FROM send_job ORDER BY id")).all() == before
        assert "ix_send_job_exhausted" in _indexes(conn)
    with bare_engine.begin() as conn:
        assert store.recover(conn, grace_seconds=0, actor="r").dead == 5

    downgrade_to(bare_engine, "0007")
    with bare_engine.connect() as conn:
        assert "ix_send_job_exhausted" not in _indexes(conn)
