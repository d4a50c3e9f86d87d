"""MAIL and RCPT for plain addresses, without aiosmtplib's address parser.

aiosmtplib's ``mail`` and ``rcpt`` quote every address through ``email.utils.parseaddr`` and an
injection check, about 25 µs per address (a twentieth of a send's CPU in the SMTP benchmark),
to return ``<address>``. For a bare ASCII dot-atom address that is exactly the result, so
``dispatch.smtp`` sends those as they are and leaves every other address to aiosmtplib.
"""

from __future__ import annotations

import re

import aiosmtplib

# A bare ASCII dot-atom address: no display name, comment, quoting, route, space, angle
# bracket or non-ASCII character, so nothing for a parser to remove and nothing to inject.
PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
)


async def mail_plain(client: aiosmtplib.SMTP, sender: str) -> None:
    """``client.mail(sender)`` for a plain address (``PLAIN_ADDRESS``): the same command and
    the same refusal."""
    response = await client.execute_command(b"MAIL", b"FROM:<" + sender.encode("ascii") + b">")
    if response.code != 250:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, sender)


async def rcpt_plain(client: aiosmtplib.SMTP, recipient: str) -> None:
    """``client.rcpt(recipient)`` for a plain address: 250 and 251 accept it."""
    response = await client.execute_command(b"RCPT", b"TO:<" + recipient.encode("ascii") + b">")
    if response.code not in (250, 251):
        raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, recipient)


def is_plain(address: str) -> bool:
    return PLAIN_ADDRESS.fullmatch(address) is not None
