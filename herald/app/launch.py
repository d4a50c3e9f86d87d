"""Use cases ``validate`` and ``launch``.

``launch`` renders every message once: its check (the same as ``validate``'s, against the
launch time the campaign will really use) keeps each composed job in a spool on disk, and the
fan-out enqueues them from there (scheduler.spool). Nothing is written to the outbox unless
every message rendered.

A campaign with a ``start_at``, ``schedule`` or ``enrollment`` trigger is checked (against
today's audience, which may be empty: a later occurrence or enrollment may fill it), registered
with the file it came from, and then given one scheduler pass at once (scheduler.passes): a
``start_at`` already due or an ``every:`` schedule's first fire goes out now, an enrollment
campaign enrolls its audience; a cron schedule reports its next fire.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import LoadedCampaign, load_campaign
from campaigns.store import CampaignStore
from herald.app.common import Clock, operator_name, utc_now
from herald.errors import UsageError
from scheduler.check import CheckReport, check_campaign
from scheduler.check_pool import pool_of
from scheduler.fanout import FanoutResult, materialise
from scheduler.new_version import NewVersionFanout
from scheduler.new_version_scheduled import ScheduledNewVersion
from scheduler.passes import CampaignPass, run_pass
from scheduler.spool import JobSpool
from scheduler.unsubscribe_links import UnsubscribeLinks

Progress = Callable[[int], None]
#: Opens a progress reporter labelled ``label`` (with the total, or None if unknown) for as
#: long as the ``with`` lasts; the CLI draws a bar on a terminal. The default reports nothing.
ProgressFactory = Callable[[str, int | None], AbstractContextManager[Progress | None]]


def _no_progress(_label: str, _total: int | None) -> AbstractContextManager[Progress | None]:
    return nullcontext(None)


class CheckFailed(UsageError):
    """The campaign did not pass its check; nothing was launched. ``report`` says why."""

    def __init__(self, report: CheckReport) -> None:
        super().__init__(f"{report.problem_count} problem(s); nothing was launched")
        self.report = report


@dataclass(frozen=True)
class Validation:
    loaded: LoadedCampaign
    report: CheckReport
    # Mistakes that render but lose content (herald.app.validate_warnings); never a failure.
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LaunchResult:
    loaded: LoadedCampaign
    report: CheckReport  # the check that preceded the fan-out (rejected rows included)
    version: int
    created: bool  # False: the campaign was launched before (idempotent relaunch)
    fanout: FanoutResult
    superseded: int  # unsent jobs of steps/recipients a new version removed
    # A scheduled trigger: what the pass run at launch did (fires, enrollments, next fire).
    scheduled: CampaignPass | None = None

    @property
    def trigger(self) -> str:
        return self.loaded.spec.trigger

    def summary(self) -> dict[str, object]:
        """The stable ``launch --json`` document (``scheduler`` only for a scheduled trigger:
        scheduler.passes.CampaignPass.summary)."""
        document: dict[str, object] = {
            "campaign": self.loaded.spec.name,
            "version": self.version,
            "created": self.created,
            "trigger": self.trigger,
            "new_jobs": self.fanout.new_jobs,
            "existing_jobs": self.fanout.existing_jobs,
            "recipients": self.report.recipients,
            "rejected_rows": self.report.rejected,
            "steps": len(self.loaded.spec.steps),
            "superseded_jobs": self.superseded,
        }
        if self.scheduled is not None:
            document["scheduler"] = self.scheduled.summary()
        return document


def load(file: Path) -> LoadedCampaign:
    """The campaign in ``file``, parsed and checked (SpecError lists every problem)."""
    if not file.exists():
        raise UsageError(f"{file}: no such file")
    return load_campaign(file)


def validate(
    file: Path,
    *,
    clock: Clock = utc_now,
    progress: ProgressFactory = _no_progress,
    links: UnsubscribeLinks | None = None,
) -> Validation:
    """Parse a campaign and render every step for every recipient. Writes nothing.

    Returns the report even when it has problems: showing them is the point. ``links``: the
    unsubscribe links marketing messages carry (herald.app.unsubscribe; None: none).
    """
    loaded = load(file)
    with progress("rendering", None) as tick:
        report = check_campaign(
            loaded,
            clock(),
            progress=tick,
            require_recipients=needs_recipients(loaded),
            links=links,
        )
    from herald.app.validate_warnings import campaign_warnings

    return Validation(loaded, report, campaign_warnings(loaded, report))


def needs_recipients(loaded: LoadedCampaign) -> bool:
    """Whether an empty audience is a problem: for a campaign sent once to today's list (at
    launch, or at its start_at, whose CSV is part of its hash), yes; a schedule's later
    occurrences and an enrollment campaign's later enrollments may fill it."""
    return loaded.spec.trigger in ("launch", "start_at")


