"""The PostgreSQL plans of the statements a piece of code runs, as it is about to run them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine


@contextmanager
def explained(engine: Engine, wanted: Callable[[str], bool]) -> Iterator[list[str]]:
    """Collects the EXPLAIN output of each statement ``wanted`` picks, planned with its own
    parameters on its own connection just before it runs."""
    plans: list[str] = []

    def explain(conn: sa.Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if wanted(statement):
            with conn.connection.dbapi_connection.cursor() as c:  # type: ignore[union-attr]
                c.execute("EXPLAIN " + statement, params)
                plans.append("\n".join(row[0] for row in c.fetchall()))

    event.listen(engine, "before_cursor_execute", explain)
    try:
        yield plans
    finally:
        event.remove(engine, "before_cursor_execute", explain)
