"""All SQL of the outbox: enqueue, claim, every guarded transition, recovery, operator queries.

Every transition is one conditional ``UPDATE … WHERE <guard> RETURNING`` (DESIGN §4) and writes
its ``send_event`` rows in the same transaction. Batched forms take many ``(id, token)`` leases at
once and return the ids whose guard held: a zombie worker's lease simply is not among them.

Methods take a ``Connection`` inside a transaction the caller owns, so a worker can group the
transitions of many concurrent sends into one commit, and the scheduler can enqueue jobs in the
same transaction that advances its fan-out cursor.

``dispatch`` imports nothing from the other packages; campaign status is read through a
lightweight table clause naming just the two columns the guards need.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from dbtypes import ForeignText, UtcTimestamp, db_now, db_now_plus, seconds, utc
from dispatch.models import send_event, send_job, suppression
from dispatch.states import State

# The campaign table belongs to the ``campaigns`` package; these are the only columns read here.
campaign_status = sa.table("campaign", sa.column("name"), sa.column("status"))

J = send_job.c

Lease = tuple[int, int]  # (job id, fencing token)


@dataclass(frozen=True)
class NewJob:
    key: str
    key_tuple: str
    campaign: str
    step: str
    occurrence_at: datetime
    channel: str
    sender: str
    recipient: str
    message_id: str
    payload: bytes
    not_before: datetime
    max_send_attempts: int = 5
    max_claims: int = 10
    in_doubt_policy: str = "hold"
    # The canonical identity of the recipient's mailbox (campaigns.addresses.mailbox_identity),
    # computed by the caller since dispatch cannot import campaigns. None stands for the
    # recipient as written (tests and benchmarks that build jobs by hand).
    mailbox: str | None = None


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    token: int
    key: str
    campaign: str
    step: str
    channel: str
    sender: str
    recipient: str
    message_id: str
    payload: bytes
    claims: int
    send_attempts: int
    max_send_attempts: int

    @property
    def lease(self) -> Lease:
        return (self.id, self.token)


@dataclass(frozen=True)
class Completion:
    """The result of a worker-side transition request for one lease."""

    lease: Lease
    target: State  # sent, pending (retry), failed, in_doubt
    code: int | None = None
    text: str = ""
    retry_in: float = 0.0  # seconds, for target=pending
    in_doubt_reason: str | None = None
    before_data: bool = False  # T6: the job never reached sending (error before DATA)


@dataclass
class RecoveryReport:
    released: int = 0  # category 1: claimed, never started -> pending
    in_doubt: int = 0  # category 2: started, outcome unknown -> in_doubt
    dead: int = 0  # category 3: exhausted -> failed
    resent: int = 0  # in_doubt jobs whose channel policy allows an automatic resend
    details: list[tuple[int, str, str]] = field(default_factory=list)  # (job id, to, why)


def _leases_in(leases: Iterable[Lease]) -> sa.ColumnElement[bool]:
    return sa.tuple_(J.id, J.lease_token).in_(list(leases))


def _campaign_not_active() -> sa.Exists:
    return sa.exists().where(
        campaign_status.c.name == J.campaign, campaign_status.c.status != "active"
    )


def _campaign_has_status(status: str) -> sa.Exists:
    return sa.exists().where(
        campaign_status.c.name == J.campaign, campaign_status.c.status == status
    )


def _campaign_active() -> sa.ColumnElement[bool]:
    """``campaign NOT IN (inactive names)``: a hashed subplan, planned well without statistics.

    The equivalent ``NOT EXISTS`` becomes an anti-join whose estimate, on a campaign table that
    was never analysed (autovacuum skips tables under 50 changed rows), makes PostgreSQL sort the
    whole pending backlog on every claim instead of reading the due index in order.
    """
    inactive = sa.select(campaign_status.c.name).where(campaign_status.c.status != "active")
    active: sa.ColumnElement[bool] = J.campaign.not_in(inactive)
    return active


def _unnest(**columns: Any) -> Any:
    """``unnest(:v_a, :v_b, …) AS v(a, b, …)``: one constant-shape statement for any batch size."""
    fn = sa.func.unnest(
        *[sa.bindparam(f"v_{name}", type_=postgresql.ARRAY(t)) for name, t in columns.items()]
    )
    return fn.table_valued(*[sa.column(name, t) for name, t in columns.items()]).render_derived(
        name="v"
    )


def _journalled(update: Any, source: Any, target: str, detail: Any = None) -> sa.Select[Any]:
    """PostgreSQL: the transition and its journal rows in ONE statement (data-modifying CTEs)."""
    done = update.cte("done")
    journal = (
        sa.insert(send_event)
        .from_select(
            ["job_id", "token", "from_state", "to_state", "actor", "detail"],
            sa.select(
                done.c.id,
                done.c.lease_token,
                source if isinstance(source, sa.ColumnElement) else sa.literal(source, sa.String()),
                sa.literal(target, sa.String()),
                sa.bindparam("actor", type_=sa.String()),
                done.c.detail if detail is not None else sa.null(),
            ),
        )
        .cte("journal")
    )
    return sa.select(done).add_cte(journal)


def _suppressed() -> sa.Exists:
    # On the mailbox identity, never the spelling: a suppressed mailbox stays suppressed
    # however an audience writes it.
    return sa.exists().where(suppression.c.address == J.mailbox)


def _per_row(values: Mapping[int, Any], type_: Any) -> sa.Case[Any]:
    """``CASE id WHEN … THEN …``: one UPDATE that sets a different value on every row."""
    return sa.case(
        {job_id: sa.literal(value, type_) for job_id, value in values.items()},
        value=J.id,
    )


def payload_hash(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


class OutboxStore:
    """The outbox's SQL. Stateless apart from the dialect; safe to share between threads."""

    def __init__(self, dialect_name: str) -> None:
        self.dialect = dialect_name
        self.is_postgres = dialect_name == "postgresql"

    # ---------------------------------------------------------------- journal

    def _journal(
        self,
        conn: sa.Connection,
        rows: Sequence[tuple[int, int, str | None, str, str | None]],
        actor: str,
    ) -> None:
        """Append (job_id, token, from, to, detail) events in the caller's transaction."""
        if not rows:
            return
        conn.execute(
            sa.insert(send_event).values(at=db_now(), actor=actor),
            [
                {
                    "job_id": r[0],
                    "token": r[1],
                    "from_state": r[2],
                    "to_state": r[3],
                    "detail": r[4],
                }
                for r in rows
            ],
        )

    # ---------------------------------------------------------------- T1 enqueue

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
        values = [
            {
                "key": job.key,
                "key_tuple": job.key_tuple,
                "campaign": job.campaign,
                "step": job.step,
                "occurrence_at": job.occurrence_at,
                "channel": job.channel,
                "sender": job.sender,
                "recipient": job.recipient,
                "mailbox": job.recipient if job.mailbox is None else job.mailbox,
                "message_id": job.message_id,
                "payload": job.payload,
                "payload_hash": payload_hash(job.payload),
                "state": State.PENDING.value,
                "not_before": job.not_before,
                "claims": 0,
                "max_claims": job.max_claims,
                "send_attempts": 0,
                "max_send_attempts": job.max_send_attempts,
                "lease_token": 0,
                "in_doubt_policy": job.in_doubt_policy,
            }
            for job in jobs
        ]
        insert = (postgresql.insert if self.is_postgres else sqlite.insert)(send_job)
        # executemany: one cached compile, batched by SQLAlchemy's "insertmanyvalues" into
        # multi-row INSERT … RETURNING statements (instead of compiling 19 × N bind params).
        # No conflict target: both UNIQUE indexes (key, and campaign/step/occurrence/mailbox)
        # make a row a no-op, whichever one it hits.
        stmt = insert.on_conflict_do_nothing().returning(J.id)
        inserted = [row.id for row in conn.execute(stmt, values)]
        if replace_pending and len(inserted) < len(values):
            # Only rows nobody has claimed yet take the new version's payload; anything
            # claimed or beyond keeps what it had (a sent key stays sent).
            conn.execute(
                sa.update(send_job)
                .where(
                    J.key == sa.bindparam("b_key"),
                    J.recipient == sa.bindparam("b_recipient"),
                    J.state == State.PENDING.value,
                    J.payload_hash != sa.bindparam("b_hash"),
                )
                .values(
                    payload=sa.bindparam("b_payload"),
                    payload_hash=sa.bindparam("b_hash"),
                    not_before=sa.bindparam("b_not_before", type_=UtcTimestamp()),
                    max_send_attempts=sa.bindparam("b_max"),
                    updated_at=db_now(),
                ),
                [
                    {
                        "b_key": v["key"],
                        "b_recipient": v["recipient"],
                        "b_hash": v["payload_hash"],
                        "b_payload": v["payload"],
                        "b_not_before": v["not_before"],
                        "b_max": v["max_send_attempts"],
                    }
                    for v in values
                ],
            )
        self._journal(
            conn, [(job_id, 0, None, State.PENDING.value, None) for job_id in inserted], "scheduler"
        )
        return len(inserted)

    # ---------------------------------------------------------------- T2 claim

    def claim(
        self, conn: sa.Connection, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs in one statement; each gets a new fencing token."""
        due = (
            sa.select(J.id)
            .where(
                J.state == State.PENDING.value,
                J.not_before <= db_now(),
                J.claims < J.max_claims,  # poison jobs wait for recovery's dead letter
                _campaign_active(),
            )
            .order_by(J.not_before, J.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        values = dict(
            state=State.CLAIMED.value,
            lease_token=J.lease_token + 1,
            lease_owner=owner,
            lease_expires_at=db_now_plus(seconds(lease_seconds)),
            claims=J.claims + 1,
            updated_at=db_now(),
        )
        columns = (
            J.id,
            J.lease_token,
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
        )
        if self.is_postgres:
            # A MATERIALIZED CTE is evaluated exactly once and joined by primary key.
            picked = due.cte("picked").prefix_with("MATERIALIZED")
            update = (
                sa.update(send_job)
                .where(J.id == picked.c.id, J.state == State.PENDING.value)
                .values(**values)
                .returning(*columns, sa.null().label("detail"))
            )
            stmt: Any = _journalled(update, State.PENDING.value, State.CLAIMED.value)
            rows = list(conn.execute(stmt, {"actor": owner}))
        else:
            stmt = (
                sa.update(send_job)
                .where(J.id.in_(due.scalar_subquery()), J.state == State.PENDING.value)
                .values(**values)
                .returning(*columns)
            )
            rows = list(conn.execute(stmt))
        rows.sort(key=lambda r: (r.not_before, r.id))
        jobs = [
            ClaimedJob(
                id=r.id,
                token=r.lease_token,
                key=r.key,
                campaign=r.campaign,
                step=r.step,
                channel=r.channel,
                sender=r.sender,
                recipient=r.recipient,
                message_id=r.message_id,
                payload=bytes(r.payload),
                claims=r.claims,
                send_attempts=r.send_attempts,
                max_send_attempts=r.max_send_attempts,
            )
            for r in rows
        ]
        if not self.is_postgres:
            self._journal(
                conn,
                [(j.id, j.token, State.PENDING.value, State.CLAIMED.value, None) for j in jobs],
                owner,
            )
        return jobs

    # ---------------------------------------------------------------- T3 heartbeat

    def heartbeat(
        self, conn: sa.Connection, leases: Sequence[Lease], *, lease_seconds: float
    ) -> set[int]:
        """Extend live leases. An expired lease is never revived: its job may be someone else's."""
        if not leases:
            return set()
        stmt = (
            sa.update(send_job)
            .where(
                _leases_in(leases),
                J.state.in_([State.CLAIMED.value, State.SENDING.value]),
                J.lease_expires_at > db_now(),
            )
            .values(lease_expires_at=db_now_plus(seconds(lease_seconds)))
            .returning(J.id)
        )
        return {row.id for row in conn.execute(stmt)}

    # ---------------------------------------------------------------- T4 start send

    def start_sends(
        self, conn: sa.Connection, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> set[int]:
        """claimed → sending: the only door to a send. Returns the ids that may go out."""
        if not leases:
            return set()
        if self.is_postgres:
            v = _unnest(id=sa.BigInteger(), token=sa.BigInteger())
            update = (
                sa.update(send_job)
                .where(
                    J.id == v.c.id,
                    J.lease_token == v.c.token,
                    J.state == State.CLAIMED.value,
                    J.lease_expires_at > db_now_plus(sa.bindparam("margin", type_=sa.Float())),
                    J.send_attempts < J.max_send_attempts,
                    J.superseded_at.is_(None),
                    ~_suppressed(),
                    _campaign_active(),
                )
                .values(
                    state=State.SENDING.value,
                    send_attempts=J.send_attempts + 1,
                    send_started_at=db_now(),
                    updated_at=db_now(),
                )
                .returning(J.id, J.lease_token, sa.null().label("detail"))
            )
            rows = conn.execute(
                _journalled(update, State.CLAIMED.value, State.SENDING.value),
                {
                    "v_id": [i for i, _ in leases],
                    "v_token": [t for _, t in leases],
                    "margin": float(margin_seconds),
                    "actor": actor,
                },
            )
            return {row.id for row in rows}
        stmt = (
            sa.update(send_job)
            .where(
                _leases_in(leases),
                J.state == State.CLAIMED.value,
                J.lease_expires_at > db_now_plus(seconds(margin_seconds)),
                J.send_attempts < J.max_send_attempts,
                J.superseded_at.is_(None),  # a replaced version's payload never goes out
                ~_suppressed(),
                ~_campaign_not_active(),
            )
            .values(
                state=State.SENDING.value,
                send_attempts=J.send_attempts + 1,
                send_started_at=db_now(),
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        started = [(row.id, row.lease_token) for row in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.CLAIMED.value, State.SENDING.value, None) for i, t in started],
            actor,
        )
        return {i for i, _ in started}

    def settle_unstartable(
        self, conn: sa.Connection, leases: Sequence[Lease], *, actor: str
    ) -> dict[int, State]:
        """Decide what happens to claimed jobs whose T4 guard failed, most final reason first.

        Superseded by a new version → cancelled; suppressed → failed; campaign cancelled →
        cancelled; attempts used up → failed; anything else (campaign paused, too little lease
        left) → back to pending untouched. Jobs whose lease is no longer ours match none of
        these and are left alone.
        """
        remaining = list(leases)
        settled: dict[int, State] = {}
        rules: list[tuple[sa.ColumnElement[bool], State, str]] = [
            (J.superseded_at.is_not(None), State.CANCELLED, "superseded"),
            (_suppressed(), State.FAILED, "recipient is suppressed"),
            (_campaign_has_status("cancelled"), State.CANCELLED, "campaign cancelled"),
            (J.send_attempts >= J.max_send_attempts, State.FAILED, "send attempts exhausted"),
            (sa.true(), State.PENDING, "released before sending"),
        ]
        for condition, target, why in rules:
            if not remaining:
                break
            values: dict[str, Any] = {
                "state": target.value,
                "lease_owner": None,
                "lease_expires_at": None,
                "updated_at": db_now(),
            }
            if target is not State.PENDING:
                values.update(outcome_text=why, outcome_at=db_now())
            stmt = (
                sa.update(send_job)
                .where(_leases_in(remaining), J.state == State.CLAIMED.value, condition)
                .values(**values)
                .returning(J.id, J.lease_token)
            )
            done = [(row.id, row.lease_token) for row in conn.execute(stmt)]
            self._journal(
                conn, [(i, t, State.CLAIMED.value, target.value, why) for i, t in done], actor
            )
            for job_id, _ in done:
                settled[job_id] = target
            remaining = [lease for lease in remaining if lease[0] not in settled]
        return settled

    # ---------------------------------------------------------------- T5–T8 outcomes

    def complete(
        self, conn: sa.Connection, completions: Sequence[Completion], *, actor: str
    ) -> set[int]:
        """Apply worker outcomes; each kind is one guarded UPDATE. Returns the ids applied.

        T5 (→ sent) accepts ``sending`` or ``in_doubt``: a 250 that arrives after recovery
        marked the job in doubt still proves delivery. Every other outcome needs ``sending``
        (T7, T8) or ``claimed`` (T6, for failures before DATA) with the same token.
        """
        applied: set[int] = set()
        by_kind: dict[tuple[State, tuple[State, ...]], list[Completion]] = {}
        for c in completions:
            by_kind.setdefault((c.target, self._sources_for(c)), []).append(c)
        for (target, sources), group in by_kind.items():
            for source in sources:
                pending = [c for c in group if c.lease[0] not in applied]
                if not pending:
                    break
                applied |= self._apply(conn, pending, source, target, actor)
        return applied

    @staticmethod
    def _sources_for(c: Completion) -> tuple[State, ...]:
        if c.target is State.SENT:
            return (State.SENDING, State.IN_DOUBT)
        if c.before_data:
            return (State.CLAIMED,)
        return (State.SENDING,)

    def _apply(
        self,
        conn: sa.Connection,
        group: Sequence[Completion],
        source: State,
        target: State,
        actor: str,
    ) -> set[int]:
        if self.is_postgres:
            return self._apply_pg(conn, group, source, target, actor)
        values: dict[str, Any] = {
            "state": target.value,
            "updated_at": db_now(),
            "outcome_code": _per_row({c.lease[0]: c.code for c in group}, sa.Integer()),
            "outcome_text": _per_row({c.lease[0]: c.text for c in group}, ForeignText()),
            "outcome_at": db_now(),
        }
        if target in (State.SENT, State.FAILED, State.PENDING):
            values.update(lease_owner=None, lease_expires_at=None)
        if target is State.PENDING:
            values["not_before"] = sa.case(
                {c.lease[0]: db_now_plus(seconds(c.retry_in)) for c in group},
                value=J.id,
            )
        if target is State.IN_DOUBT:
            values["in_doubt_reason"] = _per_row(
                {c.lease[0]: c.in_doubt_reason or c.text for c in group}, ForeignText()
            )
            values.update(lease_owner=None)
        stmt = (
            sa.update(send_job)
            .where(_leases_in(c.lease for c in group), J.state == source.value)
            .values(**values)
            .returning(J.id, J.lease_token)
        )
        done = [(row.id, row.lease_token) for row in conn.execute(stmt)]
        texts = {c.lease[0]: _event_detail(c) for c in group}
        self._journal(conn, [(i, t, source.value, target.value, texts[i]) for i, t in done], actor)
        return {i for i, _ in done}

    def _apply_pg(
        self,
        conn: sa.Connection,
        group: Sequence[Completion],
        source: State,
        target: State,
        actor: str,
    ) -> set[int]:
        v = _unnest(
            id=sa.BigInteger(),
            token=sa.BigInteger(),
            code=sa.Integer(),
            text=ForeignText(),
            detail=ForeignText(),
            retry_in=sa.Float(),
            reason=ForeignText(),
        )
        values: dict[str, Any] = {
            "state": target.value,
            "updated_at": db_now(),
            "outcome_code": v.c.code,
            "outcome_text": v.c.text,
            "outcome_at": db_now(),
        }
        if target in (State.SENT, State.FAILED, State.PENDING):
            values.update(lease_owner=None, lease_expires_at=None)
        if target is State.PENDING:
            values["not_before"] = db_now_plus(v.c.retry_in)
        if target is State.IN_DOUBT:
            values["in_doubt_reason"] = v.c.reason
            values.update(lease_owner=None)
        update = (
            sa.update(send_job)
            .where(J.id == v.c.id, J.lease_token == v.c.token, J.state == source.value)
            .values(**values)
            .returning(J.id, J.lease_token, v.c.detail)
        )
        params = {
            "v_id": [c.lease[0] for c in group],
            "v_token": [c.lease[1] for c in group],
            "v_code": [c.code for c in group],
            "v_text": [c.text for c in group],
            "v_detail": [_event_detail(c) for c in group],
            "v_retry_in": [float(c.retry_in) for c in group],
            "v_reason": [c.in_doubt_reason or c.text for c in group],
            "actor": actor,
        }
        rows = conn.execute(_journalled(update, source.value, target.value, detail=True), params)
        return {row.id for row in rows}

    def lease_state(self, conn: sa.Connection, leases: Sequence[Lease]) -> dict[int, str]:
        """Current state of the rows that still carry these tokens (for commit-unknown checks)."""
        if not leases:
            return {}
        rows = conn.execute(sa.select(J.id, J.state).where(_leases_in(leases)))
        return {row.id: row.state for row in rows}

    # ---------------------------------------------------------------- recovery R1–R3

    def recover(self, conn: sa.Connection, *, grace_seconds: float, actor: str) -> RecoveryReport:
        """Recover only leases that expired on the database clock more than ``grace`` ago."""
        report = RecoveryReport()
        expired = J.lease_expires_at < db_now_plus(seconds(-grace_seconds))

        # R1 (+R3 for poison jobs): claimed, never started.
        poison = J.claims >= J.max_claims
        stmt = (
            sa.update(send_job)
            .where(J.state == State.CLAIMED.value, expired)
            .values(
                state=sa.case((poison, State.FAILED.value), else_=State.PENDING.value),
                outcome_text=sa.case(
                    (poison, "poison: lease expired before sending on every claim"),
                    else_=J.outcome_text,
                ),
                outcome_at=sa.case((poison, db_now()), else_=J.outcome_at),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token, J.state)
        )
        rows = [(r.id, r.lease_token, r.state) for r in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.CLAIMED.value, s, "lease expired before sending") for i, t, s in rows],
            actor,
        )
        report.released = sum(1 for _, _, s in rows if s == State.PENDING.value)
        report.dead += sum(1 for _, _, s in rows if s == State.FAILED.value)
        report.details += [(i, s, "lease expired before sending") for i, _, s in rows]

        # R2: started, outcome unknown. Never resent automatically for email.
        reason = "lease expired during send"
        stmt = (
            sa.update(send_job)
            .where(J.state == State.SENDING.value, expired)
            .values(
                state=State.IN_DOUBT.value,
                in_doubt_reason=reason,
                lease_owner=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        rows2 = [(r.id, r.lease_token) for r in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.SENDING.value, State.IN_DOUBT.value, reason) for i, t in rows2],
            actor,
        )
        report.in_doubt = len(rows2)
        report.details += [(i, State.IN_DOUBT.value, reason) for i, _ in rows2]

        # R3: pending jobs with nothing left to spend.
        exhausted = sa.or_(J.send_attempts >= J.max_send_attempts, J.claims >= J.max_claims)
        why = "attempts exhausted"
        stmt = (
            sa.update(send_job)
            .where(J.state == State.PENDING.value, exhausted)
            .values(
                state=State.FAILED.value, outcome_text=why, outcome_at=db_now(), updated_at=db_now()
            )
            .returning(J.id, J.lease_token)
        )
        rows3 = [(r.id, r.lease_token) for r in conn.execute(stmt)]
        self._journal(
            conn, [(i, t, State.PENDING.value, State.FAILED.value, why) for i, t in rows3], actor
        )
        report.dead += len(rows3)
        report.details += [(i, State.FAILED.value, why) for i, _ in rows3]

        # Channel policy: receivers that dedupe on Idempotency-Key may be sent to again.
        stmt = (
            sa.update(send_job)
            .where(
                J.state == State.IN_DOUBT.value,
                J.in_doubt_policy == "resend",
                J.send_attempts < J.max_send_attempts,
                J.superseded_at.is_(None),
            )
            .values(state=State.PENDING.value, resolution="policy: resend", updated_at=db_now())
            .returning(J.id, J.lease_token)
        )
        rows4 = [(r.id, r.lease_token) for r in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.IN_DOUBT.value, State.PENDING.value, "policy: resend") for i, t in rows4],
            actor,
        )
        report.resent = len(rows4)
        return report

    def release_claims(
        self, conn: sa.Connection, leases: Sequence[Lease], *, actor: str
    ) -> set[int]:
        """Give unstarted claims back at once (graceful shutdown, or a transport that cannot
        be used as configured), guarded by token.

        The claim is not counted: ``claims`` limits jobs that keep killing the workers that
        claim them (poison), and a job handed back untried has done nothing of the sort.
        Counted, ten runs of a worker with a wrong relay setting would dead-letter every job.
        """
        if not leases:
            return set()
        stmt = (
            sa.update(send_job)
            .where(_leases_in(leases), J.state == State.CLAIMED.value)
            .values(
                state=State.PENDING.value,
                claims=J.claims - 1,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        done = [(row.id, row.lease_token) for row in conn.execute(stmt)]
        self._journal(
            conn,
            [
                (i, t, State.CLAIMED.value, State.PENDING.value, "released at shutdown")
                for i, t in done
            ],
            actor,
        )
        return {i for i, _ in done}

    # ---------------------------------------------------------------- T10 cancel

    def cancel_campaign(self, conn: sa.Connection, campaign: str, *, actor: str) -> int:
        """Cancel everything not yet past T4. A job already sending goes out."""
        stmt = (
            sa.update(send_job)
            .where(
                J.campaign == campaign,
                J.state.in_([State.PENDING.value, State.CLAIMED.value]),
            )
            .values(
                state=State.CANCELLED.value,
                lease_owner=None,
                lease_expires_at=None,
                outcome_text="campaign cancelled",
                outcome_at=db_now(),
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        total = 0
        # One statement per source state, so each journal row names where the job came from.
        for source in (State.PENDING, State.CLAIMED):
            rows = [
                (r.id, r.lease_token) for r in conn.execute(stmt.where(J.state == source.value))
            ]
            self._journal(
                conn,
                [
                    (i, t, source.value, State.CANCELLED.value, "campaign cancelled")
                    for i, t in rows
                ],
                actor,
            )
            total += len(rows)
        return total

    # ---------------------------------------------------------------- operator (T9, dead retry)

    def resolve_in_doubt(
        self,
        conn: sa.Connection,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        target: State,
        actor: str,
        why: str,
    ) -> list[tuple[int, str]]:
        """T9: an operator's explicit decision for in-doubt jobs. Returns (id, key) changed."""
        values: dict[str, Any] = {
            "state": target.value,
            "resolution": f"{actor}: {why}",
            "updated_at": db_now(),
            "lease_owner": None,
            "lease_expires_at": None,
        }
        if target is State.PENDING:
            # Re-arming grants one more transmission, recorded in the journal with who and why.
            values.update(
                max_send_attempts=sa.func.greatest(J.max_send_attempts, J.send_attempts + 1)
                if self.is_postgres
                else sa.func.max(J.max_send_attempts, J.send_attempts + 1),
                not_before=db_now(),
            )
        # A superseded payload is never re-armed (dispatch.supersede); deciding it is allowed.
        rearmable = [J.superseded_at.is_(None)] if target is State.PENDING else []
        stmt = (
            sa.update(send_job)
            .where(J.state == State.IN_DOUBT.value, *rearmable, *self._selection(keys, campaign))
            .values(**values)
            .returning(J.id, J.lease_token, J.key)
        )
        rows = [(r.id, r.lease_token, r.key) for r in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.IN_DOUBT.value, target.value, why) for i, t, _ in rows],
            actor,
        )
        return [(i, k) for i, _, k in rows]

    def retry_dead(
        self,
        conn: sa.Connection,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        actor: str,
    ) -> list[tuple[int, str]]:
        """Re-arm failed jobs: fresh attempt and claim budgets, due now."""
        stmt = (
            sa.update(send_job)
            .where(
                J.state == State.FAILED.value,
                J.superseded_at.is_(None),  # never re-arm a replaced version's payload
                *self._selection(keys, campaign),
            )
            .values(
                state=State.PENDING.value,
                max_send_attempts=J.send_attempts + J.max_send_attempts,
                max_claims=J.claims + J.max_claims,
                not_before=db_now(),
                resolution=f"{actor}: dead retry",
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token, J.key)
        )
        rows = [(r.id, r.lease_token, r.key) for r in conn.execute(stmt)]
        self._journal(
            conn,
            [(i, t, State.FAILED.value, State.PENDING.value, "dead retry") for i, t, _ in rows],
            actor,
        )
        return [(i, k) for i, _, k in rows]

    @staticmethod
    def _selection(
        keys: Sequence[str] | None, campaign: str | None
    ) -> list[sa.ColumnElement[bool]]:
        clauses: list[sa.ColumnElement[bool]] = []
        if keys is not None:
            clauses.append(J.key.in_(list(keys)))
        if campaign is not None:
            clauses.append(J.campaign == campaign)
        return clauses

    # ---------------------------------------------------------------- reads

    def counts(
        self, conn: sa.Connection, campaign: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        """(campaign, step, state, count) for status displays."""
        stmt = sa.select(J.campaign, J.step, J.state, sa.func.count()).group_by(
            J.campaign, J.step, J.state
        )
        if campaign is not None:
            stmt = stmt.where(J.campaign == campaign)
        return [(r[0], r[1], r[2], r[3]) for r in conn.execute(stmt)]

    def jobs_in_state(
        self,
        conn: sa.Connection,
        state: State,
        *,
        campaign: str | None = None,
        limit: int | None = None,
    ) -> list[sa.Row[Any]]:
        stmt = (
            sa.select(
                J.id,
                J.key,
                J.campaign,
                J.step,
                J.recipient,
                J.message_id,
                J.state,
                J.send_attempts,
                J.claims,
                J.outcome_code,
                J.outcome_text,
                J.in_doubt_reason,
                J.send_started_at,
                J.updated_at,
            )
            .where(J.state == state.value)
            .order_by(J.id)
        )
        if campaign is not None:
            stmt = stmt.where(J.campaign == campaign)
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(conn.execute(stmt))

    def events(
        self, conn: sa.Connection, job_ids: Sequence[int] | None = None
    ) -> list[sa.Row[Any]]:
        E = send_event.c
        stmt = sa.select(
            E.job_id, E.token, E.from_state, E.to_state, E.actor, E.detail, E.at
        ).order_by(E.job_id, E.id)
        if job_ids is not None:
            stmt = stmt.where(E.job_id.in_(list(job_ids)))
        return list(conn.execute(stmt))

    def has_work(self, conn: sa.Connection, horizon_seconds: float = 0.0) -> bool:
        """Anything leased, or pending and due within ``horizon_seconds``?

        ``--until-idle`` exits when not: a retry due in a few seconds is waited for, a step
        scheduled days ahead is not.
        """
        leased = sa.exists().where(J.state.in_([State.CLAIMED.value, State.SENDING.value]))
        due_soon = sa.exists().where(
            J.state == State.PENDING.value,
            J.not_before <= db_now_plus(seconds(horizon_seconds)),
            J.claims < J.max_claims,
            ~_campaign_not_active(),
        )
        return bool(conn.execute(sa.select(sa.or_(leased, due_soon))).scalar())

    def next_due_in(self, conn: sa.Connection) -> float | None:
        """Seconds until the earliest pending job is due (≤ 0 when one is due now)."""
        now = conn.execute(sa.select(db_now())).scalar_one()
        earliest = conn.execute(
            sa.select(sa.func.min(J.not_before)).where(
                J.state == State.PENDING.value, ~_campaign_not_active()
            )
        ).scalar()
        if earliest is None:
            return None
        if not isinstance(earliest, datetime):
            earliest = UtcTimestamp().process_result_value(earliest, conn.dialect)
        assert earliest is not None
        return float((earliest - now).total_seconds())

    def database_now(self, conn: sa.Connection) -> datetime:
        value: datetime = conn.execute(sa.select(db_now())).scalar_one()
        return value

    def suppress(self, conn: sa.Connection, mailbox: str, reason: str) -> bool:
        """Never send to ``mailbox`` again: its canonical identity, which the caller computes
        (campaigns.suppression). True if it was not suppressed before."""
        insert = (postgresql.insert if self.is_postgres else sqlite.insert)(suppression)
        stmt = (
            insert.values(address=mailbox, reason=reason)
            .on_conflict_do_nothing(index_elements=["address"])
            .returning(suppression.c.address)
        )
        return conn.execute(stmt).first() is not None


def _event_detail(c: Completion) -> str:
    code = f"{c.code} " if c.code is not None else ""
    return f"{code}{c.text}".strip()[:2000]


__all__ = [
    "ClaimedJob",
    "Completion",
    "Lease",
    "NewJob",
    "OutboxStore",
    "RecoveryReport",
    "utc",
]
