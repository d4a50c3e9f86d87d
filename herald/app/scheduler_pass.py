"""The scheduler package's pass as the ``herald scheduler`` loop runs it, and its one log line.

``ScheduledPass`` calls ``scheduler.passes.run_pass`` with the state a long-running process
keeps between passes (when each URL audience was last fetched) and turns its report into a
``PassSummary``: did it do anything, and one concise line saying what. A campaign's
``scheduler_note`` (why nothing can be fired for it) is reported when it appears, changes or
clears, not at every tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from scheduler.passes import CampaignPass, PassReport
    from scheduler.unsubscribe_links import UnsubscribeLinks


log = logging.getLogger("herald.scheduler")

WAITING = "waiting: another scheduler is reading its audience (taken over if it stops)"


@dataclass(frozen=True)
class PassSummary:
    report: PassReport
    parts: tuple[str, ...]  # one per campaign that did something, "name: what"
    waiting: tuple[str, ...] = ()  # campaigns whose occurrence another scheduler is reading

    @property
    def did_something(self) -> bool:
        return bool(self.parts)

    def line(self) -> str:
        said = [*self.parts, *(f"{name}: {WAITING}" for name in self.waiting)]
        return "; ".join(said) if said else "nothing was due"

    def as_dict(self) -> dict[str, object]:
        return self.report.summary()


@dataclass
class ScheduledPass:
    """``run_pass`` for a process that runs many passes (``herald scheduler``, ``herald run``)."""

    notes: dict[str, str | None] = field(default_factory=dict)  # last note seen per campaign
    links: UnsubscribeLinks | None = None  # herald.app.unsubscribe.links_from_env()
    # Told after each committed fan-out batch (scheduler.passes.run_pass): a seam for tests
    # that must act between two batches, as dispatch.instrumentation is for a send.
    fanout_progress: Callable[[int], None] | None = None
    # Jobs per fan-out transaction (None: the database's default, scheduler.fanout).
    batch_size: int | None = None

    def __post_init__(self) -> None:
        from scheduler.check_pool import pool_of
        from scheduler.passes import PassState

        self.state = PassState()
        # One process per core composes a large occurrence (scheduler.occurrence_pool) and a
        # drip pass's many next steps (scheduler.drip_pool).
        self.pool = pool_of()

    def __call__(self, engine: Engine, *, now: datetime, actor: str) -> PassSummary:
        from scheduler.passes import run_pass

        report = run_pass(
            engine,
            now=now,
            actor=actor,
            state=self.state,
            links=self.links,
            fanout_progress=self.fanout_progress,
            batch_size=self.batch_size,
            pool=self.pool,
        )
        parts = []
        for campaign in report.campaigns:
            said = describe(campaign, self._note_change(campaign))
            if said:
                parts.append(f"{campaign.campaign}: {', '.join(said)}")
        waiting = tuple(campaign.campaign for campaign in report.campaigns if campaign.busy)
        for campaign in report.campaigns:
            if campaign.fired:
                _log_fired(campaign)
        return PassSummary(report, tuple(parts), waiting)

    def _note_change(self, campaign: CampaignPass) -> str | None:
        if campaign.busy:
            return None  # another scheduler holds its audience: nothing was decided
        before = self.notes.get(campaign.campaign)
        self.notes[campaign.campaign] = campaign.note
        if campaign.note == before:
            return None
        return f"note: {campaign.note}" if campaign.note else "note cleared"


def _log_fired(campaign: CampaignPass) -> None:
    """The structured ``fired`` record: JSON only, since the pass's summary line (logged by the
    command) already says it in the text format."""
    occurrences = [_iso(moment) for moment in sorted(campaign.fired)]
    log.info(
        "%s: %s, %d new job(s)",
        campaign.campaign,
        _fired(campaign.fired),
        campaign.new_jobs,
        extra={
            "event": "fired",
            "campaign": campaign.campaign,
            "occurrence": occurrences[-1],
            "occurrences": occurrences,
            "jobs": campaign.new_jobs,
            "trigger": campaign.trigger,
            "processes": campaign.processes,  # that composed its messages
            "json_only": True,
        },
    )


def describe(campaign: CampaignPass, note_change: str | None = None) -> list[str]:
    """What a pass did for one campaign, in a few words each; [] for nothing."""
    said = []
    if campaign.fired:
        said.append(_fired(campaign.fired))
    if campaign.skipped:
        reasons = sorted({reason for _, reason in campaign.skipped})
        said.append(f"skipped {len(campaign.skipped)} ({'; '.join(reasons)})")
    counts = (
        (campaign.new_jobs, "new job(s)"),
        (campaign.enrolled, "enrolled"),
        (campaign.left, "left"),
        (campaign.ended, "ended"),
        (campaign.withdrawn, "withdrawn"),
        (campaign.done, "drip(s) done"),
    )
    said += [f"{count} {what}" for count, what in counts if count]
    if note_change:
        said.append(note_change)
    return said


def _fired(moments: list[datetime]) -> str:
    if len(moments) == 1:
        return f"fired {_iso(moments[0])}"
    return f"fired {len(moments)} ({_iso(min(moments))} .. {_iso(max(moments))})"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
