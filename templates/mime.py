"""Build the exact bytes of one email, ready for SMTP DATA.

The bytes are stored in the outbox when a send job is materialised and sent unchanged on every
attempt, so identical inputs must give identical bytes: the MIME boundary is derived from the
Message-ID instead of being random.

Bodies are kept 7-bit clean (quoted-printable when they are not plain short-lined ASCII) and
headers RFC 2047-encoded, so the message is valid whether or not the receiving server offers
8BITMIME or SMTPUTF8.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.errors import MessageError
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Literal

from templates.errors import TemplateError
from templates.render import RenderedContent, contains_line_break

KEY_HEADER = "X-Herald-Key"

# The headers build_message writes itself; an extra header may not duplicate or override them.
_OWN_HEADERS = frozenset(
    name.lower()
    for name in (
        "From", "To", "Reply-To", "Subject", "Date", "Message-ID", "MIME-Version", KEY_HEADER,
        "Content-Type", "Content-Transfer-Encoding", "Content-Disposition",
    )
)  # fmt: skip
# RFC 5322 field name: printable ASCII except colon.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
_MESSAGE_ID = re.compile(r"<[^<>\s@]+@[^<>\s@]+>")
# RFC 5322 caps a line at 998 characters; SMTP servers may reject longer ones.
_MAX_LINE = 998

TransferEncoding = Literal["7bit", "quoted-printable"]

# refold_source="none" keeps values stored with set_raw() exactly as given; see _set_verbatim.
_POLICY = SMTP.clone(refold_source="none")


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
    date: datetime,
    extra_headers: Mapping[str, str] | None = None,
) -> bytes:
    """Return the complete RFC 5322 message, CRLF line endings, for one recipient.

    A naive ``date`` is taken as UTC, the only zone Herald stores times in.
    """
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
    if not _MESSAGE_ID.fullmatch(message_id):
        raise TemplateError(f"message-id must look like <id@domain>: {message_id!r}")

    message = EmailMessage(policy=_POLICY)
    message["From"] = _address(sender, sender_name)
    message["To"] = _address(recipient, recipient_name)
    if reply_to is not None:
        message["Reply-To"] = _address(reply_to, None)
    message["Subject"] = content.subject
    message["Date"] = format_datetime(date if date.tzinfo else date.replace(tzinfo=UTC))
    message["Message-ID"] = message_id
    message["MIME-Version"] = "1.0"
    _set_verbatim(message, KEY_HEADER, key)
    for name, value in extra.items():
        if value.isascii():
            _set_verbatim(message, name, value)
        else:
            message[name] = value  # RFC 2047-encoded by the header registry
    _set_body(message, content, boundary=_boundary(message_id))
    return message.as_bytes()


def _check_header_values(values: Mapping[str, str | None]) -> None:
    for field, value in values.items():
        if value is not None and contains_line_break(value):
            raise TemplateError(f"{field} contains a line break (header injection)")


def _check_extra_header_names(extra: Mapping[str, str]) -> None:
    for name in extra:
        if not _FIELD_NAME.fullmatch(name):
            raise TemplateError(f"invalid header name {name!r} (header injection)")
        if name.lower() in _OWN_HEADERS:
            raise TemplateError(f"extra header {name} would override a header Herald sets")


def _address(addr_spec: str, display_name: str | None) -> Address:
    # Non-ASCII local parts need SMTPUTF8, which this message format does not use; domains
    # arrive IDNA-encoded, so any non-ASCII here is a caller's mistake worth stopping on.
    if not addr_spec.isascii():
        raise TemplateError(f"address must be ASCII (SMTPUTF8 is not supported): {addr_spec!r}")
    try:
        address = Address(display_name=display_name or "", addr_spec=addr_spec)
    except (ValueError, MessageError) as exc:
        raise TemplateError(f"invalid email address {addr_spec!r}: {exc}") from exc
    if not address.username or not address.domain:
        raise TemplateError(f"invalid email address {addr_spec!r}: needs local part and domain")
    return address


def _set_verbatim(message: EmailMessage, name: str, value: str) -> None:
    """Write an ASCII header exactly as given, never folded or RFC 2047-encoded.

    The email package encodes any long word it cannot fold, which would turn a long
    List-Unsubscribe URL or the idempotency key into an encoded word that receivers and
    bounce processors do not decode.
    """
    if len(name) + len(": ") + len(value) > _MAX_LINE:
        raise TemplateError(f"header {name} is longer than {_MAX_LINE} characters")
    message.set_raw(name, value)


def _boundary(message_id: str) -> str:
    # Quoted-printable never contains "==" and 7-bit text would need this exact hash, so the
    # boundary cannot collide with a body line.
    return "==herald-" + hashlib.sha256(message_id.encode()).hexdigest()[:24] + "=="


def _set_body(message: EmailMessage, content: RenderedContent, *, boundary: str) -> None:
    if content.html is None:
        message.set_content(content.text, cte=_transfer_encoding(content.text))
        return
    # Text first: clients show the last alternative they can display.
    message.make_alternative(boundary=boundary)
    for body, subtype in ((content.text, "plain"), (content.html, "html")):
        part = EmailMessage(policy=_POLICY)
        part.set_content(body, subtype=subtype, cte=_transfer_encoding(body))
        del part["MIME-Version"]  # set_content() adds it; it belongs on the top level only
        message.attach(part)


def _transfer_encoding(body: str) -> TransferEncoding:
    if body.isascii() and all(len(line) <= _MAX_LINE for line in body.splitlines()):
        return "7bit"
    return "quoted-printable"
