"""The outbox's models describe the schema the migrations make: send_job's indexes, their
columns, uniqueness and (for the partial ones) predicates, on SQLite and PostgreSQL.

PostgreSQL's predicates are not passed to ``sa.Index`` (dispatch/models.py, POSTGRESQL_WHERE:
they would import SQLAlchemy's PostgreSQL dialect into every SQLite command); they are set where
PostgreSQL is used. So the models' tables are created beside the migrated ones (a second schema,
a second SQLite file) by ``create_all``, and each database shows both sets as it stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import POSTGRESQL_WHERE, metadata
from herald.db import create_engine

Shown = dict[str, tuple[tuple[str, ...], bool, str | None]]


def _indexes(conn: sa.Connection, schema: str | None = None) -> Shown:
    """send_job's and send_key's indexes, and their unique constraints (by columns: the
    constraints' names are the database's own)."""
    inspector = sa.inspect(conn)
    shown: Shown = {}
    for table in ("send_job", "send_key"):
        for index in inspector.get_indexes(table, schema=schema):
            options: dict[str, Any] = dict(index.get("dialect_options", {}))
            where = options.get(f"{conn.dialect.name}_where")
            columns = tuple(str(c) for c in index["column_names"])
            shown[f"{table}.{index['name']}"] = (columns, bool(index["unique"]), _text(where))
        for unique in inspector.get_unique_constraints(table, schema=schema):
            columns = tuple(str(c) for c in unique["column_names"])
            shown[f"{table} UNIQUE {columns}"] = (columns, True, None)
    return shown


def _text(where: Any) -> str | None:
    return None if where is None else " ".join(str(where).split())


def test_the_models_indexes_are_the_migrated_ones(engine: Engine, tmp_path: Path) -> None:
    with engine.connect() as conn:
        migrated = _indexes(conn)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE SCHEMA models")
            metadata.create_all(conn.execution_options(schema_translate_map={None: "models"}))
        with engine.connect() as conn:
            modelled = _indexes(conn, schema="models")
    else:
        models_engine = create_engine(f"sqlite:///{tmp_path / 'models.db'}")
        try:
            metadata.create_all(models_engine)
            with models_engine.connect() as conn:
                modelled = _indexes(conn)
        finally:
            models_engine.dispose()
    assert modelled == migrated
    if engine.dialect.name == "postgresql":  # the comparison did compare predicates
        assert {name for name, (_, _, where) in migrated.items() if where} == {
            f"send_job.{name}" for name in POSTGRESQL_WHERE
        }
    # Migration 0009: what makes a job exist is send_key's; SQLite keeps send_job's UNIQUE (key).
    assert modelled["send_key.ux_send_key_mailbox"][1]
    assert ("send_job UNIQUE ('key',)" in modelled) == (engine.dialect.name == "sqlite")
