"""Enrollments by campaign and state, in id order (issue 12).

A drip pass reads a campaign's active enrollments a page at a time, in id order after the last
id seen (keyset paging). The index on (campaign, state) found them, but not in id order: every
page read and sorted ALL of the campaign's active enrollments to keep 500, so a pass grew with
the square of its drips (20,000 enrollments: 40 pages of 20,000 rows). With ``id`` as the third
column a page is one range of the index, read in order, and stops after 500 rows. The index
keeps its name: every other reader (counts per state, the audience's and the suppressed
enrollments) names campaign and state first, as before.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_enrollment_state", "enrollment")
    op.create_index("ix_enrollment_state", "enrollment", ["campaign", "state", "id"])


def downgrade() -> None:
    op.drop_index("ix_enrollment_state", "enrollment")
    op.create_index("ix_enrollment_state", "enrollment", ["campaign", "state"])
