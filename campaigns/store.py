"""SQL of campaign control: the campaign row, its version and status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from campaigns.models import campaign_table
from dbtypes import db_now, dialect_insert

C = campaign_table.c


#: Trigger kinds whose occurrences a scheduler materialises (``launch`` fans out at launch).
SCHEDULED_TRIGGERS = ("start_at", "schedule", "enrollment")


@dataclass(frozen=True)
class CampaignRow:
    name: str
    spec_hash: str
    version: int
    status: str
    # The launch occurrence; for a scheduled trigger, when it was registered (no fire of a
    # cron schedule at or before it is ever materialised).
    launched_at: datetime
    source_path: str | None = None  # the YAML as launched (resolved path)
    trigger: str = "launch"  # launch | start_at | schedule | enrollment
    scheduler_note: str | None = None  # why the scheduler cannot fire it now
    pause_reason: str | None = None  # why it paused itself (campaigns.error_threshold)

    @property
    def scheduled(self) -> bool:
        """Whether a scheduler materialises its occurrences (not a one-off launch)."""
        return self.trigger in SCHEDULED_TRIGGERS


_COLUMNS = (
    C.name,
    C.spec_hash,
    C.version,
    C.status,
    C.launched_at,
    C.source_path,
    C.trigger,
    C.scheduler_note,
    C.pause_reason,
)


def _row(r: Any) -> CampaignRow:
    return CampaignRow(
        r.name,
        r.spec_hash,
        r.version,
        r.status,
        r.launched_at,
        r.source_path,
        r.trigger or "launch",  # launched before triggers existed
        r.scheduler_note,
        r.pause_reason,
    )


class CampaignStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name

    def insert_if_new(
        self,
        conn: sa.Connection,
        *,
        name: str,
        spec: str,
        spec_hash: str,
        launched_at: datetime,
        source_path: str | None = None,
        trigger: str = "launch",
    ) -> tuple[CampaignRow, bool]:
        """Create the campaign unless it exists; return the stored row and whether it is new."""
        insert = dialect_insert(campaign_table, self.dialect_name)
        result = conn.execute(
            insert.values(
                name=name,
                spec=spec,
                spec_hash=spec_hash,
                version=1,
                status="active",
                launched_at=launched_at,
                source_path=source_path,
                trigger=trigger,
            )
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(C.id)
        )
        found = self.get(conn, name)
        assert found is not None
        # RETURNING, not rowcount: psycopg reports -1 for INSERT … ON CONFLICT DO NOTHING.
        return found, result.first() is not None

    def get(self, conn: sa.Connection, name: str) -> CampaignRow | None:
        row = conn.execute(sa.select(*_COLUMNS).where(C.name == name)).one_or_none()
        return _row(row) if row is not None else None

    def spec_hash(self, conn: sa.Connection, name: str, *, lock: bool = False) -> str | None:
        """The stored spec's hash. ``lock`` (PostgreSQL) holds a share lock to the end of the
        transaction: a new version being stored is waited for, and cannot be stored meanwhile."""
        stmt = sa.select(C.spec_hash).where(C.name == name)
        if lock and self.is_postgres:
            stmt = stmt.with_for_update(read=True)
        found: str | None = conn.execute(stmt).scalar_one_or_none()
        return found

    def all(self, conn: sa.Connection) -> list[CampaignRow]:
        rows = conn.execute(sa.select(*_COLUMNS).order_by(C.name))
        return [_row(r) for r in rows]

    def scheduled(
        self, conn: sa.Connection, names: Sequence[str] | None = None
    ) -> list[CampaignRow]:
        """Active campaigns whose trigger a scheduler materialises (``names``: only those)."""
        stmt = sa.select(*_COLUMNS).where(C.status == "active", C.trigger.in_(SCHEDULED_TRIGGERS))
        if names is not None:
            stmt = stmt.where(C.name.in_(list(names)))
        return [_row(r) for r in conn.execute(stmt.order_by(C.name))]

    def set_source(
        self, conn: sa.Connection, name: str, *, source_path: str, spec_hash: str
    ) -> None:
        """Point the campaign at the file it was relaunched from (the same definition, maybe
        moved): the scheduler re-reads it from there."""
        conn.execute(
            sa.update(campaign_table)
            .where(
                C.name == name,
                C.spec_hash == spec_hash,
                C.source_path.is_distinct_from(source_path),
            )
            .values(source_path=source_path, updated_at=db_now())
        )

    def set_note(self, conn: sa.Connection, name: str, note: str | None) -> bool:
        """Set (or with None clear) why the scheduler cannot fire the campaign; True if it
        changed. Unchanged notes are not rewritten: every pass would otherwise write."""
        result = conn.execute(
            sa.update(campaign_table)
            .where(C.name == name, C.scheduler_note.is_distinct_from(note))
            .values(scheduler_note=note, updated_at=db_now())
        )
        return result.rowcount == 1

    def new_version(
        self,
        conn: sa.Connection,
        *,
        name: str,
        spec: str,
        spec_hash: str,
        expected_hash: str,
        source_path: str | None = None,
        trigger: str = "launch",
    ) -> bool:
        """Replace the stored spec, guarded by the hash the caller saw (no lost update)."""
        result = conn.execute(
            sa.update(campaign_table)
            .where(C.name == name, C.spec_hash == expected_hash)
            .values(
                spec=spec,
                spec_hash=spec_hash,
                version=C.version + 1,
                source_path=source_path,
                trigger=trigger,
                scheduler_note=None,  # the note was about the definition now replaced
                updated_at=db_now(),
            )
        )
        return result.rowcount == 1

    def set_status(
        self, conn: sa.Connection, name: str, status: str, *, allowed_from: tuple[str, ...]
    ) -> str | None:
        """Change status if the current one allows it; returns the previous status or None.

        An operator's change ends an automatic pause, so its reason is cleared; and it moves
        ``updated_at``, where the error threshold's window starts again."""
        current = self.get(conn, name)
        if current is None or current.status not in allowed_from:
            return None
        conn.execute(
            sa.update(campaign_table)
            .where(C.name == name, C.status == current.status)
            .values(status=status, pause_reason=None, updated_at=db_now())
        )
        return current.status
