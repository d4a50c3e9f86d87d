"""How a reader sees a message Herald built: the email package, corrected where it strays.

The email package keeps the whitespace between two adjacent encoded words of a display name,
where RFC 2047 (section 6.2) and mail clients ignore it. A display name too long for one encoded
word is written as several, each holding its own spaces, so the package would read it with one
space too many at every split. ``mailboxes`` reads such a phrase as RFC 2047 says; everything
else (which headers there are, the addresses, every other value) is the email package's reading.
"""

from __future__ import annotations

import email
import email.policy
import re
from email.header import decode_header
from email.message import EmailMessage

_ENCODED_WORDS = re.compile(r"=\?utf-8\?[qb]\?[^?\s]*\?=(?: =\?utf-8\?[qb]\?[^?\s]*\?=)*")


def parse(raw: bytes) -> EmailMessage:
    message = email.message_from_bytes(raw, policy=email.policy.SMTP)
    assert isinstance(message, EmailMessage)
    return message


def mailboxes(message: EmailMessage, name: str) -> list[tuple[str, str]]:
    """(display name, addr-spec) of each mailbox in address header ``name``."""
    raw_value = " ".join(
        value.replace("\r\n", "") for field, value in message.raw_items() if field == name
    ).strip()
    result = []
    for address in message[name].addresses:
        display_name = address.display_name
        suffix = f"<{address.addr_spec}>"
        phrase = raw_value.removesuffix(suffix).strip() if raw_value.endswith(suffix) else ""
        if len(message[name].addresses) == 1 and _ENCODED_WORDS.fullmatch(phrase):
            display_name = "".join(
                part.decode(charset or "ascii") if isinstance(part, bytes) else part
                for part, charset in decode_header(phrase)
            )
        result.append((display_name, address.addr_spec))
    return result
