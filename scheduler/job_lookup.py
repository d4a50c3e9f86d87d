"""What the scheduler reads back from the outbox: where a drip's last job stands.

A drip's next step is planned from its previous step's actual send, so the scheduler needs
that job's state and ``outcome_at``; it finds it by key (the key is computed, never stored in
the enrollment), many keys per query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import sqlalchemy as sa

from dispatch.models import send_job
from dispatch.outbox.keyed import K, with_keys

J = send_job.c
CHUNK: Final = 500


@dataclass(frozen=True)
class JobOutcome:
    state: str
    outcome_at: datetime | None
    not_before: datetime


def outcomes(conn: sa.Connection, keys: Sequence[str]) -> dict[str, JobOutcome]:
    """key -> the job's state, outcome time and due time, for those of ``keys`` that exist."""
    found: dict[str, JobOutcome] = {}
    for start in range(0, len(keys), CHUNK):
        rows = conn.execute(
            sa.select(J.key, J.state, J.outcome_at, J.not_before).where(
                with_keys(keys[start : start + CHUNK])
            )
        )
        for row in rows:
            found[row.key] = JobOutcome(row.state, row.outcome_at, row.not_before)
    return found


def earliest_pending(conn: sa.Connection, campaigns: Sequence[str]) -> datetime | None:
    """The earliest due time of a pending job of these campaigns (None: none pending)."""
    if not campaigns:
        return None
    found: datetime | None = conn.execute(
        sa.select(sa.func.min(J.not_before)).where(
            J.campaign.in_(list(campaigns)), J.state == "pending"
        )
    ).scalar_one_or_none()
    return found


def has_jobs(conn: sa.Connection, campaign: str, occurrence_at: datetime) -> bool:
    """Whether any job of this occurrence exists (something of it may have been sent)."""
    found = conn.execute(
        sa.select(K.job_id).where(K.campaign == campaign, K.occurrence_at == occurrence_at).limit(1)
    ).first()
    return found is not None
