"""Jobs written as Herald wrote them before migration 0009 (send_job only, no send_key): for
the tests of older migrations, which populate an older schema and then upgrade it."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from dispatch.models import send_job
from dispatch.outbox.claim import job_rows
from dispatch.store import NewJob


def enqueue_before_0009(conn: sa.Connection, jobs: Sequence[NewJob]) -> int:
    """Insert ``jobs`` into send_job directly; returns how many (all must be new)."""
    return len(conn.execute(sa.insert(send_job).returning(send_job.c.id), job_rows(jobs)).all())
