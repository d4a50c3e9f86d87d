"""Shared fixtures: a real database on SQLite *and* PostgreSQL, and a real SMTP server.

Every storage test takes ``db_url`` (or ``engine``) and so runs twice. Each test gets a fresh,
migrated database of its own, so tests stay independent, but the migrations run once per
session: a SQLite test gets a copy of a migrated template file, a PostgreSQL test a database
cloned from a migrated template database.
Without a reachable PostgreSQL they are skipped with a reason, unless HERALD_REQUIRE_POSTGRES=1
(set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.db import create_engine
from herald.schema import upgrade
from tests.support.smtp_server import LedgerSMTPServer

PG_HOST = os.environ.get("HERALD_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("HERALD_TEST_PG_PORT", "5432"))
PG_ADMIN_URL = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/test"
TEMPLATE_DB = f"herald_tpl_{os.getpid()}"


def _postgres_reachable() -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    if _postgres_reachable():
        return
    if os.environ.get("HERALD_REQUIRE_POSTGRES") == "1":
        pytest.fail(
            f"PostgreSQL required (HERALD_REQUIRE_POSTGRES=1) but {PG_HOST}:{PG_PORT} is down"
        )
    pytest.skip(f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}; PostgreSQL tests skipped")


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    require_postgres()
    engine = sa.create_engine(
        PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
        pool_pre_ping=True,  # the chaos suite restarts PostgreSQL under us
    )
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
        conn.exec_driver_sql(f'CREATE DATABASE "{TEMPLATE_DB}"')
    template = create_engine(f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{TEMPLATE_DB}")
    upgrade(template)
    template.dispose()
    yield engine
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
    engine.dispose()


def _new_pg_database(admin: Engine) -> tuple[str, str]:
    name = f"herald_t_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
    return name, f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{name}"


def _drop_pg_database(admin: Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating takes ~60 ms, a copy ~1 ms)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "herald.db"
    engine = create_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    # WAL mode: the last connection to close folds the log into the file; a copy of the file
    # alone is then the whole database.
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database URL; the test runs once per backend."""
    if request.param == "sqlite":
        path = tmp_path / "herald.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    admin = request.getfixturevalue("pg_admin")
    name, url = _new_pg_database(admin)
    yield url
    _drop_pg_database(admin, name)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = create_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[LedgerSMTPServer]:
    server = LedgerSMTPServer(tmp_path / "ledger.txt")
    server.start()
    yield server
    server.stop()
