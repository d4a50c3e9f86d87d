"""Migration 0007 (partial send_job indexes on PostgreSQL) on a populated 0006 database.

The jobs, their states and every count stay as they were; on PostgreSQL the two indexes become
partial (and whole again on downgrade); SQLite keeps them whole.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.store import NewJob, OutboxStore
from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to
from tests.integration.test_migration_0006 import downgrade_to
from tests.support.before_0009 import enqueue_before_0009
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STATES = ["pending", "claimed", "sending", "sent", "failed", "cancelled", "in_doubt"]


def _job(i: int) -> NewJob:
    return new_job(f"{i:064d}", EPOCH, payload=b"x")


def _index_predicates(conn: sa.Connection) -> dict[str, str | None]:
    found = {}
    for index in sa.inspect(conn).get_indexes("send_job"):
        where = index.get("dialect_options", {}).get("postgresql_where")
        found[str(index["name"])] = None if where is None else str(where)
    return found


def test_0007_keeps_jobs_and_counts_and_makes_two_indexes_partial(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0006")
    store = OutboxStore(bare_engine.dialect.name)
    with bare_engine.begin() as conn:
        assert enqueue_before_0009(conn, [_job(i) for i in range(70)]) == 70
        # Every state, ten jobs each (raw SQL: the populated table an older Herald left).
        for n, state in enumerate(STATES):
            conn.execute(
                sa.text("UPDATE send_job SET state = :s WHERE id % 7 = :n"), {"s": state, "n": n}
            )
    with bare_engine.connect() as conn:
        before = sorted(store.counts(conn))
        rows_before = conn.execute(sa.text("SELECT id, state FROM send_job ORDER BY id")).all()
    assert sorted(n for _, _, _, n in before) == [10] * 7

    upgrade_to(bare_engine, "0007")
    with bare_engine.connect() as conn:
        assert sorted(store.counts(conn)) == before
        assert conn.execute(sa.text("SELECT id, state FROM send_job ORDER BY id")).all() == (
            rows_before
        )
        predicates = _index_predicates(conn)
    lease, campaign = (
        predicates["ix_send_job_state_lease"],
        predicates["ix_send_job_campaign_state"],
    )
    if bare_engine.dialect.name == "postgresql":
        assert lease is not None
        assert campaign is not None
        assert all(s in lease for s in ("claimed", "sending", "in_doubt", "failed"))
        assert "'sent'" not in lease
        assert "pending" not in lease
        assert "claimed" not in campaign
        assert "sending" not in campaign
    else:
        assert lease is None
        assert campaign is None

    downgrade_to(bare_engine, "0006")
    with bare_engine.connect() as conn:
        predicates = _index_predicates(conn)
        assert predicates["ix_send_job_state_lease"] is None
        assert predicates["ix_send_job_campaign_state"] is None
        assert sorted(store.counts(conn)) == before
