"""Mailbox identity: send_job.mailbox, one job per mailbox, suppression by identity.

Adds ``send_job.mailbox`` (campaigns.addresses.mailbox_identity of the recipient, computed here
in Python for every existing row) and ``send_job.mailbox_dup``, rewrites suppression entries to
identities, and adds the UNIQUE index ``ux_send_job_mailbox`` on (campaign, step,
occurrence_at, mailbox, mailbox_dup) so the database refuses a second job for one mailbox,
whatever its key.

Keys are never changed: they are in the Message-IDs of mail already sent.

An older Herald may already hold several jobs for one mailbox (``dup@y.example`` and
``"dup"@y.example``). The migration does not fail on them; in each such group it keeps one job
as the holder (``mailbox_dup = 0``): the lowest id among jobs that may already have reached the
mailbox (any state but pending and cancelled), else the lowest id. The others are numbered
``mailbox_dup = 1, 2, …`` by id and stay as history; those still ``pending`` become
``cancelled`` with the reason "duplicate mailbox: job N holds it" (journalled), so the mailbox
is not mailed twice. A recipient that is no longer a valid address (older rules) is its own
identity, as written.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from campaigns.addresses import AddressError, mailbox_identity
from dbtypes import db_now

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PAGE = 2000  # rows per backfill round trip
ACTOR = "migration 0003"

# Just the columns this migration touches, as they are at this revision.
job = sa.table(
    "send_job",
    sa.column("id", sa.BigInteger),
    sa.column("campaign", sa.String),
    sa.column("step", sa.String),
    sa.column("occurrence_at"),
    sa.column("recipient", sa.String),
    sa.column("mailbox", sa.String),
    sa.column("mailbox_dup", sa.Integer),
    sa.column("state", sa.String),
    sa.column("lease_token", sa.BigInteger),
    sa.column("outcome_text", sa.Text),
    sa.column("outcome_at"),
    sa.column("updated_at"),
)
event = sa.table(
    "send_event",
    sa.column("job_id", sa.BigInteger),
    sa.column("token", sa.BigInteger),
    sa.column("from_state", sa.String),
    sa.column("to_state", sa.String),
    sa.column("at"),
    sa.column("actor", sa.String),
    sa.column("detail", sa.Text),
)
suppression = sa.table(
    "suppression",
    sa.column("address", sa.String),
    sa.column("reason", sa.Text),
    sa.column("created_at"),
)


def identity(address: str) -> str:
    try:
        return mailbox_identity(address)
    except AddressError:
        return address


def _backfill_mailboxes(conn: sa.Connection) -> None:
    last = -1
    while True:
        rows = conn.execute(
            sa.select(job.c.id, job.c.recipient)
            .where(job.c.id > last)
            .order_by(job.c.id)
            .limit(PAGE)
        ).all()
        if not rows:
            return
        conn.execute(
            sa.update(job)
            .where(job.c.id == sa.bindparam("b_id"))
            .values(mailbox=sa.bindparam("b_mailbox")),
            [{"b_id": row.id, "b_mailbox": identity(row.recipient)} for row in rows],
        )
        last = rows[-1].id


def _holder(members: Sequence[sa.Row[Any]]) -> int:
    """The job that keeps the mailbox: one that may have reached it, else the first."""
    started = [m.id for m in members if m.state not in ("pending", "cancelled")]
    return min(started) if started else min(m.id for m in members)


def _separate_duplicates(conn: sa.Connection) -> None:
    group_columns = (job.c.campaign, job.c.step, job.c.occurrence_at, job.c.mailbox)
    groups = (
        sa.select(*group_columns).group_by(*group_columns).having(sa.func.count() > 1).subquery("g")
    )
    members = conn.execute(
        sa.select(job.c.id, job.c.state, job.c.lease_token, *group_columns)
        .join(
            groups,
            sa.and_(*(column == groups.c[column.name] for column in group_columns)),
        )
        .order_by(*group_columns, job.c.id)
    ).all()
    numbering: list[dict[str, Any]] = []
    cancelled: list[dict[str, Any]] = []
    same_mailbox = lambda m: (m.campaign, m.step, m.occurrence_at, m.mailbox)  # noqa: E731
    for _, group in groupby(members, key=same_mailbox):
        rows = list(group)
        holder = _holder(rows)
        why = f"duplicate mailbox: job {holder} holds it"
        others = [m for m in rows if m.id != holder]
        for number, member in enumerate(others, start=1):
            numbering.append({"b_id": member.id, "b_dup": number})
            if member.state == "pending":
                cancelled.append({"b_id": member.id, "b_token": member.lease_token, "b_why": why})
    if numbering:
        conn.execute(
            sa.update(job)
            .where(job.c.id == sa.bindparam("b_id"))
            .values(mailbox_dup=sa.bindparam("b_dup")),
            numbering,
        )
    if cancelled:
        conn.execute(
            sa.update(job)
            .where(job.c.id == sa.bindparam("b_id"), job.c.state == "pending")
            .values(
                state="cancelled",
                outcome_text=sa.bindparam("b_why"),
                outcome_at=db_now(),
                updated_at=db_now(),
            ),
            cancelled,
        )
        conn.execute(
            sa.insert(event).values(
                job_id=sa.bindparam("b_id"),
                token=sa.bindparam("b_token"),
                from_state="pending",
                to_state="cancelled",
                at=db_now(),
                actor=ACTOR,
                detail=sa.bindparam("b_why"),
            ),
            cancelled,
        )


def _canonicalise_suppressions(conn: sa.Connection) -> None:
    """Store every suppression under its identity; of several spellings the earliest stays."""
    rows = conn.execute(
        sa.select(suppression.c.address, suppression.c.reason, suppression.c.created_at).order_by(
            suppression.c.created_at, suppression.c.address
        )
    ).all()
    spellings: dict[str, list[sa.Row[Any]]] = {}
    for row in rows:
        spellings.setdefault(identity(row.address), []).append(row)
    for mailbox, group in spellings.items():
        if [row.address for row in group] == [mailbox]:
            continue
        first = group[0]
        conn.execute(
            sa.delete(suppression).where(suppression.c.address.in_([r.address for r in group]))
        )
        conn.execute(
            sa.insert(suppression).values(
                address=mailbox, reason=first.reason, created_at=first.created_at
            )
        )


def upgrade() -> None:
    # The server default only fills existing rows until the backfill; Herald always writes it.
    op.add_column(
        "send_job", sa.Column("mailbox", sa.String(320), nullable=False, server_default="")
    )
    op.add_column(
        "send_job", sa.Column("mailbox_dup", sa.Integer, nullable=False, server_default="0")
    )
    conn = op.get_bind()
    _backfill_mailboxes(conn)
    _separate_duplicates(conn)
    _canonicalise_suppressions(conn)
    op.create_index(
        "ux_send_job_mailbox",
        "send_job",
        ["campaign", "step", "occurrence_at", "mailbox", "mailbox_dup"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ux_send_job_mailbox", table_name="send_job")
    with op.batch_alter_table("send_job") as batch:
        batch.drop_column("mailbox_dup")
        batch.drop_column("mailbox")
