"""Alembic environment: always run with a connection handed in by ``herald.schema``."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Two processes starting on a fresh database must not both create the tables.
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7243917)")
    context.run_migrations()
