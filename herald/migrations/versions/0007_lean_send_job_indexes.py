"""Leaner send_job indexes: a transition touches fewer of them (issue 12).

Every transition changes ``state``, an indexed column, so no transition is a HOT update: each
one inserts an entry into EVERY index of send_job whose predicate the new row version meets.
Two indexes held entries for states nobody looks them up by:

- ``ix_send_job_state_lease`` (state, lease_expires_at) serves recovery (expired ``claimed`` and
  ``sending`` leases, ``in_doubt`` jobs), the idle check, and the operator's in-doubt and
  dead-letter lists. It now holds only those states: a job that ends ``sent`` or ``cancelled``
  (the bulk of the table) no longer adds an entry; pending jobs have ``ix_send_job_due``.
- ``ix_send_job_campaign_state`` (campaign, step, state) serves status counts and per-campaign
  reads of pending and finished jobs. It now holds every state but the two a job passes through
  in a second (``claimed``, ``sending``): claim and T4 no longer add an entry to it. Counting
  adds the few leased jobs from the lease index (``ReadOps.counts``).

Same names, same columns; only the predicates are new, and only on PostgreSQL: SQLite uses a
partial index only for a query that repeats its predicate term for term (``state = 'failed'``
does not imply ``state IN (…, 'failed')`` there), so recovery and the operator's lists would
scan the table. Downgrade restores the full indexes.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Spelled out here rather than imported: a migration must not change when the code does.
LEASE_STATES = "state IN ('claimed', 'sending', 'in_doubt', 'failed')"
SETTLED_STATES = "state IN ('pending', 'sent', 'failed', 'cancelled', 'in_doubt')"


def _partial(name: str, columns: list[str], where: str | None) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(name, "send_job")
    predicate = None if where is None else sa.text(where)
    op.create_index(name, "send_job", columns, postgresql_where=predicate)


def upgrade() -> None:
    _partial("ix_send_job_state_lease", ["state", "lease_expires_at"], LEASE_STATES)
    _partial("ix_send_job_campaign_state", ["campaign", "step", "state"], SETTLED_STATES)


def downgrade() -> None:
    _partial("ix_send_job_state_lease", ["state", "lease_expires_at"], None)
    _partial("ix_send_job_campaign_state", ["campaign", "step", "state"], None)
