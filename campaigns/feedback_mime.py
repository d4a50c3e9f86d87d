"""Reading a report's MIME structure without trusting it: the helpers the DSN and ARF parsers share.

Reports come from the Internet, written by any MTA or by anyone holding a return-path token, so
everything here is defensive: the message is parsed with the ``compat32`` policy (headers stay
plain strings; the modern policy parses address headers and can raise on hostile ones), sizes
are capped before parsing, only a bounded number of parts is looked at, and the caller turns any
exception into the verdict ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from email import message_from_bytes, message_from_string
from email import policy as email_policy
from email.message import Message

from campaigns.feedback import clean

MAX_REPORT_BYTES = 2 * 1024 * 1024  # the report parts come first; a huge original is cut off
MAX_PARTS = 64
_KEY = re.compile(r"[0-9a-f]{64}")
_MAX_REF = 200


def parse_bytes(raw: bytes) -> Message:
    return message_from_bytes(raw[:MAX_REPORT_BYTES], policy=email_policy.compat32)


def parts(message: Message) -> Iterator[Message]:
    """The first ``MAX_PARTS`` parts, depth first (``walk`` with a bound)."""
    for n, part in enumerate(message.walk()):
        if n >= MAX_PARTS:
            return
        yield part


def header(message: Message, name: str) -> str:
    """A header's text ("" if absent), unfolded, printable and bounded."""
    value = message.get(name)
    return "" if value is None else clean(value)


def report_id(message: Message) -> str | None:
    value = header(message, "Message-ID")
    return value[:_MAX_REF] if value else None


def field_blocks(part: Message) -> list[Message]:
    """The header blocks of a ``message/delivery-status`` or ``message/feedback-report`` part.

    The email package parses these into a list of Message objects; when the part is encoded or
    malformed it leaves a string instead, which is parsed here block by block.
    """
    payload = part.get_payload(decode=False)
    if isinstance(payload, list):
        return [p for p in payload[:MAX_PARTS] if isinstance(p, Message)]
    if isinstance(payload, str):
        text = payload
        encoding = (part.get("Content-Transfer-Encoding") or "").strip().lower()
        if encoding in ("base64", "quoted-printable"):
            decoded = part.get_payload(decode=True)
            if isinstance(decoded, bytes):
                text = decoded.decode("utf-8", errors="replace")
        blocks = re.split(r"\r?\n[ \t]*\r?\n", text.strip())
        return [message_from_string(b, policy=email_policy.compat32) for b in blocks[:MAX_PARTS]]
    return []


def original_headers(message: Message) -> Message | None:
    """The returned original's headers (``message/rfc822`` or ``text/rfc822-headers``)."""
    for part in parts(message):
        kind = part.get_content_type()
        if kind == "message/rfc822":
            payload = part.get_payload()
            if isinstance(payload, list) and payload and isinstance(payload[0], Message):
                return payload[0]
        elif kind == "text/rfc822-headers":
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                return message_from_bytes(payload, policy=email_policy.compat32)
    return None


def herald_key(original: Message | None) -> str | None:
    """The X-Herald-Key of the returned original, if it carries a well-formed one."""
    if original is None:
        return None
    value = header(original, "X-Herald-Key").lower()
    return value if _KEY.fullmatch(value) else None


def first_text(message: Message, limit: int = 20_000) -> str:
    """The first text/plain part's text (bounded), for bounces that are not DSNs."""
    for part in parts(message):
        if part.get_content_type() == "text/plain" and not part.is_multipart():
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                return payload[:limit].decode("utf-8", errors="replace")
    return ""
