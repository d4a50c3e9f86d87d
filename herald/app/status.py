"""Use case ``status``: counts per campaign, step and state, as a stable JSON document, with each
campaign's trigger, next fire, last occurrence, enrollments and when its pending work falls due.

Schema (stable; scripts and tests read it; keys are only ever added):
    {"now": iso,
     "campaigns": [{"name", "status", "version", "launched_at",
                    "trigger", "timezone", "next_fire", "next_fire_local", "trigger_ended",
                    "last_occurrence",
                    "fires": {due, done, skipped}, "enrollments": {active, left, ended, done},
                    "due": {now, within_1h, within_24h, within_7d, later},
                    "scheduler_note", "pause_reason",
                    "steps": [{"step", "total", "counts": {state: n for every state},
                               "left", "rate_per_minute", "eta"}],
                    "totals": {state: n}, "left", "rate_per_minute", "eta",
                    "top_failures": [{"reason", "count"}]}],
     "totals": {state: n}, "due": {bucket: n}, "in_doubt": n, "failed": n,
     "left", "rate_per_minute", "eta", "rate_window_minutes",
     "relays": [{"relay", "state", "since", "last_error", "worker", "updated_at"}]}
Every state and bucket appears in every mapping, zero included. Times are ISO-8601 UTC
(``next_fire_local``: the same instant in ``timezone``, the zone of a ``start_at`` or
``schedule`` trigger; null for the others), or null. ``trigger_ended``: for those two, whether
the trigger will fire no more (null: not a timed trigger; false with no ``next_fire``: the
stored definition could not be read, the next fire is unknown). ``pause_reason``: why the
campaign paused itself (its ``pause_on_errors`` threshold), null otherwise and once resumed.
``steps``: in the order of the campaign's ``steps:`` as launched, a step without jobs yet
included (all zero); steps with jobs that the stored spec no longer has come last, by name.
``left``: jobs still to be attempted (pending, claimed, sending). ``rate_per_minute``: jobs
that finished (sent or failed) in the last ``rate_window_minutes`` before ``now``, per minute
since the first of them (0.0 if none). ``eta``: when ``left`` should be done at that rate (never
before the last pending job falls due), null if the rate is zero or nothing is left.
``top_failures``: the commonest reasons failed jobs failed (the relay's code and reply, one
line, addresses shown as ``<address>``), at most three, commonest first
(herald/app/status_progress.py says how each is measured).
``relays``: every relay a worker ever found unreachable (``relay_status``, by name), ``state``
``unreachable`` (since ``since``) or ``ok`` (again, since ``since``); empty if none ever was.

``status`` is the stored one, except that an active campaign whose work is all settled and that
has nothing more to come shows ``completed``: every job sent, failed or cancelled (one in doubt
still waits for an operator), no future fire, no fan-out under way, and, for a drip, enrollments
that have all ended.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from campaigns.store import CampaignStore
from dispatch.states import State
from dispatch.store import OutboxStore
from herald.app.common import Clock, utc_now
from herald.app.status_progress import (
    RATE_WINDOW,
    Pace,
    in_spec_order,
    left_of,
    paces,
    step_orders,
    top_failures,
)
from herald.app.status_reads import (
    EnrollmentSummary,
    FireSummary,
    TriggerRow,
    due_histograms,
    enrollment_summaries,
    fire_summaries,
    trigger_rows,
    zero_buckets,
)
from herald.app.status_timing import CampaignTiming, timing_of
from herald.db import reading
from herald.errors import UsageError

STATES = [s.value for s in State]
_SETTLED = frozenset({State.SENT.value, State.FAILED.value, State.CANCELLED.value})
#: Triggers whose next fire comes from the stored spec (the others have none to compute).
_TIMED = frozenset({"start_at", "schedule"})


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(STATES, 0)


def status(
    engine: Engine, campaign: str | None = None, *, clock: Clock = utc_now
) -> dict[str, Any]:
    """The snapshot at ``clock()``; UsageError if ``campaign`` is named and does not exist."""
    now = clock()
    outbox = OutboxStore(engine.dialect.name)
    campaigns = CampaignStore(engine.dialect.name)
    with reading(engine) as conn:
        rows = campaigns.all(conn)
        counts = outbox.counts(conn, campaign)
        triggers = trigger_rows(conn, campaign, spec_for=_TIMED)
        fires = fire_summaries(conn, campaign)
        enrollments = enrollment_summaries(conn, campaign)
        histograms = due_histograms(conn, campaign, now)
        relays = outbox.relay_statuses(conn)
        pace = paces(conn, campaign, now)
        failures = top_failures(conn, campaign)
        orders = step_orders(
            conn, {r.name: r.spec_hash for r in rows if campaign in (None, r.name)}
        )
    by_campaign: dict[str, dict[str, dict[str, int]]] = {}
    for name, step, state, n in counts:
        by_campaign.setdefault(name, {}).setdefault(step, zero_counts())[state] = n
    totals = zero_counts()
    due_totals = zero_buckets()
    overall_pace = Pace()
    documents = []
    for row in rows:
        if campaign is not None and row.name != campaign:
            continue
        steps = by_campaign.get(row.name, {})
        campaign_totals = zero_counts()
        campaign_pace = Pace()
        step_docs = []
        for step_id in in_spec_order(steps, orders.get(row.name, ())):
            step_counts = steps.get(step_id, zero_counts())
            for state, n in step_counts.items():
                campaign_totals[state] += n
            step_pace = pace.get((row.name, step_id), Pace())
            campaign_pace = campaign_pace.merged(step_pace)
            step_docs.append(
                {
                    "step": step_id,
                    "total": sum(step_counts.values()),
                    "counts": step_counts,
                    **_progress(step_pace, step_counts, now),
                }
            )
        for state, n in campaign_totals.items():
            totals[state] += n
        overall_pace = overall_pace.merged(campaign_pace)
        due = histograms.get(row.name, zero_buckets())
        for bucket, n in due.items():
            due_totals[bucket] += n
        trigger = triggers.get(row.name, TriggerRow("launch", None, None))
        fire = fires.get(row.name, FireSummary())
        enrolled = enrollments.get(row.name, EnrollmentSummary())
        timing = _timing(trigger, fire, enrolled, row.launched_at)
        shown = _shown_status(row.status, trigger.trigger, campaign_totals, fire, enrolled, timing)
        documents.append(
            {
                "name": row.name,
                "status": shown,
                "version": row.version,
                "launched_at": row.launched_at.isoformat(),
                "trigger": trigger.trigger,
                "timezone": timing.zone,
                "next_fire": _iso(timing.next_fire),
                "next_fire_local": _iso(timing.next_fire_local),
                "trigger_ended": timing.ended,
                "last_occurrence": _iso(timing.last_occurrence),
                "fires": fire.counts,
                "enrollments": enrolled.counts,
                "due": due,
                "scheduler_note": trigger.scheduler_note,
                "pause_reason": row.pause_reason,
                "steps": step_docs,
                "totals": campaign_totals,
                **_progress(campaign_pace, campaign_totals, now),
                "top_failures": failures.get(row.name, []),
            }
        )
    if campaign is not None and not documents:
        raise UsageError(f"no campaign named {campaign!r}")
    return {
        "now": now.isoformat(),
        "campaigns": documents,
        "totals": totals,
        "due": due_totals,
        "in_doubt": totals[State.IN_DOUBT.value],
        "failed": totals[State.FAILED.value],
        **_progress(overall_pace, totals, now),
        "rate_window_minutes": RATE_WINDOW // timedelta(minutes=1),
        "relays": [
            {
                "relay": r.relay,
                "state": r.state,
                "since": r.since.isoformat(),
                "last_error": r.last_error,
                "worker": r.worker,
                "updated_at": _iso(r.updated_at),
            }
            for r in relays
        ],
    }


def _progress(pace: Pace, counts: dict[str, int], now: datetime) -> dict[str, Any]:
    left = left_of(counts)
    return {
        "left": left,
        "rate_per_minute": round(pace.rate_per_minute(now), 3),
        "eta": _iso(pace.eta(now, left)),
    }


def _timing(
    trigger: TriggerRow,
    fire: FireSummary,
    enrolled: EnrollmentSummary,
    launched_at: datetime,
) -> CampaignTiming:
    if trigger.trigger == "enrollment":
        return CampaignTiming(last_occurrence=enrolled.last_enrolled)
    if trigger.trigger not in _TIMED:
        return CampaignTiming(last_occurrence=launched_at)
    return timing_of(trigger.spec, fire, launched_at)


def _shown_status(
    stored: str,
    trigger: str,
    totals: dict[str, int],
    fire: FireSummary,
    enrolled: EnrollmentSummary,
    timing: CampaignTiming,
) -> str:
    if stored != "active":
        return stored
    if any(n for state, n in totals.items() if state not in _SETTLED):
        return stored
    if trigger in _TIMED and (timing.next_fire is not None or timing.unknown):
        return stored
    if fire.counts["due"]:  # a fire being fanned out: its jobs are still coming
        return stored
    if trigger == "enrollment" and (enrolled.counts["active"] or not any(enrolled.counts.values())):
        # Still dripping; or nobody enrolled yet (the audience's first pass, a first `enroll`).
        return stored
    return "completed"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
