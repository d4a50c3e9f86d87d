"""A timed campaign's next fire, for ``herald status``: from the spec as launched (the text in
the campaign table) and the scheduler's cursor (the newest ``trigger_fire``).

The stored spec, not the file: the file may have moved or changed since (then the scheduler
fires nothing and says why in ``scheduler_note``), while what status should show is what the
launched definition promises. Only the trigger's keys are needed, so the text is parsed without
reading any template or audience file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from herald.app.status_reads import FireSummary

if TYPE_CHECKING:
    from campaigns.spec import CampaignSpec


@dataclass(frozen=True)
class CampaignTiming:
    next_fire: datetime | None = None  # UTC
    next_fire_local: datetime | None = None  # the same instant in ``zone``
    zone: str | None = None  # the trigger's zone; None for a launch or a drip (shown in UTC)
    last_occurrence: datetime | None = None
    unknown: bool = False  # the stored spec could not be read: the next fire is not known

    @property
    def ended(self) -> bool | None:
        """A timed trigger that fires no more; None for a launch or a drip (no zone known)."""
        if self.zone is None and not self.unknown:
            return None
        return self.next_fire is None and not self.unknown


def timing_of(spec_text: str | None, fire: FireSummary, launched_at: datetime) -> CampaignTiming:
    """Next and last fire of a ``start_at`` or ``schedule`` campaign registered at
    ``launched_at``. The next fire is nominal, the first after the cursor, not after now: a
    scheduler that is not running shows as a next fire in the past."""
    spec = stored_spec(spec_text)
    if spec is None:
        return CampaignTiming(last_occurrence=fire.last_fired, unknown=True)
    from dispatch.wallclock import zone
    from herald.app.plan import next_fire_after

    zone_name = spec.zone_name
    upcoming = next_fire_after(spec, cursor=fire.cursor, registered_at=launched_at)
    return CampaignTiming(
        next_fire=upcoming,
        next_fire_local=None if upcoming is None else upcoming.astimezone(zone(zone_name)),
        zone=zone_name,
        last_occurrence=fire.last_fired,
    )


def stored_spec(text: str | None) -> CampaignSpec | None:
    """The campaign spec in ``text`` (the YAML as launched), or None if it cannot be read."""
    if text is None:
        return None
    from pydantic import ValidationError

    from campaigns.errors import CampaignError
    from campaigns.spec import CampaignSpec
    from campaigns.yaml_loader import load_yaml

    try:
        data = load_yaml(text, file="<stored spec>").data
        if not isinstance(data, dict):
            return None
        return CampaignSpec.model_validate(data)
    except (CampaignError, ValidationError, ValueError):
        return None
