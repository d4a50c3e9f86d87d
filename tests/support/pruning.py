"""Helpers for the retention tests: age jobs on the database clock, snapshot rows and journals,
run a prune pass through the application layer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.store import OutboxStore
from herald.app.prune import PruneOptions, PruneReport, prune, retention_age, start

J, E = send_job.c, send_event.c
OLD = timedelta(days=120)  # well past a 90-day retention


def age(engine: Engine, keys: Sequence[str] | None = None, *, by: timedelta = OLD) -> None:
    """Make jobs look unchanged for ``by`` (their ``updated_at``, on the database clock)."""
    with engine.begin() as conn:
        now = OutboxStore(engine.dialect.name).database_now(conn)
        stmt = sa.update(send_job).values(updated_at=now - by)
        if keys is not None:
            stmt = stmt.where(J.key.in_(list(keys)))
        conn.execute(stmt)


def rows(engine: Engine) -> dict[str, dict[str, Any]]:
    """key -> every column of its job."""
    with engine.connect() as conn:
        found = conn.execute(sa.select(send_job).order_by(J.id)).mappings().all()
    return {r["key"]: {k: bytes(v) if k == "payload" else v for k, v in r.items()} for r in found}


def journals(engine: Engine) -> dict[int, list[tuple[Any, ...]]]:
    """job id -> its journal rows (every column), in order."""
    found: dict[int, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(sa.select(send_event).order_by(E.id)):
            found.setdefault(r.job_id, []).append(tuple(r))
    return found


def run_prune(
    engine: Engine,
    older_than: str = "90d",
    *,
    campaign: str | None = None,
    dry_run: bool = False,
    keep_journal: bool = False,
    batch_size: int = 3,
) -> PruneReport:
    """One pass, small batches so that several batches run."""
    options = PruneOptions(
        older_than=retention_age(older_than),
        campaign=campaign,
        dry_run=dry_run,
        keep_journal=keep_journal,
        batch_size=batch_size,
    )
    return prune(engine, options, start(engine, options), actor="test")
