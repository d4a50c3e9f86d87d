"""The SQL forms that differ between PostgreSQL and SQLite, as one strategy object.

PostgreSQL gets constant-shape batched statements: a batch of leases is ``unnest``-ed arrays
joined by primary key, and a transition and its journal rows are ONE statement (a
data-modifying CTE). SQLite has neither arrays nor data-modifying CTEs: a batch is one bound
JSON text read with ``json_each`` (constant SQL, so both statement caches hit; SQLite ≥ 3.38),
falling back to an ``(id, token) IN (…)`` list with per-row ``CASE`` values on older SQLite, and
the journal is a second statement in the same transaction (``dispatch.outbox.dialect_sqlite``).
Everything else in the outbox is written once, for both. Each forms object keeps the hot
transitions' statements once built (``forms.Built``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import sqlalchemy as sa

from dbtypes import NUL, SHOWN_NUL, ForeignText, dialect_insert
from dispatch.models import send_event
from dispatch.outbox.dialect_sqlite import SqliteForms
from dispatch.outbox.forms import Built, Column, LeaseBatch, SqlForms, batch_params, shape_of
from dispatch.outbox.jobs import Lease
from dispatch.outbox.sqlcore import J
from dispatch.states import State, Transition

# ------------------------------------------------------------------------------------ PostgreSQL


def _array_param(name: str, type_: Any) -> Any:
    """The bound array of one unnest column. Integer arrays are bound as one array literal
    (``'{1,2,3}'``, cast to ``bigint[]``/``integer[]``): psycopg dumps a list element by element
    and tests each with a regex for quoting, which cost more than the rest of the batch's
    parameters; ``str`` of an int needs no quoting at all."""
    from sqlalchemy.dialects.postgresql import ARRAY  # not at import: dialect_insert

    if isinstance(type_, sa.Integer):
        return sa.cast(sa.bindparam(name, type_=sa.Text()), ARRAY(type_))
    if isinstance(type_, ForeignText):
        return sa.cast(sa.bindparam(name, type_=sa.Text()), ARRAY(sa.Text()))
    return sa.bindparam(name, type_=ARRAY(type_))


def _int_array(values: Sequence[int | None]) -> str:
    """``values`` as a PostgreSQL array literal (None as NULL)."""
    return "{" + ",".join(["NULL" if v is None else str(int(v)) for v in values]) + "}"


def _foreign_text_array(values: Sequence[str | None]) -> str:
    """``values`` as a PostgreSQL ``text[]`` literal, each as ``ForeignText`` stores it.

    A NUL, which PostgreSQL refuses in text, is first shown as the four characters ``\\x00``
    (``ForeignText``). Then every element is double-quoted, its backslashes and double quotes
    escaped: inside quotes nothing else is special to the array parser (commas, braces, spaces,
    the word NULL), so any text comes back exactly as ``ForeignText`` would have bound it
    (tests/integration/test_text_array_literal.py). psycopg's own list dumper tests each element
    with a regex for quoting, at more cost than the rest of an outcome's parameters.
    """
    quoted = [
        "NULL"
        if v is None
        else '"' + v.replace(NUL, SHOWN_NUL).replace("\\", "\\\\").replace('"', '\\"') + '"'
        for v in values
    ]
    return "{" + ",".join(quoted) + "}"


class _UnnestBatch:
    """``unnest(:v_id, :v_token, :v_a, …) AS v(id, token, a, …)`` joined on (id, token); integer
    columns are bound as one array literal each (``_array_param``)."""

    _shapes: ClassVar[dict[Hashable, Any]] = {}  # shape -> v: the same objects for every batch

    def __init__(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> None:
        self.shape: Hashable | None = shape_of(columns)
        v = self._shapes.get(self.shape)
        if v is None:
            types = {"id": sa.BigInteger(), "token": sa.BigInteger()}
            types.update({name: c.type_ for name, c in columns.items()})
            fn = sa.func.unnest(*[_array_param(f"v_{n}", t) for n, t in types.items()])
            v = self._shapes[self.shape] = fn.table_valued(
                *[sa.column(n, t) for n, t in types.items()]
            ).render_derived(name="v")
        self.v = v
        self._params: dict[str, Any] = {
            "v_id": "{" + ",".join([str(int(i)) for i, _ in leases]) + "}",
            "v_token": "{" + ",".join([str(int(t)) for _, t in leases]) + "}",
        }
        for name, column in columns.items():
            values = [column.values[i] for i, _ in leases]
            if isinstance(column.type_, sa.Integer):
                self._params[f"v_{name}"] = _int_array(values)
            elif isinstance(column.type_, ForeignText):
                self._params[f"v_{name}"] = _foreign_text_array(values)
            else:
                self._params[f"v_{name}"] = values

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
        return dialect_insert(table, self.name)

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
        """The transition and its journal rows in ONE statement (data-modifying CTEs)."""
        if source is None:
            source = transition.source
        transition.check(source)
        with_detail = batch is not None and detail is not None
        stmt = self.built.get(
            (key, transition, source, with_detail),
            batch,
            lambda: self._journalled(build(), transition, source, returning, batch, with_detail),
        )
        # fetchall in one driver call: iterating a result fetches row by row (psycopg's
        # fetchone per row cost more than the rest of reading a claim's or T5's rows).
        return list(conn.execute(stmt, batch_params(batch, params, actor)).all())

    def _journalled(
        self,
        update: sa.Update,
        transition: Transition,
        source: State,
        returning: Sequence[Any],
        batch: LeaseBatch | None,
        with_detail: bool,
    ) -> sa.Select[Any]:
        detail_col = batch.value("detail") if batch is not None and with_detail else None
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
        return sa.select(done).add_cte(events)


def forms_for(dialect_name: str) -> SqlForms:
    """PostgreSQL's forms for PostgreSQL; the portable (SQLite) forms for anything else."""
    return PostgresForms() if dialect_name == "postgresql" else SqliteForms()


__all__ = ["Column", "LeaseBatch", "PostgresForms", "SqlForms", "SqliteForms", "forms_for"]
