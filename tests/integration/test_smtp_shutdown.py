"""A worker's shutdown says QUIT on all its pooled relay connections at once, against a real
aiosmtpd server on 127.0.0.1: it waits one relay round trip, not one per connection (on a relay
50 ms away, 50 pooled connections closed in turn took 2.5 s; an unanswering relay, 5 s each).

The server answers no QUIT until every pooled session has sent one (or a deadline passes), so
the test sees how many were waiting at once without timing anything."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from aiosmtpd.smtp import SMTP

from dispatch import smtp as smtp_module
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Outcome, Verdict
from herald.sink import BoundPortController
from tests.integration.test_smtp_pool import envelope

SESSIONS = 6
DEADLINE = 5.0  # seconds the server holds a QUIT waiting for the others (only if they never come)


class QuitGate:
    """Lives in the server's event loop: counts QUITs waiting for their reply."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.most = 0  # most QUITs waiting at one moment
        self.all_here: asyncio.Event | None = None

    async def arrive(self) -> None:
        if self.all_here is None:  # created in the server's loop
            self.all_here = asyncio.Event()
        self.waiting += 1
        self.most = max(self.most, self.waiting)
        if self.waiting >= self.expected:
            self.all_here.set()
        try:
            await asyncio.wait_for(self.all_here.wait(), DEADLINE)
        except TimeoutError:
            pass
        finally:
            self.waiting -= 1


class Handler:
    async def handle_DATA(self, server: SMTP, session: object, envelope: object) -> str:
        return "250 stored"


def server_with(gate: QuitGate) -> BoundPortController:
    class GatedSMTP(SMTP):
        async def smtp_QUIT(self, arg: str) -> None:
            await gate.arrive()
            await super().smtp_QUIT(arg)

    class Controller(BoundPortController):
        def factory(self) -> SMTP:
            return GatedSMTP(self.handler)

    return Controller(Handler(), hostname="127.0.0.1", port=0)


async def send_at_once(transport: SmtpTransport, count: int) -> list[Outcome]:
    """``count`` messages prepared together, so each opens a connection of its own, then
    delivered: ``count`` connections end up in the pool."""
    prepared = await asyncio.gather(*(transport.prepare(envelope(n)) for n in range(count)))
    outcomes = []
    for send in prepared:
        assert not isinstance(send, Outcome), send
        outcomes.append(await send.deliver(datetime.now(UTC)))
    return outcomes


def test_shutdown_quits_every_pooled_connection_at_once() -> None:
    gate = QuitGate(SESSIONS)
    controller = server_with(gate)
    controller.start()

    async def scenario() -> tuple[list[Outcome], int, int]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", controller.port, command_timeout=5))
        outcomes = await send_at_once(transport, SESSIONS)
        pooled = len(transport._idle)
        await transport.aclose()
        return outcomes, pooled, len(transport._idle)

    try:
        outcomes, pooled, left = asyncio.run(scenario())
    finally:
        controller.stop()
    assert [o.verdict for o in outcomes] == [Verdict.SENT] * SESSIONS
    assert pooled == SESSIONS
    assert left == 0
    assert gate.most == SESSIONS  # one after another, each QUIT would have waited alone


def test_quits_the_relay_does_not_answer_in_time_cost_one_timeout_and_close_every_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A relay that answers no QUIT in time (its gate waits for more sessions than there are,
    longer than the client waits): every connection is closed after one shared timeout, all
    QUITs having been sent together, not one timeout per connection."""
    monkeypatch.setattr(smtp_module, "QUIT_TIMEOUT", 0.5)
    gate = QuitGate(SESSIONS + 1)  # never all here
    controller = server_with(gate)
    controller.start()

    async def scenario() -> tuple[int, list[bool]]:
        transport = SmtpTransport(SmtpConfig("127.0.0.1", controller.port, command_timeout=5))
        await send_at_once(transport, SESSIONS)
        clients = list(transport._idle)
        await transport.aclose()
        return len(transport._idle), [client.is_connected for client in clients]

    try:
        left, connected = asyncio.run(scenario())
    finally:
        controller.stop()
    assert left == 0
    assert connected == [False] * SESSIONS
    assert gate.most == SESSIONS
