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


def generic_plans(conn: sa.Connection, pattern: str) -> list[str]:
    """The generic plan of each statement this session prepared whose text is LIKE ``pattern``
    (psycopg prepares a statement at its sixth run; Herald's sessions then plan it once,
    generically: herald.db). Each must have been run with a generic plan at least once."""
    prepared = conn.exec_driver_sql(
        "SELECT name, statement, cardinality(parameter_types), generic_plans"
        " FROM pg_prepared_statements WHERE statement LIKE %(pattern)s",
        {"pattern": pattern},
    ).all()
    plans = []
    for name, statement, parameters, generic in prepared:
        assert generic >= 1, statement
        arguments = f"({', '.join(['NULL'] * parameters)})" if parameters else ""
        rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE {name}{arguments}").all()
        plans.append("\n".join(row[0] for row in rows))
    return plans
