"""What the dialects' SQL forms share: the strategy's protocol (``SqlForms``), a batch of leases
with per-row values (``LeaseBatch``), and the statements built once and reused (``Built``).

The forms themselves are in ``dispatch.outbox.dialect`` (PostgreSQL) and
``dispatch.outbox.dialect_sqlite``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from dispatch.outbox.jobs import Lease
from dispatch.states import State, Transition


@dataclass(frozen=True)
class Column:
    type_: Any
    values: Mapping[int, Any]  # job id -> value


class LeaseBatch(Protocol):
    """Many leases, each with its own values, addressable from one UPDATE.

    ``shape`` is equal for batches whose ``where()`` and ``value()`` are the very same SQL
    objects (only ``params()`` differ): a statement built on one serves them all. None when the
    SQL holds the values themselves (SQLite's CASE form).
    """

    shape: Hashable | None

    def where(self) -> sa.ColumnElement[bool]: ...
    def value(self, name: str) -> Any: ...
    def params(self) -> dict[str, Any]: ...


class SqlForms(Protocol):
    name: str
    built: Built

    def insert(self, table: sa.Table) -> Any: ...
    def greatest(self, a: Any, b: Any) -> Any: ...
    def picked(self, due: sa.Select[Any]) -> sa.ColumnElement[bool]: ...
    def filter_only(self, term: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]: ...
    def in_index_order(self, conn: sa.Connection) -> AbstractContextManager[None]: ...
    def batch(self, leases: Sequence[Lease], columns: Mapping[str, Column]) -> LeaseBatch: ...
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
    ) -> list[Any]: ...


class Built:
    """Statements built once per key and reused: building a Core statement (and its cache key)
    cost more than SQLAlchemy's cached compile saves, on every batch of the drain.

    A key names everything the statement's SQL depends on; what changes from call to call is
    passed as parameters. A batch without a ``shape`` is built afresh every time.
    """

    def __init__(self) -> None:
        self._built: dict[Hashable, Any] = {}

    def get(self, key: Hashable, batch: LeaseBatch | None, build: Callable[[], Any]) -> Any:
        if batch is not None:
            if batch.shape is None:
                return build()
            key = (key, batch.shape)
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = build()
        return found

    def kept(self) -> dict[Hashable, Any]:
        """The statements kept so far, by key (a copy)."""
        return dict(self._built)


def batch_params(
    batch: LeaseBatch | None, params: Mapping[str, Any] | None, actor: str | None = None
) -> dict[str, Any]:
    values = dict(batch.params()) if batch is not None else {}
    if params:
        values.update(params)
    if actor is not None:
        values["actor"] = actor
    return values


def shape_of(columns: Mapping[str, Column]) -> tuple[tuple[str, type], ...]:
    return tuple((name, type(column.type_)) for name, column in columns.items())
