"""The one entry point for inbound mail reports: bytes in, a Report out, never an exception.

``parse_report`` decides by the parts a message HAS (a ``message/feedback-report`` part makes it
a complaint, a ``message/delivery-status`` part a DSN), not by the ``report-type`` parameter that
some senders get wrong, and falls back to reading a plain-text bounce. Any failure to read the
message — garbage, hostile MIME, a decoder error, pathological nesting — is the verdict
``unknown``: the listener replies 250 either way (bouncing a bounce helps nobody) and suppresses
nobody on an ``unknown``.
"""

from __future__ import annotations

from campaigns.feedback import Report, clean
from campaigns.feedback_arf import arf_part, read_arf
from campaigns.feedback_dsn import dsn_part, read_dsn, read_plain_bounce
from campaigns.feedback_mime import parse_bytes


def parse_report(raw: bytes, *, null_sender: bool = False) -> Report:
    """What the report says. ``null_sender``: it came with ``MAIL FROM:<>`` (as DSNs do)."""
    try:
        message = parse_bytes(raw)
        if (part := arf_part(message)) is not None:
            return read_arf(message, part)
        if (part := dsn_part(message)) is not None:
            return read_dsn(message, part)
        return read_plain_bounce(message, null_sender=null_sender)
    except Exception as exc:
        # Hostile input must never take the listener down: whatever breaks is 'unknown'.
        return Report("unknown", detail=clean(f"unreadable report: {type(exc).__name__}"))