def launch(
    engine: Engine,
    campaign: Path | LoadedCampaign,
    *,
    clock: Clock = utc_now,
    force_new_version: bool = False,
    actor: str | None = None,
    progress: ProgressFactory = _no_progress,
    links: UnsubscribeLinks | None = None,
    check_processes: int | None = None,
) -> LaunchResult:
    """Check, store the campaign and fan out its send jobs (idempotent).

    ``campaign``: its file, or the campaign already loaded (``load``). ``links``: the
    unsubscribe links marketing messages carry (herald.app.unsubscribe; None: none).
    ``check_processes``: how many processes check a large audience file
    (scheduler.check_pool; None: one per core, at most four).

    Raises CheckFailed (with the report) when any message fails to render; CampaignConflict
    for a changed definition without ``force_new_version``.
    """
    loaded = campaign if isinstance(campaign, LoadedCampaign) else load(campaign)
    if loaded.spec.trigger != "launch":
        return _launch_scheduled(
            engine,
            loaded,
            now=clock(),
            force_new_version=force_new_version,
            actor=f"launch:{actor or operator_name()}",
            progress=progress,
            links=links,
            check_processes=check_processes,
        )
    now = clock()
    with engine.connect() as conn:
        existing = CampaignStore(engine.dialect.name).get(conn, loaded.spec.name)
    # Check against the launch time the campaign will really use.
    occurrence_at = existing.launched_at if existing else now
    with JobSpool(step.id for step in loaded.spec.steps) as spool:
        with progress("checking", None) as tick:
            report = check_campaign(
                loaded,
                occurrence_at,
                progress=tick,
                engine=engine,
                count_duplicates=False,
                spool=spool,
                links=links,
                pool=pool_of(check_processes),
            )
        if not report.ok:
            raise CheckFailed(report)
        # A new version fans out inside the transaction that stores it (scheduler.new_version).
        new_version = (
            NewVersionFanout(
                engine,
                loaded,
                occurrence_at,
                actor=f"launch:{actor or operator_name()}",
                composed=spool,
                links=links,
            )
            if force_new_version
            else None
        )
        registration = register(
            engine,
            loaded,
            now=now,
            force_new_version=force_new_version,
            on_new_version=new_version.apply if new_version is not None else None,
        )
        if registration.new_version and new_version is not None:
            return LaunchResult(
                loaded,
                report,
                registration.campaign.version,
                registration.created,
                new_version.result,
                new_version.report.cancelled + new_version.report.marked,
            )
        launched_at = registration.campaign.launched_at
        # Another launch may have registered the campaign since the check: then the spool is of
        # another occurrence and fan-out composes for the stored one itself.
        composed = spool if launched_at == occurrence_at else None
        with progress("enqueueing", report.messages) as tick:
            result = materialise(
                engine, loaded, launched_at, progress=tick, composed=composed, links=links
            )
    return LaunchResult(
        loaded, report, registration.campaign.version, registration.created, result, 0
    )


def _launch_scheduled(
    engine: Engine,
    loaded: LoadedCampaign,
    *,
    now: datetime,
    force_new_version: bool,
    actor: str,
    progress: ProgressFactory,
    links: UnsubscribeLinks | None,
    check_processes: int | None,
) -> LaunchResult:
    """Check, register, and run the campaign's first scheduler pass now."""
    pool = pool_of(check_processes)
    # A large audience file is checked in one process per core, as a broadcast's is; the
    # processes hand their composed jobs over in a spool, which nothing reads afterwards here:
    # each occurrence and drip step is composed when it fires, with its own time.
    shared = pool is not None and pool.takes(loaded)
    spool = JobSpool(step.id for step in loaded.spec.steps) if shared else None
    with spool if spool is not None else nullcontext(), progress("checking", None) as tick:
        # Today's audience, read live: each occurrence snapshots its own list when it fires.
        report = check_campaign(
            loaded,
            now,
            progress=tick,
            count_duplicates=False,
            require_recipients=needs_recipients(loaded),
            links=links,
            spool=spool,
            pool=pool if shared else None,
        )
    if not report.ok:
        raise CheckFailed(report)
    new_version = (
        ScheduledNewVersion(engine, loaded, actor=actor, links=links) if force_new_version else None
    )
    registration = register(
        engine,
        loaded,
        now=now,
        force_new_version=force_new_version,
        on_new_version=new_version.apply if new_version is not None else None,
    )
    superseded = 0
    if registration.new_version and new_version is not None:
        superseded = new_version.report.cancelled + new_version.report.marked
    passed = run_pass(
        engine,
        now=now,
        actor=actor,
        campaigns=[loaded.spec.name],
        takeover_after=None,
        links=links,
        pool=pool,
    ).get(loaded.spec.name)
    fanout = FanoutResult()
    if passed is not None:
        fanout.new_jobs = passed.new_jobs
        fanout.existing_jobs = passed.existing_jobs
    return LaunchResult(
        loaded,
        report,
        registration.campaign.version,
        registration.created,
        fanout,
        superseded,
        scheduled=passed
        if passed is not None
        else CampaignPass(loaded.spec.name, loaded.spec.trigger, note="the campaign is not active"),
    )
