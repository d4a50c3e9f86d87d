"""Which fires of a campaign's trigger are due now, and which the catch-up policy skips.

The campaign's ``schedule:`` or ``start_at:`` becomes a ``scheduler.timing.Trigger``; its fire
times after the campaign's cursor (the newest fire decided, ``trigger_fire``) up to ``now``
are split by the catch-up policy (research §2: on time within 5 minutes; ``latest`` by default,
``max_catch_up_age`` by default min(period, 24 h)). Before the first fire the cursor is the
registration time (``campaign.launched_at``): a cron schedule never fires at or before it; an
``every:`` without ``start:`` fires first at registration; a ``start_at`` already past when the
campaign was launched fires at once (its lateness counted from the launch, not from the time
it names).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from campaigns.spec import CampaignSpec
from scheduler.timing import CatchUp, CatchUpDecision, Trigger, apply_catch_up

GRACE = timedelta(minutes=5)  # a fire this late is on time (research §2)
JUST_BEFORE = timedelta(microseconds=1)
# Missed fires are recorded as skipped (with their reason, for `herald status`) as far back as
# this; older ones are not even enumerated, which bounds a pass after a long outage.
SKIPS_RECORDED_WITHIN = timedelta(days=31)


def trigger_of(spec: CampaignSpec, registered_at: datetime) -> Trigger | None:
    """The campaign's trigger (None for ``launch`` and ``enrollment``)."""
    if spec.trigger == "start_at":
        assert spec.start_at is not None
        return Trigger("once", at=spec.start_at, zone=spec.zone_name)
    schedule = spec.schedule
    if spec.trigger != "schedule" or schedule is None:
        return None
    if schedule.cron is not None:
        return Trigger(
            "cron",
            expr=schedule.cron,
            zone=schedule.zone_name,
            start=schedule.start,
            end=schedule.end,
        )
    # The anchor of an interval without start: the registration, whole seconds (the first
    # fire is then the registration itself, due at the launch's own pass).
    start = schedule.start or registered_at.replace(microsecond=0)
    return Trigger(
        "every", every=schedule.every, zone=schedule.zone_name, start=start, end=schedule.end
    )


def catch_up_policy(spec: CampaignSpec, trigger: Trigger) -> tuple[CatchUp, timedelta]:
    """The campaign's catch-up policy and max_catch_up_age (default: the trigger's)."""
    schedule = spec.schedule
    policy: CatchUp = schedule.catch_up if schedule is not None else "latest"
    max_age = (
        schedule.max_catch_up_age
        if schedule is not None and schedule.max_catch_up_age is not None
        else trigger.default_max_age()
    )
    return policy, max_age


def decide(
    spec: CampaignSpec,
    trigger: Trigger,
    *,
    registered_at: datetime,
    cursor: datetime | None,
    now: datetime,
) -> CatchUpDecision:
    """The fires in (cursor, now], each to fire or to skip (with its reason)."""
    policy, max_age = catch_up_policy(spec, trigger)
    if cursor is None and trigger.kind == "once":
        assert trigger.at is not None
        if trigger.at <= registered_at:
            # Launched after its time: due at the launch, late only from then on.
            decision = apply_catch_up(
                policy, [registered_at], max(now, registered_at), max_age=max_age, grace=GRACE
            )
            return CatchUpDecision(
                fire=[trigger.at] if decision.fire else [],
                skip=[(trigger.at, reason) for _, reason in decision.skip],
            )
    if cursor is not None:
        lower = cursor
    elif trigger.kind == "every" and spec.schedule is not None and spec.schedule.start is None:
        lower = registered_at.replace(microsecond=0) - JUST_BEFORE
    else:
        lower = registered_at
    after = max(lower, now - max(max_age, GRACE, SKIPS_RECORDED_WITHIN))
    # At most 10,000 fires, the earliest: after a long outage of a fast schedule the next
    # passes decide the rest (each fire too old for the policy is skipped meanwhile).
    due = trigger.fires(after, now)
    return apply_catch_up(policy, due, now, max_age=max_age, grace=GRACE)


def next_fire(trigger: Trigger, *, after: datetime) -> datetime | None:
    """The first fire strictly after ``after`` (None: the trigger has ended)."""
    found = trigger.next_after(after)
    return found[0] if found else None
