"""A small partial index on pending jobs with nothing left to spend (issue 12).

Every recovery pass (R3) looks for pending jobs whose send attempts or claims have run out. With
no index for that test it read EVERY pending job on each pass: O(backlog) work every few
seconds in every worker, ≈ 30 ms at 20,000 pending jobs and seconds at a million. Such jobs
are rare (a pending job normally has budget left), so this index is nearly empty and a pass
reads only them. Its predicate is written so that both PostgreSQL and SQLite can prove R3's
two statements (``attempts out``; ``attempts left and claims out``) imply it: each names one
arm of the OR term for term (dispatch.outbox.recovery).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# Spelled out here rather than imported: a migration must not change when the code does.
EXHAUSTED = "state = 'pending' AND (send_attempts >= max_send_attempts OR claims >= max_claims)"


def upgrade() -> None:
    op.create_index(
        "ix_send_job_exhausted",
        "send_job",
        # state leads although it is constant here: SQLite, with no statistics, prefers an
        # equality on a leading column, and would otherwise pick ix_send_job_state_lease's
        # (state = 'pending'), which holds every pending job.
        ["state", "id"],
        postgresql_where=sa.text(EXHAUSTED),
        sqlite_where=sa.text(EXHAUSTED),
    )


def downgrade() -> None:
    op.drop_index("ix_send_job_exhausted", "send_job")
