"""A Herald older than its database (a host missed a rolling upgrade) stops with one line and
exit 2, instead of Alembic's traceback about a revision it cannot find."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.schema import HEAD_REVISION, SchemaTooNew, ensure_schema
from tests.support.factories import run_herald


def set_revision(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def test_a_newer_schema_is_refused_and_left_alone(engine: Engine, db_url: str) -> None:
    newer = f"{int(HEAD_REVISION) + 1:04d}"
    set_revision(engine, newer)
    with pytest.raises(SchemaTooNew) as raised:
        ensure_schema(engine)
    assert newer in raised.value.message
    assert raised.value.exit_code == 2
    result = run_herald("worker", "--until-idle", "--database-url", db_url)
    assert result.returncode == 2
    assert f"revision {newer}, newer than this Herald's" in result.stderr
    assert "Traceback" not in result.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == newer


def test_the_current_schema_is_accepted(engine: Engine) -> None:
    ensure_schema(engine)  # no error, nothing to do
