"""Column types and clock expressions that behave the same on SQLite and PostgreSQL.

Leases are compared on the *database* clock (docs/design.md §4), so "now" is an SQL expression,
never a Python value. PostgreSQL stores ``timestamptz`` and uses ``now()``. SQLite has no date
type, so we store UTC epoch seconds as REAL: numeric comparison is exact and cheap, and
``julianday('now')`` gives millisecond resolution from the same clock every process on the host
shares.

This package is the bottom of the layering, below ``templates`` and ``dispatch``: every package
that declares tables (``dispatch``, ``campaigns``, ``scheduler``, the migrations in ``herald``)
takes its column types from here, so a table of one layer never needs another layer just for a
type. It holds nothing but types and SQL expressions, and imports nothing of ours (it is the last
layer of the contract in ``[tool.importlinter]``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import operators
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import TypeEngine

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite


NUL = "\x00"
SHOWN_NUL = "\\x00"  # how ForeignText stores a NUL: backslash, x, 0, 0


class ForeignText(sa.types.TypeDecorator[str]):
    """Text that came from outside (a server's reply, a receiver's body, an exception): stored
    with every NUL shown as the four characters ``\\x00``.

    PostgreSQL refuses NUL in text ("invalid byte sequence"), so a relay that put one in its
    reply would make recording the outcome fail, again on every attempt; SQLite would keep it
    and cut the text short in some tools. One type on every such column fixes both, whatever
    path the value takes to the database.
    """

    impl = sa.Text()
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else value.replace(NUL, SHOWN_NUL)


class IndexedChoice(sa.types.TypeDecorator[str]):
    """A short text column that partial indexes are predicated on (``send_job.state``): a
    value compared to it is written into the SQL, never bound.

    A planner proves a partial index's predicate (``WHERE state = 'pending'``) from the
    query's own terms. PostgreSQL cannot prove it from a bound ``state = $1`` in a generic
    plan, and Herald's connections plan every parameterised statement generically
    (``plan_cache_mode = force_generic_plan``, herald.db). Such a search read the whole table:
    measured over 10,000 jobs, each of the recovery pass's searches took 3–4 ms instead of
    0.3, and an idle worker runs them every few seconds over the whole outbox's history.
    (SQLite re-plans a statement with its bound values, so it used the indexes either way.)

    Only a lower-case ASCII identifier (what the choices are: ``dispatch.states``) is written
    in; anything else stays a bound value, so no value can become SQL text. Values set
    (INSERT, UPDATE) stay bound: they choose no plan, and executemany needs them bound. A
    statement that finds its rows by id binds the state on purpose (``dispatch.outbox.sqlcore
    .guard``).
    """

    impl = sa.String(16)
    cache_ok = True

    class comparator_factory(sa.types.TypeDecorator.Comparator[str]):
        def operate(self, op: Any, *other: Any, **kwargs: Any) -> Any:
            if op in _LITERAL_OPERATORS:
                other = tuple(_written_in(value, self.type) for value in other)
            return super().operate(op, *other, **kwargs)


def _written_in(value: Any, type_: sa.types.TypeEngine[Any]) -> Any:
    """``value`` as SQL text when it is a choice, a list of choices as a list of them; anything
    else as it came. SQL text, not a literal-rendered bind: an executemany may compare too."""
    if _is_choice(value):
        return _sql_text(value, type_)
    if isinstance(value, list | tuple | set | frozenset) and value and all(map(_is_choice, value)):
        return [_sql_text(choice, type_) for choice in sorted(value)]
    return value


def _sql_text(choice: str, type_: sa.types.TypeEngine[Any]) -> sa.ColumnElement[Any]:
    # The characters checked, whatever a str subclass (an enum) would print: str.__str__.
    return sa.literal_column(f"'{str.__str__(choice)}'", type_)


def _is_choice(value: object) -> bool:
    return isinstance(value, str) and value.isidentifier() and value.isascii() and value.islower()


_LITERAL_OPERATORS = frozenset({operators.eq, operators.ne, operators.in_op, operators.not_in_op})


class UtcTimestamp(sa.types.TypeDecorator[datetime]):
    """An aware UTC datetime in Python; ``timestamptz`` on PostgreSQL, epoch REAL on SQLite."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Float())
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column; pass an aware datetime")
        if dialect.name == "sqlite":
            return value.timestamp()
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        assert isinstance(value, datetime)
        return value.astimezone(UTC)

    def result_processor(
        self, dialect: Dialect, coltype: Any
    ) -> Callable[[Any], datetime | None] | None:
        """Straight to an aware UTC datetime: on SQLite from epoch seconds, on PostgreSQL from
        the driver's aware datetime (in the session's time zone). The same values as
        ``process_result_value``, without TypeDecorator's two calls and type tests per value
        (2.5 of 3 µs a value; the drain reads one for every job it claims and starts)."""
        if self.impl_instance.result_processor(dialect, coltype):
            return super().result_processor(dialect, coltype)
        if dialect.name == "sqlite":
            return _from_epoch
        if dialect.name == "postgresql":
            return _to_utc
        return super().result_processor(dialect, coltype)


def _from_epoch(value: Any) -> datetime | None:
    # SQLite hands back the stored REAL (or an INTEGER); anything else fails here, as it would
    # in process_result_value.
    return None if value is None else _fromtimestamp(value, UTC)


_fromtimestamp = datetime.fromtimestamp


def _to_utc(value: datetime | None) -> datetime | None:
    # psycopg hands back ``timestamptz`` as an aware datetime; anything else fails here, as it
    # would in process_result_value.
    return None if value is None else value.astimezone(UTC)


class db_now(FunctionElement[datetime]):
    """The database's current time (transaction time on PostgreSQL)."""

    type = UtcTimestamp()
    inherit_cache = True


class db_now_plus(FunctionElement[datetime]):
    """The database's current time plus a number of seconds (a bound parameter or literal)."""

    type = UtcTimestamp()
    inherit_cache = True


_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


@compiles(db_now, "sqlite")
def _now_sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return _SQLITE_NOW


@compiles(db_now)
def _now_default(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "now()"


@compiles(db_now_plus, "sqlite")
def _now_plus_sqlite(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"({_SQLITE_NOW} + {compiler.process(seconds, **kw)})"


@compiles(db_now_plus)
def _now_plus_default(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"(now() + make_interval(secs => {compiler.process(seconds, **kw)}))"


def seconds(value: float) -> sa.BindParameter[float]:
    """A float bind parameter for db_now_plus (typed, so PostgreSQL knows it is numeric)."""
    return sa.bindparam(None, float(value), type_=sa.Float())


def utc(value: datetime) -> sa.BindParameter[datetime]:
    """A datetime bind parameter converted the way UtcTimestamp columns store it."""
    return sa.bindparam(None, value, type_=UtcTimestamp())


def big_id() -> sa.types.TypeEngine[int]:
    """64-bit ids on PostgreSQL; SQLite needs plain INTEGER for its rowid alias."""
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def dialect_insert(table: sa.Table, dialect_name: str) -> postgresql.Insert | sqlite.Insert:
    """``INSERT`` into ``table`` in the dialect's own form (``ON CONFLICT`` clauses, ``excluded``).

    The dialect's module is imported here, when a statement is built: importing SQLAlchemy's
    PostgreSQL dialect costs every SQLite command ~40 ms of start-up otherwise."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)
