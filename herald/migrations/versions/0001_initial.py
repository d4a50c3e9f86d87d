"""Initial schema: campaign, occurrence, send_job, send_event, suppression.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp, big_id, db_now

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True, default_now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name, UtcTimestamp(), nullable=nullable, server_default=db_now() if default_now else None
    )


def upgrade() -> None:
    op.create_table(
        "campaign",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        _ts("launched_at", nullable=False),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
    )
    op.create_table(
        "occurrence",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("campaign", sa.String(128), nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        _ts("occurrence_at", nullable=False),
        sa.Column("fanout_state", sa.String(16), nullable=False),
        sa.Column("cursor", sa.Integer, nullable=False),
        sa.Column("jobs_created", sa.Integer, nullable=False),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
        sa.UniqueConstraint("campaign", "step", "occurrence_at", name="uq_occurrence"),
    )
    op.create_table(
        "send_job",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("key_tuple", sa.Text, nullable=False),
        sa.Column("campaign", sa.String(128), nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        _ts("occurrence_at", nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("sender", sa.String(320), nullable=False),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("message_id", sa.String(400), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("payload_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        _ts("not_before", nullable=False),
        sa.Column("claims", sa.Integer, nullable=False),
        sa.Column("max_claims", sa.Integer, nullable=False),
        sa.Column("send_attempts", sa.Integer, nullable=False),
        sa.Column("max_send_attempts", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.String(128)),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        _ts("lease_expires_at"),
        _ts("send_started_at"),
        sa.Column("outcome_code", sa.Integer),
        sa.Column("outcome_text", sa.Text),
        _ts("outcome_at"),
        sa.Column("in_doubt_reason", sa.Text),
        sa.Column("in_doubt_policy", sa.String(16), nullable=False),
        sa.Column("resolution", sa.Text),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
    )
    op.create_index(
        "ix_send_job_due",
        "send_job",
        ["not_before", "id"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_index("ix_send_job_campaign_state", "send_job", ["campaign", "step", "state"])
    op.create_index("ix_send_job_state_lease", "send_job", ["state", "lease_expires_at"])
    op.create_table(
        "send_event",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        _ts("at", default_now=True),
        sa.Column("actor", sa.String(160), nullable=False),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_send_event_job", "send_event", ["job_id", "id"])
    op.create_table(
        "suppression",
        sa.Column("address", sa.String(320), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        _ts("created_at", default_now=True),
    )


def downgrade() -> None:
    for table in ("suppression", "send_event", "send_job", "occurrence", "campaign"):
        op.drop_table(table)
