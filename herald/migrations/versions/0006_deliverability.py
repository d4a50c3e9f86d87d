"""Deliverability: scoped suppression, shared rate limits, relay state, mail feedback.

- ``suppression`` gains ``scope`` (``global`` or ``list:<name>``) and ``source``; its key
  becomes (address, scope), so an unsubscribe from one list never stops another list's mail,
  and a hard bounce or complaint (``global``) stops everything.
- ``send_job.list_scope``: the suppression scope of the job's campaign (``list:<name>``),
  which the T4 guard compares together with ``global``.
- ``campaign.pause_reason``: why a campaign paused itself (error threshold), shown by status.
- ``rate_limit``: one row per shared limit (``campaign:<name>``, ``domain:<domain>``), a GCRA
  cell (theoretical arrival time) every worker on every host updates with one conditional
  statement; ``factor`` < 1 while a 421/451/454 has slowed the domain down, until
  ``factor_until``.
- ``relay_status``: the last thing workers learnt about each relay (ok / unreachable since),
  shown by ``herald status``.
- ``mail_feedback``: bounces, complaints and unsubscribes as they arrive (inbound SMTP,
  provider webhooks, the one-click endpoint), deduplicated on ``event_ref``.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp, big_id, db_now

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True, default_now: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(
        name, UtcTimestamp(), nullable=nullable, server_default=db_now() if default_now else None
    )


def upgrade() -> None:
    # The key changes: copy into a new table (portable on SQLite and PostgreSQL alike).
    op.create_table(
        "suppression_new",
        sa.Column("address", sa.String(320), nullable=False),
        sa.Column("scope", sa.String(140), nullable=False, server_default="global"),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("source", sa.String(32), nullable=False, server_default="manual"),
        _ts("created_at", default_now=True),
        sa.PrimaryKeyConstraint("address", "scope", name="pk_suppression_scoped"),
    )
    op.execute(
        "INSERT INTO suppression_new (address, scope, reason, source, created_at) "
        "SELECT address, 'global', reason, 'manual', created_at FROM suppression"
    )
    op.drop_table("suppression")
    op.rename_table("suppression_new", "suppression")
    with op.batch_alter_table("send_job") as batch:
        batch.add_column(sa.Column("list_scope", sa.String(140), nullable=True))
    with op.batch_alter_table("campaign") as batch:
        batch.add_column(sa.Column("pause_reason", sa.Text, nullable=True))
    op.create_table(
        "rate_limit",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("per_second", sa.Float, nullable=False),
        sa.Column("factor", sa.Float, nullable=False, server_default="1"),
        _ts("factor_until"),
        _ts("tat"),
        _ts("updated_at", default_now=True),
    )
    op.create_table(
        "relay_status",
        sa.Column("relay", sa.String(300), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        _ts("since", nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("worker", sa.String(128)),
        _ts("updated_at", default_now=True),
    )
    op.create_table(
        "mail_feedback",
        sa.Column("id", big_id(), primary_key=True),
        sa.Column("event_ref", sa.String(200), nullable=True, unique=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("mailbox", sa.String(320), nullable=True),
        sa.Column("job_key", sa.String(64), nullable=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("status_code", sa.String(16)),
        sa.Column("detail", sa.Text),
        _ts("created_at", default_now=True),
    )
    op.create_index("ix_mail_feedback_mailbox", "mail_feedback", ["mailbox", "kind"])


def downgrade() -> None:
    op.drop_index("ix_mail_feedback_mailbox", "mail_feedback")
    op.drop_table("mail_feedback")
    op.drop_table("relay_status")
    op.drop_table("rate_limit")
    with op.batch_alter_table("campaign") as batch:
        batch.drop_column("pause_reason")
    with op.batch_alter_table("send_job") as batch:
        batch.drop_column("list_scope")
    op.create_table(
        "suppression_old",
        sa.Column("address", sa.String(320), primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        _ts("created_at", default_now=True),
    )
    op.execute(
        "INSERT INTO suppression_old (address, reason, created_at) "
        "SELECT address, MIN(reason), MIN(created_at) FROM suppression GROUP BY address"
    )
    op.drop_table("suppression")
    op.rename_table("suppression_old", "suppression")
