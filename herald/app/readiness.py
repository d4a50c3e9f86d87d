"""Use case ``not_ready``: why this process should not be sent work yet, if it should not.

Ready means the database answers and its schema is the one this Herald expects (a database
upgraded by a newer Herald, or not yet upgraded for this one, would answer and then fail).
``herald serve``'s ``/readyz`` answers with it; ``/healthz`` only says the process is alive.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from herald.schema import HEAD_REVISION, current_revision

MAX_DETAIL = 200  # one short line for a probe's log, never a traceback


def not_ready(engine: Engine) -> str | None:
    """None when ready, else a short reason."""
    gone = _sqlite_file_gone(engine)
    if gone is not None:
        return f"the database file {gone} is gone"
    try:
        revision = current_revision(engine)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip()
        first = detail.splitlines()[0] if detail else type(exc).__name__
        return f"database not answering: {first[:MAX_DETAIL]}"
    if revision != HEAD_REVISION:
        return f"schema at {revision or 'none'}, this Herald needs {HEAD_REVISION}"
    return None


def _sqlite_file_gone(engine: Engine) -> str | None:
    """An SQLite file removed under a running process: its pooled connections still answer
    from the deleted file, which no other process sees (a new one would start empty)."""
    url = engine.url
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or Path(database).exists():
        return None
    return database
