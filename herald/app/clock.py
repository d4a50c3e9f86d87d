"""The time a read-only command pretends it is: ``--now`` / ``HERALD_NOW``, parsed in one place.

A marketer checking next week's digest, or a drip across the autumn DST change, asks "what
would happen if it were then?". The read-only commands (``status``, ``schedule``, ``simulate``,
``validate``) take a clock like every use case does (``herald.app.common.Clock``); this module
turns the text an operator typed into one. Nothing else changes: there is no global switch, and
commands that write (``launch``, ``worker``, ``scheduler``) never take ``--now``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from herald.app.common import Clock, utc_now
from herald.errors import UsageError

NOW_HINT = "use ISO-8601, e.g. 2026-12-07T09:00:00Z or 2026-12-07T10:00+01:00 (no offset means UTC)"


def parse_now(text: str, *, source: str = "--now/HERALD_NOW") -> datetime:
    """``text`` as an aware UTC instant: no offset means UTC; a date alone means its midnight.

    Raises UsageError (exit 2) naming ``source`` for anything else.
    """
    cleaned = text.strip()
    try:
        # fromisoformat (3.11) takes 'Z', a space for 'T', dates alone and basic forms.
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise UsageError(f"invalid {source} value {text!r}", hint=NOW_HINT) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first representable instant
        raise UsageError(f"invalid {source} value {text!r}: out of range", hint=NOW_HINT) from None


def fixed_clock(moment: datetime) -> Clock:
    """A clock that always says ``moment`` (a read-only command's "now" does not move)."""
    return lambda: moment


def clock_from(text: str | None, *, source: str = "--now/HERALD_NOW") -> Clock:
    """The real clock, or the one ``text`` (an operator's ``--now``) asks for."""
    if text is None:
        return utc_now
    return fixed_clock(parse_now(text, source=source))
