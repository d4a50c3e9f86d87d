"""SQL of trigger fires: each fire of a recurring or one-shot trigger, decided exactly once.

A fire is inserted with ON CONFLICT DO NOTHING on UNIQUE(campaign, nominal_at), as ``due`` (to
be fanned out) or ``skipped`` (by the catch-up policy, with its reason); so any number of
schedulers may decide the same fire and only the first decision counts, with no leader. A due
fire becomes ``done`` once its occurrence is fanned out. The newest ``nominal_at`` of a campaign
is its cursor: the next pass looks for fires after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import sqlalchemy as sa

from dbtypes import db_now, dialect_insert
from scheduler.models import trigger_fire_table

F = trigger_fire_table.c

DUE: Final = "due"
DONE: Final = "done"
SKIPPED: Final = "skipped"
CHUNK: Final = 500  # rows per INSERT: well under SQLite's bound-parameter limit


@dataclass(frozen=True)
class Fire:
    nominal_at: datetime  # whole seconds, UTC: part of every key of the occurrence
    state: str  # due, done, skipped
    reason: str | None = None  # why it was skipped


class FireStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name

    def record(self, conn: sa.Connection, campaign: str, fires: Sequence[Fire]) -> int:
        """Insert the fires not decided yet; returns how many were new (the rest were decided
        already, by this or another scheduler, and keep that decision)."""
        inserted = 0
        for start in range(0, len(fires), CHUNK):
            rows = [
                {
                    "campaign": campaign,
                    "nominal_at": fire.nominal_at,
                    "state": fire.state,
                    "reason": fire.reason,
                }
                for fire in fires[start : start + CHUNK]
            ]
            insert = dialect_insert(trigger_fire_table, self.dialect_name)
            # RETURNING, not rowcount: psycopg reports -1 for INSERT … ON CONFLICT DO NOTHING.
            result = conn.execute(
                insert.values(rows)
                .on_conflict_do_nothing(index_elements=["campaign", "nominal_at"])
                .returning(F.id)
            )
            inserted += len(result.all())
        return inserted

    def cursor(self, conn: sa.Connection, campaign: str) -> datetime | None:
        """The newest fire decided (due, done or skipped), or None before the first."""
        found: datetime | None = conn.execute(
            sa.select(sa.func.max(F.nominal_at)).where(F.campaign == campaign)
        ).scalar_one_or_none()
        return found

    def due(self, conn: sa.Connection, campaign: str) -> list[datetime]:
        """Fires decided ``due`` and not fanned out yet (a crash may have left one), oldest
        first."""
        return list(
            conn.execute(
                sa.select(F.nominal_at)
                .where(F.campaign == campaign, F.state == DUE)
                .order_by(F.nominal_at)
            ).scalars()
        )

    def mark_done(self, conn: sa.Connection, campaign: str, nominal_at: datetime) -> bool:
        result = conn.execute(
            sa.update(trigger_fire_table)
            .where(F.campaign == campaign, F.nominal_at == nominal_at, F.state == DUE)
            .values(state=DONE, updated_at=db_now())
        )
        return result.rowcount == 1

    def skip_due(
        self, conn: sa.Connection, campaign: str, nominal_at: datetime, reason: str
    ) -> bool:
        """A due fire that can no longer be sent becomes skipped, with why."""
        result = conn.execute(
            sa.update(trigger_fire_table)
            .where(F.campaign == campaign, F.nominal_at == nominal_at, F.state == DUE)
            .values(state=SKIPPED, reason=reason, updated_at=db_now())
        )
        return result.rowcount == 1

    def history(self, conn: sa.Connection, campaign: str, *, limit: int = 20) -> list[Fire]:
        """The newest ``limit`` fires, newest first."""
        rows = conn.execute(
            sa.select(F.nominal_at, F.state, F.reason)
            .where(F.campaign == campaign)
            .order_by(F.nominal_at.desc())
            .limit(limit)
        )
        return [Fire(row.nominal_at, row.state, row.reason) for row in rows]

    def last_fired(self, conn: sa.Connection, campaign: str) -> datetime | None:
        """The newest fire that was (or is being) fanned out: the last occurrence."""
        found: datetime | None = conn.execute(
            sa.select(sa.func.max(F.nominal_at)).where(
                F.campaign == campaign, F.state.in_([DUE, DONE])
            )
        ).scalar_one_or_none()
        return found

    def campaigns_with_due(self, conn: sa.Connection) -> set[str]:
        """Campaigns with a fire decided ``due`` and not yet fanned out."""
        return set(conn.execute(sa.select(F.campaign).where(F.state == DUE).distinct()).scalars())
