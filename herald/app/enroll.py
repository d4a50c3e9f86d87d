"""Use case ``enroll``: put one recipient into an enrollment campaign's drip.

The recipient's steps count from their own enrollment (``enrolled_at``, this moment in whole
seconds, part of every key of their drip), so enrolling the same mailbox again, in any
spelling, is a no-op that says so. After enrolling, one scheduler pass runs for the campaign,
so the first step is materialised at once (and goes out when it is due).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from campaigns.addresses import AddressError, normalise_address, split_display_name
from campaigns.audience import Recipient
from campaigns.errors import excerpt
from campaigns.store import CampaignStore
from herald.app.common import Clock, operator_name, utc_now
from herald.errors import UsageError
from scheduler.enrollment import enroll_one, variables_text
from scheduler.passes import CampaignPass, run_pass
from scheduler.planning import valid_zone
from scheduler.unsubscribe_links import UnsubscribeLinks

ZONE_HINT = "use an IANA time zone name such as Europe/Berlin, America/New_York or UTC"
ENROLLABLE = ("active", "paused")  # a paused campaign's drip starts when it is resumed


@dataclass(frozen=True)
class EnrollResult:
    campaign: str
    recipient: str  # as written
    mailbox: str  # its identity
    enrolled_at: datetime
    created: bool  # False: already enrolled (nothing changed)
    state: str  # the enrollment's state: active, left, ended, done
    timezone: str | None
    scheduled: CampaignPass | None  # the pass run after enrolling (None: campaign not active)

    def summary(self) -> dict[str, Any]:
        """The stable ``enroll --json`` document."""
        return {
            "campaign": self.campaign,
            "recipient": self.recipient,
            "mailbox": self.mailbox,
            "enrolled_at": self.enrolled_at.isoformat(),
            "created": self.created,
            "state": self.state,
            "timezone": self.timezone,
            "new_jobs": 0 if self.scheduled is None else self.scheduled.new_jobs,
            "note": None if self.scheduled is None else self.scheduled.note,
        }


def parse_data(data: str | None) -> dict[str, str]:
    """``--data``: a JSON object of text, numbers, true/false or null (template variables)."""
    if data is None:
        return {}
    try:
        parsed = json.loads(data)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--data is not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(parsed, dict):
        raise UsageError(
            "--data must be a JSON object", hint='e.g. --data \'{"name": "Ann", "plan": "pro"}\''
        )
    try:
        return variables_text(parsed)
    except ValueError as exc:
        raise UsageError(f"--data: {exc}") from None


def _zone(name: str, what: str) -> str:
    found = valid_zone(name)
    if found is None:
        raise UsageError(f"{what}: unknown time zone {excerpt(name)}", hint=ZONE_HINT)
    return found


def enroll(
    engine: Engine,
    campaign: str,
    address: str,
    *,
    data: str | None = None,
    timezone: str | None = None,
    clock: Clock = utc_now,
    actor: str | None = None,
    links: UnsubscribeLinks | None = None,
) -> EnrollResult:
    """Enroll ``address`` ('ann@x.example' or 'Ann <ann@x.example>') into ``campaign``.

    Raises UsageError (exit 2) for an invalid address, ``--data`` or zone, an unknown
    campaign, or one that takes no enrollments. ``links``: the unsubscribe links of the
    step the pass materialises (herald.app.unsubscribe).
    """
    variables = parse_data(data)
    try:
        display_name, written = split_display_name(address)
        email = normalise_address(written)
    except AddressError as exc:
        raise UsageError(f"invalid address {excerpt(address)}: {exc}") from None
    zone = _zone(timezone, "--timezone") if timezone is not None else None
    if zone is None:
        given = next((v for k, v in variables.items() if k.lower() == "timezone"), None)
        zone = _zone(given, "--data timezone") if given else None
    with engine.connect() as conn:
        row = CampaignStore(engine.dialect.name).get(conn, campaign)
    if row is None:
        raise UsageError(f"no campaign named {campaign!r}", hint="`herald status` lists campaigns")
    if row.trigger != "enrollment":
        raise UsageError(
            f"campaign {campaign!r} takes no enrollments (its trigger is {row.trigger})",
            hint="only a campaign with `enrollment:` has a drip per recipient",
        )
    if row.status not in ENROLLABLE:
        raise UsageError(f"campaign {campaign!r} is {row.status}: it takes no enrollments")
    name = display_name or variables.get("name") or None
    variables = {**variables, "email": written}
    if name is not None:
        variables["name"] = name
    now = clock()
    enrolled, created = enroll_one(
        engine, campaign, Recipient(email, name, variables, 0), now=now, timezone=zone
    )
    passed = run_pass(
        engine,
        now=now,
        actor=f"enroll:{actor or operator_name()}",
        campaigns=[campaign],
        links=links,
    ).get(campaign)
    return EnrollResult(
        campaign,
        enrolled.recipient,
        enrolled.mailbox,
        enrolled.enrolled_at,
        created,
        enrolled.state,
        enrolled.timezone,
        passed,
    )
