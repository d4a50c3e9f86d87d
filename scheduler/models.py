"""The occurrence table: one row per (campaign, step, nominal fire time).

The unique constraint is what makes re-firing a trigger harmless, and the cursor lets a fan-out
interrupted by a crash resume where it stopped (the outbox's unique key makes any overlap a no-op).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from dbtypes import UtcTimestamp, big_id, db_now


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


class AudienceFetch(SQLModel, table=True):
    """One fetch of a URL audience for one occurrence: the snapshot's header.

    ``token`` names the process writing the snapshot; a relaunch that finds a snapshot still
    being written (its writer crashed, or is slower) takes it over with a new token, and the old
    writer's next batch then matches nothing. Only a ``complete`` snapshot is ever fanned out.
    """

    __tablename__ = "audience_fetch"
    __table_args__ = (sa.UniqueConstraint("campaign", "occurrence_at", name="uq_audience_fetch"),)

    id: int | None = Field(default=None, sa_column=sa.Column(big_id(), primary_key=True))
    campaign: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    occurrence_at: datetime = Field(sa_column=sa.Column(UtcTimestamp(), nullable=False))
    state: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))  # fetching, complete
    token: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    url: str = Field(sa_column=sa.Column(sa.Text, nullable=False))  # as written: no secrets
    format: str | None = Field(default=None, sa_column=sa.Column(sa.String(8)))
    row_count: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    reject_count: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    created_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )
    updated_at: datetime | None = Field(
        default=None, sa_column=sa.Column(UtcTimestamp(), server_default=db_now())
    )
    completed_at: datetime | None = Field(default=None, sa_column=sa.Column(UtcTimestamp()))


class AudienceSnapshotRow(SQLModel, table=True):
    """One row of a fetched audience, in source order; a rejected row keeps its reason."""

    __tablename__ = "audience_snapshot"

    campaign: str = Field(sa_column=sa.Column(sa.String(128), primary_key=True))
    occurrence_at: datetime = Field(sa_column=sa.Column(UtcTimestamp(), primary_key=True))
    position: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=False))
    line: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))  # or JSON element index
    email: str | None = Field(default=None, sa_column=sa.Column(sa.String(320)))
    name: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    variables: str | None = Field(default=None, sa_column=sa.Column(sa.Text))  # JSON object
    problem: str | None = Field(default=None, sa_column=sa.Column(sa.Text))  # set for rejects


audience_fetch_table = AudienceFetch.__table__  # type: ignore[attr-defined]
audience_snapshot_table = AudienceSnapshotRow.__table__  # type: ignore[attr-defined]
