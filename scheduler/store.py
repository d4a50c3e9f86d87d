"""SQL of the scheduler: occurrence rows and their fan-out cursors, and audience snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from dbtypes import db_now, db_now_plus, dialect_insert, seconds
from dispatch.outbox import bulk_enqueue
from scheduler.models import audience_fetch_table, audience_snapshot_table, occurrence_table

Occ = occurrence_table.c
Fetch = audience_fetch_table.c
Snap = audience_snapshot_table.c


@dataclass(frozen=True)
class OccurrenceRow:
    id: int
    fanout_state: str
    cursor: int
    jobs_created: int


class OccurrenceStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name

    def open(
        self, conn: sa.Connection, campaign: str, step: str, occurrence_at: datetime
    ) -> OccurrenceRow:
        """Insert the occurrence if it is new (unique), then return its current row."""
        insert = dialect_insert(occurrence_table, self.dialect_name)
        conn.execute(
            insert.values(
                campaign=campaign,
                step=step,
                occurrence_at=occurrence_at,
                fanout_state="open",
                cursor=0,
                jobs_created=0,
            ).on_conflict_do_nothing(index_elements=["campaign", "step", "occurrence_at"])
        )
        row = conn.execute(
            sa.select(Occ.id, Occ.fanout_state, Occ.cursor, Occ.jobs_created).where(
                Occ.campaign == campaign, Occ.step == step, Occ.occurrence_at == occurrence_at
            )
        ).one()
        return OccurrenceRow(row.id, row.fanout_state, row.cursor, row.jobs_created)

    def advance(self, conn: sa.Connection, occurrence_id: int, cursor: int, created: int) -> None:
        # Never move a cursor backwards: a second scheduler working the same occurrence may be
        # ahead of us; the outbox's unique key already made our overlapping inserts no-ops.
        conn.execute(
            sa.update(occurrence_table)
            .where(Occ.id == occurrence_id)
            .values(
                cursor=sa.case((Occ.cursor < cursor, cursor), else_=Occ.cursor),
                jobs_created=Occ.jobs_created + created,
                updated_at=db_now(),
            )
        )

    def close(self, conn: sa.Connection, occurrence_id: int) -> None:
        conn.execute(
            sa.update(occurrence_table)
            .where(Occ.id == occurrence_id)
            .values(fanout_state="done", updated_at=db_now())
        )

    def occurrences(
        self, conn: sa.Connection, campaign: str
    ) -> list[sa.Row[tuple[str, datetime, str, int]]]:
        return list(
            conn.execute(
                sa.select(Occ.step, Occ.occurrence_at, Occ.fanout_state, Occ.jobs_created)
                .where(Occ.campaign == campaign)
                .order_by(Occ.occurrence_at, Occ.step)
            )
        )


@dataclass(frozen=True)
class FetchRow:
    state: str  # fetching, complete
    token: str
    format: str | None
    row_count: int
    reject_count: int

    @property
    def complete(self) -> bool:
        return self.state == "complete"


class SnapshotStore:
    """Audience snapshots: the fetch header and its rows, keyed by (campaign, occurrence_at).

    Every write of a snapshot's rows is guarded by the writer's token in the same transaction,
    so a writer that has been taken over adds nothing.
    """

    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name

    @staticmethod
    def _key(campaign: str, occurrence_at: datetime) -> tuple[sa.ColumnElement[bool], ...]:
        return (Fetch.campaign == campaign, Fetch.occurrence_at == occurrence_at)

    @staticmethod
    def _rows_key(campaign: str, occurrence_at: datetime) -> tuple[sa.ColumnElement[bool], ...]:
        return (Snap.campaign == campaign, Snap.occurrence_at == occurrence_at)

    def get(self, conn: sa.Connection, campaign: str, occurrence_at: datetime) -> FetchRow | None:
        row = conn.execute(
            sa.select(
                Fetch.state, Fetch.token, Fetch.format, Fetch.row_count, Fetch.reject_count
            ).where(*self._key(campaign, occurrence_at))
        ).one_or_none()
        if row is None:
            return None
        return FetchRow(row.state, row.token, row.format, row.row_count, row.reject_count)

    def begin(
        self,
        conn: sa.Connection,
        campaign: str,
        occurrence_at: datetime,
        *,
        token: str,
        url: str,
        stale_after: float | None = None,
    ) -> FetchRow:
        """Start writing the snapshot under ``token``, or return the complete one.

        An unfinished snapshot (its writer crashed, or is still at it) is taken over: its rows
        are deleted and its token replaced, in this one transaction. With ``stale_after``, only
        if its writer wrote nothing for that many seconds (database clock); otherwise the
        returned row carries the other writer's token.
        """
        insert = dialect_insert(audience_fetch_table, self.dialect_name)
        conn.execute(
            insert.values(
                campaign=campaign,
                occurrence_at=occurrence_at,
                state="fetching",
                token=token,
                url=url,
                row_count=0,
                reject_count=0,
            ).on_conflict_do_nothing(index_elements=["campaign", "occurrence_at"])
        )
        stale = (
            []
            if stale_after is None
            else [
                sa.or_(
                    Fetch.token == token,  # just inserted by us
                    Fetch.updated_at < db_now_plus(seconds(-stale_after)),
                )
            ]
        )
        taken = conn.execute(
            sa.update(audience_fetch_table)
            .where(*self._key(campaign, occurrence_at), Fetch.state == "fetching", *stale)
            .values(token=token, url=url, row_count=0, reject_count=0, updated_at=db_now())
        )
        if taken.rowcount:
            conn.execute(
                sa.delete(audience_snapshot_table).where(*self._rows_key(campaign, occurrence_at))
            )
        found = self.get(conn, campaign, occurrence_at)
        assert found is not None
        return found

    def append(
        self,
        conn: sa.Connection,
        campaign: str,
        occurrence_at: datetime,
        *,
        token: str,
        format: str,
        rows: Sequence[dict[str, Any]],
        rejects: int,
    ) -> bool:
        """Add a batch of rows if ``token`` still owns the snapshot; False if it does not."""
        owned = conn.execute(
            sa.update(audience_fetch_table)
            .where(
                *self._key(campaign, occurrence_at),
                Fetch.token == token,
                Fetch.state == "fetching",
            )
            .values(
                format=format,
                row_count=Fetch.row_count + len(rows),
                reject_count=Fetch.reject_count + rejects,
                updated_at=db_now(),
            )
        )
        if owned.rowcount != 1:
            return False
        if rows and bulk_enqueue.usable(conn):
            bulk_enqueue.wrapped(conn, _copy_snapshot_rows, conn, campaign, occurrence_at, rows)
        elif rows:
            conn.execute(
                sa.insert(audience_snapshot_table),
                [{"campaign": campaign, "occurrence_at": occurrence_at, **row} for row in rows],
            )
        return True

    def complete(
        self, conn: sa.Connection, campaign: str, occurrence_at: datetime, *, token: str
    ) -> bool:
        done = conn.execute(
            sa.update(audience_fetch_table)
            .where(
                *self._key(campaign, occurrence_at),
                Fetch.token == token,
                Fetch.state == "fetching",
            )
            .values(state="complete", completed_at=db_now(), updated_at=db_now())
        )
        return done.rowcount == 1

    def discard(
        self,
        conn: sa.Connection,
        campaign: str,
        occurrence_at: datetime,
        *,
        token: str | None = None,
    ) -> bool:
        """Delete a snapshot (only the one ``token`` owns, when given) and its rows."""
        guard = [] if token is None else [Fetch.token == token]
        gone = conn.execute(
            sa.delete(audience_fetch_table).where(*self._key(campaign, occurrence_at), *guard)
        )
        if gone.rowcount:
            conn.execute(
                sa.delete(audience_snapshot_table).where(*self._rows_key(campaign, occurrence_at))
            )
        return bool(gone.rowcount)

    def discard_unused(self, conn: sa.Connection, campaign: str, occurrence_at: datetime) -> bool:
        """Delete a snapshot nothing has been fanned out from (no occurrence row refers to it)."""
        fanned_out = sa.exists().where(Occ.campaign == campaign, Occ.occurrence_at == occurrence_at)
        gone = conn.execute(
            sa.delete(audience_fetch_table).where(*self._key(campaign, occurrence_at), ~fanned_out)
        )
        if gone.rowcount:
            conn.execute(
                sa.delete(audience_snapshot_table).where(*self._rows_key(campaign, occurrence_at))
            )
        return bool(gone.rowcount)

    def page(
        self, conn: sa.Connection, campaign: str, occurrence_at: datetime, *, after: int, limit: int
    ) -> list[sa.Row[Any]]:
        """Rows with position > ``after``, in order (keyset paging: constant cost per page)."""
        return list(
            conn.execute(
                sa.select(
                    Snap.position, Snap.line, Snap.email, Snap.name, Snap.variables, Snap.problem
                )
                .where(*self._rows_key(campaign, occurrence_at), Snap.position > after)
                .order_by(Snap.position)
                .limit(limit)
            )
        )

    def rejects(
        self, conn: sa.Connection, campaign: str, occurrence_at: datetime, *, limit: int
    ) -> list[tuple[int, str]]:
        """(line, reason) of the first ``limit`` rejected rows."""
        rows = conn.execute(
            sa.select(Snap.line, Snap.problem)
            .where(*self._rows_key(campaign, occurrence_at), Snap.problem.is_not(None))
            .order_by(Snap.position)
            .limit(limit)
        )
        return [(row.line, row.problem) for row in rows]


# A snapshot's rows by COPY on PostgreSQL (psycopg), as the fan-out enqueues: an executemany
# INSERT cost the server about 55 µs a row, most of a 50,000-row URL audience's fetch.
_SNAPSHOT_COLUMNS = (
    ("position", "int4"),
    ("line", "int4"),
    ("email", "text"),
    ("name", "text"),
    ("variables", "text"),
    ("problem", "text"),
)
_COPY_SNAPSHOT = (
    "COPY audience_snapshot (campaign, occurrence_at, "
    + ", ".join(name for name, _ in _SNAPSHOT_COLUMNS)
    + ") FROM STDIN (FORMAT BINARY)"
)


def _copy_snapshot_rows(
    conn: sa.Connection, campaign: str, occurrence_at: datetime, rows: Sequence[dict[str, Any]]
) -> None:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(_COPY_SNAPSHOT) as copy:
        copy.set_types(["text", "timestamptz", *(type_ for _, type_ in _SNAPSHOT_COLUMNS)])
        for row in rows:
            copy.write_row((campaign, occurrence_at, *(row[name] for name, _ in _SNAPSHOT_COLUMNS)))
