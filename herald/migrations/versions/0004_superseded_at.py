"""send_job.superseded_at: the durable mark that a job's payload belongs to a replaced version.

Set in the transaction that stores a new campaign version, on every unsent job whose key the new
version no longer has. Nothing carrying the mark passes T4, and operators cannot re-arm it.

Revision ID: 0004
Revises: 0002 (re-chained after 0003 when the branches are merged)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dispatch.dbtypes import UtcTimestamp

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("send_job") as batch:
        batch.add_column(sa.Column("superseded_at", UtcTimestamp(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("send_job") as batch:
        batch.drop_column("superseded_at")
