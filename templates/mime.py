"""Build the exact bytes of one email, ready for SMTP DATA.

The bytes are stored in the outbox when a send job is materialised and sent unchanged on every
attempt, so identical inputs must give identical bytes: the MIME boundary is derived from the
Message-ID instead of being random. They carry no ``Date``: a message rendered today may go out
next week, so the worker adds ``Date`` when the message is sent (``dispatch.message_date``).

Bodies are kept 7-bit clean (quoted-printable when they are not plain short-lined ASCII) and
headers RFC 2047-encoded, so the message is valid whether or not the receiving server offers
8BITMIME or SMTPUTF8.

The message is assembled as text rather than through ``email.message.EmailMessage``, whose
header registry and folder cost milliseconds per message (Herald builds every message twice:
to validate, then to enqueue). The shapes written here are few and fixed.

Every header value that can come from data (subject, display names) is encoded here and never
handed to the email package: the package *parses* a string it is given, so text that reads as an
RFC 2047 encoded word was decoded, and a decoded LF became a header or body of the attacker's
choice (issue 7). Text that merely looks like an encoded word is itself encoded, so it arrives
literally. Control characters are refused outright, and the finished bytes are checked
(_check_wire) so that no bug in these modules can ever put a line on the wire that is not a
header, a fold, or body. tests/unit/test_templates_mime.py checks the output against the
EmailMessage-based builder this replaced.

This module checks the inputs, puts the message together and checks the result; the header
fields are written by templates/mime_headers.py (RFC 2047 words: templates/encoded_words.py),
the body by templates/mime_body.py, under the line rules of templates/wire_lines.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from email.headerregistry import HeaderRegistry

from templates.errors import TemplateError
from templates.header_values import header_value_problem
from templates.mime_body import TransferEncoding, boundary_for, message_body
from templates.mime_headers import (
    MESSAGE_ID,
    PLAIN_ADDR_SPEC,
    RFC5322_SPECIALS,
    address_field,
    text_field,
    verbatim_field,
)
from templates.render import RenderedContent
from templates.wire_lines import CRLF, MAX_LINE

# Importable from here as before the split into templates/mime_*.py.
__all__ = [
    "KEY_HEADER",
    "PLAIN_ADDR_SPEC",
    "RFC5322_SPECIALS",
    "TransferEncoding",
    "build_message",
]

KEY_HEADER = "X-Herald-Key"

# The headers build_message writes itself, and Date, which the worker adds when it sends the
# message; an extra header may not duplicate or override them.
_OWN_HEADERS = frozenset(
    name.lower()
    for name in (
        "From", "To", "Reply-To", "Subject", "Date", "Message-ID", "MIME-Version", KEY_HEADER,
        "Content-Type", "Content-Transfer-Encoding", "Content-Disposition",
    )
)  # fmt: skip
# RFC 5322 field name: printable ASCII except colon.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
# Extra header names the email package parses as structured fields (addresses, dates, MIME
# parameters): their text must follow that field's grammar, which only ASCII written as given
# does here (Herald sets no such header from data).
_STRUCTURED = frozenset(HeaderRegistry().registry) - {"subject"}


def build_message(
    *,
    sender: str,
    sender_name: str | None,
    recipient: str,
    recipient_name: str | None,
    reply_to: str | None,
    content: RenderedContent,
    message_id: str,
    key: str,
    extra_headers: Mapping[str, str] | None = None,
) -> bytes:
    """Return the complete RFC 5322 message but its ``Date``, CRLF line endings, for one
    recipient. The worker adds ``Date`` when it sends it (``dispatch.message_date``)."""
    extra = dict(extra_headers or {})
    _check_header_values(
        {
            "sender": sender,
            "sender name": sender_name,
            "recipient": recipient,
            "recipient name": recipient_name,
            "reply-to": reply_to,
            "subject": content.subject,
            "message-id": message_id,
            "key": key,
            **{f"header {name}": value for name, value in extra.items()},
        }
    )
    _check_extra_header_names(extra)
    if not MESSAGE_ID.fullmatch(message_id):
        raise TemplateError(f"message-id must look like <id@domain>: {message_id!r}")
    if not key.isascii():
        raise TemplateError(f"{KEY_HEADER} must be ASCII: {key!r}")

    lines = [
        address_field("From", sender, sender_name or None),
        address_field("To", recipient, recipient_name or None),
    ]
    if reply_to is not None:
        lines.append(address_field("Reply-To", reply_to, None))
    lines.append(text_field("Subject", content.subject))
    lines.append(verbatim_field("Message-ID", message_id))
    lines.append(f"MIME-Version: 1.0{CRLF}")
    lines.append(verbatim_field(KEY_HEADER, key))
    for name, value in extra.items():
        if value.isascii():
            lines.append(verbatim_field(name, value))
        elif name.lower() in _STRUCTURED:
            raise TemplateError(f"header {name} cannot be encoded: a structured header is ASCII")
        else:
            lines.append(text_field(name, value))
    head = "".join(lines).encode("ascii")
    message = head + message_body(content, boundary=boundary_for(message_id))
    _check_wire(message)
    return message


def _check_header_values(values: Mapping[str, str | None]) -> None:
    for field, value in values.items():
        problem = None if value is None else header_value_problem(value)
        if problem is not None:
            raise TemplateError(f"{field} contains {problem} (header injection)")


def _check_extra_header_names(extra: Mapping[str, str]) -> None:
    for name in extra:
        if not _FIELD_NAME.fullmatch(name):
            raise TemplateError(f"invalid header name {name!r} (header injection)")
        if name.lower() in _OWN_HEADERS:
            raise TemplateError(f"extra header {name} would override a header Herald sets")


# A header line on the wire: a field (name, colon, printable ASCII) or a continuation holding
# more than whitespace (some readers end the header block at a whitespace-only line).
_WIRE_HEADER_LINE = rb"(?:[!-9;-~]+:[\t -~]*|[ \t]+[!-~][\t -~]*)"
# The header block: such lines joined by CRLF, matched in one pass (no line's characters
# include CR or LF, so the match cannot backtrack across lines). One call per message instead
# of one per line: about 7 % of a launch's check (py-spy, issue 12).
_WIRE_HEADER = re.compile(_WIRE_HEADER_LINE + rb"(?:\r\n" + _WIRE_HEADER_LINE + rb")*")


def _check_wire(message: bytes) -> None:
    """Refuse ``message`` unless its bytes have the shape every part of this module promises.

    A guard against bugs, not a check of the input: every line ends in CRLF (no bare CR or
    LF), no line exceeds 998 octets, and the header block holds only fields and folds, so no
    value can have become a header or the start of the body.
    """
    crlf = message.count(b"\r\n")
    if message.count(b"\n") != crlf or message.count(b"\r") != crlf:
        raise TemplateError("built message is malformed: a bare CR or LF (a bug in Herald)")
    head, separator, _ = message.partition(b"\r\n\r\n")
    if not separator or not message.endswith(b"\r\n"):
        raise TemplateError("built message is malformed: no header block (a bug in Herald)")
    if _WIRE_HEADER.fullmatch(head) is None:
        raise TemplateError(
            "built message is malformed: a header line that is not a field or a fold"
            " (a bug in Herald)"
        )
    if len(message) > MAX_LINE and max(map(len, message.split(b"\r\n"))) > MAX_LINE:
        raise TemplateError(
            f"built message is malformed: a line over {MAX_LINE} octets (a bug in Herald)"
        )
