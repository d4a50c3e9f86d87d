"""Use case ``plan`` (``herald schedule`` / ``herald plan``): a campaign's next fires and, per
step, how many messages fall due when: computed from the file, writing nothing.

It answers "what happens if I launch this now?" (``now`` is the caller's clock, ``--now``
included): the fires a launch at ``now`` would produce (a launch: one occurrence, at once;
``start_at``: its one time; ``schedule``: the trigger's next fires after ``now``; a drip: each
recipient as if enrolled at ``now``), and for each, the due time of every step for every
recipient, planned by the scheduler's own planner (``scheduler.planning``: the same chain, the
same recipient time zones and send windows), grouped by due time. Recipients are read once and
reduced to a count per time zone, so an audience of millions costs one chain per zone.

``simulate`` (herald.app.simulate) uses the same pieces over a horizon.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herald.app.common import Clock, utc_now

if TYPE_CHECKING:
    from campaigns.spec import CampaignSpec, LoadedCampaign
    from herald.app.launch import ProgressFactory
    from scheduler.check import CheckReport
    from scheduler.planning import Planned, Planner
    from scheduler.timing import Trigger
    from scheduler.unsubscribe_links import UnsubscribeLinks

#: What a drip's plan calls its one "fire": everyone enrolled at ``now``.
ENROLLED_NOW = "if enrolled now"
AT_LAUNCH = "at launch"
#: A launch's fire is the launch itself; a drip's, an enrollment: neither is a trigger fire.
_UNTIMED = frozenset({"launch", "enrollment"})


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class DueGroup:
    """``messages`` jobs of ``step`` falling due at ``due`` (UTC), shown on ``zone``'s clock
    (the recipients' zone when their zone decided the time, else the campaign's)."""

    step: str
    channel: str
    due: datetime
    zone: str
    messages: int

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "channel": self.channel,
            "due": self.due.isoformat(),
            "due_local": _local(self.due, self.zone).isoformat(),
            "zone": self.zone,
            "messages": self.messages,
        }


@dataclass(frozen=True)
class PlannedFire:
    at: datetime  # the occurrence (UTC): nominal fire time, launch time or enrollment time
    label: str | None  # AT_LAUNCH, ENROLLED_NOW, or None for a scheduled time
    groups: tuple[DueGroup, ...]

    @property
    def messages(self) -> int:
        return sum(group.messages for group in self.groups)

    def to_json(self, zone_name: str) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "local": _local(self.at, zone_name).isoformat(),
            "label": self.label,
            "messages": self.messages,
            "steps": [group.to_json() for group in self.groups],
        }


@dataclass(frozen=True)
class Plan:
    loaded: LoadedCampaign
    report: CheckReport  # the check (as ``validate``): when it failed, fires is empty
    now: datetime
    trigger: str
    zone: str  # the campaign's time zone
    description: str  # the trigger in words
    warnings: list[str]
    fires: list[PlannedFire]
    recipients: int
    per_enrollment: bool  # a manual drip: planned for one recipient enrolled at ``now``

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    def to_json(self) -> dict[str, Any]:
        """The stable ``schedule --json`` document."""
        return {
            "campaign": self.name,
            "trigger": self.trigger,
            "timezone": self.zone,
            "description": self.description,
            "now": self.now.isoformat(),
            "recipients": self.recipients,
            "per_enrollment": self.per_enrollment,
            "warnings": self.warnings,
            "fires": [fire.to_json(self.zone) for fire in self.fires],
            "computed_with": computed_with(),
        }


# ---------------------------------------------------------------------- the audience


@dataclass
class AudienceZones:
    """The audience reduced to what timing needs: how many recipients have each own time zone
    (None: none, or one Herald does not know; the campaign's zone is used)."""

    counts: Counter[str | None] = field(default_factory=Counter)
    rejected: int = 0

    @property
    def recipients(self) -> int:
        return sum(self.counts.values())


def audience_zones(loaded: LoadedCampaign, *, one_recipient: bool = False) -> AudienceZones:
    """Read the audience once; or, ``one_recipient``, stand for one recipient without a zone
    of their own (a manual drip, planned per enrolled recipient)."""
    from campaigns.audience import MailboxDeduper, RowProblem, iter_audience
    from scheduler.planning import recipient_zone

    zones = AudienceZones()
    if one_recipient:
        zones.counts[None] = 1
        return zones
    seen = MailboxDeduper()
    for item in iter_audience(loaded):
        if isinstance(item, RowProblem):
            zones.rejected += 1
        elif seen.first_row_of(item) is None:  # a later row of a mailbox sends nothing
            zones.counts[recipient_zone(item.variables)] += 1
    return zones


# ---------------------------------------------------------------------- planning


def due_groups(
    spec: CampaignSpec,
    planner: Planner,
    occurrence: datetime,
    zones: AudienceZones,
    now: datetime,
) -> tuple[DueGroup, ...]:
    """Every step of one occurrence (or enrollment) for the whole audience, grouped by due
    time. A time before ``now`` (a ``start_at`` in the past) goes at once: it is shown as
    ``now``."""
    steps = list(spec.steps)
    by_due: Counter[tuple[int, datetime, str]] = Counter()
    for own_zone, n in zones.counts.items():
        if n <= 0:
            continue
        for index, planned in enumerate(chain(spec, planner, occurrence, own_zone)):
            shown = _shown_zone(spec, planner, index, own_zone)
            by_due[(index, max(planned.not_before, now), shown)] += n
    return tuple(
        DueGroup(steps[index].id, steps[index].channel, due, shown, n)
        for (index, due, shown), n in sorted(by_due.items(), key=lambda item: item[0])
    )


def chain(
    spec: CampaignSpec, planner: Planner, occurrence: datetime, own_zone: str | None
) -> list[Planned]:
    """When each step falls due for a recipient in ``own_zone``. A broadcast chains on planned
    times, as its fan-out does; a drip plans each step from the previous one's send, here
    assumed to happen when it falls due (the first from the enrollment)."""
    if spec.trigger != "enrollment":
        return planner.broadcast(occurrence, own_zone)
    planned: list[Planned] = []
    anchor = occurrence
    for index in range(len(spec.steps)):
        step = planner.step(index, anchor, own_zone)
        planned.append(step)
        anchor = step.not_before
    return planned


def _shown_zone(spec: CampaignSpec, planner: Planner, index: int, own_zone: str | None) -> str:
    """The zone whose clock explains a step's time: the recipient's when the step's ``at`` or
    the send window is in it, else the campaign's."""
    wanted = [spec.steps[index].timezone]
    if spec.send_window is not None:
        wanted.append(spec.send_window.timezone)
    if "recipient" in wanted:
        return planner.zone_for("recipient", own_zone)
    return planner.campaign_zone


def triggered(spec: CampaignSpec, registered_at: datetime) -> Trigger | None:
    """The campaign's trigger as the scheduler builds it (scheduler.triggers), for a campaign
    registered at ``registered_at``; None for a launch or a drip, and for an ``every:``
    schedule without ``start:`` whose ``end:`` has passed by then (it never fires)."""
    from scheduler.triggers import trigger_of

    schedule = spec.schedule
    if (
        spec.trigger == "schedule"
        and schedule is not None
        and schedule.every is not None
        and schedule.start is None
        and schedule.end is not None
        and schedule.end < registered_at.replace(microsecond=0)
    ):
        return None
    return trigger_of(spec, registered_at)


def first_after(spec: CampaignSpec, registered_at: datetime) -> datetime:
    """Fires strictly after this instant are the campaign's: a cron schedule never fires at or
    before its registration; an ``every:`` without ``start:`` and a past ``start_at`` fire at
    registration (a past ``start_at`` at once)."""
    if spec.start_at is not None:
        return spec.start_at - timedelta(microseconds=1)
    if spec.schedule is not None and spec.schedule.cron is None and spec.schedule.start is None:
        # The interval's anchor is the registration in whole seconds (scheduler.triggers).
        return registered_at.replace(microsecond=0) - timedelta(microseconds=1)
    return registered_at


def next_fire_after(
    spec: CampaignSpec, *, cursor: datetime | None, registered_at: datetime
) -> datetime | None:
    """The next nominal fire of a registered campaign: the first after the scheduler's cursor
    (the newest recorded fire), or the first fire at all; None when the trigger has ended."""
    trigger = triggered(spec, registered_at)
    if trigger is None:
        return None
    after = cursor if cursor is not None else first_after(spec, registered_at)
    found = trigger.next_after(after, 1)
    return found[0] if found else None


def upcoming(spec: CampaignSpec, now: datetime, count: int) -> list[tuple[datetime, str | None]]:
    """The first ``count`` occurrences of a campaign launched at ``now``, with their label."""
    kind = spec.trigger
    if kind == "launch":
        return [(now, AT_LAUNCH)]
    if kind == "enrollment":
        return [(now.replace(microsecond=0), ENROLLED_NOW)]
    trigger = triggered(spec, now)
    if trigger is None:
        return []
    return [(fire, None) for fire in trigger.next_after(first_after(spec, now), count)]


def describe_trigger(spec: CampaignSpec) -> str:
    """The trigger in words, for people."""
    kind = spec.trigger
    if kind == "launch":
        return "sent once, when launched"
    if kind == "start_at":
        assert spec.start_at is not None
        return (
            f"sent once, at {_local(spec.start_at, spec.zone_name).isoformat()} ({spec.zone_name})"
        )
    if kind == "enrollment":
        source = (
            "as they appear in the audience"
            if spec.enrollment == "audience"
            else "by `herald enroll`"
        )
        return f"a drip: each recipient's steps count from their enrollment ({source})"
    schedule = spec.schedule
    assert schedule is not None
    what = (
        f"cron {schedule.cron!r}" if schedule.cron is not None else f"every {_span(schedule.every)}"
    )
    bounds = ""
    if schedule.start is not None:
        bounds += f", from {_local(schedule.start, schedule.zone_name).isoformat()}"
    if schedule.end is not None:
        bounds += f", until {_local(schedule.end, schedule.zone_name).isoformat()}"
    return f"on a schedule: {what} in {schedule.zone_name}{bounds} (catch_up: {schedule.catch_up})"


def warnings_of(spec: CampaignSpec) -> list[str]:
    from scheduler.timing import cron_warnings

    if spec.schedule is not None and spec.schedule.cron is not None:
        return cron_warnings(spec.schedule.cron)
    return []


def plan(
    file: Path,
    *,
    count: int = 10,
    clock: Clock = utc_now,
    progress: ProgressFactory | None = None,
    links: UnsubscribeLinks | None = None,
) -> Plan:
    """Check the campaign as ``validate`` does (every message rendered), then plan its next
    ``count`` fires. Writes nothing. When the check finds problems the plan has no fires: show
    the report."""
    from herald.app.launch import load, needs_recipients
    from scheduler.check import check_campaign
    from scheduler.planning import Planner

    now = clock()
    loaded = load(file)
    spec = loaded.spec
    with (progress or _no_progress)("rendering", None) as tick:
        # As validate and launch check it: a schedule's audience may be empty today (a later
        # occurrence's list, or later enrollments, fill it).
        report = check_campaign(
            loaded, now, progress=tick, require_recipients=needs_recipients(loaded), links=links
        )
    fires: list[PlannedFire] = []
    zones = AudienceZones()
    if report.ok:
        zones = audience_zones(loaded, one_recipient=per_enrollment(spec))
        planner = Planner(spec)
        for at, label in upcoming(spec, now, count):
            fires.append(PlannedFire(at, label, due_groups(spec, planner, at, zones, now)))
    return Plan(
        loaded=loaded,
        report=report,
        now=now,
        trigger=spec.trigger,
        zone=spec.zone_name,
        description=describe_trigger(spec),
        warnings=warnings_of(spec),
        fires=fires,
        recipients=zones.recipients,
        per_enrollment=per_enrollment(spec),
    )


def computed_with() -> dict[str, str | None]:
    """The versions fire times depend on: every scheduler process must run the same ones
    (research §5), so a plan says which it was computed with."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for package in ("croniter", "tzdata"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def per_enrollment(spec: CampaignSpec) -> bool:
    """A manual drip enrolls nobody by itself (``herald enroll`` does): it is planned for one
    recipient, enrolled at ``now``."""
    return spec.trigger == "enrollment" and spec.enrollment == "manual"


def _no_progress(_label: str, _total: int | None) -> AbstractContextManager[None]:
    return nullcontext(None)


def _local(moment: datetime, zone_name: str) -> datetime:
    from dispatch.wallclock import zone

    return moment.astimezone(zone(zone_name))


def _span(delta: timedelta | None) -> str:
    from campaigns.durations import format_duration

    return "?" if delta is None else format_duration(delta)
