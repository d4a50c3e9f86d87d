"""One scheduler pass: every active scheduled campaign's due work, materialised once.

For each active campaign whose trigger is ``start_at``, ``schedule`` or ``enrollment``:

1. re-read it from its file (scheduler.source); a missing or changed file fires nothing and
   sets ``campaign.scheduler_note`` (cleared by the first pass that can use the file again);
2. ``start_at``/``schedule``: decide the fires after the cursor up to ``now`` (catch-up policy,
   scheduler.triggers), record them in ``trigger_fire`` (ON CONFLICT DO NOTHING: a fire is
   decided once, by whichever scheduler comes first), then fan out every ``due`` fire — its
   occurrence is the NOMINAL fire time — with the resumable fan-out (scheduler.fanout; the
   audience is snapshotted per occurrence) and mark it ``done``. A fire left ``due`` by a crash
   is resumed by the next pass;
3. ``enrollment``: with ``enrollment: audience``, re-read the audience and enroll newcomers /
   end the drips of those who left (scheduler.enrollment; a URL at most every
   ``url_refresh`` seconds); end the drips of suppressed mailboxes; then materialise each
   drip's next step whose previous step has settled (scheduler.drip).

Nothing here needs a leader: every write is ON CONFLICT DO NOTHING or a guarded UPDATE, so any
number of schedulers may run passes at once on one database (that is how to get high
availability). A problem with one campaign (its audience cannot be read, a template fails)
is reported and noted on that campaign; the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DataError

from campaigns.errors import CampaignError
from campaigns.spec import LoadedCampaign, UrlAudience
from campaigns.store import CampaignRow, CampaignStore
from scheduler.check_pool import CheckPool
from scheduler.compose import CompileFailures, compile_steps
from scheduler.drip import advance_drips
from scheduler.enrollment import SyncReport, csv_digest, end_suppressed, sync_audience
from scheduler.fanout import FanoutResult, materialise
from scheduler.fire_store import DUE, SKIPPED, Fire, FireStore
from scheduler.job_lookup import earliest_pending, has_jobs
from scheduler.snapshot import SnapshotBusy
from scheduler.source import reload
from scheduler.triggers import catch_up_policy, decide, next_fire, trigger_of
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

# What one campaign's definition, files or audience can raise: noted on that campaign, which is
# retried at the next pass, while the others go on. That includes the database refusing a value
# of the campaign's data (DataError: a NUL in a text, once): it would refuse it at every pass,
# and no campaign after it would ever be passed. Other database errors (the server gone, a
# deadlock) end the pass, which is retried whole.
CAMPAIGN_PROBLEMS = (CampaignError, TemplateError, CompileFailures, OSError, ValueError, DataError)
URL_REFRESH = 300.0  # seconds between two fetches of an enrollment campaign's URL audience
TAKEOVER_AFTER = 60.0  # seconds without a write before a snapshot's writer is presumed dead


@dataclass
class CampaignPass:
    """What one pass did for one campaign."""

    campaign: str
    trigger: str
    fired: list[datetime] = field(default_factory=list)  # occurrences fanned out
    skipped: list[tuple[datetime, str]] = field(default_factory=list)  # by the catch-up policy
    new_jobs: int = 0
    existing_jobs: int = 0
    enrolled: int = 0
    left: int = 0
    ended: int = 0
    done: int = 0
    withdrawn: int = 0
    next_fire: datetime | None = None
    note: str | None = None  # why nothing (more) was fired: the campaign's scheduler_note
    busy: bool = False  # another scheduler is reading an occurrence's audience: next pass
    processes: int = 1  # the most that composed one of its occurrences (scheduler.fanout)

    def summary(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "trigger": self.trigger,
            "fired": [moment.isoformat() for moment in self.fired],
            "skipped": [
                {"occurrence": moment.isoformat(), "reason": reason}
                for moment, reason in self.skipped
            ],
            "new_jobs": self.new_jobs,
            "existing_jobs": self.existing_jobs,
            "enrolled": self.enrolled,
            "left": self.left,
            "ended": self.ended,
            "done": self.done,
            "withdrawn": self.withdrawn,
            "next_fire": None if self.next_fire is None else self.next_fire.isoformat(),
            "note": self.note,
            "busy": self.busy,
        }


@dataclass
class PassReport:
    now: datetime
    campaigns: list[CampaignPass] = field(default_factory=list)

    @property
    def new_jobs(self) -> int:
        return sum(c.new_jobs for c in self.campaigns)

    @property
    def fired(self) -> int:
        return sum(len(c.fired) for c in self.campaigns)

    def get(self, campaign: str) -> CampaignPass | None:
        return next((c for c in self.campaigns if c.campaign == campaign), None)

    def summary(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            "fired": self.fired,
            "new_jobs": self.new_jobs,
            "campaigns": [c.summary() for c in self.campaigns],
        }


@dataclass
class PassState:
    """What a long-running scheduler remembers between passes (nothing that matters for
    correctness: a new process starts with an empty one)."""

    url_fetched: dict[str, datetime] = field(default_factory=dict)  # campaign -> last fetch
    # campaign -> (spec_hash, CSV digest, note) of the last audience sync this process did
    csv_synced: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)


def run_pass(
    engine: Engine,
    *,
    now: datetime,
    actor: str,
    campaigns: Sequence[str] | None = None,
    state: PassState | None = None,
    url_refresh: float = URL_REFRESH,
    takeover_after: float | None = TAKEOVER_AFTER,
    batch_size: int | None = None,
    links: UnsubscribeLinks | None = None,
    fanout_progress: Callable[[int], None] | None = None,
    pool: CheckPool | None = None,
) -> PassReport:
    """One pass over every active scheduled campaign (``campaigns``: only those) at ``now``.

    ``takeover_after``: see scheduler.snapshot.ensure_snapshot (None: take over at once, as
    ``herald launch`` does). ``batch_size``: jobs per fan-out transaction (None: materialise's
    default for the database, 500 on SQLite and 5,000 on PostgreSQL). ``links``: the
    unsubscribe links of marketing messages (scheduler.unsubscribe_links; None: none).
    ``fanout_progress``: told, from inside the pass, after each batch of a scheduled
    occurrence's fan-out has committed (how many jobs it held), like materialise's
    ``progress``; a seam for tests that act between two batches (None: nothing is told).
    ``pool``: processes that compose a large occurrence's messages (scheduler.occurrence_pool)
    and a drip pass's many next steps (scheduler.drip_pool); None: the pass composes them
    itself.
    """
    store = CampaignStore(engine.dialect.name)
    with engine.connect() as conn:
        rows = store.scheduled(conn, campaigns)
    report = PassReport(now)
    for row in rows:
        result = CampaignPass(row.name, row.trigger)
        report.campaigns.append(result)
        source = reload(row)
        if source.loaded is None:
            result.note = source.note
        else:
            try:
                if row.trigger == "enrollment":
                    _drip_pass(
                        engine,
                        source.loaded,
                        result,
                        now,
                        actor,
                        state,
                        _DripOptions(url_refresh, links, pool),
                    )
                else:
                    _broadcast_pass(
                        engine,
                        row,
                        source.loaded,
                        result,
                        now,
                        _FanoutOptions(takeover_after, batch_size, links, fanout_progress, pool),
                    )
            except SnapshotBusy:
                result.busy = True
            except CAMPAIGN_PROBLEMS as exc:
                result.note = f"{_first_line(exc)} (retried at the next pass)"
        if not result.busy:
            with engine.begin() as conn:
                store.set_note(conn, row.name, result.note)
    return report


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class _FanoutOptions:
    takeover_after: float | None
    batch_size: int | None
    links: UnsubscribeLinks | None
    progress: Callable[[int], None] | None
    pool: CheckPool | None


def _broadcast_pass(
    engine: Engine,
    row: CampaignRow,
    loaded: LoadedCampaign,
    result: CampaignPass,
    now: datetime,
    options: _FanoutOptions,
) -> None:
    trigger = trigger_of(loaded.spec, row.launched_at)
    if trigger is None:
        return
    fires = FireStore(engine.dialect.name)
    with engine.connect() as conn:
        cursor = fires.cursor(conn, row.name)
    decision = decide(loaded.spec, trigger, registered_at=row.launched_at, cursor=cursor, now=now)
    decided = [Fire(moment, DUE) for moment in decision.fire]
    decided += [Fire(moment, SKIPPED, reason) for moment, reason in decision.skip]
    with engine.begin() as conn:
        fires.record(conn, row.name, sorted(decided, key=lambda fire: fire.nominal_at))
        due = fires.due(conn, row.name)
    result.skipped = list(decision.skip)
    _, max_age = catch_up_policy(loaded.spec, trigger)
    for occurrence_at in due:
        try:
            fanout = materialise(
                engine,
                loaded,
                occurrence_at,
                batch_size=options.batch_size,
                per_occurrence=True,
                takeover_after=options.takeover_after,
                links=options.links,
                progress=options.progress,
                pool=options.pool,
            )
        except CAMPAIGN_PROBLEMS as exc:
            # Retried at every pass; given up once the policy would no longer send it late,
            # if nothing of it was sent (then it is finished as well as it can be, later).
            late = now - occurrence_at > max_age
            with engine.begin() as conn:
                if late and not has_jobs(conn, row.name, occurrence_at):
                    reason = f"not sent: could not be fanned out in time: {_first_line(exc)}"
                    fires.skip_due(conn, row.name, occurrence_at, reason)
                    result.skipped.append((occurrence_at, reason))
                    continue
            raise
        with engine.begin() as conn:
            fires.mark_done(conn, row.name, occurrence_at)
        result.fired.append(occurrence_at)
        result.new_jobs += fanout.new_jobs
        result.existing_jobs += fanout.existing_jobs
        result.processes = max(result.processes, fanout.processes)
        result.note = _fanout_note(occurrence_at, fanout) or result.note
    result.next_fire = next_fire(trigger, after=now)


def _fanout_note(occurrence_at: datetime, fanout: FanoutResult) -> str | None:
    """What an occurrence's fan-out left out (its list is not checked before it fires)."""
    parts = []
    if fanout.skipped_rows:
        parts.append(f"{fanout.skipped_rows} audience row(s) could not be used")
    if fanout.unrendered:
        parts.append(
            f"{fanout.unrendered} message(s) could not be rendered (first: {fanout.problems[0]})"
        )
    if not parts:
        return None
    return f"occurrence {occurrence_at.isoformat()}: {'; '.join(parts)}; skipped"


