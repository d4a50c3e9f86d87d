"""What bounces, complaints and unsubscribes have come in (``herald feedback``).

Reads ``mail_feedback`` only: the counts per kind (soft bounces are counted here, never
suppressed by themselves), the mailboxes with the most soft bounces, and the newest events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import mail_feedback
from herald.db import reading

F = mail_feedback.c
KINDS = ("hard", "soft", "block", "complaint", "unsubscribe")


@dataclass(frozen=True)
class FeedbackEvent:
    at: datetime | None
    kind: str
    source: str
    mailbox: str | None
    status_code: str | None
    detail: str | None
    job_key: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat() if self.at else None,
            "kind": self.kind,
            "source": self.source,
            "mailbox": self.mailbox,
            "status_code": self.status_code,
            "detail": self.detail,
            "job_key": self.job_key,
        }


@dataclass(frozen=True)
class FeedbackSummary:
    counts: dict[str, int]
    soft_by_mailbox: list[tuple[str, int]] = field(default_factory=list)
    recent: list[FeedbackEvent] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "soft_by_mailbox": [{"mailbox": m, "count": n} for m, n in self.soft_by_mailbox],
            "recent": [e.to_json() for e in self.recent],
        }


def feedback_summary(
    engine: Engine, *, kind: str | None = None, limit: int = 20
) -> FeedbackSummary:
    with reading(engine) as conn:
        counts = dict.fromkeys(KINDS, 0)
        for k, n in conn.execute(sa.select(F.kind, sa.func.count()).group_by(F.kind)):
            counts[k] = n
        soft = conn.execute(
            sa.select(F.mailbox, sa.func.count().label("n"))
            .where(F.kind == "soft", F.mailbox.is_not(None))
            .group_by(F.mailbox)
            .order_by(sa.desc("n"), F.mailbox)
            .limit(limit)
        ).all()
        recent_q = sa.select(
            F.created_at, F.kind, F.source, F.mailbox, F.status_code, F.detail, F.job_key
        ).order_by(F.id.desc())
        if kind is not None:
            recent_q = recent_q.where(F.kind == kind)
        recent = [FeedbackEvent(*row) for row in conn.execute(recent_q.limit(limit))]
    return FeedbackSummary(counts, [(m, n) for m, n in soft], recent)
