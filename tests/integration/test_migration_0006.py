"""Migration 0006 (deliverability) on a database an older Herald filled, SQLite and PostgreSQL.

Existing suppressions become global ones (they stopped every campaign before, and still do);
the downgrade folds scoped rows back into one row per mailbox; the new tables exist and are
empty.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Engine

from herald.schema import alembic_config
from tests.integration.test_migration_0003 import bare_engine as bare_engine
from tests.integration.test_migration_0003 import upgrade_to


def downgrade_to(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_0006_keeps_old_suppressions_as_global(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0005")
    with bare_engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO suppression (address, reason) VALUES (:a, :r)"),
            [{"a": "ann@example.org", "r": "asked by phone"}, {"a": "bob@example.org", "r": "x"}],
        )
    upgrade_to(bare_engine, "0006")
    with bare_engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT address, scope, reason, source FROM suppression ORDER BY address")
        ).all()
        assert [tuple(r) for r in rows] == [
            ("ann@example.org", "global", "asked by phone", "manual"),
            ("bob@example.org", "global", "x", "manual"),
        ]
        for table in ("rate_limit", "relay_status", "mail_feedback"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 0
        columns = {c["name"] for c in sa.inspect(conn).get_columns("send_job")}
        assert "list_scope" in columns
        assert "pause_reason" in {c["name"] for c in sa.inspect(conn).get_columns("campaign")}


def test_0006_one_mailbox_may_be_suppressed_in_several_scopes(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0006")
    insert = sa.text("INSERT INTO suppression (address, scope, reason) VALUES (:a, :s, :r)")
    with bare_engine.begin() as conn:
        conn.execute(insert, {"a": "ann@example.org", "s": "global", "r": "bounce"})
        conn.execute(insert, {"a": "ann@example.org", "s": "list:news", "r": "unsubscribe"})
    with pytest.raises(sa.exc.IntegrityError), bare_engine.begin() as conn:
        conn.execute(insert, {"a": "ann@example.org", "s": "list:news", "r": "again"})
    downgrade_to(bare_engine, "0005")
    with bare_engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT address FROM suppression")).all()
        assert [r.address for r in rows] == ["ann@example.org"]
