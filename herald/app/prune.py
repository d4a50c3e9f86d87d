"""Retention: ``herald prune --older-than 90d`` (docs/operations/retention.md).

Drops the rendered payload of jobs that finished (sent, failed, cancelled) and have not changed
since the cutoff, and trims their journal to its final event; keeps every key, so nothing that
could be re-fired, re-launched or re-enrolled is ever sent twice (dispatch.outbox.prune).

Works in batches, one transaction each: it never holds locks for long, and an interrupted pass
(Ctrl-C, kill, a lost connection) has committed whole batches only; running it again continues
where it stopped, because what is left to prune is read from the jobs, not from a bookmark.
The cutoff is read once from the database clock, so every batch of one pass agrees on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.durations import parse_duration
from dispatch.models import send_event, send_job
from dispatch.store import OutboxStore
from herald.db import reading
from herald.errors import UsageError

log = logging.getLogger("herald.prune")

#: Below this, ``--force`` is needed: a job that finished an hour ago is still being looked at
#: (its bounce or complaint may still arrive; an operator may want its message and history).
MINIMUM_AGE = timedelta(days=1)
DEFAULT_BATCH = 1000
MAX_BATCH = 5000  # ids per IN list, and a transaction short enough never to stall workers

TABLES = (send_job.name, send_event.name)


def retention_age(raw: str, *, force: bool = False) -> timedelta:
    """``--older-than``: a duration (90d, 12h, 2w); zero never, under a day only with force."""
    try:
        age = parse_duration(raw)
    except ValueError as exc:
        raise UsageError(str(exc), hint="e.g. --older-than 90d (w, d, h, m, s)") from exc
    if age <= timedelta(0):
        raise UsageError(f"--older-than {raw}: must be longer than 0 (it would prune everything)")
    if age < MINIMUM_AGE and not force:
        raise UsageError(
            f"--older-than {raw} is under the {MINIMUM_AGE.days}-day minimum",
            hint="add --force if you really mean to drop messages that finished so recently",
        )
    return age


@dataclass(frozen=True)
class PruneOptions:
    older_than: timedelta
    campaign: str | None = None
    batch_size: int = DEFAULT_BATCH
    dry_run: bool = False
    keep_journal: bool = False
    vacuum: bool = False


@dataclass
class PruneReport:
    """What a pass did so far (kept up to date batch by batch, so an interrupted pass can say
    what it committed)."""

    cutoff: datetime
    dry_run: bool
    jobs: int = 0
    payload_bytes: int = 0
    events: int = 0
    batches: int = 0
    stopped: bool = False  # asked to stop before the pass was done
    vacuumed: bool = False
    sizes_before: dict[str, int] = field(default_factory=dict)
    sizes_after: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "dry_run": self.dry_run,
            "jobs": self.jobs,
            "payload_bytes": self.payload_bytes,
            "events": self.events,
            "batches": self.batches,
            "stopped": self.stopped,
            "vacuumed": self.vacuumed,
            "sizes_before": self.sizes_before,
            "sizes_after": self.sizes_after,
        }


def start(engine: Engine, options: PruneOptions) -> PruneReport:
    """The pass's report, with its cutoff on the database clock."""
    if not 1 <= options.batch_size <= MAX_BATCH:
        raise UsageError(f"--batch-size must be between 1 and {MAX_BATCH}")
    store = OutboxStore(engine.dialect.name)
    with reading(engine) as conn:
        cutoff = store.database_now(conn) - options.older_than
    report = PruneReport(cutoff=cutoff, dry_run=options.dry_run)
    report.sizes_before = table_sizes(engine)
    return report


def prune(
    engine: Engine,
    options: PruneOptions,
    report: PruneReport,
    *,
    actor: str,
    stop: Callable[[], bool] = lambda: False,
) -> PruneReport:
    """Run the pass ``start`` prepared, updating ``report`` after every committed batch.

    ``stop`` is asked between batches (the CLI's Ctrl-C): the pass ends after the batch that
    is running commits, and says so in ``report.stopped``.
    """
    store = OutboxStore(engine.dialect.name)
    if options.dry_run:
        with reading(engine) as conn:  # a dry run only counts: never behind a writer
            estimate = store.prune_estimate(
                conn,
                cutoff=report.cutoff,
                campaign=options.campaign,
                keep_journal=options.keep_journal,
            )
        report.jobs, report.payload_bytes, report.events = (
            estimate.jobs,
            estimate.payload_bytes,
            estimate.events,
        )
        return report
    after = 0
    while True:
        if stop():
            report.stopped = True
            break
        with engine.begin() as conn:
            batch = store.prune_batch(
                conn,
                cutoff=report.cutoff,
                after_id=after,
                limit=options.batch_size,
                campaign=options.campaign,
                keep_journal=options.keep_journal,
            )
        if batch.last_id is None:
            break
        after = batch.last_id
        report.batches += 1
        report.jobs += batch.jobs
        report.payload_bytes += batch.payload_bytes
        report.events += batch.events
    if options.vacuum and not report.stopped:
        vacuum(engine)
        report.vacuumed = True
    report.sizes_after = table_sizes(engine)
    # The operator's action: one record naming who, what and how much (not a journal row:
    # nothing changed state).
    log.info(
        "pruned %d job payload(s) and %d journal row(s) older than %s",
        report.jobs,
        report.events,
        report.cutoff.isoformat(),
        extra={
            "event": "outbox_pruned",
            "actor": actor,
            "campaign": options.campaign,
            "cutoff": report.cutoff.isoformat(),
            "jobs": report.jobs,
            "payload_bytes": report.payload_bytes,
            "events": report.events,
            "vacuumed": report.vacuumed,
            "stopped": report.stopped,
        },
    )
    return report


def vacuum(engine: Engine) -> None:
    """Make the freed space reusable (PostgreSQL: VACUUM, no exclusive lock) or give it back to
    the file system (SQLite: VACUUM rewrites the file and locks the database while it runs)."""
    if engine.dialect.name != "postgresql":
        # On the DB-API connection: Herald's SQLite engine begins every transaction itself
        # (BEGIN IMMEDIATE, herald.db), and VACUUM cannot run inside one.
        raw = engine.raw_connection()
        try:
            raw.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
        finally:
            raw.close()
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM (ANALYZE) {', '.join(TABLES)}"))


def table_sizes(engine: Engine) -> dict[str, int]:
    """Bytes on disk: PostgreSQL per table (with its TOAST) and its indexes; SQLite: the file's
    used and free pages (per-table sizes need the optional dbstat table)."""
    with reading(engine) as conn:
        if engine.dialect.name == "postgresql":
            sizes: dict[str, int] = {}
            for table in TABLES:
                row = conn.execute(
                    sa.text(
                        "select pg_table_size(cast(:t as regclass)),"
                        " pg_indexes_size(cast(:t as regclass))"
                    ),
                    {"t": table},
                ).one()
                sizes[f"{table}"] = int(row[0])
                sizes[f"{table}_indexes"] = int(row[1])
            return sizes
        page = int(conn.execute(sa.text("pragma page_size")).scalar_one())
        pages = int(conn.execute(sa.text("pragma page_count")).scalar_one())
        free = int(conn.execute(sa.text("pragma freelist_count")).scalar_one())
        return {"database": pages * page, "free": free * page}
