"""Shared fixtures: a real database on SQLite *and* PostgreSQL, and a real SMTP server.

Every storage test takes ``db_url`` (or ``engine``) and so runs twice. Each test gets a fresh,
migrated database of its own, so tests stay independent, but the migrations run once per
session: a SQLite test gets a copy of a migrated template file, a PostgreSQL test a database
cloned from a migrated template database, or one an earlier test on the same xdist worker used,
emptied and renamed (tests/support/pg_pool.py: a clone costs the server far more).
Without a reachable PostgreSQL they are skipped with a reason, unless HERALD_REQUIRE_POSTGRES=1
(set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import Engine

from herald.db import create_engine
from herald.schema import upgrade
from tests.support.examples import QUICK, QUICK_DEFAULT_EXAMPLES
from tests.support.pg_cluster import (
    ClusterUnavailable,
    PrivateCluster,
    RestartableDatabase,
    private_cluster,
)
from tests.support.pg_pool import DatabasePool
from tests.support.smtp_server import LedgerSMTPServer

# The suite runs on several xdist workers beside other load: a property test's verdict must not
# depend on how fast an example runs. No per-example deadline (hypothesis' default of 200 ms
# fails a correct test on a busy machine) and no "data generation too slow" health check; the
# settings a test gives itself still apply on top.
settings.register_profile("herald", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# `make test` draws fewer examples per property test (tests/support/examples.py says how many);
# `make test-thorough` draws the full counts.
settings.register_profile(
    "herald-quick", settings.get_profile("herald"), max_examples=QUICK_DEFAULT_EXAMPLES
)
settings.load_profile("herald-quick" if QUICK else "herald")

PG_HOST = os.environ.get("HERALD_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("HERALD_TEST_PG_PORT", "5432"))
PG_ADMIN_URL = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/test"
TEMPLATE_DB = f"herald_tpl_{os.getpid()}"
# This worker's databases (tests/support/pg_pool.py), made by the pg_admin fixture.
_pool: DatabasePool | None = None


def _postgres_reachable() -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            return True
    except OSError:
        return False


def _without_postgres(reason: str) -> None:
    if os.environ.get("HERALD_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required (HERALD_REQUIRE_POSTGRES=1) but {reason}")
    pytest.skip(f"{reason}; PostgreSQL tests skipped")


def require_postgres() -> None:
    if not _postgres_reachable():
        _without_postgres(f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}")


# The folders of the longest tests (real processes, the chaos suite: tens of seconds each, up
# to minutes). They run first: a long test started near the end would run on alone while the
# other workers idle (longest first is the classic remedy). Order within each group is
# unchanged, so a package's tests stay together (tests/browser shares its world by package).
LONG_FIRST = ("tests/chaos/", "tests/processes/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long = [item for item in items if item.nodeid.startswith(LONG_FIRST)]
    short = [item for item in items if not item.nodeid.startswith(LONG_FIRST)]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = long + short if workers <= 1 else _dealt(long, short, workers)


def _dealt(long: list[pytest.Item], short: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order for ``workers`` xdist workers: each worker's share starts with its long tests.

    pytest-xdist's worksteal hands worker k the k-th contiguous slice of the collection (the
    first takes len // workers, the next len // (workers - 1) of the rest, ...) and an idle
    worker steals from the END of the busiest one's queue. With every long test at the front
    of the collection they were all in the first worker's slice, and ran one after another there
    (the others stole its short tail and then waited): the suite took about as long as the
    long tests end to end. Dealt round-robin to the head of every slice, they run side by
    side from the start and the short tests fill in behind them.
    """
    remaining = len(long) + len(short)
    sizes = []
    for k in range(workers):
        sizes.append(remaining // (workers - k))
        remaining -= sizes[-1]
    ordered: list[pytest.Item] = []
    rest = iter(short)
    for k, size in enumerate(sizes):
        heads = long[k::workers]
        ordered += heads
        ordered += [item for _, item in zip(range(size - len(heads)), rest, strict=False)]
    ordered += list(rest)
    return ordered


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
    global _pool
    _pool = DatabasePool(engine, TEMPLATE_DB, f"postgresql://postgres@{PG_HOST}:{PG_PORT}")
    yield engine
    _pool.close()
    _pool = None
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
    engine.dispose()


def _new_pg_database(admin: Engine) -> tuple[str, str]:
    """An empty, migrated database of the caller's own (``admin`` is the pg_admin fixture,
    which must be set up); give it back with ``_drop_pg_database``."""
    assert _pool is not None, "take the pg_admin fixture first"
    name = _pool.take()
    return name, _pool.url(name)


def _drop_pg_database(admin: Engine, name: str) -> None:
    """Done with ``name``: no one can reach it under that name any more (it is reset and kept
    for another test under a new name, or dropped)."""
    assert _pool is not None, "take the pg_admin fixture first"
    _pool.give_back(name)


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


def _sqlite_copy(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = tmp_path / "herald.db"
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    return f"sqlite:///{path}"


@contextmanager
def fresh_database(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database on ``backend`` ("sqlite" or "postgresql"), as ``db_url``'s."""
    if backend == "sqlite":
        yield _sqlite_copy(request, tmp_path)
        return
    admin = request.getfixturevalue("pg_admin")
    name, url = _new_pg_database(admin)
    try:
        yield url
    finally:
        _drop_pg_database(admin, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database URL; the test runs once per backend."""
    with fresh_database(request, request.param, tmp_path) as url:
        yield url


@pytest.fixture
def pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a migrated, empty PostgreSQL database of this test's own (PostgreSQL-only
    tests: the committer's lanes, COPY)."""
    with fresh_database(request, "postgresql", tmp_path) as url:
        engine = create_engine(url)
        yield engine
        engine.dispose()


@pytest.fixture(scope="module")
def pg_engine(pg_admin: Engine) -> Iterator[Engine]:
    """An engine on a PostgreSQL database the whole module shares (property tests whose every
    example empties what it wrote)."""
    name, url = _new_pg_database(pg_admin)
    engine = create_engine(url)
    yield engine
    engine.dispose()
    _drop_pg_database(pg_admin, name)


@pytest.fixture
def private_pg() -> Iterator[PrivateCluster]:
    """A PostgreSQL cluster of this test's own (tests/support/pg_cluster.py), for a test that
    restarts the server: restarting the shared one would break the tests running beside it."""
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(private_cluster())
        except ClusterUnavailable as exc:
            _without_postgres(str(exc))
        yield cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def restartable_db(request: pytest.FixtureRequest, tmp_path: Path) -> RestartableDatabase:
    """Like ``db_url``, but on PostgreSQL the database lives in a private cluster that the test
    may restart (``restart()``) without disturbing any other test."""
    if request.param == "sqlite":
        return RestartableDatabase(_sqlite_copy(request, tmp_path), None)
    cluster: PrivateCluster = request.getfixturevalue("private_pg")
    admin = sa.create_engine(
        cluster.url().replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.exec_driver_sql('CREATE DATABASE "herald"')
    admin.dispose()
    engine = create_engine(cluster.url("herald"))
    upgrade(engine)
    engine.dispose()
    return RestartableDatabase(cluster.url("herald"), cluster.restart)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = create_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where connections are refused: bound but never listening, and held
    for the whole test. A probe closed before use would leave the port free for another test
    (xdist runs them side by side) to start a server on, and the refusal would become a reply."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[LedgerSMTPServer]:
    server = LedgerSMTPServer(tmp_path / "ledger.txt")
    server.start()
    yield server
    server.stop()
