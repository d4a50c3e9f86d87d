"""SQL of the scheduler: occurrence rows and their fan-out cursors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from dispatch.dbtypes import db_now
from scheduler.models import occurrence_table

Occ = occurrence_table.c


@dataclass(frozen=True)
class OccurrenceRow:
    id: int
    fanout_state: str
    cursor: int
    jobs_created: int


class OccurrenceStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"

    def open(
        self, conn: sa.Connection, campaign: str, step: str, occurrence_at: datetime
    ) -> OccurrenceRow:
        """Insert the occurrence if it is new (unique), then return its current row."""
        insert = (postgresql.insert if self.is_postgres else sqlite.insert)(occurrence_table)
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
