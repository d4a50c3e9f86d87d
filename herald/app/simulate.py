"""Use case ``simulate``: the timeline of what a campaign would send when, from ``now`` to
``until``, computed in memory from the file: no database, nothing written.

Each occurrence in the horizon (a launch: one, at ``now``; ``start_at``: its time; a schedule:
every fire) times each step times the audience, planned by the scheduler's own planner and
grouped by due time. A drip treats the whole audience as enrolled at ``now`` (or, with
``enroll_every``, enrolled again as a new cohort every so often, to see successive cohorts'
steps overlap) and assumes each step is sent when it falls due, which is what the next step
then counts from. So a marketer sees step 3 of a drip land on Monday 09:00 in each recipient's
zone before launching it.

The simulation does not render messages (``herald validate`` and ``herald schedule`` do) and
does not know the suppression list or who is already enrolled: it shows the timing of the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herald.app.clock import parse_now
from herald.app.common import Clock, utc_now
from herald.app.plan import (
    audience_zones,
    describe_trigger,
    due_groups,
    first_after,
    per_enrollment,
    triggered,
    warnings_of,
)
from herald.errors import UsageError

if TYPE_CHECKING:
    from campaigns.spec import CampaignSpec, LoadedCampaign

#: At most this many occurrences (or drip cohorts) are simulated; the rest are counted as cut.
MAX_OCCURRENCES = 10_000
DURATION_OR_TIME_HINT = "a duration such as 30d, 2w or 12h, or an ISO-8601 time"


@dataclass(frozen=True)
class TimelineEntry:
    due: datetime  # UTC
    zone: str  # shown on this zone's clock (see plan.DueGroup)
    occurrence: datetime  # the fire or the cohort's enrollment time
    step: str
    channel: str
    messages: int

    def to_json(self) -> dict[str, Any]:
        from dispatch.wallclock import zone

        return {
            "due": self.due.isoformat(),
            "due_local": self.due.astimezone(zone(self.zone)).isoformat(),
            "zone": self.zone,
            "occurrence": self.occurrence.isoformat(),
            "step": self.step,
            "channel": self.channel,
            "messages": self.messages,
        }


@dataclass(frozen=True)
class Simulation:
    loaded: LoadedCampaign
    now: datetime
    until: datetime
    trigger: str
    zone: str
    description: str
    warnings: list[str]
    recipients: int
    per_enrollment: bool  # a manual drip: one recipient per cohort
    entries: list[TimelineEntry]
    occurrences: int
    beyond: int  # messages of simulated occurrences that fall due after ``until``
    cut: bool  # more than MAX_OCCURRENCES occurrences in the horizon: the rest not simulated

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    @property
    def messages(self) -> int:
        return sum(entry.messages for entry in self.entries)

    def to_json(self) -> dict[str, Any]:
        """The stable ``simulate --json`` document."""
        return {
            "campaign": self.name,
            "trigger": self.trigger,
            "timezone": self.zone,
            "description": self.description,
            "now": self.now.isoformat(),
            "until": self.until.isoformat(),
            "recipients": self.recipients,
            "per_enrollment": self.per_enrollment,
            "warnings": self.warnings,
            "occurrences": self.occurrences,
            "messages": self.messages,
            "beyond_until": self.beyond,
            "cut": self.cut,
            "timeline": [entry.to_json() for entry in self.entries],
        }


def parse_until(text: str, now: datetime) -> datetime:
    """``--until``: a duration from ``now`` or an ISO-8601 time after it (UsageError if not)."""
    from campaigns.durations import parse_duration

    try:
        until = now + parse_duration(text)
    except ValueError:
        try:
            until = parse_now(text, source="--until")
        except UsageError:
            raise UsageError(
                f"invalid --until value {text!r}", hint=f"use {DURATION_OR_TIME_HINT}"
            ) from None
    if until <= now:
        raise UsageError(
            f"--until {text!r} is not after --now ({now.isoformat()})",
            hint=f"use {DURATION_OR_TIME_HINT}",
        )
    return until


def parse_every(text: str) -> timedelta:
    """``--enroll-every``: a positive duration (UsageError if not)."""
    from campaigns.durations import parse_duration

    try:
        every = parse_duration(text)
    except ValueError as error:
        raise UsageError(f"invalid --enroll-every value: {error}", hint="e.g. 1d or 12h") from None
    if every <= timedelta(0):
        raise UsageError("--enroll-every must be longer than 0", hint="e.g. 1d or 12h")
    return every


def simulate(
    file: Path,
    *,
    until: datetime,
    clock: Clock = utc_now,
    enroll_every: timedelta | None = None,
) -> Simulation:
    """The timeline from ``clock()`` to ``until`` (see the module docstring). Writes nothing."""
    from herald.app.launch import load
    from scheduler.planning import Planner

    now = clock()
    if until <= now:
        raise UsageError("the simulation must end after it starts (--until after --now)")
    loaded = load(file)
    spec = loaded.spec
    if enroll_every is not None and spec.trigger != "enrollment":
        raise UsageError(
            "--enroll-every is for drips (enrollment:)",
            hint=f"{spec.name} is triggered by {spec.trigger}",
        )
    zones = audience_zones(loaded, one_recipient=per_enrollment(spec))
    occurrences, cut = _occurrences(spec, now, until, enroll_every)
    planner = Planner(spec)
    entries: list[TimelineEntry] = []
    beyond = 0
    for occurrence in occurrences:
        for group in due_groups(spec, planner, occurrence, zones, now):
            if group.due > until:
                beyond += group.messages
                continue
            entries.append(
                TimelineEntry(
                    group.due, group.zone, occurrence, group.step, group.channel, group.messages
                )
            )
    order = {step.id: index for index, step in enumerate(spec.steps)}
    entries.sort(key=lambda e: (e.due, e.occurrence, order[e.step], e.zone))
    return Simulation(
        loaded=loaded,
        now=now,
        until=until,
        trigger=spec.trigger,
        zone=spec.zone_name,
        description=describe_trigger(spec),
        warnings=warnings_of(spec),
        recipients=zones.recipients,
        per_enrollment=per_enrollment(spec),
        entries=entries,
        occurrences=len(occurrences),
        beyond=beyond,
        cut=cut,
    )


def _occurrences(
    spec: CampaignSpec, now: datetime, until: datetime, enroll_every: timedelta | None
) -> tuple[list[datetime], bool]:
    """The occurrences (or drip cohorts) in [now, until] of a campaign launched at ``now``,
    and whether there were more than MAX_OCCURRENCES."""
    kind = spec.trigger
    if kind == "launch":
        return [now], False
    if kind == "enrollment":
        start = now.replace(microsecond=0)  # enrollment times are whole seconds
        if enroll_every is None:
            return [start], False
        cohorts: list[datetime] = []
        moment = start
        while moment <= until and len(cohorts) <= MAX_OCCURRENCES:
            cohorts.append(moment)
            moment += enroll_every
        return cohorts[:MAX_OCCURRENCES], len(cohorts) > MAX_OCCURRENCES
    trigger = triggered(spec, now)
    if trigger is None:
        return [], False
    fires = trigger.fires(first_after(spec, now), until, limit=MAX_OCCURRENCES + 1)
    return fires[:MAX_OCCURRENCES], len(fires) > MAX_OCCURRENCES
