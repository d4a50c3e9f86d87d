"""Outbox tables: send_job, send_event, suppression (DESIGN §3).

The worker needs nothing but the send_job row: the payload is rendered at materialisation time.
Schema changes go through an Alembic migration in ``herald/migrations``; these models are what
the code reads and writes.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from dbtypes import ForeignText, UtcTimestamp, big_id, db_now


def _ts(nullable: bool = True, default_now: bool = False) -> sa.Column[datetime]:
    return sa.Column(
        UtcTimestamp(),
        nullable=nullable,
        server_default=db_now() if default_now else None,
    )


class SendJob(SQLModel, table=True):
    __tablename__ = "send_job"
    __table_args__ = (
        # The claim query's access path: due pending jobs in order.
        sa.Index(
            "ix_send_job_due",
            "not_before",
            "id",
            postgresql_where=sa.text("state = 'pending'"),
            sqlite_where=sa.text("state = 'pending'"),
        ),
        sa.Index("ix_send_job_campaign_state", "campaign", "step", "state"),
        sa.Index("ix_send_job_state_lease", "state", "lease_expires_at"),
        # One job per mailbox and message, whatever the key: the database itself refuses a
        # second job for another spelling of the same mailbox (migration 0003).
        sa.Index(
            "ux_send_job_mailbox",
            "campaign",
            "step",
            "occurrence_at",
            "mailbox",
            "mailbox_dup",
            unique=True,
        ),
    )

    id: int | None = Field(default=None, sa_column=sa.Column(big_id(), primary_key=True))
    key: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    key_tuple: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    campaign: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    step: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    occurrence_at: datetime = Field(sa_column=_ts(nullable=False))
    channel: str = Field(default="email", sa_column=sa.Column(sa.String(16), nullable=False))
    sender: str = Field(sa_column=sa.Column(sa.String(320), nullable=False))
    recipient: str = Field(sa_column=sa.Column(sa.String(320), nullable=False))  # as written
    # The canonical identity of the recipient's mailbox (campaigns.addresses.mailbox_identity):
    # what suppression and the one-job-per-mailbox rule compare.
    mailbox: str = Field(sa_column=sa.Column(sa.String(320), nullable=False))
    # 0 for the job that holds its mailbox. Only migration 0003 sets 1, 2, … on the extra jobs
    # an older Herald created for other spellings of one mailbox (kept as history; see 0003).
    mailbox_dup: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    message_id: str = Field(sa_column=sa.Column(sa.String(400), nullable=False))
    payload: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    payload_hash: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    state: str = Field(
        default="pending", sa_column=sa.Column(sa.String(16), nullable=False, default="pending")
    )
    not_before: datetime = Field(sa_column=_ts(nullable=False))
    claims: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, default=0))
    max_claims: int = Field(default=10, sa_column=sa.Column(sa.Integer, nullable=False))
    send_attempts: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, default=0)
    )
    max_send_attempts: int = Field(default=5, sa_column=sa.Column(sa.Integer, nullable=False))
    lease_owner: str | None = Field(default=None, sa_column=sa.Column(sa.String(128)))
    # The fencing token: incremented by every claim and never reset, so a token identifies
    # exactly one lease of one job forever (a re-armed job cannot hand an old token back out).
    lease_token: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, default=0)
    )
    lease_expires_at: datetime | None = Field(default=None, sa_column=_ts())
    send_started_at: datetime | None = Field(default=None, sa_column=_ts())
    outcome_code: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    outcome_text: str | None = Field(default=None, sa_column=sa.Column(ForeignText()))
    outcome_at: datetime | None = Field(default=None, sa_column=_ts())
    in_doubt_reason: str | None = Field(default=None, sa_column=sa.Column(ForeignText()))
    in_doubt_policy: str = Field(
        default="hold", sa_column=sa.Column(sa.String(16), nullable=False, default="hold")
    )
    resolution: str | None = Field(default=None, sa_column=sa.Column(ForeignText()))
    # Set when a new campaign version removed this job's key: its payload must never go out
    # (T4 refuses it; `dead retry` and `in-doubt resolve --resend` will not re-arm it).
    superseded_at: datetime | None = Field(default=None, sa_column=_ts())
    created_at: datetime | None = Field(default=None, sa_column=_ts(default_now=True))
    updated_at: datetime | None = Field(default=None, sa_column=_ts(default_now=True))


class SendEvent(SQLModel, table=True):
    """Append-only journal; one row per transition, written in the transition's transaction."""

    __tablename__ = "send_event"
    __table_args__ = (sa.Index("ix_send_event_job", "job_id", "id"),)

    id: int | None = Field(default=None, sa_column=sa.Column(big_id(), primary_key=True))
    job_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    token: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    from_state: str | None = Field(default=None, sa_column=sa.Column(sa.String(16)))
    to_state: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    at: datetime | None = Field(default=None, sa_column=_ts(default_now=True))
    actor: str = Field(sa_column=sa.Column(sa.String(160), nullable=False))
    detail: str | None = Field(default=None, sa_column=sa.Column(ForeignText()))


class Suppression(SQLModel, table=True):
    """Mailboxes that must never be sent to (unsubscribes, hard bounces, manual).

    ``address`` holds the mailbox identity (compared with ``send_job.mailbox``), not a spelling.
    """

    __tablename__ = "suppression"

    address: str = Field(sa_column=sa.Column(sa.String(320), primary_key=True))
    reason: str = Field(sa_column=sa.Column(ForeignText(), nullable=False))
    created_at: datetime | None = Field(default=None, sa_column=_ts(default_now=True))


send_job = SendJob.__table__  # type: ignore[attr-defined]
send_event = SendEvent.__table__  # type: ignore[attr-defined]
suppression = Suppression.__table__  # type: ignore[attr-defined]
