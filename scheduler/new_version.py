"""Fan out a new campaign version inside the transaction that stores it (issue 7, item 3).

``launch --force-new-version`` must never leave the old version's work sendable. So the new
version's whole fan-out -- new jobs inserted, unsent jobs of kept keys given the new content,
jobs of removed keys superseded (dispatch.supersede) -- happens in the one transaction that
replaces the stored spec. If anything fails, nothing of it happened: the old version and its
jobs stay exactly as they were.

The price is one long transaction for a big audience. A new version is a deliberate, rare
operator action; its atomicity is worth holding the outbox's write lock (SQLite) or the
campaign's rows (PostgreSQL) for the length of one fan-out. Workers meanwhile send other
campaigns' jobs (PostgreSQL) or wait (SQLite).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient
from campaigns.control import CampaignConflict
from campaigns.spec import LoadedCampaign
from campaigns.store import CampaignRow
from dispatch.store import NewJob, OutboxStore
from dispatch.supersede import VersionReport, VersionStore
from scheduler.compose import CompiledStep, compile_steps, compose_broadcast
from scheduler.fanout import (
    BATCH_SIZE,
    Audience,
    FanoutResult,
    Item,
    audience_entries,
    prepare_audience,
)
from scheduler.planning import Planner
from scheduler.spool import JobSpool
from scheduler.store import OccurrenceStore
from scheduler.unsubscribe_links import UnsubscribeLinks


@dataclass
class NewVersionFanout:
    """Prepared before the transaction (audience snapshot, compiled steps); ``apply`` runs in it.

    Pass ``apply`` as ``register(..., on_new_version=...)``.
    """

    engine: Engine
    loaded: LoadedCampaign
    occurrence_at: datetime
    actor: str
    batch_size: int = BATCH_SIZE
    # The launch check's complete spool of this occurrence: its jobs are not composed again.
    composed: JobSpool | None = None
    links: UnsubscribeLinks | None = None  # scheduler.unsubscribe_links
    result: FanoutResult = field(default_factory=FanoutResult)
    report: VersionReport = field(default_factory=VersionReport)

    def __post_init__(self) -> None:
        if self.composed is not None and not self.composed.complete:
            raise ValueError("a new version from an incomplete spool")
        self._steps = compile_steps(self.loaded, self.links)
        self._audience: Audience | None = None
        if self.composed is None:
            self._audience = prepare_audience(self.engine, self.loaded, self.occurrence_at)

    def _entries(self, conn: sa.Connection, step: CompiledStep) -> Iterator[Item]:
        if self.composed is not None:
            return self.composed.entries(step.spec.id)
        assert self._audience is not None
        return audience_entries(self._audience(conn))

    def apply(self, conn: sa.Connection, campaign: CampaignRow) -> None:
        if campaign.launched_at != self.occurrence_at:
            raise CampaignConflict(
                f"campaign {campaign.name!r} changed while launching", hint="run the command again"
            )
        dialect = conn.dialect.name
        outbox, versions = OutboxStore(dialect), VersionStore(dialect)
        occurrences = OccurrenceStore(dialect)
        existing = versions.lock_campaign_jobs(conn, campaign.name)
        kept: set[str] = set()
        batch: list[NewJob] = []

        def flush(occurrence_id: int, position: int) -> None:
            created = outbox.enqueue(conn, batch)
            versions.take_new_content(
                conn,
                batch,
                existing,
                version=campaign.version,
                actor=self.actor,
                report=self.report,
            )
            occurrences.advance(conn, occurrence_id, position, created)
            self.result.new_jobs += created
            self.result.existing_jobs += len(batch) - created
            batch.clear()

        planner = Planner(self.loaded.spec)
        for index, step in enumerate(self._steps):
            occurrence = occurrences.open(conn, campaign.name, step.spec.id, self.occurrence_at)
            position = skipped = 0
            for position, entry in self._entries(conn, step):
                if entry is None:
                    skipped += 1
                    continue
                job = (
                    compose_broadcast(self.loaded, planner, index, step, entry, self.occurrence_at)
                    if isinstance(entry, Recipient)
                    else entry
                )
                kept.add(job.key)
                batch.append(job)
                if len(batch) >= self.batch_size:
                    flush(occurrence.id, position)
            if batch:
                flush(occurrence.id, position)
            occurrences.close(conn, occurrence.id)
            if self.result.steps_done == 0:
                self.result.skipped_rows = skipped
            self.result.steps_done += 1
        versions.supersede_removed(conn, existing, kept, actor=self.actor, report=self.report)
