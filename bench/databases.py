"""Throw-away databases for one benchmark run: a fresh PostgreSQL database, or a temp SQLite file.

PostgreSQL is found the way the test suite finds it (``HERALD_TEST_PG_HOST``/``_PORT``, default
127.0.0.1:5432, user postgres, maintenance database ``test``). Every database made here is
dropped again, also when the benchmark fails.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.db import create_engine
from herald.schema import upgrade

PG_HOST = os.environ.get("HERALD_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("HERALD_TEST_PG_PORT", "5432"))
PG_ADMIN_DB = os.environ.get("HERALD_BENCH_PG_DB", "test")


def pg_url(database: str, driver: str = "postgresql") -> str:
    return f"{driver}://postgres@{PG_HOST}:{PG_PORT}/{database}"


def postgres_database(url: str) -> str | None:
    """The database name of a PostgreSQL URL made here; None for anything else."""
    if not url.startswith("postgresql"):
        return None
    return url.rsplit("/", 1)[1]


def postgres_reachable() -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            return True
    except OSError:
        return False


def admin_engine() -> Engine:
    return sa.create_engine(pg_url(PG_ADMIN_DB, "postgresql+psycopg"), isolation_level="AUTOCOMMIT")


def postgres_version() -> str:
    admin = admin_engine()
    try:
        with admin.connect() as conn:
            return str(conn.exec_driver_sql("SHOW server_version").scalar_one())
    finally:
        admin.dispose()


@contextmanager
def fresh_postgres(prefix: str = "herald_bench", *, migrate: bool = True) -> Iterator[str]:
    """A new PostgreSQL database, migrated to Herald's schema unless told not to; dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = admin_engine()
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = pg_url(name)
        if migrate:
            _migrate(url)
        yield url
    finally:
        admin.dispose()
        _drop(name)


def _drop(name: str, attempts: int = 10) -> None:
    """Drop ``name``, retrying while the server restarts (a fresh engine for every try)."""
    for attempt in range(attempts):
        admin = admin_engine()
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except sa.exc.OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
        finally:
            admin.dispose()


@contextmanager
def temp_sqlite() -> Iterator[str]:
    """A migrated SQLite database in a temporary directory, removed after."""
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'herald.db'}"
        _migrate(url)
        yield url


@contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    if backend == "postgresql":
        with fresh_postgres() as url:
            yield url
    else:
        with temp_sqlite() as url:
            yield url


def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
