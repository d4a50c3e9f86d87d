"""A new campaign version takes over the unsent work of the old one (T11–T13 in dispatch.states).

Everything here runs in the caller's transaction, the one that stores the new version, so the
switch is atomic: either the old version and all its jobs as they were, or the new version with

- every unsent job of a key the new version still has carrying the new content (a claim on
  changed content is released first: T12; a key an earlier version removed is re-armed: T13);
- every job of a key it removed unable to go out: pending and claimed ones are cancelled with
  reason ``superseded`` (T11) -- a worker holding such a claim is fenced, because T4 needs
  ``state = 'claimed'`` -- and ``sending``, ``failed`` and ``in_doubt`` ones carry
  ``superseded_at``, which T4 and the operator's re-arming commands refuse.

A job already ``sending`` cannot be stopped: its message may be on the wire. Only if it comes
back for a retry does the mark stop it.

The campaign's jobs are read once, ``FOR UPDATE`` (PostgreSQL; SQLite renders no row locks and
needs none: its BEGIN IMMEDIATE already serialises writers), so no worker can move one between
the decision and the write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dbtypes import db_now
from dispatch.models import send_job
from dispatch.outbox.jobs import NewJob, payload_hash
from dispatch.outbox.keyed import with_keys
from dispatch.outbox.send import in_order
from dispatch.outbox.sqlcore import J, JournalRow, guard, journal, journal_each, returned
from dispatch.states import State, T, performs

SUPERSEDED = "superseded"
CHUNK = 500  # ids per statement: well under SQLite's bound-parameter limit

# States whose job has not been sent; ``sent`` jobs are history and never touched.
_UNSENT = (
    State.PENDING,
    State.CLAIMED,
    State.SENDING,
    State.FAILED,
    State.IN_DOUBT,
    State.CANCELLED,
)


@dataclass(frozen=True)
class ExistingJob:
    id: int
    state: State
    token: int
    payload_hash: str
    superseded: bool


@dataclass
class VersionReport:
    cancelled: int = 0  # pending/claimed jobs of removed keys -> cancelled (superseded)
    marked: int = 0  # sending/failed/in_doubt jobs of removed keys, marked superseded
    updated: int = 0  # unsent jobs of kept keys that took the new content
    released: int = 0  # ... of which claims released back to pending (T12)
    restored: int = 0  # ... of which superseded-cancelled jobs re-armed (T13)


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


class VersionStore:
    def __init__(self, dialect_name: str) -> None:
        self.dialect = dialect_name

    def lock_campaign_jobs(self, conn: sa.Connection, campaign: str) -> dict[str, ExistingJob]:
        """key -> the campaign's unsent job, locked for the rest of the transaction."""
        stmt = (
            sa.select(J.id, J.key, J.state, J.lease_token, J.payload_hash, J.superseded_at)
            .where(J.campaign == campaign, J.state.in_([s.value for s in _UNSENT]))
            .with_for_update()
        )
        return {
            r.key: ExistingJob(
                r.id, State(r.state), r.lease_token, r.payload_hash, r.superseded_at is not None
            )
            for r in conn.execute(stmt)
        }

    @performs(T.NEW_CONTENT, T.RESTORED)
    def take_new_content(
        self,
        conn: sa.Connection,
        jobs: Sequence[NewJob],
        existing: dict[str, ExistingJob],
        *,
        version: int,
        actor: str,
        report: VersionReport,
    ) -> None:
        """Give the new payload to every unsent job of these (kept) keys."""
        updates: list[dict[str, Any]] = []
        released: list[JournalRow] = []
        restored: list[JournalRow] = []
        for job in jobs:
            found = existing.get(job.key)
            if found is None or found.state is State.SENDING:
                continue  # new (just inserted), or on the wire and beyond recall
            if found.state is State.CANCELLED and not found.superseded:
                continue  # cancelled by the operator, not by a version
            digest = payload_hash(job.payload)
            if digest == found.payload_hash and not found.superseded:
                continue  # unchanged content: a claim on it may go ahead
            # Pending, failed and in_doubt jobs keep their state (no transition, no event).
            target: State = found.state
            if found.state in T.NEW_CONTENT.sources:
                target = T.NEW_CONTENT.target
                released.append((found.id, found.token, f"new content v{version}"))
                report.released += 1
            elif found.state in T.RESTORED.sources:
                target = T.RESTORED.target
                restored.append((found.id, found.token, f"restored v{version}"))
                report.restored += 1
            updates.append(
                {
                    "b_id": found.id,
                    "b_from": found.state.value,
                    "b_state": target.value,
                    "b_payload": job.payload,
                    "b_recipient": job.recipient,
                    "b_hash": digest,
                    "b_not_before": job.not_before,
                    "b_window": job.send_window,
                    "b_scope": job.list_scope,
                    "b_max": job.max_send_attempts,
                }
            )
        if not updates:
            return
        conn.execute(
            sa.update(send_job)
            .where(J.id == sa.bindparam("b_id"), J.state == sa.bindparam("b_from"))
            .values(
                state=sa.bindparam("b_state"),
                payload=sa.bindparam("b_payload"),
                # One key is one mailbox; the new version may spell it differently, and the
                # envelope must name what the new payload's To header names.
                recipient=sa.bindparam("b_recipient"),
                payload_hash=sa.bindparam("b_hash"),
                not_before=sa.bindparam("b_not_before", type_=J.not_before.type),
                send_window=sa.bindparam("b_window"),
                # A new version may move the campaign to another list (or make it
                # transactional): its unsent jobs obey the new version's scope.
                list_scope=sa.bindparam("b_scope"),
                max_send_attempts=sa.bindparam("b_max"),
                superseded_at=None,
                # Every target (pending, failed, in_doubt) is a state without a lease.
                lease_owner=None,
                lease_expires_at=None,
                outcome_text=sa.case(
                    (J.state == State.CANCELLED.value, None), else_=J.outcome_text
                ),
                updated_at=db_now(),
            ),
            updates,
        )
        report.updated += len(updates)
        journal_each(conn, [(T.NEW_CONTENT, released), (T.RESTORED, restored)], actor)

    @performs(T.SUPERSEDED)
    def supersede_removed(
        self,
        conn: sa.Connection,
        existing: dict[str, ExistingJob],
        kept: set[str],
        *,
        actor: str,
        report: VersionReport,
    ) -> None:
        """Make every unsent job of a key the new version does not have unable to go out."""
        removed = [job for key, job in existing.items() if key not in kept]
        for source in in_order(T.SUPERSEDED.sources):
            ids = [job.id for job in removed if job.state is source]
            for chunk in _chunks(ids):
                rows = conn.execute(
                    sa.update(send_job)
                    .where(J.id.in_(chunk), guard(T.SUPERSEDED, source, bound=True))
                    .values(
                        state=T.SUPERSEDED.target.value,
                        superseded_at=db_now(),
                        lease_owner=None,
                        lease_expires_at=None,
                        outcome_text=SUPERSEDED,
                        outcome_at=db_now(),
                        updated_at=db_now(),
                    )
                    .returning(J.id, J.lease_token)
                ).all()
                journal(conn, T.SUPERSEDED, returned(rows, SUPERSEDED), actor, source=source)
                report.cancelled += len(rows)
        kept_out = (State.SENDING, State.FAILED, State.IN_DOUBT)
        ids = [job.id for job in removed if job.state in kept_out and not job.superseded]
        for chunk in _chunks(ids):
            done = conn.execute(
                sa.update(send_job)
                .where(J.id.in_(chunk), J.superseded_at.is_(None))
                .values(superseded_at=db_now(), updated_at=db_now())
            )
            report.marked += done.rowcount


def superseded_keys(conn: sa.Connection, keys: Sequence[str]) -> dict[str, str]:
    """key -> campaign, for those of ``keys`` whose payload a newer version replaced."""
    found: dict[str, str] = {}
    for start in range(0, len(keys), CHUNK):
        rows = conn.execute(
            sa.select(J.key, J.campaign).where(
                with_keys(keys[start : start + CHUNK]), J.superseded_at.is_not(None)
            )
        )
        found.update({r.key: r.campaign for r in rows})
    return found
