"""Engine creation: SQLite (WAL, busy timeout, BEGIN IMMEDIATE) and PostgreSQL (psycopg 3)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError

from herald.errors import ConfigError

SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and select the psycopg 3 driver for them."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def create_engine(url: str, **kwargs: Any) -> Engine:
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError as exc:
        raise ConfigError(
            f"invalid database URL {url!r}",
            hint="use sqlite:///path/to/herald.db or postgresql://user@host:5432/db",
        ) from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    if backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return sa.create_engine(parsed, pool_pre_ping=True, **kwargs)
    raise ConfigError(
        f"unsupported database {backend!r} in {url!r}", hint="Herald runs on SQLite or PostgreSQL"
    )


def _sqlite_engine(url: sa.URL, **kwargs: Any) -> Engine:
    engine = sa.create_engine(
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so that we can BEGIN IMMEDIATE ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # FULL: a committed T4 must survive a host crash before the message goes out.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # IMMEDIATE takes the write lock up front. A deferred transaction that reads, then
        # writes, can fail with SQLITE_BUSY without waiting when another process writes first.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
