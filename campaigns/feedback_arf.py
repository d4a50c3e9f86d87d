"""RFC 5965 abuse feedback reports (ARF complaints), read into a Report.

``multipart/report; report-type=feedback-report``: human text, a ``message/feedback-report``
part (``Feedback-Type``, ``User-Agent``, ``Version`` required), the original or its headers.
Reports are often redacted (RFC 6590): the complaining address in ``Original-Rcpt-To`` may be
missing or scrambled, which is why the recipient is taken from the VERP token or the
X-Herald-Key of the original, never from the report's ``To:``.

Feedback types: ``abuse``, ``fraud``, ``virus``, ``other`` (RFC 5965) and any type we do not know
(RFC 5965 §7.3 says treat it as ``other``) are complaints; ``not-spam`` (RFC 6430) is the
opposite of a complaint; ``auth-failure`` (RFC 6591) is about our authentication, not the
recipient's wishes, so it is ``policy``.
"""

from __future__ import annotations

from email.message import Message

from campaigns.feedback import Report, Verdict, clean
from campaigns.feedback_mime import (
    field_blocks,
    header,
    herald_key,
    original_headers,
    parts,
    report_id,
)

_NOT_COMPLAINTS: dict[str, Verdict] = {"not-spam": "none", "auth-failure": "policy"}


def arf_part(message: Message) -> Message | None:
    for part in parts(message):
        if part.get_content_type() == "message/feedback-report":
            return part
    return None


def read_arf(message: Message, part: Message) -> Report:
    fields = next((b for b in field_blocks(part) if b.get("Feedback-Type")), None)
    if fields is None:
        return Report("unknown", detail="feedback report without Feedback-Type")
    kind = header(fields, "Feedback-Type").lower().split(" ")[0]
    verdict = _NOT_COMPLAINTS.get(kind, "complaint")
    recipient = header(fields, "Original-Rcpt-To") or None
    detail = clean(f"{kind} from {header(fields, 'User-Agent') or 'an unnamed agent'}")
    return Report(
        verdict,
        None,
        detail,
        recipient[:320] if recipient else None,
        report_id(message),
        herald_key(original_headers(message)),
        "arf",
    )
