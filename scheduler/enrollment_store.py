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

import functools
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


COLUMNS = (
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


def enrollment_row(r: Any) -> EnrollmentRow:
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


def _variables_text(entry: NewEnrollment) -> str:
    return json.dumps(dict(entry.variables), ensure_ascii=False, separators=(",", ":"))


_UNNESTED = ("mailbox", "recipient", "name", "variables", "timezone", "source")


def _insert_unnested() -> Any:
    """PostgreSQL: ``INSERT … SELECT … FROM unnest(:mailbox, :recipient, …) ON CONFLICT DO
    NOTHING RETURNING mailbox``, a chunk's columns as one bound ``text[]`` each."""
    from sqlalchemy.dialects.postgresql import ARRAY  # imported here: see _ids_of_batch

    columns = [sa.column(name, sa.Text()) for name in _UNNESTED]
    rows = (
        sa.func.unnest(*[sa.bindparam(name, type_=ARRAY(sa.Text())) for name in _UNNESTED])
        .table_valued(*columns)
        .render_derived(name="new")
    )
    chosen = sa.select(
        sa.bindparam("campaign", type_=E.campaign.type),
        *[rows.c[name] for name in _UNNESTED],
        sa.literal(ROTATION),
        sa.bindparam("enrolled_at", type_=E.enrolled_at.type),
        sa.literal(ACTIVE),
        sa.literal(0),
    )
    targets = ["campaign", *_UNNESTED, "rotation", "enrolled_at", "state", "next_step"]
    return (
        dialect_insert(enrollment_table, "postgresql")
        .from_select(targets, chosen)
        .on_conflict_do_nothing(index_elements=["campaign", "mailbox", "rotation"])
        .returning(E.mailbox)
    )


def _ids_of_batch(is_postgres: bool) -> sa.ColumnElement[bool]:
    """``enrollment.id`` among the bound ``ids``.

    PostgreSQL: ``id = ANY (:ids)``, one bound array, which the plan finds by primary key.
    Herald plans generically (``plan_cache_mode = force_generic_plan``), and the form
    ``id IN (…500 parameters…) AND state = …`` was planned, on enrollments no ANALYZE had seen,
    as a scan of the state index that tested every active enrollment against the batch, once
    per batch: a drip pass quadratic in its enrollments (tests/integration/test_drip_plans.py).
    SQLite: ``IN``, planned with the values.
    """
    if not is_postgres:
        return E.id.in_(sa.bindparam("ids", expanding=True))
    # Imported here, as dbtypes.dialect_insert does: the PostgreSQL dialect costs every SQLite
    # command ~40 ms of start-up at import.
    from sqlalchemy.dialects.postgresql import ARRAY

    array = sa.cast(sa.bindparam("ids", type_=sa.Text()), ARRAY(sa.BigInteger()))
    return E.id == sa.any_(array)


@dataclass(frozen=True)
class _Statements:
    insert: Any
    insert_unnested: Any | None  # PostgreSQL
    lock: Any
    by_ids: Any
    advance: Any
    finish: Any


@functools.cache
def _statements(dialect_name: str) -> _Statements:
    """Built once per dialect: a drip pass moves hundreds of enrollments a transaction, ends
    drips by the thousand when an audience shrinks, and building a statement per row (or a
    store per drip) cost more than running it."""
    is_postgres = dialect_name == "postgresql"
    ids = _ids_of_batch(is_postgres)
    return _Statements(
        insert=dialect_insert(enrollment_table, dialect_name)
        .on_conflict_do_nothing(index_elements=["campaign", "mailbox", "rotation"])
        .returning(E.mailbox),
        insert_unnested=_insert_unnested() if is_postgres else None,
        lock=sa.select(E.id).where(ids).order_by(E.id).with_for_update(),
        by_ids=sa.select(*COLUMNS).where(ids).order_by(E.id),
        advance=sa.update(enrollment_table)
        .where(ids, E.state == ACTIVE, E.next_step == sa.bindparam("from_step"))
        .values(next_step=sa.bindparam("to_step"), updated_at=db_now())
        .returning(E.id),
        finish=sa.update(enrollment_table)
        .where(ids, E.state == ACTIVE)
        .values(
            state=sa.bindparam("to_state"),
            ended_reason=sa.bindparam("reason", type_=E.ended_reason.type),
            updated_at=db_now(),
        )
        .returning(E.id, E.next_step),
    )


class EnrollmentStore:
    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"
        self.dialect_name = dialect_name
        self._sql = _statements(dialect_name)

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
            chunk = entries[start : start + CHUNK]
            if self._sql.insert_unnested is not None:
                # PostgreSQL: the chunk as one array a column. SQLAlchemy sends a parameter
                # list as multi-row INSERTs, a statement too long for psycopg's cache, which
                # then parsed it anew for every chunk (a tenth of a drip's launch).
                params = {
                    "campaign": campaign,
                    "enrolled_at": enrolled_at,
                    "mailbox": [entry.mailbox for entry in chunk],
                    "recipient": [entry.recipient for entry in chunk],
                    "name": [entry.name for entry in chunk],
                    "variables": [_variables_text(entry) for entry in chunk],
                    "timezone": [entry.timezone for entry in chunk],
                    "source": [entry.source for entry in chunk],
                }
                created += conn.execute(self._sql.insert_unnested, params).scalars().all()
                continue
            rows = [
                {
                    "campaign": campaign,
                    "mailbox": entry.mailbox,
                    "rotation": ROTATION,
                    "recipient": entry.recipient,
                    "name": entry.name,
                    "variables": _variables_text(entry),
                    "timezone": entry.timezone,
                    "source": entry.source,
                    "enrolled_at": enrolled_at,
                    "state": ACTIVE,
                    "next_step": 0,
                }
                for entry in chunk
            ]
            # One statement with its rows as parameters, not a VALUES list written into it:
            # SQLAlchemy compiled a VALUES list of 500 rows afresh for every chunk (a third of
            # a drip launch's time); a parameter list it sends as multi-row INSERTs itself.
            result = conn.execute(self._sql.insert, rows)
            created += result.scalars().all()
        return created

    def get(self, conn: sa.Connection, campaign: str, mailbox: str) -> EnrollmentRow | None:
        row = conn.execute(
            sa.select(*COLUMNS).where(
                E.campaign == campaign, E.mailbox == mailbox, E.rotation == ROTATION
            )
        ).one_or_none()
        return None if row is None else enrollment_row(row)

    def active_from(self, conn: sa.Connection, campaign: str, source: str) -> list[tuple[int, str]]:
        """(id, mailbox) of the active enrollments that ``source`` made."""
        rows = conn.execute(
            sa.select(E.id, E.mailbox)
            .where(E.campaign == campaign, E.state == ACTIVE, E.source == source)
            .order_by(E.id)
        )
        return [(r.id, r.mailbox) for r in rows]

    def _ids(self, ids: Sequence[int]) -> list[int] | str:
        """``ids`` bound as ``_ids_of_batch`` reads them: an array literal on PostgreSQL."""
        if self.is_postgres:
            return "{" + ",".join([str(int(i)) for i in ids]) + "}"
        return list(ids)

    def active_suppressed(
        self, conn: sa.Connection, campaign: str, scopes: Sequence[str]
    ) -> list[EnrollmentRow]:
        """Active enrollments whose mailbox is suppressed in one of ``scopes`` (``global``
        and, unless the campaign is transactional, its list's): the scopes its T4 checks."""
        listed = sa.exists().where(
            suppression.c.address == E.mailbox, suppression.c.scope.in_(list(scopes))
        )
        rows = conn.execute(
            sa.select(*COLUMNS)
            .where(E.campaign == campaign, E.state == ACTIVE, listed)
            .order_by(E.id)
        )
        return [enrollment_row(r) for r in rows]

    def by_ids(self, conn: sa.Connection, ids: Sequence[int]) -> list[EnrollmentRow]:
        found: list[EnrollmentRow] = []
        for start in range(0, len(ids), CHUNK):
            chunk = self._ids(ids[start : start + CHUNK])
            found += [enrollment_row(r) for r in conn.execute(self._sql.by_ids, {"ids": chunk})]
        return found

    def lock(self, conn: sa.Connection, ids: Sequence[int]) -> None:
        """Lock these enrollments' rows in id order (PostgreSQL; SQLite has one writer).

        Every scheduler takes enrollment rows in id order, so two passes wait for each other
        instead of deadlocking. A batched UPDATE locks its rows in whatever order its plan
        reads them, so a transaction that changes many takes their locks here first.
        """
        if not self.is_postgres:
            return
        ordered = sorted(set(ids))
        for start in range(0, len(ordered), CHUNK):
            conn.execute(self._sql.lock, {"ids": self._ids(ordered[start : start + CHUNK])}).all()

    def advance_many(self, conn: sa.Connection, moves: Sequence[tuple[int, int]]) -> set[int]:
        """Each (enrollment id, from_step): ``next_step`` from ``from_step`` to the next.

        Returns the ids that moved. An id missing from it was moved (or ended) by another
        scheduler first: the caller must not write its step (``move_many``).
        """
        return self.move_many(conn, [(i, step, step + 1) for i, step in moves])

    def move_many(self, conn: sa.Connection, moves: Sequence[tuple[int, int, int]]) -> set[int]:
        """Each (enrollment id, from_step, to_step): ``next_step`` from ``from_step`` to
        ``to_step`` if the enrollment is active and still at ``from_step``; returns the ids that
        moved. One guarded UPDATE per (from, to) and chunk, not one per enrollment (``lock``
        the rows first on PostgreSQL)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for enrollment_id, from_step, to_step in moves:
            groups.setdefault((from_step, to_step), []).append(enrollment_id)
        moved: set[int] = set()
        for (from_step, to_step), ids in sorted(groups.items()):
            ordered = sorted(ids)
            for start in range(0, len(ordered), CHUNK):
                params = {
                    "ids": self._ids(ordered[start : start + CHUNK]),
                    "from_step": from_step,
                    "to_step": to_step,
                }
                moved.update(conn.execute(self._sql.advance, params).scalars())
        return moved

    def finish_many(
        self, conn: sa.Connection, ids: Sequence[int], state: str, *, reason: str | None = None
    ) -> dict[int, int]:
        """These active enrollments to ``state`` (left, ended, done) with ``reason``; returns
        the ``next_step`` of each that was still active, as the UPDATE left it (the steps
        materialised). ``lock`` them first on PostgreSQL."""
        if state == ACTIVE:
            raise ValueError("finish_many() ends enrollments")
        ordered = sorted(set(ids))
        finished: dict[int, int] = {}
        for start in range(0, len(ordered), CHUNK):
            params = {
                "ids": self._ids(ordered[start : start + CHUNK]),
                "to_state": state,
                "reason": reason,
            }
            finished.update(
                (row.id, row.next_step) for row in conn.execute(self._sql.finish, params)
            )
        return finished

    def counts(self, conn: sa.Connection, campaign: str) -> dict[str, int]:
        """Enrollments per state (every state present, zero included)."""
        counts = dict.fromkeys((ACTIVE, LEFT, ENDED, DONE), 0)
        rows = conn.execute(
            sa.select(E.state, sa.func.count()).where(E.campaign == campaign).group_by(E.state)
        )
        for state, n in rows:
            counts[state] = n
        return counts
