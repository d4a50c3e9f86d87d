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

from campaigns.spec import CampaignSpec
from dispatch.wallclock import SendWindow, UnknownZone, zone
from scheduler.timing import StepTiming, plan_chain

RECIPIENT = "recipient"
CAMPAIGN = "campaign"


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
        self.campaign_zone = spec.zone_name
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

    def timing(self, index: int, recipient: str | None) -> StepTiming:
        step = self.steps[index]
        return StepTiming(
            after=step.after,
            at=step.at,
            on=step.on,
            zone=zone(self.zone_for(step.timezone, recipient)) if step.at is not None else None,
        )

    def step(self, index: int, anchor: datetime, recipient: str | None) -> Planned:
        """A drip's step ``index`` counted from ``anchor`` (the previous step's actual send,
        or the enrollment), moved into the send window."""
        window = self.window(recipient)
        due = self.timing(index, recipient).plan(anchor, window)
        return Planned(due, None if window is None else window.to_json())

    def broadcast(self, occurrence_at: datetime, recipient: str | None) -> list[Planned]:
        """Every step of an occurrence, chained on planned times."""
        cache_key = (occurrence_at, recipient or "")
        found = self._chains.get(cache_key)
        if found is None:
            window = self.window(recipient)
            shown = None if window is None else window.to_json()
            timings = [self.timing(index, recipient) for index in range(len(self.steps))]
            found = [
                Planned(due, shown) for due in plan_chain(occurrence_at, timings, window=window)
            ]
            self._chains[cache_key] = found
        return found
