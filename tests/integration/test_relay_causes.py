"""What the SMTP transport calls a relay problem (``RelayUnavailable``), against real sockets:
refused, DNS failure, a relay that never greets, one that greets with a refusal, TLS spoken to
a plain server, and a pooled connection the relay dropped while it went away."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Envelope, Outcome, RelayUnavailable, Verdict
from tests.support.relay_outage import OutageSMTPServer

ENVELOPE = Envelope(
    job_id=1,
    key="k",
    channel="email",
    sender="news@herald.test",
    recipient="someone@example.com",
    message_id="<k@herald.test>",
    payload=b"Message-ID: <k@herald.test>\r\nSubject: hi\r\n\r\nbody\r\n",
)


async def unavailable(config: SmtpConfig) -> RelayUnavailable:
    transport = SmtpTransport(config)
    try:
        with pytest.raises(RelayUnavailable) as caught:
            await transport.prepare(ENVELOPE)
    finally:
        await transport.aclose()
    return caught.value


async def with_server(
    greeting: bytes | None,
    body: Callable[[int], Awaitable[RelayUnavailable]],
) -> RelayUnavailable:
    """A TCP server that says ``greeting`` and hangs up (None: says nothing until the client
    gives up)."""

    handled = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer)
        finally:
            handled.set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if greeting is not None:
            writer.write(greeting)
            await writer.drain()
        else:
            await reader.read()  # until the client closes
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await body(port)
    finally:
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(handled.wait(), timeout=10)  # its socket closed, not leaked


def test_connection_refused(refused_port: int) -> None:
    port = refused_port
    error = asyncio.run(unavailable(SmtpConfig("127.0.0.1", port)))
    assert error.cause == "connection refused"
    assert error.relay == f"smtp://127.0.0.1:{port}"
    assert error.line == f"relay unreachable: connection refused (smtp://127.0.0.1:{port})"


def test_a_name_that_does_not_resolve() -> None:
    error = asyncio.run(unavailable(SmtpConfig("relay.invalid", 25, command_timeout=10)))
    assert error.cause.startswith("DNS lookup failed for relay.invalid"), error.cause
    assert error.relay == "smtp://relay.invalid:25"


def test_a_relay_that_never_greets_times_out() -> None:
    error = asyncio.run(
        with_server(
            None,
            lambda port: unavailable(SmtpConfig("127.0.0.1", port, command_timeout=0.3)),
        )
    )
    assert error.cause == "connect timeout after 0.3s"


def test_a_refusing_greeting() -> None:
    error = asyncio.run(
        with_server(
            b"554 5.3.2 no service here\r\n",
            lambda port: unavailable(SmtpConfig("127.0.0.1", port)),
        )
    )
    assert error.cause.startswith("connection refused by the relay's greeting: 554"), error.cause


def test_tls_spoken_to_a_plain_server_is_a_tls_failure(tmp_path: Path) -> None:
    with OutageSMTPServer(tmp_path / "ledger.txt") as server:
        config = SmtpConfig("127.0.0.1", server.port, use_tls=True, command_timeout=5)
        error = asyncio.run(unavailable(config))
    assert error.cause.startswith("TLS failure"), error.cause
    assert error.relay == f"smtps://127.0.0.1:{server.port}"


def test_a_pooled_connection_dropped_by_a_relay_that_went_away(tmp_path: Path) -> None:
    """The first send leaves its connection in the pool; the relay goes away: the next send
    finds it dead at MAIL, tries a new connection, and reports the relay (no T6, no blame on
    the recipient). Back on the same port, sending resumes."""
    server = OutageSMTPServer(tmp_path / "ledger.txt")
    server.start()

    async def scenario() -> tuple[Outcome, RelayUnavailable, Outcome]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", server.port, command_timeout=5))
        try:
            first = await transport.prepare(ENVELOPE)
            assert not isinstance(first, Outcome)
            sent = await first.deliver(datetime.now(UTC))
            await asyncio.to_thread(server.go_down)
            with pytest.raises(RelayUnavailable) as caught:
                await transport.prepare(ENVELOPE)
            await asyncio.to_thread(server.come_back)
            again = await transport.prepare(ENVELOPE)
            assert not isinstance(again, Outcome)
            return sent, caught.value, await again.deliver(datetime.now(UTC))
        finally:
            await transport.aclose()

    try:
        sent, error, resent = asyncio.run(scenario())
    finally:
        server.stop()
    assert sent.verdict is Verdict.SENT
    assert error.cause == "connection refused"
    assert resent.verdict is Verdict.SENT
    assert len(server.accepted_ids()) == 2
