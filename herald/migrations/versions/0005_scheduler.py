"""The scheduler: trigger fires, enrollments, send windows (docs/design.md §7, §12).

- ``trigger_fire``: one row per (campaign, nominal fire time) of a recurring or one-shot
  trigger, decided exactly once (``due`` → ``done``, or ``skipped`` by the catch-up policy);
  UNIQUE(campaign, nominal_at) is what lets several schedulers run with no leader.
- ``enrollment``: one row per (campaign, mailbox, rotation): a recipient's own drip, counted
  from ``enrolled_at``; ``next_step`` is the index of the step still to be materialised.
- ``campaign.source_path``: the YAML as launched, so a scheduler can re-read the audience and
  templates for a later occurrence; ``trigger`` names the kind of trigger; ``scheduler_note``
  says why the scheduler cannot fire the campaign (shown by ``herald status``).
- ``send_job.send_window``: the job's send window (JSON), re-checked by the worker at claim.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp, big_id, db_now

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True, default_now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name, UtcTimestamp(), nullable=nullable, server_default=db_now() if default_now else None
    )


def upgrade() -> None:
    with op.batch_alter_table("campaign") as batch:
        batch.add_column(sa.Column("source_path", sa.Text, nullable=True))
        batch.add_column(sa.Column("trigger", sa.String(16), nullable=True))
        batch.add_column(sa.Column("scheduler_note", sa.Text, nullable=True))
    with op.batch_alter_table("send_job") as batch:
        batch.add_column(sa.Column("send_window", sa.Text, nullable=True))
    op.create_table(
        "trigger_fire",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("campaign", sa.String(128), nullable=False),
        _ts("nominal_at", nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
        sa.UniqueConstraint("campaign", "nominal_at", name="uq_trigger_fire"),
    )
    op.create_index("ix_trigger_fire_state", "trigger_fire", ["campaign", "state"])
    op.create_table(
        "enrollment",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("campaign", sa.String(128), nullable=False),
        sa.Column("mailbox", sa.String(320), nullable=False),
        sa.Column("rotation", sa.Integer, nullable=False, server_default="1"),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("name", sa.Text),
        sa.Column("variables", sa.Text, nullable=False),
        sa.Column("timezone", sa.String(64)),
        sa.Column("source", sa.String(16), nullable=False),
        _ts("enrolled_at", nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_step", sa.Integer, nullable=False, server_default="0"),
        sa.Column("ended_reason", sa.Text),
        _ts("created_at", default_now=True),
        _ts("updated_at", default_now=True),
        sa.UniqueConstraint("campaign", "mailbox", "rotation", name="uq_enrollment"),
    )
    op.create_index("ix_enrollment_state", "enrollment", ["campaign", "state"])


def downgrade() -> None:
    op.drop_index("ix_enrollment_state", "enrollment")
    op.drop_table("enrollment")
    op.drop_index("ix_trigger_fire_state", "trigger_fire")
    op.drop_table("trigger_fire")
    with op.batch_alter_table("send_job") as batch:
        batch.drop_column("send_window")
    with op.batch_alter_table("campaign") as batch:
        batch.drop_column("scheduler_note")
        batch.drop_column("trigger")
        batch.drop_column("source_path")
