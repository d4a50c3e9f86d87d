"""Opening the database for a use case: the engine, with the schema brought up to date
(writers), or an existing database that must already be current (read-only commands)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from dispatch.egress.redact import redact_url
from herald.db import create_engine
from herald.errors import DatabaseError
from herald.schema import HEAD_REVISION, current_revision, ensure_schema, upgrade
from herald.settings import parse_database_url

NO_DATABASE_HINT = (
    "wrong folder? set --database-url / HERALD_DATABASE_URL (or database_url in herald.toml);"
    " a new database is created by `herald launch` or `herald db upgrade`"
)


def open_engine(url: str) -> Engine:
    """An engine on ``url`` whose schema is current; DatabaseError if it cannot be reached.

    The caller disposes of it.
    """
    engine = create_engine(url)
    try:
        ensure_schema(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise _unreachable(url, exc) from exc
    return engine


def open_existing(url: str) -> Engine:
    """An engine on an existing Herald database whose schema is current; creates nothing.

    For read-only commands: run in the wrong folder, they must say so rather than create an
    empty ``herald.db`` there and report "no campaigns". DatabaseError (exit 1) for an absent
    SQLite file (naming its full path), a database without Herald's schema (an empty
    PostgreSQL database), or a schema at another revision than this Herald's.
    """
    parsed = parse_database_url(url)  # ConfigError for a malformed URL, before any file check
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and _is_file_path(database):
        path = Path(database).absolute()
        if not path.is_file():
            raise DatabaseError(f"no database at {path}", hint=NO_DATABASE_HINT)
    engine = create_engine(url)
    try:
        revision = current_revision(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise _unreachable(url, exc) from exc
    if revision is None:
        engine.dispose()
        raise DatabaseError(
            f"{redact_url(url)} is not a Herald database (it has no Herald schema)",
            hint=f"check the URL; {NO_DATABASE_HINT.split('; ')[1]}",
        )
    if revision != HEAD_REVISION:
        engine.dispose()
        raise DatabaseError(
            f"the database {redact_url(url)} is at schema revision {revision};"
            f" this Herald reads revision {HEAD_REVISION}",
            hint="run `herald db upgrade` (or upgrade Herald if the database is newer)",
        )
    return engine


def _is_file_path(database: str) -> bool:
    # ":memory:" and "file:" URIs (SQLite's own syntax) name no plain file to look for.
    return database != ":memory:" and not database.startswith("file:")


def _unreachable(url: str, exc: SQLAlchemyError) -> DatabaseError:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return DatabaseError(
        f"cannot open the database {redact_url(url)}: {detail}",
        hint="is the server running and the URL right?",
    )


def upgrade_database(engine: Engine) -> None:
    """Create or upgrade the schema to the current version (``herald db upgrade``)."""
    upgrade(engine)
