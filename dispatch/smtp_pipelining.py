"""Commands sent together, replies read in order: SMTP PIPELINING (RFC 2920) on aiosmtplib.

A relay that offers PIPELINING takes MAIL and RCPT in one write and answers both: one round
trip instead of two for every message. aiosmtplib cannot read two replies to one write: its
protocol parses one reply per ``read_response`` and drops bytes that arrive while a parsed reply
waits to be picked up, so a second reply landing in a separate packet would be lost. While a
group's replies are outstanding, ``send_group`` therefore lends the connection's transport a
reader of its own (``asyncio.Transport.set_protocol``, public API, TLS included) and gives it
back once every reply is in. Anything else the transport reports meanwhile (a lost connection,
an end of file, flow control) is passed on to aiosmtplib's protocol, so the client knows its
connection's state as if it had read the replies itself.

The reply grammar is ``parse_replies``'s, a pure function: complete lines ``NNN-text`` continue a
reply, ``NNN text`` (or a bare ``NNN``) ends it; a malformed or oversized reply is an error, never
guessed at.
"""

from __future__ import annotations

import asyncio
from typing import cast

import aiosmtplib
from aiosmtplib.response import SMTPResponse

# aiosmtplib's bounds (aiosmtplib.protocol): a reply line, and a whole reply.
MAX_LINE_LENGTH = 8192
MAX_REPLY_LENGTH = MAX_LINE_LENGTH * 4


class MalformedReply(aiosmtplib.SMTPException):
    """A reply that is not SMTP: the connection cannot be trusted any more."""


def parse_replies(buffer: bytearray) -> list[SMTPResponse]:
    """Take every complete reply off the front of ``buffer`` (in place); leave a partial one.

    Raises ``MalformedReply`` for a line without a three-digit code, a code that changes inside
    a reply, or a line or reply past aiosmtplib's bounds.
    """
    replies: list[SMTPResponse] = []
    start = 0  # where the reply being read begins
    offset = 0
    code: bytes | None = None
    lines: list[bytes] = []
    while True:
        end = buffer.find(b"\n", offset)
        if end == -1:
            if len(buffer) - offset > MAX_LINE_LENGTH or len(buffer) - start > MAX_REPLY_LENGTH:
                raise MalformedReply("reply too long")
            break
        line = bytes(buffer[offset : end + 1])
        offset = end + 1
        if len(line) > MAX_LINE_LENGTH or offset - start > MAX_REPLY_LENGTH:
            raise MalformedReply("reply too long")
        head = line[:3]
        separator = line[3:4]
        if not (head.isdigit() and len(head) == 3 and separator in (b"-", b" ", b"\r", b"\n")):
            raise MalformedReply(f"malformed SMTP reply line: {line[:80]!r}")
        if code is not None and head != code:
            raise MalformedReply(f"reply code changed inside a reply: {line[:80]!r}")
        code = head
        lines.append(line[4:].strip(b" \t\r\n"))
        if separator != b"-":
            text = b"\n".join(lines).decode("utf-8", "surrogateescape")
            replies.append(SMTPResponse(int(code), text))
            start, code, lines = offset, None, []
    del buffer[:start]
    return replies


class _GroupReader(asyncio.Protocol):
    """The transport's protocol while a group's replies are read; the rest goes to ``inner``."""

    def __init__(self, inner: asyncio.BaseProtocol, expected: int, done: asyncio.Future[None]):
        self.inner = inner
        self.expected = expected
        self.done = done
        self.buffer = bytearray()
        self.replies: list[SMTPResponse] = []
        self.error: BaseException | None = None

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return  # more than the group's replies: send_group refuses the connection
        self.buffer.extend(data)
        try:
            self.replies.extend(parse_replies(self.buffer))
        except MalformedReply as exc:
            self._finish(exc)
            return
        if len(self.replies) >= self.expected:
            self._finish(None)

    def eof_received(self) -> bool | None:
        self._finish(aiosmtplib.SMTPServerDisconnected("Unexpected EOF received"))
        return cast(asyncio.Protocol, self.inner).eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(aiosmtplib.SMTPServerDisconnected("Connection lost"))
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _finish(self, error: BaseException | None) -> None:
        if not self.done.done():
            self.error = error
            self.done.set_result(None)


async def send_group(
    client: aiosmtplib.SMTP, commands: list[bytes], reply_wait: float
) -> list[SMTPResponse]:
    """Write ``commands`` (each without its CRLF) at once and return their replies in order.

    Fewer replies than commands means the connection failed after those: the caller decides what
    the ones received mean, and must close the connection. Raises
    ``aiosmtplib.SMTPServerDisconnected`` when the connection is gone before the first reply,
    ``aiosmtplib.SMTPReadTimeoutError`` when the replies do not all come within ``reply_wait``
    seconds (no reply is returned then: the connection is out of step, close it), and
    ``MalformedReply`` (an ``aiosmtplib.SMTPException``). The caller owns the connection:
    nothing else may use it meanwhile.
    """
    protocol = client.protocol
    transport = protocol.transport if protocol is not None else None
    if protocol is None or transport is None or transport.is_closing():
        raise aiosmtplib.SMTPServerDisconnected("Connection lost")
    for command in commands:
        if b"\r" in command or b"\n" in command:
            raise ValueError("an SMTP command may not contain CR or LF")
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reader = _GroupReader(protocol, len(commands), done)
    transport.set_protocol(reader)
    try:
        protocol.write(b"".join(command + b"\r\n" for command in commands))
        try:
            await asyncio.wait_for(done, reply_wait)
        except TimeoutError:
            raise aiosmtplib.SMTPReadTimeoutError("Timed out waiting for server response") from None
    except asyncio.CancelledError:
        client.close()  # replies may still be on their way: the connection is out of step
        raise
    finally:
        if not transport.is_closing():
            transport.set_protocol(protocol)
    if reader.buffer or len(reader.replies) > len(commands):
        # Bytes beyond the group's replies: nothing the server says unasked can be trusted.
        client.close()
        raise MalformedReply("unexpected data after the replies")
    if reader.error is not None and not reader.replies:
        raise reader.error
    return reader.replies
