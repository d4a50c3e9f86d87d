"""When each step's message may go out, and in which send window, per recipient.

``after:`` counts from the previous step (docs/design.md §7):

- a broadcast (launch, start_at, schedule) chains on PLANNED times: step 1 is planned from the
  occurrence, step k from step k−1's planned time (window openings included), so the whole
  sequence is known when the occurrence is fanned out;
- a drip plans one step at a time, from the previous step's ACTUAL send (``outcome_at``), or
  from ``enrolled_at`` for the first step.

A step's ``at:``/``on:`` use the step's ``timezone:`` (an IANA name, or ``recipient``), else the
campaign's; a send window's zone is ``campaign``, ``recipient`` or an IANA name. ``recipient``
means the recipient's ``timezone`` column or variable when it names a zone Herald knows, else
the campaign's zone, else UTC. The window itself travels with the job (``send_window``), in the
zone resolved here, so the worker re-checks exactly what was planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from campaigns.spec import CampaignSpec, StepSpec, WebhookStepSpec
from dispatch.wallclock import SendWindow, UnknownZone, zone
from scheduler import timing

RECIPIENT = "recipient"
CAMPAIGN = "campaign"
UTC_NAME = "UTC"


@dataclass(frozen=True)
class Planned:
    not_before: datetime
    send_window: str | None = None  # dispatch.wallclock.SendWindow JSON, or None: any time


def valid_zone(name: str | None) -> str | None:
    """``name`` stripped if it is a zone this machine knows, else None."""
    if name is None or not name.strip():
        return None
    try:
        zone(name.strip())
    except UnknownZone:
        return None
    return name.strip()


def recipient_zone(variables: Mapping[str, str]) -> str | None:
    """The recipient's own zone: its ``timezone`` column or variable (any letter case), if it
    names a zone Herald knows."""
    for key, value in variables.items():
        if key.lower() == "timezone":
            return valid_zone(value)
    return None


class Planner:
    """Plans the steps of one campaign; caches broadcast chains per (occurrence, zone), so a
    100,000-recipient occurrence computes one chain per distinct recipient zone."""

    def __init__(self, spec: CampaignSpec) -> None:
        self.spec = spec
        self.steps = list(spec.steps)
        self.campaign_zone = spec.zone_name or UTC_NAME
        self._chains: dict[tuple[datetime, str], list[Planned]] = {}

    def zone_for(self, wanted: str | None, recipient: str | None) -> str:
        """The zone a step's or window's ``timezone:`` means for this recipient."""
        if wanted is None or wanted == CAMPAIGN:
            return self.campaign_zone
        if wanted == RECIPIENT:
            return recipient or self.campaign_zone
        return wanted

    def window(self, recipient: str | None) -> SendWindow | None:
        spec = self.spec.send_window
        if spec is None:
            return None
        return spec.window(self.zone_for(spec.timezone, recipient))

    def step(
        self, index: int, anchor: datetime, recipient: str | None, *, previous: datetime | None
    ) -> Planned:
        """Step ``index`` counted from ``anchor`` (its window applied). ``previous``: the
        previous step's planned time, which a step is never planned before."""
        step = self.steps[index]
        window = self.window(recipient)
        due = timing.plan_step(
            anchor,
            after=step.after,
            at=_at(step),
            on=_on(step),
            tz=zone(self.zone_for(_timezone(step), recipient)),
            window=window,
        )
        if previous is not None and due < previous:
            due = previous
        return Planned(due, None if window is None else window.to_json())

    def broadcast(self, occurrence_at: datetime, recipient: str | None) -> list[Planned]:
        """Every step of an occurrence, chained on planned times."""
        cache_key = (occurrence_at, recipient or "")
        found = self._chains.get(cache_key)
        if found is None:
            found = []
            anchor = occurrence_at
            previous: datetime | None = None
            for index in range(len(self.steps)):
                planned = self.step(index, anchor, recipient, previous=previous)
                found.append(planned)
                anchor = previous = planned.not_before
            self._chains[cache_key] = found
        return found


def _at(step: StepSpec | WebhookStepSpec):  # type: ignore[no-untyped-def]
    return step.at


def _on(step: StepSpec | WebhookStepSpec):  # type: ignore[no-untyped-def]
    return step.on


def _timezone(step: StepSpec | WebhookStepSpec) -> str | None:
    found: str | None = step.timezone
    return found
