"""URL audiences: audience_fetch (one per occurrence) and audience_snapshot (its rows).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp, big_id, db_now

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True, default_now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name, UtcTimestamp(), nullable=nullable, server_default=db_now() if default_now else None
    )


def upgrade() -> None:
    op.create_table(
        "audience_fetch",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("campaign", sa.String(128), nullable=False),
        _ts("occurrence_at", nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("token", sa.String(32), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("format", sa.String(8)),
        sa.Column("row_count", sa.Integer, nullable=False),
        sa.Column("reject_count", sa.Integer, nullable=False),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
        _ts("completed_at"),
        sa.UniqueConstraint("campaign", "occurrence_at", name="uq_audience_fetch"),
    )
    op.create_table(
        "audience_snapshot",
        sa.Column("campaign", sa.String(128), nullable=False),
        _ts("occurrence_at", nullable=False),
        sa.Column("position", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("line", sa.Integer, nullable=False),
        sa.Column("email", sa.String(320)),
        sa.Column("name", sa.Text),
        sa.Column("variables", sa.Text),
        sa.Column("problem", sa.Text),
        sa.PrimaryKeyConstraint("campaign", "occurrence_at", "position"),
    )


def downgrade() -> None:
    for table in ("audience_snapshot", "audience_fetch"):
        op.drop_table(table)
