"""The campaign table: one row per campaign name, holding the spec as launched."""

from __future__ import annotations

from enum import StrEnum

import sqlalchemy as sa

from dbtypes import UtcTimestamp, big_id, db_now

# Plain SQLAlchemy tables (no ORM): importing them stays cheap for every command.
metadata = sa.MetaData()


class CampaignStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


campaign_table = sa.Table(
    "campaign",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("spec_hash", sa.String(64), nullable=False),
    sa.Column("version", sa.Integer, nullable=False, default=1),
    sa.Column("status", sa.String(16), nullable=False, default="active"),
    # The launch occurrence: fixed at first launch so relaunching yields the same keys.
    sa.Column("launched_at", UtcTimestamp(), nullable=False),
    # The YAML as launched (resolved path): a scheduler re-reads audience and templates there.
    sa.Column("source_path", sa.Text, nullable=True),
    # launch | start_at | schedule | enrollment (None: launched before triggers existed = launch)
    sa.Column("trigger", sa.String(16), nullable=True),
    # Why the scheduler cannot fire this campaign now (shown by `herald status`), or None.
    sa.Column("scheduler_note", sa.Text, nullable=True),
    # Why the campaign paused itself (its error threshold), or None (migration 0006).
    sa.Column("pause_reason", sa.Text, nullable=True),
    sa.Column("created_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("updated_at", UtcTimestamp(), server_default=db_now()),
)
