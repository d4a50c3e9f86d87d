"""Retention: drop the rendered payload of old finished jobs, keep everything that makes them
idempotent (docs/operations/retention.md).

A pruned job keeps its row: key (UNIQUE), key tuple, campaign, step, occurrence, mailbox, state,
outcome, counters and ``payload_hash``. So a re-fired trigger, a re-launch or an enrollment of
the same recipient still meets the key (``ON CONFLICT DO NOTHING``) and inserts nothing, and a
new campaign version with unchanged content still sees an unchanged hash. Only ``payload`` (the
rendered message: personal data, and most of the row's bytes) becomes empty, and, unless the
operator keeps it, the job's journal shrinks to its final event (the outcome: who, when, why).

An empty payload is what "pruned" means: no job is ever enqueued without one (a rendered message
always has headers, a webhook request always has a URL). ``payload_kept()`` is the predicate the
re-arming transitions (D1 dead retry, T9r resend) add to their guard, so a pruned job can never
go back to pending: its message no longer exists and must not be sent empty.

Nothing here is a transition: the state does not change, so no journal row is written (the state
machine has no self-loops, and a retention pass that appended a row per job would grow the table
it shrinks). The operator's action is logged by the caller (herald.app.prune).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from dbtypes import utc
from dispatch.models import send_event, send_job
from dispatch.outbox.base import SqlBase
from dispatch.outbox.keyed import with_keys
from dispatch.outbox.sqlcore import J, bound_state
from dispatch.states import TERMINAL, State

#: What a pruned job's payload is.
PRUNED_PAYLOAD = b""

#: Finished jobs: terminal, and no automatic path leads out of them. ``in_doubt`` is terminal
#: too, but waits for a decision (T9) or a policy resend (R4) that needs the message: never pruned.
PRUNABLE: frozenset[State] = TERMINAL - {State.IN_DOUBT}

#: Journal rows deleted per statement (well under SQLite's bound-parameter limit).
CHUNK = 500

E = send_event.c


def payload_kept() -> sa.ColumnElement[bool]:
    """The job still has its message. ``length`` of a bytea/blob reads the stored size (no
    de-TOASTing on PostgreSQL), so the guard costs nothing on large payloads."""
    kept: sa.ColumnElement[bool] = sa.func.length(J.payload) > 0
    return kept


def payload_pruned() -> sa.ColumnElement[bool]:
    pruned: sa.ColumnElement[bool] = sa.func.length(J.payload) == 0
    return pruned


@dataclass(frozen=True)
class PruneBatch:
    """What one batch (one transaction) did. ``last_id`` is where the next batch starts."""

    jobs: int
    payload_bytes: int  # as stored before compression: what the rendered messages weighed
    events: int  # journal rows deleted
    last_id: int | None  # None: nothing left to look at


@dataclass(frozen=True)
class PruneEstimate:
    jobs: int
    payload_bytes: int
    events: int


def _eligible(
    cutoff: datetime, campaign: str | None, *, by_id: bool = False
) -> list[sa.ColumnElement[bool]]:
    """Finished, unchanged since ``cutoff``, still carrying a payload (of ``campaign``).

    ``updated_at`` is set by every transition (and by a new version marking the job), so a job
    is only pruned once nothing has happened to it for the whole retention period. ``by_id``:
    for a statement that finds its rows by id, the states are bound (``sqlcore.guard``).
    Written in, they offered PostgreSQL the partial index of finished jobs, and on an outbox
    without statistics it read every finished job for each batch, testing each against the
    batch's ids: 1 s a batch of 5,000 at 20,000 jobs, growing with the outbox.
    """
    states = sorted(s.value for s in PRUNABLE)
    clauses = [
        J.state.in_(bound_state(states) if by_id else states),
        J.updated_at < utc(cutoff),
        payload_kept(),
    ]
    if campaign is not None:
        clauses.append(J.campaign == campaign)
    return clauses


def _not_last_event() -> sa.ColumnElement[bool]:
    """A journal row that is not its job's final one: below its job's last id, one probe of
    ix_send_event_job per row. A scalar sub-select is never turned into a join; as
    ``EXISTS (a later row)`` PostgreSQL made it a hash join over the WHOLE journal for each
    500 jobs trimmed when it had no statistics (0.1 s a chunk at 400,000 events, growing with
    the journal)."""
    later = sa.alias(send_event, "later")
    last = sa.select(sa.func.max(later.c.id)).where(later.c.job_id == E.job_id).scalar_subquery()
    return E.id < last


def _later_event() -> sa.Exists:
    """The same test for a count over every eligible job (the estimate): there a join over
    the whole journal is the right plan."""
    later = sa.alias(send_event, "later")
    return sa.exists().where(later.c.job_id == E.job_id, later.c.id > E.id)


_NO_JIT = sa.text("SELECT set_config('jit', 'off', true)")


def _has_jit(conn: sa.Connection) -> bool:
    """PostgreSQL 11 brought JIT (and its setting)."""
    version = conn.dialect.server_version_info
    return version is not None and version >= (11,)


class PruneOps(SqlBase):
    def prune_batch(
        self,
        conn: sa.Connection,
        *,
        cutoff: datetime,
        after_id: int,
        limit: int,
        campaign: str | None = None,
        keep_journal: bool = False,
    ) -> PruneBatch:
        """Prune up to ``limit`` eligible jobs with id > ``after_id``, in the caller's
        transaction: the payload and the journal trimming of a job commit together or not at
        all, so an interrupted pass leaves every job either untouched or fully pruned.

        The UPDATE repeats the whole eligibility test: a job re-armed or given new content
        between the read and the write (D1, a new version) is left alone.
        """
        if conn.dialect.name == "postgresql" and _has_jit(conn):
            # The batch's statements are short index probes, but the trim's estimate (the
            # journal rows of 500 jobs, each with its sub-select) passes jit_above_cost when the
            # tables have no statistics yet: compiling it took 80 ms, running it 4. Off for this
            # transaction only (set_config(…, true): it works through a transaction pooler).
            conn.execute(_NO_JIT)
        picked = conn.execute(
            sa.select(J.id, sa.func.length(J.payload).label("size"))
            .where(J.id > after_id, *_eligible(cutoff, campaign))
            .order_by(J.id)
            .limit(limit)
        ).all()
        if not picked:
            return PruneBatch(0, 0, 0, None)
        sizes = {row.id: int(row.size) for row in picked}
        done = conn.execute(
            sa.update(send_job)
            .where(J.id.in_(list(sizes)), *_eligible(cutoff, campaign, by_id=True))
            .values(payload=PRUNED_PAYLOAD)
            .returning(J.id)
        ).scalars()
        ids = sorted(done)
        events = 0 if keep_journal else self._trim_journal(conn, ids)
        return PruneBatch(len(ids), sum(sizes[i] for i in ids), events, max(sizes))

    def _trim_journal(self, conn: sa.Connection, job_ids: Sequence[int]) -> int:
        """Delete every journal row of these jobs but the last (the outcome)."""
        deleted = 0
        for start in range(0, len(job_ids), CHUNK):
            chunk = list(job_ids[start : start + CHUNK])
            gone = conn.execute(sa.delete(send_event).where(E.job_id.in_(chunk), _not_last_event()))
            deleted += gone.rowcount
        return deleted

    def prune_estimate(
        self,
        conn: sa.Connection,
        *,
        cutoff: datetime,
        campaign: str | None = None,
        keep_journal: bool = False,
    ) -> PruneEstimate:
        """What ``prune_batch`` would do to every eligible job now (a dry run: reads only)."""
        eligible = sa.select(J.id).where(*_eligible(cutoff, campaign))
        jobs, size = conn.execute(
            sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(J.payload)), 0))
            .select_from(send_job)
            .where(*_eligible(cutoff, campaign))
        ).one()
        events = 0
        if not keep_journal:
            events = conn.execute(
                sa.select(sa.func.count())
                .select_from(send_event)
                .where(E.job_id.in_(eligible.scalar_subquery()), _later_event())
            ).scalar_one()
        return PruneEstimate(int(jobs), int(size), int(events))

    def pruned_keys(self, conn: sa.Connection, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` whose payload was pruned (for operators' refusals)."""
        found: list[str] = []
        for start in range(0, len(keys), CHUNK):
            chunk = list(keys[start : start + CHUNK])
            found += conn.execute(
                sa.select(J.key).where(with_keys(chunk), payload_pruned())
            ).scalars()
        return found
