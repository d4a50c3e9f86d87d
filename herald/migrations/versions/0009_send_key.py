"""What makes a job exist moves to ``send_key``, written once per job (issue 12).

send_job carried two unique indexes: ``key`` (the idempotency key) and ``ux_send_job_mailbox``
(campaign, step, occurrence, mailbox, mailbox_dup: one job per mailbox). Every transition
changes ``state``, an indexed column, so none is a HOT update, and each new row version was
inserted into both again: claim, T4 and T5 each paid for two wide unique entries that never
change. On a model of the drain's three statements that was about 30 of 80 µs of PostgreSQL's
CPU per job (bench/profiles/drain-cpu.md, session 23).

``send_key`` holds the key, the job's id and the mailbox identity, with both unique indexes;
enqueue (T1) inserts into it first and creates a job only for a row it inserted, in the same
transaction, so the rule "a job exists when its key does, or when its mailbox identity does"
is enforced as before, by the same two unique indexes. send_job keeps its ``key``, ``campaign``
… ``mailbox`` columns (every read of a job stays one row), but no index on them.

SQLite keeps send_job's UNIQUE (key): SQLite updates only the indexes whose columns an UPDATE
changes, so the constraint costs its transitions nothing, and dropping an inline constraint
there means rebuilding the table.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dbtypes import UtcTimestamp

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_IDENTITY = ["campaign", "step", "occurrence_at", "mailbox", "mailbox_dup"]


def upgrade() -> None:
    op.create_table(
        "send_key",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=True),
        sa.Column("campaign", sa.String(128), nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("occurrence_at", UtcTimestamp(), nullable=False),
        sa.Column("mailbox", sa.String(320), nullable=False),
        sa.Column("mailbox_dup", sa.Integer, nullable=False, server_default="0"),
    )
    op.execute(
        "INSERT INTO send_key (key, job_id, campaign, step, occurrence_at, mailbox, mailbox_dup) "
        "SELECT key, id, campaign, step, occurrence_at, mailbox, mailbox_dup FROM send_job"
    )
    # Built after the copy: one sort instead of a million insertions.
    op.create_index("ux_send_key_mailbox", "send_key", _IDENTITY, unique=True)
    op.drop_index("ux_send_job_mailbox", "send_job")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("send_job_key_key", "send_job", type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_unique_constraint("send_job_key_key", "send_job", ["key"])
    op.create_index("ux_send_job_mailbox", "send_job", _IDENTITY, unique=True)
    op.drop_index("ux_send_key_mailbox", "send_key")
    op.drop_table("send_key")
