"""The SQL forms that differ between PostgreSQL and SQLite, as one strategy object.

PostgreSQL gets constant-shape batched statements: a batch of leases is ``unnest``-ed arrays
joined by primary key, and a transition and its journal rows are ONE statement (a
data-modifying CTE). SQLite has neither arrays nor data-modifying CTEs: a batch is one bound
JSON text read with ``json_each`` (constant SQL, so both statement caches hit; SQLite ≥ 3.38),
falling back to an ``(id, token) IN (…)`` list with per-row ``CASE`` values on older SQLite, and
the journal is a second statement in the same transaction. Everything else in the outbox is
written once, for both.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from dispatch.models import send_event
from dispatch.outbox.jobs import Lease
from dispatch.outbox.sqlcore import J, JournalRow, journal, leases_in
from dispatch.states import State, Transition


@dataclass(frozen=True)
class Column:
    type_: Any
    values: Mapping[int, Any]  # job id -> value


class LeaseBatch(Protocol):
    """Many leases, each with its own values, addressable from one UPDATE."""

    def where(self) -> sa.ColumnElement[bool]: ...
    def value(self, name: str) -> Any: ...
    def params(self) -> dict[str, Any]: ...


class SqlForms(Protocol):
    name: str

    def insert(self, table: sa.Table) -> Any: ...
    def greatest(self, a: Any, b: Any) -> Any: ...
    def picked(self, due: sa.Select[Any]) -> sa.ColumnElement[bool]: ...
    def filter_only(self, term: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]: ...
    def in_index_order(self, conn: sa.Connection) -> AbstractContextManager[None]: ...
    def batch(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> LeaseBatch: ...
    def journalled(
        self,
        conn: sa.Connection,
        update: sa.Update,
        transition: Transition,
        *,
        actor: str,
        returning: Sequence[Any] = (),
        batch: LeaseBatch | None = None,
        detail: Mapping[int, str] | None = None,
        source: State | None = None,
    ) -> list[Any]: ...


# ------------------------------------------------------------------------------------ PostgreSQL


class _UnnestBatch:
    """``unnest(:v_id, :v_token, :v_a, …) AS v(id, token, a, …)`` joined on (id, token)."""

    def __init__(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> None:
        types = {"id": sa.BigInteger(), "token": sa.BigInteger()}
        types.update({name: c.type_ for name, c in columns.items()})
        fn = sa.func.unnest(
            *[sa.bindparam(f"v_{n}", type_=postgresql.ARRAY(t)) for n, t in types.items()]
        )
        self.v = fn.table_valued(*[sa.column(n, t) for n, t in types.items()]).render_derived(
            name="v"
        )
        self._params: dict[str, Any] = {
            "v_id": [i for i, _ in leases],
            "v_token": [t for _, t in leases],
        }
        for name, column in columns.items():
            self._params[f"v_{name}"] = [column.values[i] for i, _ in leases]

    def where(self) -> sa.ColumnElement[bool]:
        return sa.and_(J.id == self.v.c.id, J.lease_token == self.v.c.token)

    def value(self, name: str) -> Any:
        return self.v.c[name]

    def params(self) -> dict[str, Any]:
        return self._params


# The claim is planned as index lookups only (``PostgresForms.in_index_order``). The old values
# are read before set_config runs (a target list is evaluated left to right).
_INDEX_ONLY = sa.text(
    "SELECT current_setting('enable_sort') AS sort, current_setting('enable_bitmapscan') AS bitmap,"
    " set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)"
).columns(sa.column("sort", sa.String()), sa.column("bitmap", sa.String()))
_RESTORE = sa.text(
    "SELECT set_config('enable_sort', :sort, true), set_config('enable_bitmapscan', :bitmap, true)"
)


class PostgresForms:
    name = "postgresql"

    def insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def greatest(self, a: Any, b: Any) -> Any:
        return sa.func.greatest(a, b)

    def picked(self, due: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # A MATERIALIZED CTE is evaluated exactly once and joined by primary key.
        cte = due.cte("picked").prefix_with("MATERIALIZED")
        picked: sa.ColumnElement[bool] = J.id == cte.c.id
        return picked

    def filter_only(self, term: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]:
        return term  # the planner's statistics (and in_index_order) decide

    @contextmanager
    def in_index_order(self, conn: sa.Connection) -> Iterator[None]:
        """Plan the statements inside as index lookups: the claim reads the due index in order
        and joins the picked rows by primary key.

        Without statistics (a backlog enqueued since the last ANALYZE: every launch) the
        planner estimates a handful of pending rows, and a bitmap scan of the due index plus a
        sort looks as cheap as the ordered index scan. It is not: that plan reads and sorts the
        WHOLE backlog to lease 200 rows, on every claim (60 ms at 20,000 pending jobs, a
        quadratic drain; the ordered scan takes 0.3 ms); the same estimate can join each picked
        row to a bitmap scan of every pending row. Stale statistics taken before a big launch
        mislead it the same way, so this does not wait for autovacuum. The settings are
        transaction-local (``set_config(…, true)``: they work through a transaction-mode
        pooler) and restored right after the claim, so nothing else in the group commit's
        transaction is planned differently. Only costs: with no usable index PostgreSQL would
        still sort.
        """
        previous = conn.execute(_INDEX_ONLY).one()
        try:
            yield
        finally:
            conn.execute(_RESTORE, {"sort": previous.sort, "bitmap": previous.bitmap})

    def batch(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> LeaseBatch:
        return _UnnestBatch(leases, columns)

    def journalled(
        self,
        conn: sa.Connection,
        update: sa.Update,
        transition: Transition,
        *,
        actor: str,
        returning: Sequence[Any] = (),
        batch: LeaseBatch | None = None,
        detail: Mapping[int, str] | None = None,
        source: State | None = None,
    ) -> list[Any]:
        """The transition and its journal rows in ONE statement (data-modifying CTEs)."""
        if source is None:
            source = transition.source
        transition.check(source)
        detail_col = batch.value("detail") if batch is not None and detail is not None else None
        done = update.returning(
            J.id,
            J.lease_token,
            *returning,
            (sa.null() if detail_col is None else detail_col).label("detail"),
        ).cte("done")
        events = (
            sa.insert(send_event)
            .from_select(
                ["job_id", "token", "from_state", "to_state", "actor", "detail"],
                sa.select(
                    done.c.id,
                    done.c.lease_token,
                    sa.literal(source.value, sa.String()),
                    sa.literal(transition.target.value, sa.String()),
                    sa.bindparam("actor", type_=sa.String()),
                    sa.null() if detail_col is None else done.c.detail,
                ),
            )
            .cte("journal")
        )
        params = dict(batch.params()) if batch is not None else {}
        params["actor"] = actor
        return list(conn.execute(sa.select(done).add_cte(events), params))


# ------------------------------------------------------------------------------------ SQLite


class _InListBatch:
    """``(id, lease_token) IN (…)`` with a ``CASE id WHEN … THEN …`` per value column."""

    def __init__(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> None:
        self.leases = list(leases)
        self.columns = columns

    def where(self) -> sa.ColumnElement[bool]:
        return leases_in(self.leases)

    def value(self, name: str) -> Any:
        column = self.columns[name]
        return sa.case(
            {job_id: sa.literal(v, column.type_) for job_id, v in column.values.items()},
            value=J.id,
        )

    def params(self) -> dict[str, Any]:
        return {}


# One bound JSON text per batch: ``[[id, token, a, …], …]``. Values go through their column
# type's bind processing first (ForeignText shows NUL as ``\x00``), exactly as bound values do.
_SQLITE = sqlite.dialect()
# json_each/json_extract are built in from SQLite 3.38 (before, an optional extension).
JSON_BATCHES = sqlite3.sqlite_version_info >= (3, 38, 0)


class _JsonBatch:
    """``WITH v AS (SELECT json_extract(value, '$[0]') AS id, … FROM json_each(:batch))
    UPDATE … FROM v`` joined on (id, token): SQLite's ``unnest``. The SQL text depends only on
    the column names, so SQLAlchemy's compiled cache and sqlite3's statement cache both hit,
    and send_job is searched by primary key once per row of the batch."""

    def __init__(self, leases: Sequence[Lease], columns: Mapping[str, Column], text: str) -> None:
        names = ["id", "token", *columns]
        types: list[Any] = [sa.Integer(), sa.Integer(), *(c.type_ for c in columns.values())]
        each = sa.func.json_each(sa.bindparam("batch", type_=sa.String())).table_valued("value")
        self.v = (
            sa.select(
                *[
                    sa.type_coerce(
                        sa.func.json_extract(each.c.value, sa.literal_column(f"'$[{i}]'")), t
                    ).label(n)
                    for i, (n, t) in enumerate(zip(names, types, strict=True))
                ]
            )
            .select_from(each)
            # MATERIALIZED: without statistics SQLite would otherwise walk the state index (the
            # guard's ``state = ?``) and read the whole JSON for every row it finds; this way it
            # reads the batch once and searches send_job by rowid for each row.
            .cte("v")
            .prefix_with("MATERIALIZED")
        )
        self._params = {"batch": text}

    @classmethod
    def of(cls, leases: Sequence[Lease], columns: Mapping[str, Column]) -> _JsonBatch | None:
        """The batch, or None when a value has no JSON form (a non-finite float)."""
        processors = [
            c.type_.dialect_impl(_SQLITE).bind_processor(_SQLITE) for c in columns.values()
        ]
        rows: list[list[Any]] = []
        for job_id, token in leases:
            row: list[Any] = [job_id, token]
            for column, process in zip(columns.values(), processors, strict=True):
                value = column.values[job_id]
                row.append(value if process is None else process(value))
            rows.append(row)
        try:
            text = json.dumps(rows, ensure_ascii=False, allow_nan=False)
        except ValueError:
            return None
        return cls(leases, columns, text)

    def where(self) -> sa.ColumnElement[bool]:
        return sa.and_(J.id == self.v.c.id, J.lease_token == self.v.c.token)

    def value(self, name: str) -> Any:
        return self.v.c[name]

    def params(self) -> dict[str, Any]:
        return self._params


class SqliteForms:
    name = "sqlite"

    def insert(self, table: sa.Table) -> Any:
        return sqlite.insert(table)

    def greatest(self, a: Any, b: Any) -> Any:
        return sa.func.max(a, b)  # SQLite's two-argument max() is a scalar function

    def picked(self, due: sa.Select[Any]) -> sa.ColumnElement[bool]:
        picked: sa.ColumnElement[bool] = J.id.in_(due.scalar_subquery())
        return picked

    def filter_only(self, term: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]:
        """``likely(term)``: a term to test on the rows found, not to search by.

        Without statistics SQLite takes an equality on an indexed column to be very selective
        and searches by it, even on ``state = 'pending'`` over the whole backlog. ``likely``
        changes only that estimate, never the result, and a partial index whose predicate the
        term implies stays usable. Untyped: typed Boolean, SQLAlchemy would write
        ``likely(…) = 1``, which no longer implies the partial index's predicate.
        """
        likely: sa.ColumnElement[bool] = sa.func.likely(term)
        return likely

    @contextmanager
    def in_index_order(self, conn: sa.Connection) -> Iterator[None]:
        yield  # SQLite's planner uses the due index for the claim's ORDER BY … LIMIT already

    def batch(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> LeaseBatch:
        json_batch = _JsonBatch.of(leases, columns) if JSON_BATCHES else None
        return _InListBatch(leases, columns) if json_batch is None else json_batch

    def journalled(
        self,
        conn: sa.Connection,
        update: sa.Update,
        transition: Transition,
        *,
        actor: str,
        returning: Sequence[Any] = (),
        batch: LeaseBatch | None = None,
        detail: Mapping[int, str] | None = None,
        source: State | None = None,
    ) -> list[Any]:
        """The transition, then its journal rows, in the caller's transaction."""
        params = batch.params() if batch is not None else {}
        rows = list(conn.execute(update.returning(J.id, J.lease_token, *returning), params))
        events: list[JournalRow] = [
            (r.id, r.lease_token, None if detail is None else detail[r.id]) for r in rows
        ]
        journal(conn, transition, events, actor, source=source)
        return rows


def forms_for(dialect_name: str) -> SqlForms:
    """PostgreSQL's forms for PostgreSQL; the portable (SQLite) forms for anything else."""
    return PostgresForms() if dialect_name == "postgresql" else SqliteForms()


__all__ = ["Column", "LeaseBatch", "PostgresForms", "SqlForms", "SqliteForms", "forms_for"]
