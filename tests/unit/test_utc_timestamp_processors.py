"""UtcTimestamp's direct result processors give exactly what ``process_result_value`` gives: on
SQLite (epoch seconds straight to an aware datetime) for every value SQLite can hand back for
the column, a REAL, an INTEGER, NULL; on PostgreSQL (the driver's aware datetime straight to
UTC) for a datetime at any offset, and NULL. They exist for speed only (the drain reads a
timestamp for every job it claims and every job it starts), so they must not change a single
value.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite

import dbtypes
from dbtypes import UtcTimestamp
from tests.support.examples import examples

SQLITE = sqlite.dialect()
POSTGRES = sa.create_engine("postgresql+psycopg://herald@localhost/none").dialect  # no connection
# What datetime can represent (years 1..9999) as epoch seconds, with a margin for time zones.
EPOCH_SECONDS = st.floats(
    min_value=-62_135_596_800 + 86_400,
    max_value=253_402_300_799 - 86_400,
    allow_nan=False,
    allow_infinity=False,
)
STORED = (
    st.none()
    | EPOCH_SECONDS
    | EPOCH_SECONDS.map(int)
    | st.sampled_from([0, 0.0, -0.0, 1767225600.123456, 1e-7, -1e-7])
)


def test_each_database_reads_through_its_direct_processor() -> None:
    assert UtcTimestamp()._cached_result_processor(SQLITE, None) is dbtypes._from_epoch
    assert UtcTimestamp()._cached_result_processor(POSTGRES, None) is dbtypes._to_utc


# What psycopg hands back for a timestamptz: an aware datetime in the session's time zone.
AWARE = st.builds(
    lambda moment, minutes: moment.astimezone(timezone(timedelta(minutes=minutes))),
    st.datetimes(
        min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)
    ),
    st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59),
)


@settings(max_examples=examples(200))
@given(value=st.none() | AWARE)
def test_postgres_processor_matches_process_result_value(value: datetime | None) -> None:
    processor = UtcTimestamp()._cached_result_processor(POSTGRES, None)
    assert processor is not None
    expected = UtcTimestamp().process_result_value(value, POSTGRES)
    got = processor(value)
    assert got == expected
    if got is not None and expected is not None:
        assert got.tzinfo is expected.tzinfo is UTC


@settings(max_examples=examples(200))
@given(value=STORED)
def test_direct_processor_matches_process_result_value(value: Any) -> None:
    processor = UtcTimestamp()._cached_result_processor(SQLITE, None)
    assert processor is not None
    expected = UtcTimestamp().process_result_value(value, SQLITE)
    got = processor(value)
    assert got == expected
    assert (got is None) == (expected is None)
    if got is not None and expected is not None:
        assert got.tzinfo == expected.tzinfo
        assert got.utcoffset() == expected.utcoffset()


def test_a_timestamp_survives_a_round_trip_through_sqlite() -> None:
    engine = sa.create_engine("sqlite://")
    table = sa.Table("t", sa.MetaData(), sa.Column("at", UtcTimestamp()))
    table.metadata.create_all(engine)
    written = UtcTimestamp().process_result_value(1767225600.25, SQLITE)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"at": written}, {"at": None}])
        conn.exec_driver_sql("INSERT INTO t (at) VALUES (1767225600)")  # an INTEGER
        read = [row.at for row in conn.execute(sa.select(table.c.at))]
    assert read[:2] == [written, None]
    assert read[2] == UtcTimestamp().process_result_value(1767225600, SQLITE)
    assert all(v is None or v.tzinfo is not None for v in read)
