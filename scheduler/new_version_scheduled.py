"""A new version of a scheduled or enrollment campaign takes over its unsent work at once.

As for a launch campaign (scheduler.new_version), ``launch --force-new-version`` must never
leave the old version's work sendable, and the switch is one transaction (the one that stores
the new spec): either the old version with all its jobs as they were, or the new version with

- every occurrence that still has unsent jobs fanned out again from its own audience snapshot
  (the list of its day), with the new steps and content: kept keys take the new content, new
  steps are added, keys of removed steps are superseded (dispatch.outbox.versions);
- every drip's unsent jobs of steps the new version still has re-rendered (keeping the time
  they were planned for), jobs of removed steps superseded, and each active drip's
  ``next_step`` re-pointed at the first step of the new version it has not had yet (a step
  inserted before its position is sent next; a removed one is skipped).

Future occurrences and drip steps simply use the new version: the scheduler re-reads the file,
whose hash is now the stored one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.spec import LoadedCampaign
from campaigns.store import CampaignRow
from dispatch.models import send_job, send_key
from dispatch.outbox.keyed import K
from dispatch.store import NewJob, OutboxStore
from dispatch.supersede import ExistingJob, VersionReport, VersionStore
from scheduler.compose import compile_steps, compose_broadcast, compose_job
from scheduler.enrollment_store import EnrollmentRow, EnrollmentStore
from scheduler.fanout import BATCH_SIZE, FanoutResult
from scheduler.models import enrollment_table
from scheduler.planning import Planner
from scheduler.snapshot import Snapshot, iter_snapshot, url_audience
from scheduler.store import OccurrenceStore, SnapshotStore
from scheduler.unsubscribe_links import UnsubscribeLinks

J = send_job.c
E = enrollment_table.c
_UNSENT = ("pending", "claimed", "sending", "failed", "in_doubt", "cancelled")


@dataclass
class ScheduledNewVersion:
    """Pass ``apply`` as ``register(..., on_new_version=...)``."""

    engine: Engine
    loaded: LoadedCampaign
    actor: str
    batch_size: int = BATCH_SIZE
    links: UnsubscribeLinks | None = None  # scheduler.unsubscribe_links
    result: FanoutResult = field(default_factory=FanoutResult)
    report: VersionReport = field(default_factory=VersionReport)

    def __post_init__(self) -> None:
        self._steps = compile_steps(self.loaded, self.links)
        self._planner = Planner(self.loaded.spec)
        self._version = 0

    def apply(self, conn: sa.Connection, campaign: CampaignRow) -> None:
        self._version = campaign.version
        versions = VersionStore(conn.dialect.name)
        existing = versions.lock_campaign_jobs(conn, campaign.name)
        kept: set[str] = set()
        if self.loaded.spec.trigger == "enrollment":
            self._drips(conn, existing, kept)
        else:
            for occurrence_at in _unsent_occurrences(conn, campaign.name):
                self._occurrence(conn, occurrence_at, existing, kept)
        versions.supersede_removed(conn, existing, kept, actor=self.actor, report=self.report)

    def _flush(
        self, conn: sa.Connection, batch: list[NewJob], existing: dict[str, ExistingJob]
    ) -> int:
        created = OutboxStore(conn.dialect.name).enqueue(conn, batch)
        VersionStore(conn.dialect.name).take_new_content(
            conn,
            batch,
            existing,
            version=self._version,
            actor=self.actor,
            report=self.report,
        )
        self.result.new_jobs += created
        self.result.existing_jobs += len(batch) - created
        batch.clear()
        return created

    def _occurrence(
        self,
        conn: sa.Connection,
        occurrence_at: datetime,
        existing: dict[str, ExistingJob],
        kept: set[str],
    ) -> None:
        occurrences = OccurrenceStore(conn.dialect.name)
        name = self.loaded.spec.name
        for index, step in enumerate(self._steps):
            occurrence = occurrences.open(conn, name, step.spec.id, occurrence_at)
            batch: list[NewJob] = []
            position = 0
            for position, item in enumerate(self._audience(conn, occurrence_at), start=1):
                if isinstance(item, RowProblem):
                    continue
                job = compose_broadcast(
                    self.loaded, self._planner, index, step, item, occurrence_at
                )
                kept.add(job.key)
                batch.append(job)
                if len(batch) >= self.batch_size:
                    created = self._flush(conn, batch, existing)
                    occurrences.advance(conn, occurrence.id, position, created)
            if batch:
                created = self._flush(conn, batch, existing)
                occurrences.advance(conn, occurrence.id, position, created)
            occurrences.close(conn, occurrence.id)
        self.result.steps_done += 1

    def _audience(
        self, conn: sa.Connection, occurrence_at: datetime
    ) -> Iterator[Recipient | RowProblem]:
        """The occurrence's own list: its snapshot; without one (an occurrence of a launch
        version), the source as it is now, unless that is a URL (its jobs are superseded)."""
        name = self.loaded.spec.name
        found = SnapshotStore(conn.dialect.name).get(conn, name, occurrence_at)
        if found is not None and found.complete:
            snapshot = Snapshot(
                name, occurrence_at, found.format or "", found.row_count, found.reject_count
            )
            return iter_snapshot(self.engine, snapshot, conn=conn)
        if self.loaded.spec.audience is None or url_audience(self.loaded) is not None:
            return iter(())
        return iter_audience(self.loaded)

    def _drips(self, conn: sa.Connection, existing: dict[str, ExistingJob], kept: set[str]) -> None:
        name = self.loaded.spec.name
        store = EnrollmentStore(conn.dialect.name)
        jobs = _drip_jobs(conn, name)
        by_id = {step.spec.id: index for index, step in enumerate(self._steps)}
        batch: list[NewJob] = []
        moves: list[tuple[int, int, int]] = []
        for row in _enrollments(conn, name):
            had = jobs.get((row.mailbox, row.enrolled_at), {})
            for step_id, (state, not_before) in had.items():
                index = by_id.get(step_id)
                if index is None or state not in _UNSENT:
                    continue
                planned_window = self._planner.window(row.timezone)
                job = compose_job(
                    self.loaded,
                    self._steps[index],
                    Recipient(row.recipient, row.name, dict(row.variables), 0),
                    row.enrolled_at,
                    not_before=not_before,
                    send_window=None if planned_window is None else planned_window.to_json(),
                )
                kept.add(job.key)
                batch.append(job)
            if row.state == "active":
                position = next(
                    (i for i, step in enumerate(self._steps) if step.spec.id not in had),
                    len(self._steps),
                )
                if position != row.next_step:
                    moves.append((row.id, row.next_step, position))
            if len(batch) >= self.batch_size:
                self._flush(conn, batch, existing)
        if batch:
            self._flush(conn, batch, existing)
        # Each drip to the first step it has not had, a batch at a time (drip passes wait on
        # the campaign's row this transaction changed, so the rows are free).
        store.lock(conn, [enrollment_id for enrollment_id, _, _ in moves])
        store.move_many(conn, moves)


def _unsent_occurrences(conn: sa.Connection, campaign: str) -> list[datetime]:
    return list(
        conn.execute(
            sa.select(J.occurrence_at)
            .where(J.campaign == campaign, J.state.in_(_UNSENT))
            .distinct()
            .order_by(J.occurrence_at)
        ).scalars()
    )


def _drip_jobs(
    conn: sa.Connection, campaign: str
) -> dict[tuple[str, datetime], dict[str, tuple[str, datetime]]]:
    """(mailbox, enrolled_at) -> step id -> (state, not_before), for every job of the drip."""
    found: dict[tuple[str, datetime], dict[str, tuple[str, datetime]]] = {}
    rows = conn.execute(
        # By send_key's (campaign, …) index: send_job has none that holds every state.
        sa.select(J.mailbox, J.occurrence_at, J.step, J.state, J.not_before)
        .join(send_key, K.job_id == J.id)
        .where(K.campaign == campaign)
    )
    for row in rows:
        found.setdefault((row.mailbox, row.occurrence_at), {})[row.step] = (
            row.state,
            row.not_before,
        )
    return found


def _enrollments(conn: sa.Connection, campaign: str) -> list[EnrollmentRow]:
    store = EnrollmentStore(conn.dialect.name)
    ids = list(conn.execute(sa.select(E.id).where(E.campaign == campaign)).scalars())
    return store.by_ids(conn, ids)
