"""Getting work into and out of the queue: enqueue (T1), claim (T2), heartbeat (T3), and the
scheduler withdrawing work it enqueued (T14)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from dbtypes import db_now, db_now_plus, seconds
from dispatch.models import send_job, send_key
from dispatch.outbox import bulk_enqueue
from dispatch.outbox.base import SqlBase
from dispatch.outbox.jobs import (
    CLAIMED_FIELDS,
    ClaimedJob,
    Lease,
    NewJob,
    claimed_job,
    payload_hash,
)
from dispatch.outbox.keyed import K, with_keys
from dispatch.outbox.send import in_order
from dispatch.outbox.sqlcore import J, bound_state, guard, journal, leases_in, returned
from dispatch.states import LEASED, T, performs

KEYS_PER_STATEMENT = 500  # well under SQLite's bound-parameter limit

# What a claim returns after (id, lease_token), in this order: ClaimOps.claim unpacks by position.
CLAIM_COLUMNS: tuple[Any, ...] = (
    J.key,
    J.campaign,
    J.step,
    J.channel,
    J.sender,
    J.recipient,
    J.message_id,
    J.payload,
    J.claims,
    J.send_attempts,
    J.max_send_attempts,
    J.not_before,
    J.send_window,
)
# ``claimed_job`` fills the fields by position, from the RETURNING row: a field added to or
# moved in ClaimedJob must be placed here too.
assert (
    "id",
    "token",
    *(c.name for c in CLAIM_COLUMNS if c.name != "not_before"),
) == CLAIMED_FIELDS, CLAIMED_FIELDS


def job_rows(jobs: Sequence[NewJob]) -> list[dict[str, Any]]:
    """send_job's values for new jobs (T1's starting state and counters)."""
    return [
        {
            "key": job.key,
            "key_tuple": job.key_tuple,
            "campaign": job.campaign,
            "step": job.step,
            "occurrence_at": job.occurrence_at,
            "channel": job.channel,
            "sender": job.sender,
            "recipient": job.recipient,
            "mailbox": job.mailbox_identity,
            "message_id": job.message_id,
            "payload": job.payload,
            "payload_hash": payload_hash(job.payload),
            "state": T.ENQUEUE.target.value,
            "not_before": job.not_before,
            "send_window": job.send_window,
            "list_scope": job.list_scope,
            "claims": 0,
            "max_claims": job.max_claims,
            "send_attempts": 0,
            "max_send_attempts": job.max_send_attempts,
            "lease_token": 0,
            "in_doubt_policy": job.in_doubt_policy,
        }
        for job in jobs
    ]


class ClaimOps(SqlBase):
    @performs(T.ENQUEUE)
    def enqueue(
        self, conn: sa.Connection, jobs: Sequence[NewJob], *, replace_pending: bool = False
    ) -> int:
        """Insert jobs, ignoring any that exist. Returns how many rows were new.

        A job exists when its key does, or when its (campaign, step, occurrence, mailbox) does:
        jobs an older Herald keyed on another spelling of the same mailbox count as existing.

        With ``replace_pending`` (a new campaign version), a job that exists but is still
        pending gets the new payload when it is for the same key and the same spelling (so the
        envelope and the To header always agree, and the first of several spellings in one
        audience keeps the job); anything claimed or beyond keeps what it had.
        """
        if not jobs:
            return 0
        if bulk_enqueue.usable(conn):
            # PostgreSQL: COPY into a staging table, one INSERT … SELECT with its journal.
            return bulk_enqueue.copy_enqueue(conn, jobs, replace_pending=replace_pending)
        # Keys first (executemany, batched by SQLAlchemy's "insertmanyvalues" into multi-row
        # INSERT … RETURNING statements). No conflict target: both UNIQUE indexes of send_key
        # (key, and campaign/step/occurrence/mailbox) make a row a no-op, whichever one it hits,
        # and rows go in in the batch's order, so the first of several spellings of one mailbox
        # keeps the job. A job is created only for a key inserted here. Until the job exists,
        # its key row holds -(position in the batch + 1) as its job id: RETURNING says which
        # rows went in without comparing any value a round trip may have rounded.
        inserted = conn.execute(
            self.forms.insert(send_key).on_conflict_do_nothing().returning(K.job_id),
            [
                {
                    "key": job.key,
                    "job_id": -(position + 1),
                    "campaign": job.campaign,
                    "step": job.step,
                    "occurrence_at": job.occurrence_at,
                    "mailbox": job.mailbox_identity,
                }
                for position, job in enumerate(jobs)
            ],
        )
        positions = sorted(-placeholder - 1 for placeholder in inserted.scalars())
        chosen = [jobs[position] for position in positions]
        created: list[tuple[int, str]] = []
        if chosen:
            stmt = sa.insert(send_job).returning(J.id, J.key, sort_by_parameter_order=True)
            created = [(row.id, row.key) for row in conn.execute(stmt, job_rows(chosen))]
            conn.execute(
                sa.update(send_key)
                .where(K.key == sa.bindparam("b_key"))
                .values(job_id=sa.bindparam("b_id")),
                [{"b_key": key, "b_id": job_id} for job_id, key in created],
            )
        if replace_pending and len(created) < len(jobs):
            bulk_enqueue.replace_each(conn, jobs)
        journal(conn, T.ENQUEUE, [(job_id, 0, None) for job_id, _ in created], "scheduler")
        return len(created)

    @performs(T.CLAIM)
    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs in one statement; each gets a new fencing token."""
        with self.forms.in_index_order(conn):
            rows = self.forms.journalled(
                conn,
                "claim",
                self._claim_statement,
                T.CLAIM,
                actor=owner,
                returning=CLAIM_COLUMNS,
                params={
                    "claim_owner": owner,
                    "claim_limit": int(limit),
                    "claim_lease": float(lease_seconds),
                },
            )
        # By position (the RETURNING order: id, lease_token, then CLAIM_COLUMNS): a claim
        # builds up to hundreds of jobs, and a Row's attribute lookup by name costs more than
        # the rest of the job's construction. Row: id … message_id, payload, claims,
        # send_attempts, max_send_attempts, not_before (13), send_window (14).
        picked = sorted((tuple(r) for r in rows), key=lambda r: (r[13], r[0]))  # (not_before, id)
        return [claimed_job((*r[:9], bytes(r[9]), *r[10:13], r[14])) for r in picked]

    def _claim_statement(self) -> sa.Update:
        """The claim, built once per outbox (``forms.journalled``): owner, limit and lease
        length are parameters (``claim_owner``, ``claim_limit``, ``claim_lease``)."""
        # SQLite, which has no statistics to plan with, would search by the state index and
        # sort the whole backlog on every claim (quadratic: 25 ms per claim at 10,000 pending);
        # told that the state tests are not selective (``forms.filter_only``), and shown the
        # literal ``state = 'pending'`` of the partial due index, it reads the due index in
        # order and fetches the picked rows by rowid (tests/integration/test_claim_plan.py).
        due = (
            sa.select(J.id)
            .where(
                self.forms.filter_only(guard(T.CLAIM)),
                J.not_before <= db_now(),
                J.claims < J.max_claims,  # poison jobs wait for recovery's dead letter
                self.campaigns.active(),
            )
            .order_by(J.not_before, J.id)
            .limit(sa.bindparam("claim_limit", type_=sa.Integer()))
            .with_for_update(skip_locked=True)
        )
        return (
            sa.update(send_job)
            .where(self.forms.picked(due), self.forms.filter_only(guard(T.CLAIM, bound=True)))
            .values(
                state=T.CLAIM.target.value,
                lease_token=J.lease_token + 1,
                lease_owner=sa.bindparam("claim_owner", type_=sa.String()),
                lease_expires_at=db_now_plus(sa.bindparam("claim_lease", type_=sa.Float())),
                claims=J.claims + 1,
                updated_at=db_now(),
            )
        )

    @performs(T.WITHDRAWN)
    def withdraw(self, conn: sa.Connection, keys: Sequence[str], *, reason: str, actor: str) -> int:
        """Cancel these keys' jobs that are not yet past T4 (T14), with ``reason`` as their
        outcome. Returns how many were withdrawn.

        A claimed job is fenced as by T11: its worker's T4 needs ``state = 'claimed'`` and
        matches nothing. A job already sending, or finished, is left as it is.
        """
        total = 0
        for start in range(0, len(keys), KEYS_PER_STATEMENT):
            chunk = list(keys[start : start + KEYS_PER_STATEMENT])
            # One statement per source state, so each journal row names where its job came from.
            for source in in_order(T.WITHDRAWN.sources):
                stmt = (
                    sa.update(send_job)
                    .where(with_keys(chunk), guard(T.WITHDRAWN, source, bound=True))
                    .values(
                        state=T.WITHDRAWN.target.value,
                        lease_owner=None,
                        lease_expires_at=None,
                        outcome_text=reason,
                        outcome_at=db_now(),
                        updated_at=db_now(),
                    )
                    .returning(J.id, J.lease_token)
                )
                rows = returned(conn.execute(stmt), reason)
                journal(conn, T.WITHDRAWN, rows, actor, source=source)
                total += len(rows)
        return total

    def heartbeat(
        self, conn: sa.Connection, leases: Sequence[Lease], *, lease_seconds: float
    ) -> set[int]:
        """Extend live leases (no transition). An expired lease is never revived: its job may
        be someone else's."""
        if not leases:
            return set()
        stmt = (
            sa.update(send_job)
            .where(
                leases_in(leases),
                J.state.in_(bound_state(sorted(s.value for s in LEASED))),  # by lease: see guard
                J.lease_expires_at > db_now(),
            )
            .values(lease_expires_at=db_now_plus(seconds(lease_seconds)))
            .returning(J.id)
        )
        return {row.id for row in conn.execute(stmt)}
