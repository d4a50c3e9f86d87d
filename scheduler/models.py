"""The occurrence table: one row per (campaign, step, nominal fire time).

The unique constraint is what makes re-firing a trigger harmless, and the cursor lets a fan-out
interrupted by a crash resume where it stopped (the outbox's unique key makes any overlap a no-op).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from dispatch.dbtypes import UtcTimestamp, big_id, db_now


class Occurrence(SQLModel, table=True):
    __tablename__ = "occurrence"
    __table_args__ = (
        sa.UniqueConstraint("campaign", "step", "occurrence_at", name="uq_occurrence"),
    )

    id: int | None = Field(default=None, sa_column=sa.Column(big_id(), primary_key=True))
    campaign: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    step: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    occurrence_at: datetime = Field(sa_column=sa.Column(UtcTimestamp(), nullable=False))
    fanout_state: str = Field(
        default="open", sa_column=sa.Column(sa.String(16), nullable=False, default="open")
    )
    cursor: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, default=0))
    jobs_created: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, default=0))
    created_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )
    updated_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )


occurrence_table = Occurrence.__table__  # type: ignore[attr-defined]
