"""Provider webhook payloads (SES via SNS, SendGrid, Mailgun, Postmark) read into events.

Pure: called only AFTER herald.serve verified the request's signature, with the decoded JSON.
Every provider adds fields and event types over time, so anything unknown is skipped, never an
error, and any shape we did not expect (a string where an object was, a missing list) reads as
"no event". Each event carries the provider's own event id as ``event_ref`` (prefixed with the
provider) so a retried webhook is recorded once (``mail_feedback.event_ref`` is UNIQUE).

Mapping (../shared/research/deliverability.md §4):

- SES: ``Bounce`` with ``bounceType: Permanent`` → hard (per bounced recipient), ``Transient``
  / ``Undetermined`` → soft; ``Complaint`` → complaint (``not-spam`` feedback → nothing).
- SendGrid: ``bounce`` → hard (``type: blocked`` → soft), ``spamreport`` → complaint,
  ``unsubscribe`` / ``group_unsubscribe`` → unsubscribe.
- Mailgun: ``failed`` with ``severity: permanent`` → hard, ``temporary`` → soft; ``complained``
  → complaint; ``unsubscribed`` → unsubscribe.
- Postmark: ``Bounce`` of type ``HardBounce`` / ``BadEmailAddress`` → hard, ``SoftBounce`` /
  ``Transient`` / ``DnsError`` → soft, ``SpamComplaint`` → complaint; ``SubscriptionChange``
  with ``SuppressSending`` → hard / complaint / unsubscribe by its reason.

In every case a status code the provider passes along can only make a verdict milder: a
"permanent" bounce with a 5.7.x code is a policy block, and blocks never suppress (§3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from campaigns.feedback import Verdict, classify_status, clean, find_status

_KEY = re.compile(r"[0-9a-f]{64}")
_MAX_EVENTS = 1000  # one webhook request; SendGrid batches, but not this many
_ACTIONABLE = frozenset({"hard", "soft", "policy", "complaint", "unsubscribe"})


@dataclass(frozen=True)
class ProviderEvent:
    event_ref: str
    verdict: Verdict
    address: str | None  # the recipient as the provider names it
    status: str | None = None
    detail: str = ""
    herald_key: str | None = None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value[:_MAX_EVENTS] if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int):
        text = clean(value, 320)
        return text or None
    return None


def _key(value: Any) -> str | None:
    text = (_str(value) or "").lower()
    return text if _KEY.fullmatch(text) else None


def _ref(provider: str, *parts: str) -> str:
    return f"{provider}:{':'.join(parts)}"[:200]


def _milder(verdict: Verdict, status: str | None) -> Verdict:
    """A provider's "hard" whose code says policy (5.7.x) or sender trouble is a block."""
    if verdict == "hard" and status is not None and classify_status(status) == "policy":
        return "policy"
    return verdict


def _event(
    ref: str, verdict: Verdict, address: Any, status: Any, detail: Any, key: str | None
) -> ProviderEvent:
    code = find_status(_str(status) or "") if status is not None else None
    return ProviderEvent(ref, _milder(verdict, code), _str(address), code, clean(detail), key)


# ------------------------------------------------------------------------------------- SES


def ses_events(message_id: str, notification: Any) -> list[ProviderEvent]:
    """Events of one SNS ``Notification`` whose ``Message`` (JSON) is ``notification``."""
    note = _dict(notification)
    kind = _str(note.get("notificationType")) or _str(note.get("eventType"))
    mail = _dict(note.get("mail"))
    key = None
    for item in _list(mail.get("headers")):
        if (_str(_dict(item).get("name")) or "").lower() == "x-herald-key":
            key = _key(_dict(item).get("value"))
    events: list[ProviderEvent] = []
    if kind == "Bounce":
        bounce = _dict(note.get("bounce"))
        bounce_type = _str(bounce.get("bounceType"))
        verdict: Verdict = "hard" if bounce_type == "Permanent" else "soft"
        sub = _str(bounce.get("bounceSubType")) or ""
        for n, rcpt in enumerate(_list(bounce.get("bouncedRecipients"))):
            r = _dict(rcpt)
            detail = f"{bounce_type} {sub} {_str(r.get('diagnosticCode')) or ''}"
            ref = _ref("ses", message_id, str(n))
            events.append(_event(ref, verdict, r.get("emailAddress"), r.get("status"), detail, key))
    elif kind == "Complaint":
        complaint = _dict(note.get("complaint"))
        feedback = _str(complaint.get("complaintFeedbackType")) or "abuse"
        verdict = "none" if feedback == "not-spam" else "complaint"
        for n, rcpt in enumerate(_list(complaint.get("complainedRecipients"))):
            ref = _ref("ses", message_id, str(n))
            address = _dict(rcpt).get("emailAddress")
            events.append(_event(ref, verdict, address, None, f"complaint {feedback}", key))
    return [e for e in events if e.verdict in _ACTIONABLE]


