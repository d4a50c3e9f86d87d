"""SQLite's SQL forms (``dispatch.outbox.dialect`` describes both dialects)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from dbtypes import ForeignText
from dispatch.outbox.forms import Built, Column, LeaseBatch, batch_params, shape_of
from dispatch.outbox.jobs import Lease
from dispatch.outbox.sqlcore import J, JournalRow, journal, leases_in
from dispatch.states import State, Transition


class _InListBatch:
    """``(id, lease_token) IN (…)`` with a ``CASE id WHEN … THEN …`` per value column."""

    shape: Hashable | None = None  # the values are in the SQL: a statement per batch

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

    # shape -> (v, bind processors): the same objects for every batch of a shape
    _shapes: ClassVar[dict[Hashable, tuple[Any, list[Any]]]] = {}

    def __init__(self, shape: Hashable, v: Any, text: str) -> None:
        self.shape: Hashable | None = shape
        self.v = v
        self._params = {"batch": text}

    @classmethod
    def _build(cls, columns: Mapping[str, Column]) -> tuple[Any, list[Any]]:
        names = ["id", "token", *columns]
        types: list[Any] = [sa.Integer(), sa.Integer(), *(c.type_ for c in columns.values())]
        each = sa.func.json_each(sa.bindparam("batch", type_=sa.String())).table_valued("value")
        v = (
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
        processors = [
            c.type_.dialect_impl(_SQLITE).bind_processor(_SQLITE) for c in columns.values()
        ]
        return v, processors

    @classmethod
    def of(cls, leases: Sequence[Lease], columns: Mapping[str, Column]) -> _JsonBatch | None:
        """The batch, or None when a value has no JSON form (a non-finite float)."""
        shape = shape_of(columns)
        built = cls._shapes.get(shape)
        if built is None:
            built = cls._shapes[shape] = cls._build(columns)
        v, processors = built
        ids = [job_id for job_id, _ in leases]
        text = cls._text(ids, leases, columns, processors, foreign=False)
        if text is not None and "\\u0000" in text:
            # A NUL somewhere (json.dumps writes it \u0000; a false alarm only costs this):
            # ForeignText's processing, skipped above, changes the value. Again, in full.
            text = cls._text(ids, leases, columns, processors, foreign=True)
        return None if text is None else cls(shape, v, text)

    @staticmethod
    def _text(
        ids: list[int],
        leases: Sequence[Lease],
        columns: Mapping[str, Column],
        processors: list[Any],
        *,
        foreign: bool,
    ) -> str | None:
        """The batch's JSON, or None when a value has no JSON form. ``foreign=False`` leaves
        ForeignText values as they are: its processing only rewrites NUL (one Python call per
        value otherwise, for every completion's reply text)."""
        # Column by column (one comprehension each), then zipped into rows: json.dumps writes
        # the tuples as arrays, ``[[id, token, a, …], …]``.
        values: list[list[Any]] = [ids, [token for _, token in leases]]
        for column, process in zip(columns.values(), processors, strict=True):
            found = list(map(column.values.__getitem__, ids))
            if process is None or (not foreign and isinstance(column.type_, ForeignText)):
                values.append(found)
            else:
                values.append(list(map(process, found)))
        try:
            return json.dumps(list(zip(*values, strict=True)), ensure_ascii=False, allow_nan=False)
        except ValueError:
            return None

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

    def __init__(self) -> None:
        self.built = Built()

    def journalled(
        self,
        conn: sa.Connection,
        key: Hashable,
        build: Callable[[], sa.Update],
        transition: Transition,
        *,
        actor: str,
        returning: Sequence[Any] = (),
        batch: LeaseBatch | None = None,
        detail: Mapping[int, str] | None = None,
        source: State | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """The transition, then its journal rows, in the caller's transaction."""
        stmt = self.built.get(
            (key, transition, source),
            batch,
            lambda: build().returning(J.id, J.lease_token, *returning),
        )
        rows = list(conn.execute(stmt, batch_params(batch, params)).all())
        # By position (RETURNING id, lease_token, …): a Row's attribute lookup by name costs
        # more than the rest of the journal row.
        events: list[JournalRow] = [
            (r[0], r[1], None if detail is None else detail[r[0]]) for r in rows
        ]
        journal(conn, transition, events, actor, source=source)
        return rows
