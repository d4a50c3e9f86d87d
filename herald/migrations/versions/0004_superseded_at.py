"""send_job.superseded_at: the durable mark that a job's payload belongs to a replaced version.

Set in the transaction that stores a new campaign version, on every unsent job whose key the new
version no longer has. Nothing carrying the mark passes T4, and operators cannot re-arm it.

Jobs that migration 0003 found to be a second job for one mailbox (``mailbox_dup > 0``) are
marked too: their payload was made for a spelling that another job holds, so no operator action
may re-arm them (``dead retry``, ``in-doubt resolve --resend``) and T4 refuses them.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("send_job") as batch:
        batch.add_column(sa.Column("superseded_at", UtcTimestamp(), nullable=True))
    jobs = sa.table(
        "send_job",
        sa.column("superseded_at", UtcTimestamp()),
        sa.column("mailbox_dup", sa.Integer()),
    )
    op.execute(jobs.update().where(jobs.c.mailbox_dup > 0).values(superseded_at=datetime.now(UTC)))


def downgrade() -> None:
    with op.batch_alter_table("send_job") as batch:
        batch.drop_column("superseded_at")
