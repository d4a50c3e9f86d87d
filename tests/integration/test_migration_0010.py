"""Migration 0010 (enrollments by campaign, state and id) on a populated 0009 database: the
enrollments stay as they were, the index gains ``id`` as its third column, and downgrade
gives it back its two columns."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to
from tests.integration.test_migration_0006 import downgrade_to

ROWS = "SELECT * FROM enrollment ORDER BY id"


def _columns(conn: sa.Connection) -> list[str]:
    (index,) = [
        index
        for index in sa.inspect(conn).get_indexes("enrollment")
        if index["name"] == "ix_enrollment_state"
    ]
    return [str(column) for column in index["column_names"]]


def test_0010_orders_the_state_index_by_id_and_keeps_every_enrollment(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0009")
    with bare_engine.begin() as conn:
        for i in range(12):
            conn.execute(
                sa.text(
                    "INSERT INTO enrollment (campaign, mailbox, rotation, recipient, variables,"
                    " source, enrolled_at, state, next_step)"
                    " VALUES (:c, :m, 1, :m, '{}', 'audience', :at, :s, :n)"
                ),
                {
                    "c": f"c{i % 2}",
                    "m": f"p{i}@example.com",
                    "at": "2026-01-06 10:00:00",
                    "s": ("active", "done")[i % 3 == 0],
                    "n": i % 3,
                },
            )
    with bare_engine.connect() as conn:
        before = conn.execute(sa.text(ROWS)).all()
        assert _columns(conn) == ["campaign", "state"]

    upgrade_to(bare_engine, "0010")
    with bare_engine.connect() as conn:
        assert conn.execute(sa.text(ROWS)).all() == before
        assert _columns(conn) == ["campaign", "state", "id"]

    downgrade_to(bare_engine, "0009")
    with bare_engine.connect() as conn:
        assert conn.execute(sa.text(ROWS)).all() == before
        assert _columns(conn) == ["campaign", "state"]
