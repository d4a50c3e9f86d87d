"""SQL of enrollments: one recipient's drip through a campaign, counted from their enrollment.

Enrolling is INSERT … ON CONFLICT DO NOTHING on UNIQUE(campaign, mailbox, rotation = 1): a
second enrollment of the same mailbox (by ``herald enroll``, or the audience read again by
another scheduler) inserts nothing and keeps the first ``enrolled_at``, which is part of every
key of the drip. ``next_step`` moves only through a guarded UPDATE (``WHERE next_step = i``) in
the transaction that inserts step i's job, so two schedulers materialise each step once.

States: ``active``; ``left`` (gone from the audience), ``ended`` (suppressed, or a step was
cancelled), ``done`` (every step materialised and settled). Only ``active`` changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa

from dbtypes import db_now, dialect_insert
from dispatch.models import suppression
from scheduler.models import enrollment_table

E = enrollment_table.c

ACTIVE: Final = "active"
LEFT: Final = "left"
ENDED: Final = "ended"
DONE: Final = "done"
ROTATION: Final = 1  # re-enrollment is not offered: a mailbox goes through a drip once
CHUNK: Final = 500


@dataclass(frozen=True)
class NewEnrollment:
    mailbox: str  # the identity (campaigns.addresses.mailbox_identity)
    recipient: str  # as written: where the mail goes
    name: str | None
    variables: Mapping[str, str]
    timezone: str | None  # a valid IANA name, or None (the campaign's zone applies)
    source: str  # cli | audience


@dataclass(frozen=True)
class EnrollmentRow:
    id: int
    campaign: str
    mailbox: str
    recipient: str
    name: str | None
    variables: dict[str, str]
    timezone: str | None
    source: str
    enrolled_at: datetime
    state: str
    next_step: int
    ended_reason: str | None


_COLUMNS = (
    E.id,
    E.campaign,
    E.mailbox,
    E.recipient,
    E.name,
    E.variables,
    E.timezone,
    E.source,
    E.enrolled_at,
    E.state,
    E.next_step,
    E.ended_reason,
)


def _row(r: Any) -> EnrollmentRow:
    return EnrollmentRow(
        r.id,
        r.campaign,
        r.mailbox,
        r.recipient,
        r.name,
        json.loads(r.variables),
        r.timezone,
        r.source,
        r.enrolled_at,
        r.state,
        r.next_step,
        r.ended_reason,
    )


class EnrollmentStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name
        self._insert = (
            dialect_insert(enrollment_table, dialect_name)
            .on_conflict_do_nothing(index_elements=["campaign", "mailbox", "rotation"])
            .returning(E.mailbox)
        )

    def enroll(
        self,
        conn: sa.Connection,
        campaign: str,
        entries: Sequence[NewEnrollment],
        *,
        enrolled_at: datetime,
    ) -> list[str]:
        """Enroll the mailboxes not enrolled yet; returns those that were new.

        ``enrolled_at`` must be whole seconds: it is the occurrence of every key of the drip.
        """
        if enrolled_at.microsecond:
            raise ValueError("enrolled_at must be whole seconds")
        created: list[str] = []
        for start in range(0, len(entries), CHUNK):
            rows = [
                {
                    "campaign": campaign,
                    "mailbox": entry.mailbox,
                    "rotation": ROTATION,
                    "recipient": entry.recipient,
                    "name": entry.name,
                    "variables": json.dumps(
                        dict(entry.variables), ensure_ascii=False, separators=(",", ":")
                    ),
                    "timezone": entry.timezone,
                    "source": entry.source,
                    "enrolled_at": enrolled_at,
                    "state": ACTIVE,
                    "next_step": 0,
                }
                for entry in entries[start : start + CHUNK]
            ]
            # One statement with its rows as parameters, not a VALUES list written into it:
            # SQLAlchemy compiled a VALUES list of 500 rows afresh for every chunk (a third of
            # a drip launch's time); a parameter list it sends as multi-row INSERTs itself.
            result = conn.execute(self._insert, rows)
            created += result.scalars().all()
        return created

    def get(self, conn: sa.Connection, campaign: str, mailbox: str) -> EnrollmentRow | None:
        row = conn.execute(
            sa.select(*_COLUMNS).where(
                E.campaign == campaign, E.mailbox == mailbox, E.rotation == ROTATION
            )
        ).one_or_none()
        return None if row is None else _row(row)

    def active_page(
        self, conn: sa.Connection, campaign: str, *, after_id: int, limit: int
    ) -> list[EnrollmentRow]:
        """Active enrollments with id > ``after_id``, by id (keyset paging)."""
        rows = conn.execute(
            sa.select(*_COLUMNS)
            .where(E.campaign == campaign, E.state == ACTIVE, E.id > after_id)
            .order_by(E.id)
            .limit(limit)
        )
        return [_row(r) for r in rows]

    def active_from(self, conn: sa.Connection, campaign: str, source: str) -> list[tuple[int, str]]:
        """(id, mailbox) of the active enrollments that ``source`` made."""
        rows = conn.execute(
            sa.select(E.id, E.mailbox)
            .where(E.campaign == campaign, E.state == ACTIVE, E.source == source)
            .order_by(E.id)
        )
        return [(r.id, r.mailbox) for r in rows]

    def active_suppressed(
        self, conn: sa.Connection, campaign: str, scopes: Sequence[str]
    ) -> list[EnrollmentRow]:
        """Active enrollments whose mailbox is suppressed in one of ``scopes`` (``global``
        and, unless the campaign is transactional, its list's): the scopes its T4 checks."""
        listed = sa.exists().where(
            suppression.c.address == E.mailbox, suppression.c.scope.in_(list(scopes))
        )
        rows = conn.execute(
            sa.select(*_COLUMNS)
            .where(E.campaign == campaign, E.state == ACTIVE, listed)
            .order_by(E.id)
        )
        return [_row(r) for r in rows]

    def by_ids(self, conn: sa.Connection, ids: Sequence[int]) -> list[EnrollmentRow]:
        found: list[EnrollmentRow] = []
        for start in range(0, len(ids), CHUNK):
            rows = conn.execute(
                sa.select(*_COLUMNS).where(E.id.in_(ids[start : start + CHUNK])).order_by(E.id)
            )
            found += [_row(r) for r in rows]
        return found

    def advance(self, conn: sa.Connection, enrollment_id: int, from_step: int) -> bool:
        """``next_step`` from ``from_step`` to the next; False if another scheduler (or a
        state change) got there first: the caller's transaction must then write nothing."""
        result = conn.execute(
            sa.update(enrollment_table)
            .where(
                E.id == enrollment_id,
                E.state == ACTIVE,
                E.next_step == from_step,
            )
            .values(next_step=from_step + 1, updated_at=db_now())
        )
        return result.rowcount == 1

    def repoint(
        self, conn: sa.Connection, enrollment_id: int, from_step: int, to_step: int
    ) -> bool:
        """``next_step`` from ``from_step`` to ``to_step`` (a new campaign version changed the
        steps); guarded like ``advance``."""
        result = conn.execute(
            sa.update(enrollment_table)
            .where(E.id == enrollment_id, E.state == ACTIVE, E.next_step == from_step)
            .values(next_step=to_step, updated_at=db_now())
        )
        return result.rowcount == 1

    def finish(
        self, conn: sa.Connection, enrollment_id: int, state: str, *, reason: str | None = None
    ) -> int | None:
        """An active enrollment to ``state`` (left, ended, done): returns its ``next_step`` as
        the UPDATE left it (the steps materialised), or None if it was no longer active."""
        if state == ACTIVE:
            raise ValueError("finish() ends an enrollment")
        found: int | None = conn.execute(
            sa.update(enrollment_table)
            .where(E.id == enrollment_id, E.state == ACTIVE)
            .values(state=state, ended_reason=reason, updated_at=db_now())
            .returning(E.next_step)
        ).scalar_one_or_none()
        return found

    def counts(self, conn: sa.Connection, campaign: str) -> dict[str, int]:
        """Enrollments per state (every state present, zero included)."""
        counts = dict.fromkeys((ACTIVE, LEFT, ENDED, DONE), 0)
        rows = conn.execute(
            sa.select(E.state, sa.func.count()).where(E.campaign == campaign).group_by(E.state)
        )
        for state, n in rows:
            counts[state] = n
        return counts