@dataclass(frozen=True)
class _DripOptions:
    url_refresh: float
    links: UnsubscribeLinks | None
    pool: CheckPool | None


def _drip_pass(
    engine: Engine,
    loaded: LoadedCampaign,
    result: CampaignPass,
    now: datetime,
    actor: str,
    state: PassState | None,
    options: _DripOptions,
) -> None:
    links = options.links
    steps = compile_steps(loaded, links)
    sync = SyncReport()
    if loaded.spec.enrollment == "audience" and _audience_due(
        loaded, now, state, options.url_refresh
    ):
        sync = _sync_audience(engine, loaded, now, actor, state)
    end_suppressed(engine, loaded, actor=actor, report=sync)
    drips = advance_drips(engine, loaded, steps, actor=actor, pool=options.pool, links=links)
    result.processes = max(result.processes, drips.processes)
    result.enrolled = sync.enrolled
    result.left = sync.left
    result.ended = sync.ended + drips.ended
    result.withdrawn = sync.withdrawn
    result.done = drips.done
    result.new_jobs = drips.materialised
    if drips.problems:
        result.note = f"{len(drips.problems)} drip(s) ended: {drips.problems[0]}"
    elif sync.note:
        result.note = sync.note


def _sync_audience(
    engine: Engine, loaded: LoadedCampaign, now: datetime, actor: str, state: PassState | None
) -> SyncReport:
    """Enroll the audience's newcomers and end the drips of those who left, unless this
    process already did so from the same CSV bytes under the same campaign version.

    Reading a CSV again costs its rows' parsing and address checks at every pass (a million
    rows: tens of seconds, every tick), and from the same bytes it can change nothing: nobody
    new appears, nobody leaves, and no other code removes an enrollment. The digest is taken
    BEFORE the file is read, so a file rewritten in between is read again at the next pass.
    """
    name = loaded.spec.name
    digest = csv_digest(loaded) if state is not None else None
    if state is not None and digest is not None:
        synced = state.csv_synced.get(name)
        if synced is not None and synced[:2] == (loaded.spec_hash, digest):
            return SyncReport(note=synced[2])
    sync = sync_audience(engine, loaded, now=now, actor=actor)
    if state is not None:
        state.url_fetched[name] = now
        if digest is not None:
            state.csv_synced[name] = (loaded.spec_hash, digest, sync.note)
    return sync