# -------------------------------------------------------------------------------- SendGrid


def sendgrid_events(body: Any) -> list[ProviderEvent]:
    events: list[ProviderEvent] = []
    for item in _list(body):
        e = _dict(item)
        event_id = _str(e.get("sg_event_id"))
        name = _str(e.get("event"))
        if event_id is None or name is None:
            continue  # without an id it cannot be deduplicated: not recorded
        verdict: Verdict | None = None
        if name == "bounce":
            verdict = "soft" if _str(e.get("type")) == "blocked" else "hard"
        elif name == "spamreport":
            verdict = "complaint"
        elif name in ("unsubscribe", "group_unsubscribe"):
            verdict = "unsubscribe"
        if verdict is None:
            continue
        detail = f"{name} {_str(e.get('reason')) or ''}"
        key = _key(e.get("herald_key"))
        ref = _ref("sendgrid", event_id)
        events.append(_event(ref, verdict, e.get("email"), e.get("status"), detail, key))
    return [e for e in events if e.verdict in _ACTIONABLE]


# --------------------------------------------------------------------------------- Mailgun


def mailgun_events(body: Any) -> list[ProviderEvent]:
    data = _dict(_dict(body).get("event-data"))
    event_id = _str(data.get("id"))
    name = _str(data.get("event"))
    if event_id is None or name is None:
        return []
    verdict: Verdict | None = None
    if name == "failed":
        verdict = "hard" if _str(data.get("severity")) == "permanent" else "soft"
    elif name == "complained":
        verdict = "complaint"
    elif name == "unsubscribed":
        verdict = "unsubscribe"
    if verdict is None:
        return []
    status = _dict(data.get("delivery-status"))
    detail = f"{name} {_str(data.get('reason')) or ''} {_str(status.get('message')) or ''}"
    # The enhanced code, if the receiving MTA gave one, is in the message text.
    code = find_status(_str(status.get("message")) or _str(status.get("description")) or "")
    key = _key(_dict(data.get("user-variables")).get("herald_key"))
    event = _event(_ref("mailgun", event_id), verdict, data.get("recipient"), code, detail, key)
    return [event] if event.verdict in _ACTIONABLE else []


# -------------------------------------------------------------------------------- Postmark

_POSTMARK_BOUNCES: dict[str, Verdict] = {
    "HardBounce": "hard",
    "BadEmailAddress": "hard",
    "SoftBounce": "soft",
    "Transient": "soft",
    "DnsError": "soft",
    "SpamComplaint": "complaint",
    "Blocked": "policy",
    "DMARCPolicy": "policy",
}
_POSTMARK_SUPPRESSIONS: dict[str, Verdict] = {
    "HardBounce": "hard",
    "SpamComplaint": "complaint",
    "ManualSuppression": "unsubscribe",
}


def postmark_events(body: Any) -> list[ProviderEvent]:
    b = _dict(body)
    record = _str(b.get("RecordType"))
    key = _key(_dict(b.get("Metadata")).get("herald_key"))
    verdict: Verdict | None = None
    if record in ("Bounce", "SpamComplaint"):
        event_id = _str(b.get("ID"))
        kind = _str(b.get("Type")) or ""
        verdict = _POSTMARK_BOUNCES.get(kind)
        if record == "SpamComplaint":
            verdict = "complaint"
        if event_id is None or verdict is None:
            return []
        ref = _ref("postmark", record, event_id)
        detail = f"{kind} {_str(b.get('Description')) or ''} {_str(b.get('Details')) or ''}"
        return [_event(ref, verdict, b.get("Email"), b.get("Details"), detail, key)]
    if record == "SubscriptionChange" and b.get("SuppressSending") is True:
        reason = _str(b.get("SuppressionReason")) or ""
        verdict = _POSTMARK_SUPPRESSIONS.get(reason)
        message_id, changed = _str(b.get("MessageID")), _str(b.get("ChangedAt"))
        if verdict is None or message_id is None:
            return []
        ref = _ref("postmark", "change", message_id, changed or "")
        return [_event(ref, verdict, b.get("Recipient"), None, f"suppressed: {reason}", key)]
    return []
