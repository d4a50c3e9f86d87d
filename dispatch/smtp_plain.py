"""MAIL and RCPT for plain addresses, without aiosmtplib's address parser.

aiosmtplib's ``mail`` and ``rcpt`` quote every address through ``email.utils.parseaddr`` and an
injection check, about 25 µs per address (a twentieth of a send's CPU in the SMTP benchmark),
to return ``<address>``. For a bare ASCII dot-atom address that is exactly the result, so
``dispatch.smtp`` sends those as they are and leaves every other address to aiosmtplib.

To a relay that offers PIPELINING (RFC 2920), the two go in one write (``mail_rcpt_pipelined``,
``dispatch.smtp_pipelining``): one round trip a message instead of two. The replies mean what
they mean one at a time; a RCPT after a refused MAIL is answered with an error of its own
(RFC 2920 §3.1), which changes nothing: the MAIL refusal is the outcome.
"""

from __future__ import annotations

import re

import aiosmtplib
from aiosmtplib.response import SMTPResponse

from dispatch.smtp_pipelining import send_group

# A bare ASCII dot-atom address: no display name, comment, quoting, route, space, angle
# bracket or non-ASCII character, so nothing for a parser to remove and nothing to inject.
PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
)


async def mail_plain(client: aiosmtplib.SMTP, sender: str) -> None:
    """``client.mail(sender)`` for a plain address (``PLAIN_ADDRESS``): the same command and
    the same refusal."""
    check_mail(
        await client.execute_command(b"MAIL", b"FROM:<" + sender.encode("ascii") + b">"), sender
    )


async def rcpt_plain(client: aiosmtplib.SMTP, recipient: str) -> None:
    """``client.rcpt(recipient)`` for a plain address: 250 and 251 accept it."""
    check_rcpt(
        await client.execute_command(b"RCPT", b"TO:<" + recipient.encode("ascii") + b">"), recipient
    )


class LostAfterMail(aiosmtplib.SMTPServerDisconnected):
    """The connection went away after MAIL was accepted, before RCPT was answered."""


async def mail_rcpt_pipelined(
    client: aiosmtplib.SMTP, sender: str, recipient: str, *, reply_wait: float, data: bool
) -> SMTPResponse | None:
    """MAIL and RCPT for plain addresses in one write, to a relay that offers PIPELINING; with
    ``data``, the DATA command too (RFC 2920 lets it end a group), whose reply is returned.

    Raises what ``mail_plain`` then ``rcpt_plain`` would: a refused MAIL first (whatever RCPT
    got), then a refused RCPT. A connection lost before MAIL's reply raises
    ``aiosmtplib.SMTPServerDisconnected``; lost after an accepted MAIL, ``LostAfterMail``.
    A relay that answered DATA with 354 after refusing MAIL or RCPT now waits for a message:
    its connection is closed (nothing was sent), never reset and reused.
    """
    commands = [
        b"MAIL FROM:<" + sender.encode("ascii") + b">",
        b"RCPT TO:<" + recipient.encode("ascii") + b">",
    ]
    if data:
        commands.append(b"DATA")
    replies = await send_group(client, commands, reply_wait)
    complete = len(replies) == len(commands)
    waiting = data and complete and replies[2].code == aiosmtplib.SMTPStatus.start_input
    if not complete or (waiting and not _accepted(replies)):
        client.close()  # out of step, gone, or in DATA: never reused
    check_mail(replies[0], sender)
    if len(replies) > 1:
        check_rcpt(replies[1], recipient)
    if not complete:
        raise LostAfterMail("Connection lost after MAIL was accepted")
    return replies[2] if data else None


def _accepted(replies: list[SMTPResponse]) -> bool:
    return replies[0].code == 250 and replies[1].code in (250, 251)


def check_mail(response: SMTPResponse, sender: str) -> None:
    if response.code != 250:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, sender)


def check_rcpt(response: SMTPResponse, recipient: str) -> None:
    if response.code not in (250, 251):
        raise aiosmtplib.SMTPRecipientRefused(response.code, response.message, recipient)


def is_plain(address: str) -> bool:
    return PLAIN_ADDRESS.fullmatch(address) is not None
