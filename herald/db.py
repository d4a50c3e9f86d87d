"""Engine creation: SQLite (WAL, busy timeout, BEGIN IMMEDIATE) and PostgreSQL (psycopg 3,
directly or through a transaction pooler)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from herald.errors import ConfigError, DatabaseError
from herald.settings import normalise_database_url, parse_database_url

SQLITE_BUSY_TIMEOUT_MS = 30_000
POOLER_VARIABLE = "HERALD_DATABASE_POOLER"
# "none": Herald talks to PostgreSQL, or to a pooler in session mode (one server connection per
# client connection). "transaction": to a pooler in transaction mode (PgBouncer, pgcat, RDS
# Proxy, ...), where each transaction may run on another server connection.
POOLERS = ("none", "transaction")


_READ_ONLY = "herald_read_only"


def reading(engine: Engine) -> sa.Connection:
    """A connection for reads only (``with reading(engine) as conn:``).

    On SQLite every other transaction begins IMMEDIATE, i.e. takes the writer's lock even to
    read, and SQLite does not queue that lock: a reader polls with a growing back-off while a
    busy writer (a worker's group commits, a prune pass) commits and takes it again at once,
    so ``herald status`` or a dashboard page could wait many seconds. This one begins
    DEFERRED: in WAL mode a reader never waits and sees the last committed state. It must not
    write. On PostgreSQL it is a plain connection.
    """
    return engine.connect().execution_options(**{_READ_ONLY: True})


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and select the psycopg 3 driver for them."""
    return normalise_database_url(url)


def create_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; ConfigError (without the password) if the URL is malformed."""
    parsed = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    return _postgres_engine(parsed, database_pooler(), **kwargs)


def database_pooler(environ: Mapping[str, str] | None = None) -> str:
    """``HERALD_DATABASE_POOLER`` (``none`` when unset or empty); ConfigError for another word."""
    value = (os.environ if environ is None else environ).get(POOLER_VARIABLE, "").strip()
    if not value:
        return "none"
    if value.lower() not in POOLERS:
        raise ConfigError(
            f"{POOLER_VARIABLE}: {value!r} is not one of {', '.join(POOLERS)}",
            hint="'transaction' when HERALD_DATABASE_URL points at a pooler in transaction mode",
        )
    return value.lower()


def _postgres_engine(url: sa.URL, pooler: str, **kwargs: Any) -> Engine:
    if pooler == "transaction":
        # psycopg prepares a statement server-side the sixth time a connection runs it
        # (prepare_threshold=5), then only names it. A prepared statement lives in one server
        # session; a transaction pooler hands the next transaction to another session, where
        # the name does not exist ("prepared statement _pg3_0 does not exist"). PgBouncer
        # before 1.21, and 1.21+ without max_prepared_statements, cannot follow them: never
        # prepare. Herald keeps nothing else in a session between transactions (no SET,
        # LISTEN, temporary table, WITH HOLD cursor or session advisory lock).
        connect_args = {**kwargs.pop("connect_args", {}), "prepare_threshold": None}
        kwargs["connect_args"] = connect_args
    # The models' PostgreSQL-only index predicates, set where PostgreSQL is used (not at import:
    # they import SQLAlchemy's PostgreSQL dialect; dispatch/models.py).
    from dispatch.models import with_postgresql_predicates

    with_postgresql_predicates()
    engine = sa.create_engine(url, pool_pre_ping=True, **kwargs)
    if pooler == "none":
        event.listen(engine, "connect", _generic_plans)
        event.listen(engine, "connect", _bounded_idle_transactions)
    return engine


# plan_cache_mode appeared in PostgreSQL 12; an older server keeps its default.
_PLAN_CACHE_MODE_SINCE = 120000


def _generic_plans(dbapi_connection: Any, _record: Any) -> None:
    """Plan a prepared statement once, not at every execution.

    psycopg prepares a statement the sixth time a connection runs it. PostgreSQL then plans
    it for its parameters at each of the next five executions, and afterwards only when a
    generic plan looks dearer: for T4 and T5 (an UPDATE joined to ``unnest`` of bound arrays)
    it always did, so they were planned afresh at every execution (35 of 35 in a test), about
    a third of the server CPU of a worker whose transactions each carry a few SMTP-paced sends
    (bench/profiles/smtp.md, "Planning every transaction"). Their generic plans are the ones
    the planner picks for any parameters: the claim reads the due index (its predicate is a
    literal), T4 and T5 find their jobs by primary key (tests/integration/test_claim_plan.py).
    Other commands rarely run a statement six times on one connection. Not through a
    transaction pooler: there nothing is prepared, and nothing may be kept in a session.
    """
    if dbapi_connection.info.server_version < _PLAN_CACHE_MODE_SINCE:
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    dbapi_connection.commit()


# A Herald session left this long inside a transaction without a word is ended by the server
# (``_bounded_idle_transactions``). Herald runs a transaction's statements back to back; the
# longest pauses inside one are a fan-out reading or composing its next batch, well under a
# second.
IDLE_IN_TRANSACTION_TIMEOUT = "2min"
_IDLE_TIMEOUT_SINCE = 90600  # PostgreSQL 9.6


def _bounded_idle_transactions(dbapi_connection: Any, _record: Any) -> None:
    """End a frozen process's transaction, unless the server already decides when.

    A process frozen in the middle of a transaction (stopped, swapped out, its VM paused) keeps
    the rows it wrote locked until it resumes or its connection dies. Recovery and claims skip
    locked rows, but what needs those very rows waits: the process's own jobs, other workers'
    sends under a rate limit whose slot it was taking, an operator's command on its jobs. With
    ``idle_in_transaction_session_timeout`` the server ends such a transaction; the process
    finds it gone when it resumes and goes on as after a lost connection
    (tests/integration/test_committer_idle_timeout.py). Set only when the server's setting for
    this session is 0 (off): a value the operator gave the role or database is kept. Not
    through a transaction pooler, where nothing may be kept in a session: there the role's
    setting does it (docs/operations/postgresql.md, "A frozen worker").
    """
    if dbapi_connection.info.server_version < _IDLE_TIMEOUT_SINCE:
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)"
            " WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
            (IDLE_IN_TRANSACTION_TIMEOUT,),
        )
    dbapi_connection.commit()


def _precreate_private(url: sa.URL) -> None:
    """Create a new SQLite database file 0600 before SQLite does (it would use 0644 & ~umask).

    The file holds every rendered message and audience snapshot. SQLite gives the -wal, -shm
    and -journal files the mode of the database file, so they are private too. An existing
    file keeps its mode: it is the operator's.
    """
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise DatabaseError(
            f"cannot create the database file {database}: {exc.strerror}",
            hint="check that its directory exists and is writable",
        ) from None
    os.close(fd)


def _sqlite_engine(url: sa.URL, **kwargs: Any) -> Engine:
    _precreate_private(url)
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
        if connection.get_execution_options().get(_READ_ONLY):
            # A WAL reader never waits for the writer and sees the last commit (reading()).
            connection.exec_driver_sql("BEGIN DEFERRED")
            return
        # IMMEDIATE takes the write lock up front. A deferred transaction that reads, then
        # writes, can fail with SQLITE_BUSY without waiting when another process writes first.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
