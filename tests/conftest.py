"""Shared fixtures: a real database on SQLite *and* PostgreSQL, and a real SMTP server.

Every storage test takes ``db_url`` (or ``engine``) and so runs twice. Each test gets a fresh,
migrated database of its own, so tests stay independent, but the migrations run once per
session: a SQLite test gets a copy of a migrated template file, a PostgreSQL test a database
cloned from a migrated template database. Cloning and dropping a PostgreSQL database costs a few
hundred milliseconds of the server's I/O, so a background thread clones the next test's database
while the current test runs and drops finished ones behind it (``PgDatabases``).
Without a reachable PostgreSQL they are skipped with a reason, unless HERALD_REQUIRE_POSTGRES=1
(set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


def _drop_pg_database(admin: Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PgDatabases:
    """Fresh template clones, made one ahead and dropped behind, on one background thread.

    A test still gets a database nobody else ever used, created from the migrated template
    before it starts; only the waiting moves off the test's path. If a background clone failed
    (the chaos suite restarts PostgreSQL), the clone is made again in the foreground; a failed
    drop is retried by the sweep at the end of the session.
    """

    def __init__(self, admin: Engine) -> None:
        self.admin = admin
        self.prefix = f"herald_t_{os.getpid()}_"
        self._numbers = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-clones")
        self._next: Future[tuple[str, str]] | None = None

    def _clone(self) -> tuple[str, str]:
        name = f"{self.prefix}{next(self._numbers)}"
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
        return name, f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{name}"

    def take(self) -> tuple[str, str]:
        ready, self._next = self._next, None
        made: tuple[str, str] | None = None
        if ready is not None:
            try:
                made = ready.result()
            except Exception:  # made again below, in the foreground, so a real error shows
                made = None
        if made is None:
            made = self._clone()
        self._next = self._pool.submit(self._clone)
        return made

    def give_back(self, name: str) -> None:
        self._pool.submit(self._drop_quietly, name)

    def _drop_quietly(self, name: str) -> None:
        try:
            _drop_pg_database(self.admin, name)
        except Exception:  # left for close()
            return

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self.admin.connect() as conn:
            leftover = conn.exec_driver_sql(
                "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (self.prefix,)
            ).scalars()
            names = list(leftover)
        for name in names:
            _drop_pg_database(self.admin, name)


@pytest.fixture(scope="session")
def pg_databases(pg_admin: Engine) -> Iterator[PgDatabases]:
    databases = PgDatabases(pg_admin)
    yield databases
    databases.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating takes ~60 ms, a copy ~1 ms)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "herald.db"
    engine = create_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database URL; the test runs once per backend."""
    if request.param == "sqlite":
        path = tmp_path / "herald.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    databases: PgDatabases = request.getfixturevalue("pg_databases")
    name, url = databases.take()
    yield url
    databases.give_back(name)


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