def _audience_due(
    loaded: LoadedCampaign, now: datetime, state: PassState | None, url_refresh: float
) -> bool:
    """A CSV is read at every pass; a URL at most every ``url_refresh`` seconds."""
    if state is None or not isinstance(loaded.spec.audience, UrlAudience):
        return True
    last = state.url_fetched.get(loaded.spec.name)
    return last is None or now - last >= timedelta(seconds=url_refresh)


def next_wake(engine: Engine, now: datetime) -> datetime | None:
    """The earliest moment after which a pass has something to do that is known now: the next
    fire of a scheduled campaign (``now`` itself if one is overdue), or the due time of a drip
    step's pending job (once it is sent the next step can follow). None: nothing timed.

    Changes nothing signals (a new campaign, an edited CSV, a job settled early) are for the
    scheduler's periodic tick.
    """
    store = CampaignStore(engine.dialect.name)
    fires = FireStore(engine.dialect.name)
    wakes: list[datetime] = []
    with engine.connect() as conn:
        rows = store.scheduled(conn)
        drip_campaigns = [row.name for row in rows if row.trigger == "enrollment"]
        pending = earliest_pending(conn, drip_campaigns)
        cursors = {row.name: fires.cursor(conn, row.name) for row in rows}
        unfinished = fires.campaigns_with_due(conn)
    if any(row.name in unfinished for row in rows):
        wakes.append(now)  # a fan-out a crash interrupted: resume it
    if pending is not None:
        wakes.append(max(pending, now))
    for row in rows:
        if row.trigger == "enrollment":
            continue
        loaded = reload(row).loaded
        if loaded is None:
            continue
        trigger = trigger_of(loaded.spec, row.launched_at)
        if trigger is None:
            continue
        cursor = cursors[row.name]
        after = cursor if cursor is not None else row.launched_at - timedelta(seconds=1)
        upcoming = next_fire(trigger, after=after)
        if upcoming is not None:
            wakes.append(max(upcoming, now))
    return min(wakes) if wakes else None
