"""Migration 0009 (send_key) on a populated 0008 database.

Every job's key and mailbox identity move into send_key with the job's id; what exists is then
decided there: an old job's key, or another key for an old job's mailbox, enqueues nothing, as
before the upgrade. send_job's jobs are untouched, and on PostgreSQL send_job keeps no unique
index but its primary key. Downgrade restores send_job's unique indexes.
"""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.store import OutboxStore
from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to
from tests.integration.test_migration_0006 import downgrade_to
from tests.integration.test_migration_0007 import _job
from tests.support.before_0009 import enqueue_before_0009


def _unique_indexes(conn: sa.Connection, table: str) -> set[tuple[str, ...]]:
    inspector = sa.inspect(conn)
    found = {
        tuple(str(c) for c in index["column_names"])
        for index in inspector.get_indexes(table)
        if index["unique"]
    }
    found |= {
        tuple(str(c) for c in u["column_names"]) for u in inspector.get_unique_constraints(table)
    }
    return found


IDENTITY = ("campaign", "step", "occurrence_at", "mailbox", "mailbox_dup")


def test_0009_moves_keys_and_mailboxes_into_send_key(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0008")
    with bare_engine.begin() as conn:
        assert enqueue_before_0009(conn, [_job(i) for i in range(30)]) == 30
        conn.execute(sa.text("UPDATE send_job SET state = 'sent' WHERE id % 3 = 0"))
    with bare_engine.connect() as conn:
        before = conn.execute(sa.text("SELECT * FROM send_job ORDER BY id")).all()

    upgrade_to(bare_engine, "0009")
    store = OutboxStore(bare_engine.dialect.name)
    with bare_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT * FROM send_job ORDER BY id")).all() == before
        keyed = conn.execute(
            sa.text("SELECT key, job_id, campaign, step, mailbox, mailbox_dup FROM send_key")
        ).all()
        assert sorted(keyed) == sorted(
            (r.key, r.id, r.campaign, r.step, r.mailbox, r.mailbox_dup) for r in before
        )
        assert _unique_indexes(conn, "send_key") >= {IDENTITY}
        job_uniques = _unique_indexes(conn, "send_job")
        assert IDENTITY not in job_uniques
        if bare_engine.dialect.name == "postgresql":
            assert job_uniques == set()  # every transition used to re-insert into both
    with bare_engine.begin() as conn:
        # An old key, and a new key for an old job's mailbox: both exist already.
        same_key = _job(3)
        same_mailbox = replace(_job(4), key="f" * 64)
        assert store.enqueue(conn, [same_key, same_mailbox]) == 0
        assert store.enqueue(conn, [_job(30)]) == 1
    with bare_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM send_job")).scalar_one() == 31

    downgrade_to(bare_engine, "0008")
    with bare_engine.connect() as conn:
        assert IDENTITY in _unique_indexes(conn, "send_job")
        assert ("key",) in _unique_indexes(conn, "send_job")
        assert "send_key" not in sa.inspect(conn).get_table_names()
