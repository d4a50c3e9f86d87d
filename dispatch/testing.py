"""Test-only seams. Nothing here is used unless a test (or the chaos suite) asks for it.

``unguarded_start_sends`` is T4 with its guards switched off — by id only, no token, no state,
no lease check. The chaos suite runs a worker with it to prove that the suite *can* catch the
duplicates the real guard prevents. Never wire this into production paths.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from dbtypes import db_now
from dispatch.models import send_job
from dispatch.store import Lease

UNGUARDED_ENV = "HERALD_TEST_UNGUARDED_T4"


def unguarded_start_sends(conn: sa.Connection, leases: Sequence[Lease]) -> set[int]:
    if not leases:
        return set()
    stmt = (
        sa.update(send_job)
        .where(send_job.c.id.in_([job_id for job_id, _ in leases]))
        .values(
            state="sending",
            send_attempts=send_job.c.send_attempts + 1,
            send_started_at=db_now(),
        )
        .returning(send_job.c.id)
    )
    return {row.id for row in conn.execute(stmt)}
