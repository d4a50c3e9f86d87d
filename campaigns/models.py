"""The campaign table: one row per campaign name, holding the spec as launched."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from dbtypes import UtcTimestamp, big_id, db_now


class CampaignStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class Campaign(SQLModel, table=True):
    __tablename__ = "campaign"

    id: int | None = Field(default=None, sa_column=sa.Column(big_id(), primary_key=True))
    name: str = Field(sa_column=sa.Column(sa.String(128), nullable=False, unique=True))
    spec: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    spec_hash: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    version: int = Field(default=1, sa_column=sa.Column(sa.Integer, nullable=False, default=1))
    status: str = Field(
        default=CampaignStatus.ACTIVE.value,
        sa_column=sa.Column(sa.String(16), nullable=False, default="active"),
    )
    # The launch occurrence: fixed at first launch so relaunching yields the same keys.
    launched_at: datetime = Field(sa_column=sa.Column(UtcTimestamp(), nullable=False))
    created_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )
    updated_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )


campaign_table = Campaign.__table__  # type: ignore[attr-defined]
