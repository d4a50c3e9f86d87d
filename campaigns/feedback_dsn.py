"""RFC 3464 delivery status notifications (and the bounces that are not), read into a Report.

Order of evidence, as the research found works in practice (../shared/research/deliverability.md
§3): the per-recipient ``Action`` and ``Status`` of a ``message/delivery-status`` part; the
enhanced code inside ``Diagnostic-Code`` when ``Status`` is missing or only says x.0.0; the
basic reply code with a few unmistakable phrases; else ``unknown``. ``Action: delayed`` is a
warning, never a bounce. A plain-text bounce (qmail, Yahoo) is read the same way from its text,
but only when it comes from a null sender or a mailer daemon: an out-of-office reply quoting
"5.1.1" must not suppress anyone.

The recipient named in the report is kept for the record only; whom to suppress is decided by
the VERP token the report was addressed to (herald.serve.inbound), never by the report's text.
"""

from __future__ import annotations

from email.message import Message

from campaigns.feedback import (
    Report,
    Verdict,
    classify_status,
    classify_text,
    clean,
    find_status,
    strongest,
)
from campaigns.feedback_mime import (
    field_blocks,
    first_text,
    header,
    herald_key,
    original_headers,
    parts,
    report_id,
)

_NOT_FAILURES = frozenset({"delivered", "relayed", "expanded"})
_DAEMONS = ("mailer-daemon", "postmaster", "mail delivery")


def dsn_part(message: Message) -> Message | None:
    for part in parts(message):
        if part.get_content_type() == "message/delivery-status":
            return part
    return None


def read_dsn(message: Message, part: Message) -> Report:
    """The strongest verdict over the per-recipient blocks of the delivery-status part."""
    result = Report("unknown")
    # Block 0 is the per-message block (Reporting-MTA …); recipients follow. Some MTAs omit
    # the per-message block, so any block with an Action or a Status counts.
    for block in field_blocks(part):
        if not (block.get("Action") or block.get("Status")):
            continue
        result = strongest(result, _recipient_block(block))
    original = original_headers(message)
    return Report(
        result.verdict,
        result.status,
        result.detail,
        result.recipient,
        report_id(message),
        herald_key(original),
        "dsn",
    )


def _recipient_block(block: Message) -> Report:
    action = header(block, "Action").lower().split(" ")[0]
    status = find_status(header(block, "Status"))
    diagnostic = header(block, "Diagnostic-Code")
    recipient = _address(header(block, "Final-Recipient") or header(block, "Original-Recipient"))
    # A generic x.0.0 Status with a specific code in the diagnostic: the specific one is the
    # evidence (Exchange and others report 5.0.0 and explain in Diagnostic-Code).
    from_text = find_status(diagnostic)
    if from_text and (status is None or (status.endswith(".0.0") and from_text[0] == status[0])):
        status = from_text
    verdict: Verdict
    if action == "delayed":
        verdict = "delayed"
    elif action in _NOT_FAILURES:
        verdict = "none"
    elif action in ("failed", ""):
        if status is not None:
            verdict = classify_status(status)
        else:
            verdict, _ = classify_text(diagnostic)
    else:
        verdict = "unknown"
    detail = clean(f"{action or '-'} {status or '-'} {diagnostic}")
    return Report(verdict, status, detail, recipient)


def read_plain_bounce(message: Message, *, null_sender: bool) -> Report:
    """A bounce without a delivery-status part: its words, if a mail system wrote it."""
    sender = header(message, "From").lower()
    if not (null_sender or any(d in sender for d in _DAEMONS)):
        return Report("unknown", detail="not a delivery report", report_id=report_id(message))
    text = first_text(message)
    verdict, status = classify_text(text)
    if verdict == "none":
        verdict = "unknown"  # a 2xx quoted in prose is no delivery report
    return Report(
        verdict,
        status,
        clean(text),
        None,
        report_id(message),
        herald_key(original_headers(message)),
        "text",
    )


def _address(field: str) -> str | None:
    # "rfc822; alice@example.org" → "alice@example.org" (only for the record).
    _, _, address = field.partition(";")
    address = (address or field).strip().strip("<>")
    return address[:320] or None
