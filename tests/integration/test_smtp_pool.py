"""SmtpTransport's pool of SMTP sessions against a real aiosmtpd server on 127.0.0.1: a pooled
session the relay closed between two messages is replaced before T4 (nothing lost, nothing
blamed on the message), and a session that breaks inside DATA is in doubt and never pooled
again."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiosmtpd.smtp import SMTP, Session

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Envelope, Outcome, Verdict
from herald.sink import BoundPortController
from tests.support.relay_outage import OutageSMTPServer
from tests.support.smtp_server import Fault, LedgerSMTPServer


def envelope(n: int) -> Envelope:
    message_id = f"<m{n}@herald.test>"
    return Envelope(
        job_id=n,
        key=f"k{n}",
        channel="email",
        sender="news@herald.test",
        recipient=f"r{n}@example.com",
        message_id=message_id,
        payload=f"Message-ID: {message_id}\r\nSubject: hi\r\n\r\nbody\r\n".encode(),
    )


async def send(transport: SmtpTransport, n: int) -> Outcome:
    prepared = await transport.prepare(envelope(n))
    assert not isinstance(prepared, Outcome), prepared
    return await prepared.deliver(datetime.now(UTC))


def test_a_pooled_session_the_relay_closed_is_replaced(tmp_path: Path) -> None:
    """The relay restarts between two messages (every open session is gone, as after an idle
    timeout): the next message goes out on a new session, first time."""
    server = OutageSMTPServer(tmp_path / "ledger.txt")
    server.start()

    async def scenario() -> tuple[Outcome, Outcome, bool]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", server.port, command_timeout=5))
        try:
            first = await send(transport, 1)
            (pooled,) = transport._idle
            await asyncio.to_thread(server.go_down)
            await asyncio.to_thread(server.come_back)
            second = await send(transport, 2)
            return first, second, pooled in transport._idle
        finally:
            await transport.aclose()

    try:
        first, second, old_session_back = asyncio.run(scenario())
    finally:
        server.stop()
    assert (first.verdict, second.verdict) == (Verdict.SENT, Verdict.SENT)
    assert not old_session_back
    assert server.accepted_ids() == ["<m1@herald.test>", "<m2@herald.test>"]


def test_a_pooled_session_that_breaks_inside_data_is_in_doubt_and_not_reused(
    tmp_path: Path,
) -> None:
    """Message 2 rides the session message 1 left in the pool; the relay stores it and drops
    the connection before replying: in doubt (never a retry), and message 3 gets a new
    session rather than the broken one."""
    drop = {"<m2@herald.test>"}
    server = LedgerSMTPServer(
        tmp_path / "ledger.txt",
        fault_plan=lambda key, _: Fault.DROP_AFTER_STORE if key in drop else Fault.ACCEPT,
    )
    server.start()

    async def scenario() -> tuple[list[Outcome], bool, bool]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", server.port, command_timeout=5))
        try:
            first = await send(transport, 1)
            (pooled,) = transport._idle
            prepared = await transport.prepare(envelope(2))
            assert not isinstance(prepared, Outcome)
            rode_the_pooled_session = getattr(prepared, "client", None) is pooled
            second = await prepared.deliver(datetime.now(UTC))
            third = await send(transport, 3)
            return [first, second, third], rode_the_pooled_session, pooled in transport._idle
        finally:
            await transport.aclose()

    try:
        outcomes, reused, broken_back = asyncio.run(scenario())
    finally:
        server.stop()
    assert reused
    assert [o.verdict for o in outcomes] == [Verdict.SENT, Verdict.IN_DOUBT, Verdict.SENT]
    assert "inside DATA" in outcomes[1].text
    assert not broken_back
    assert server.accepted_ids() == ["<m1@herald.test>", "<m2@herald.test>", "<m3@herald.test>"]


def test_every_connection_names_this_host_from_one_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiosmtplib looks this host's name up for every new connection (``socket.getfqdn``, a
    DNS query that can stall); the transport's connections share one lookup, even a worker's
    burst of them at start, and EHLO still gives that name."""
    lookups: list[int] = []

    def getfqdn(name: str = "") -> str:
        lookups.append(1)
        return "worker.herald.test"

    monkeypatch.setattr(socket, "getfqdn", getfqdn)
    greeted: list[str] = []

    class Handler:
        async def handle_EHLO(
            self,
            server: SMTP,
            session: Session,
            envelope: object,
            hostname: str,
            responses: list[str],
        ) -> list[str]:
            session.host_name = hostname
            greeted.append(hostname)
            return responses

        async def handle_DATA(self, server: SMTP, session: Session, envelope: object) -> str:
            return "250 ok"

    controller = BoundPortController(
        Handler(), hostname="127.0.0.1", port=0, server_hostname="relay.herald.test"
    )
    controller.start()

    async def scenario() -> list[Outcome]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", controller.port, command_timeout=5))
        try:
            return list(await asyncio.gather(*(send(transport, n) for n in range(1, 11))))
        finally:
            await transport.aclose()

    try:
        outcomes = asyncio.run(scenario())
    finally:
        controller.stop()
    assert [o.verdict for o in outcomes] == [Verdict.SENT] * 10
    assert greeted == ["worker.herald.test"] * 10  # ten connections, opened at once
    assert len(lookups) == 1
