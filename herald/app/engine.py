"""Opening the database for a use case: the engine, with the schema brought up to date."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from dispatch.egress.redact import redact_url
from herald.db import create_engine
from herald.errors import DatabaseError
from herald.schema import ensure_schema, upgrade


def open_engine(url: str) -> Engine:
    """An engine on ``url`` whose schema is current; DatabaseError if it cannot be reached.

    The caller disposes of it.
    """
    engine = create_engine(url)
    try:
        ensure_schema(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseError(
            f"cannot open the database {redact_url(url)}: {detail}",
            hint="is the server running and the URL right?",
        ) from exc
    return engine


def upgrade_database(engine: Engine) -> None:
    """Create or upgrade the schema to the current version (``herald db upgrade``)."""
    upgrade(engine)
