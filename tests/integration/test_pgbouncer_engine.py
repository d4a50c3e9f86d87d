"""``HERALD_DATABASE_POOLER``: how an operator says the database URL is a transaction pooler, what
it changes in the engine (psycopg never prepares), and the schema upgrade and the outbox through
a real PgBouncer in transaction mode (tests/support/pgbouncer.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.config_names import ENV_ONLY
from herald.db import POOLERS, create_engine, database_pooler
from herald.errors import ConfigError
from herald.schema import HEAD_REVISION, current_revision, upgrade
from tests.support.paths import HERALD
from tests.support.pgbouncer import PgBouncer, pgbouncer_for_test
from tests.support.serve_process import herald_env

POOLED = {"HERALD_DATABASE_POOLER": "transaction"}


@pytest.fixture
def bouncer(pg_admin: Engine) -> Iterator[PgBouncer]:
    with pgbouncer_for_test(str(pg_admin.url), pool_size=2) as running:
        yield running


def test_the_setting_reads_none_or_transaction_and_refuses_anything_else() -> None:
    assert database_pooler({}) == "none"
    assert database_pooler({"HERALD_DATABASE_POOLER": ""}) == "none"
    assert database_pooler({"HERALD_DATABASE_POOLER": "Transaction"}) == "transaction"
    assert database_pooler({"HERALD_DATABASE_POOLER": "none"}) == "none"
    with pytest.raises(ConfigError, match="'session' is not one of none, transaction"):
        database_pooler({"HERALD_DATABASE_POOLER": "session"})
    # `herald config` lists it with the same words (config_names imports nothing heavy).
    (setting,) = [s for s in ENV_ONLY if s.env == "HERALD_DATABASE_POOLER"]
    assert (setting.name, setting.default, setting.choices) == ("database_pooler", "none", POOLERS)


def _threshold(engine: Engine) -> object:
    with engine.connect() as conn:
        return conn.connection.dbapi_connection.prepare_threshold  # type: ignore[union-attr]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_through_a_transaction_pooler_psycopg_never_prepares(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERALD_DATABASE_POOLER", raising=False)
    direct = create_engine(db_url)
    monkeypatch.setenv("HERALD_DATABASE_POOLER", "transaction")
    pooled = create_engine(db_url, connect_args={"connect_timeout": 10})
    try:
        assert _threshold(direct) == 5  # psycopg's default: prepared from the sixth run
        assert _threshold(pooled) is None
        with pooled.connect() as conn:  # the caller's connect_args are kept
            info = conn.connection.dbapi_connection.info  # type: ignore[union-attr]
            assert info.get_parameters()["connect_timeout"] == "10"
    finally:
        direct.dispose()
        pooled.dispose()
    monkeypatch.setenv("HERALD_DATABASE_POOLER", "statement")
    with pytest.raises(ConfigError):
        create_engine(db_url)


def test_herald_config_shows_the_pooler_and_refuses_a_misspelt_one(tmp_path: Path) -> None:
    def config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(HERALD), "config", "--json"],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
            env=herald_env(env),
        )  # fmt: skip

    shown = config(POOLED)
    assert shown.returncode == 0, shown.stderr
    (row,) = [s for s in json.loads(shown.stdout)["settings"] if s["name"] == "database_pooler"]
    assert (row["value"], row["source"]) == ("transaction", "environment")
    (tmp_path / "herald.toml").write_text('database_pooler = "transactoin"\n')
    refused = config({})
    assert refused.returncode == 2
    assert "database_pooler must be one of none, transaction" in refused.stderr


def test_the_schema_is_created_through_the_pooler(pg_admin: Engine, bouncer: PgBouncer) -> None:
    """Migrations take a transaction-scoped advisory lock: fine through transaction pooling."""
    name = f"herald_pgb_{uuid.uuid4().hex[:10]}"
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = bouncer.url(str(pg_admin.url.set(database=name)))
        done = subprocess.run(
            [str(HERALD), "db", "upgrade", "--database-url", url],
            capture_output=True, text=True, timeout=120, check=False, env=herald_env(POOLED),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        direct = create_engine(str(pg_admin.url.set(database=name)))
        try:
            assert current_revision(direct) == HEAD_REVISION
            upgrade(direct)  # nothing left to do
        finally:
            direct.dispose()
    finally:
        with pg_admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("pooler", ["transaction", "none"])
def test_many_connections_share_two_server_sessions(
    db_url: str, bouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch, pooler: str
) -> None:
    """Eight threads, each with its own connection committing the same statement over and
    over, on two server sessions: no error with the setting; psycopg's prepared statements
    (from the sixth run) collide without it."""
    monkeypatch.setenv("HERALD_DATABASE_POOLER", pooler)
    engine = create_engine(bouncer.url(db_url), pool_size=8)
    errors: list[BaseException] = []
    query = sa.text("SELECT count(*) FROM send_job WHERE state = :state AND id > :id")

    def hammer() -> None:
        try:
            with engine.connect() as conn:
                for i in range(60):
                    conn.execute(query, {"state": "pending", "id": i}).scalar_one()
                    conn.commit()  # a commit keeps psycopg's counts (a rollback clears them)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        engine.dispose()
    if pooler == "transaction":
        assert errors == []
    else:
        assert errors, "no prepared statement ever met another session"
        assert all("prepared statement" in str(exc) for exc in errors), errors
    database = sa.make_url(db_url).database
    servers = [s for s in bouncer.admin("SHOW SERVERS") if s["database"] == database]
    assert 0 < len(servers) <= 2
