"""On PostgreSQL a URL audience's snapshot rows go in by COPY; they must be exactly what the
portable executemany INSERT stores, for rows of any text (or the same refusal, for a NUL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.outbox import bulk_enqueue
from scheduler.models import audience_snapshot_table
from scheduler.store import SnapshotStore
from tests.support.examples import examples

AT = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # NUL included
ROW = st.fixed_dictionaries(
    {
        "line": st.integers(0, 2**31 - 1),
        "email": st.none() | TEXT,
        "name": st.none() | TEXT,
        "variables": st.none() | TEXT,
        "problem": st.none() | TEXT,
    }
)


def _stored(engine: Engine, rows: list[dict[str, Any]], *, copy: bool) -> Any:
    """The rows ``append`` stores (or the class of what it raised), rolled back after."""
    store = SnapshotStore("postgresql")
    batch = [{"position": i + 1, **row} for i, row in enumerate(rows)]
    snap = audience_snapshot_table.c
    with mock.patch.object(bulk_enqueue, "usable", return_value=copy), engine.connect() as conn:
        try:
            store.begin(conn, "c", AT, token="t", url="https://audience.test/x")
            try:
                store.append(conn, "c", AT, token="t", format="csv", rows=batch, rejects=0)
            except Exception as exc:
                return type(exc)
            columns = [c for c in audience_snapshot_table.c]
            return conn.execute(sa.select(*columns).order_by(snap.position)).all()
        finally:
            conn.rollback()


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=st.lists(ROW, max_size=8))
def test_copied_rows_are_the_inserted_rows(engine: Engine, rows: list[dict[str, Any]]) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("COPY is PostgreSQL's")
    copied = _stored(engine, rows, copy=True)
    assert copied == _stored(engine, rows, copy=False)
    if not isinstance(copied, type):  # stored: every row, in order, with its occurrence
        assert [row.position for row in copied] == list(range(1, len(rows) + 1))
        assert {(row.campaign, row.occurrence_at) for row in copied} <= {("c", AT)}
