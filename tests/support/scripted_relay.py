"""A scripted SMTP relay on 127.0.0.1 for the PIPELINING tests (real sockets, the client's own
event loop): it offers PIPELINING, reads a whole group of commands (MAIL, RCPT and, when told,
DATA) before it answers any of them, so a client that waited for a reply between them would
hang until its command timeout, and answers each group as the test says."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from dispatch.smtp import SmtpConfig, SmtpTransport

COMMAND_TIMEOUT = 3.0  # seconds: the transport's, in these tests


@dataclass(frozen=True)
class Reply:
    """The relay's answer to one group: ``data`` as written, then ``then``: carry on,
    close the connection (``drop``) or say nothing more until the client closes (``hang``).
    ``trickle`` writes it one byte at a time."""

    data: bytes
    then: Literal["go", "drop", "hang"] = "go"
    trickle: bool = False


@dataclass
class ScriptedRelay:
    """``group``: the commands read before answering (2: MAIL, RCPT; 3: and DATA). Each group
    gets the next of ``answers``, then plain acceptance."""

    answers: list[Reply]
    group: int = 2
    offers_pipelining: bool = True
    transactions: list[tuple[bytes, ...]] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)
    sessions: int = 0

    def accepted(self) -> Reply:
        return Reply(b"250 ok\r\n250 ok\r\n" + (b"354 go ahead\r\n" if self.group == 3 else b""))

    async def session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sessions += 1
        try:
            writer.write(b"220 scripted relay\r\n")
            await reader.readline()  # EHLO
            extension = b"250-PIPELINING\r\n" if self.offers_pipelining else b""
            writer.write(b"250-scripted\r\n" + extension + b"250 HELP\r\n")
            while True:
                line = await reader.readline()
                if not line or line.startswith(b"QUIT"):
                    writer.write(b"221 bye\r\n")
                    return
                if line.startswith(b"RSET"):
                    writer.write(b"250 reset\r\n")
                elif line.startswith(b"DATA"):
                    writer.write(b"354 go ahead\r\n")
                    await self._message(reader, writer)
                elif not await self._group(line, reader, writer):
                    return
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _group(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        commands = [first.strip()]
        for _ in range(self.group - 1):  # a client that does not pipeline waits here, unanswered
            line = await reader.readline()
            if not line:
                return False
            commands.append(line.strip())
        self.transactions.append(tuple(commands))
        reply = self.answers.pop(0) if self.answers else self.accepted()
        if reply.trickle:
            for i in range(len(reply.data)):
                writer.write(reply.data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
        else:
            writer.write(reply.data)
        await writer.drain()
        if reply.then == "drop":
            return False
        if reply.then == "hang":
            await reader.read()  # until the client gives up and closes
            return False
        last = reply.data.rstrip(b"\r\n").rsplit(b"\n", 1)[-1]
        if commands[-1] == b"DATA" and last.startswith(b"354"):
            await self._message(reader, writer)
        return True

    async def _message(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.messages.append(await reader.readuntil(b"\r\n.\r\n"))
        writer.write(b"250 stored\r\n")


async def with_relay(
    relay: ScriptedRelay,
    scenario: Callable[[SmtpTransport], Awaitable[object]],
    *,
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
) -> object:
    """``scenario`` run with a transport to ``relay``, served on this event loop; with ``tls``
    (the server's context, the client's), over implicit TLS (smtps)."""
    server_tls, client_tls = tls if tls is not None else (None, None)
    server = await asyncio.start_server(relay.session, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    config = SmtpConfig("127.0.0.1", port, use_tls=tls is not None, command_timeout=COMMAND_TIMEOUT)
    transport = SmtpTransport(config, ssl_context=client_tls)
    try:
        async with server:
            try:
                return await scenario(transport)
            finally:
                await transport.aclose()
    finally:
        server.close()
