"""The occurrence table: one row per (campaign, step, nominal fire time).

The unique constraint is what makes re-firing a trigger harmless, and the cursor lets a fan-out
interrupted by a crash resume where it stopped (the outbox's unique key makes any overlap a no-op).
"""

from __future__ import annotations

import sqlalchemy as sa

from dbtypes import UtcTimestamp, big_id, db_now

# Plain SQLAlchemy tables (no ORM): importing them stays cheap for every command.
metadata = sa.MetaData()


occurrence_table = sa.Table(
    "occurrence",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("step", sa.String(64), nullable=False),
    sa.Column("occurrence_at", UtcTimestamp(), nullable=False),
    sa.Column("fanout_state", sa.String(16), nullable=False, default="open"),
    sa.Column("cursor", sa.Integer, nullable=False, default=0),
    sa.Column("jobs_created", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("updated_at", UtcTimestamp(), server_default=db_now()),
    sa.UniqueConstraint("campaign", "step", "occurrence_at", name="uq_occurrence"),
)


# One fetch of a URL audience for one occurrence: the snapshot's header.
#
# ``token`` names the process writing the snapshot; a relaunch that finds a snapshot still
# being written (its writer crashed, or is slower) takes it over with a new token, and the old
# writer's next batch then matches nothing. Only a ``complete`` snapshot is ever fanned out.
audience_fetch_table = sa.Table(
    "audience_fetch",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("occurrence_at", UtcTimestamp(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # fetching, complete
    sa.Column("token", sa.String(32), nullable=False),
    sa.Column("url", sa.Text, nullable=False),  # as written: no secrets
    sa.Column("format", sa.String(8)),
    sa.Column("row_count", sa.Integer, nullable=False),
    sa.Column("reject_count", sa.Integer, nullable=False),
    sa.Column("created_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("updated_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("completed_at", UtcTimestamp()),
    sa.UniqueConstraint("campaign", "occurrence_at", name="uq_audience_fetch"),
)


# One row of a fetched audience, in source order; a rejected row keeps its reason.
audience_snapshot_table = sa.Table(
    "audience_snapshot",
    metadata,
    sa.Column("campaign", sa.String(128), primary_key=True),
    sa.Column("occurrence_at", UtcTimestamp(), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("line", sa.Integer, nullable=False),  # or JSON element index
    sa.Column("email", sa.String(320)),
    sa.Column("name", sa.Text),
    sa.Column("variables", sa.Text),  # JSON object
    sa.Column("problem", sa.Text),  # set for rejects
)


# One fire of a campaign's recurring or one-shot trigger, decided exactly once: UNIQUE(campaign,
# nominal_at) lets any number of schedulers insert the same fire with ON CONFLICT DO NOTHING.
# state: due (to be fanned out), done (fanned out), skipped (by the catch-up policy; ``reason``).
# The newest nominal_at of a campaign is its cursor.
trigger_fire_table = sa.Table(
    "trigger_fire",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("nominal_at", UtcTimestamp(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("created_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("updated_at", UtcTimestamp(), server_default=db_now()),
    sa.UniqueConstraint("campaign", "nominal_at", name="uq_trigger_fire"),
    sa.Index("ix_trigger_fire_state", "campaign", "state"),
)


# One recipient's drip: steps count from *their* ``enrolled_at`` (whole seconds, part of every
# key of the drip, so enrolling twice is a no-op). ``next_step`` is the index of the step still
# to be materialised; state: active, left (left the audience), ended (suppressed, cancelled),
# done (every step materialised and settled).
enrollment_table = sa.Table(
    "enrollment",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("mailbox", sa.String(320), nullable=False),
    sa.Column("rotation", sa.Integer, nullable=False, server_default="1"),
    sa.Column("recipient", sa.String(320), nullable=False),  # as written
    sa.Column("name", sa.Text),
    sa.Column("variables", sa.Text, nullable=False),  # JSON object of text
    sa.Column("timezone", sa.String(64)),  # the recipient's IANA zone, if known
    sa.Column("source", sa.String(16), nullable=False),  # cli | audience
    sa.Column("enrolled_at", UtcTimestamp(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("next_step", sa.Integer, nullable=False, server_default="0"),
    sa.Column("ended_reason", sa.Text),
    sa.Column("created_at", UtcTimestamp(), server_default=db_now()),
    sa.Column("updated_at", UtcTimestamp(), server_default=db_now()),
    sa.UniqueConstraint("campaign", "mailbox", "rotation", name="uq_enrollment"),
    sa.Index("ix_enrollment_state", "campaign", "state", "id"),  # a page in id order (0010)
)
