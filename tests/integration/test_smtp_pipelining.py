"""SMTP PIPELINING (RFC 2920): to a relay that offers it, MAIL and RCPT go in one write, and every
way the relay may answer them means what it meant one command at a time.

The relay here is a scripted SMTP server on 127.0.0.1 (real sockets, the client's real event
loop): it reads MAIL *and* RCPT before it answers either, so a client that waited for MAIL's
reply would hang until its command timeout, and it answers them as each test says (whole, byte
by byte, refused, dropped, malformed). The Herald sink (aiosmtpd) offers PIPELINING too, and a
worker's sends through it are stored whole.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiosmtplib
import pytest

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Outcome, RelayUnavailable, Verdict
from herald.sink import start_sink
from tests.integration.test_smtp_pool import envelope

COMMAND_TIMEOUT = 3.0

# How the scripted relay answers one transaction's MAIL and RCPT, given both command lines.
Answer = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]
]  # False: the session ends here


@dataclass
class ScriptedRelay:
    """Answers each transaction's MAIL+RCPT with the next of ``answers`` (then plain 250s)."""

    answers: list[Answer]
    offers_pipelining: bool = True
    transactions: list[tuple[bytes, bytes]] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)
    sessions: int = 0

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
                    continue
                if line.startswith(b"DATA"):
                    writer.write(b"354 go ahead\r\n")
                    message = await reader.readuntil(b"\r\n.\r\n")
                    self.messages.append(message)
                    writer.write(b"250 stored\r\n")
                    continue
                # MAIL: its reply waits for RCPT (a client that does not pipeline hangs here).
                rcpt = await reader.readline()
                if not rcpt:
                    return
                self.transactions.append((line.strip(), rcpt.strip()))
                answer = self.answers.pop(0) if self.answers else both(b"250 ok\r\n250 ok\r\n")
                if not await answer(reader, writer):
                    writer.close()
                    return
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


def both(data: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        return True

    return answer


def byte_by_byte(data: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    return answer


def then_drop(data: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        await writer.drain()
        return False

    return answer


def silence() -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"250 ok\r\n")  # MAIL's reply; RCPT's never comes
        await writer.drain()
        await reader.read()  # until the client gives up and closes
        return False

    return answer


async def with_relay(
    relay: ScriptedRelay, scenario: Callable[[SmtpTransport], Awaitable[object]]
) -> object:
    server = await asyncio.start_server(relay.session, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = SmtpTransport(SmtpConfig("127.0.0.1", port, command_timeout=COMMAND_TIMEOUT))
    try:
        async with server:
            try:
                return await scenario(transport)
            finally:
                await transport.aclose()
    finally:
        server.close()


async def send(transport: SmtpTransport, n: int) -> Outcome:
    prepared = await transport.prepare(envelope(n))
    if isinstance(prepared, Outcome):
        return prepared
    return await prepared.deliver(datetime.now(UTC))


def run_sends(relay: ScriptedRelay, count: int) -> list[Outcome]:
    async def scenario(transport: SmtpTransport) -> list[Outcome]:
        return [await send(transport, n) for n in range(1, count + 1)]

    outcomes = asyncio.run(with_relay(relay, scenario))
    assert isinstance(outcomes, list)
    return outcomes


def test_mail_and_rcpt_go_in_one_write_and_the_message_follows() -> None:
    relay = ScriptedRelay(answers=[])
    outcomes = run_sends(relay, 3)
    assert [o.verdict for o in outcomes] == [Verdict.SENT] * 3
    assert relay.transactions[0] == (b"MAIL FROM:<news@herald.test>", b"RCPT TO:<r1@example.com>")
    assert len(relay.transactions) == len(relay.messages) == 3
    assert relay.sessions == 1  # one pooled connection, its replies kept in step
    assert b"Message-ID: <m3@herald.test>" in relay.messages[2]


def test_replies_that_arrive_byte_by_byte_or_multiline_are_read_whole() -> None:
    relay = ScriptedRelay(
        answers=[
            byte_by_byte(b"250 sender ok\r\n250 recipient ok\r\n"),
            both(b"250-sender\r\n250 ok\r\n250-recipient\r\n250-is\r\n250 fine\r\n"),
        ]
    )
    assert [o.verdict for o in run_sends(relay, 3)] == [Verdict.SENT] * 3
    assert relay.sessions == 1


@pytest.mark.parametrize(
    ("answer", "verdict", "where"),
    [
        (b"550 no such sender\r\n503 need MAIL first\r\n", Verdict.FAILED, "MAIL"),
        (b"451 try later\r\n503 need MAIL first\r\n", Verdict.RETRY, "MAIL"),
        (b"250 ok\r\n550 no such user\r\n", Verdict.FAILED, "RCPT"),
        (b"250 ok\r\n452 mailbox full\r\n", Verdict.RETRY, "RCPT"),
    ],
)
def test_a_refusal_is_the_outcome_and_the_connection_stays_in_step(
    answer: bytes, verdict: Verdict, where: str
) -> None:
    """The RCPT reply after a refused MAIL is read and set aside: the RSET and the next
    message's replies on the same connection pair with their own commands."""
    relay = ScriptedRelay(answers=[both(answer)])
    first, second = run_sends(relay, 2)
    assert first.verdict is verdict
    assert first.text.startswith(where), first.text
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 1
    assert len(relay.messages) == 1


def test_a_connection_lost_after_mail_was_accepted_is_this_messages_retry() -> None:
    relay = ScriptedRelay(answers=[then_drop(b"250 ok\r\n")])
    first, second = run_sends(relay, 2)
    assert first.verdict is Verdict.RETRY
    assert "before DATA" in first.text
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2  # the dropped connection is never reused


def test_a_refused_mail_then_a_lost_connection_is_still_the_refusal() -> None:
    relay = ScriptedRelay(answers=[then_drop(b"421 closing\r\n")])
    first, second = run_sends(relay, 2)
    assert (first.verdict, first.code) == (Verdict.RETRY, 421)
    assert first.text.startswith("MAIL")
    assert second.verdict is Verdict.SENT


def test_a_new_connection_dropped_before_any_reply_means_the_relay_is_unavailable() -> None:
    relay = ScriptedRelay(answers=[then_drop(b"")])

    async def scenario(transport: SmtpTransport) -> object:
        with pytest.raises(RelayUnavailable):
            await transport.prepare(envelope(1))
        return await send(transport, 2)

    outcome = asyncio.run(with_relay(relay, scenario))
    assert isinstance(outcome, Outcome)
    assert outcome.verdict is Verdict.SENT


@pytest.mark.parametrize(
    "answer",
    [
        b"250 ok\r\nnonsense\r\n",  # not a reply
        b"250 ok\r\n250 ok\r\n250 and one nobody asked for\r\n",
        b"250-ok\r\n550 code changed inside a reply\r\n",
    ],
)
def test_a_relay_out_of_step_costs_this_message_a_retry_and_its_connection(answer: bytes) -> None:
    relay = ScriptedRelay(answers=[both(answer)])
    first, second = run_sends(relay, 2)
    assert first.verdict is Verdict.RETRY
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2
    assert len(relay.messages) == 1


def test_a_reply_that_never_comes_is_a_retry_within_the_command_timeout() -> None:
    relay = ScriptedRelay(answers=[silence()])
    started = time.monotonic()

    async def scenario(transport: SmtpTransport) -> object:
        first = await send(transport, 1)
        return first, time.monotonic() - started, list(transport._idle)

    result = asyncio.run(with_relay(relay, scenario))
    assert isinstance(result, tuple)
    first, took, idle = result
    assert first.verdict is Verdict.RETRY
    assert COMMAND_TIMEOUT <= took < COMMAND_TIMEOUT * 3
    assert idle == []


def test_a_relay_without_pipelining_gets_one_command_at_a_time() -> None:
    """The scripted relay waits for RCPT before answering MAIL: a client that honours the
    missing PIPELINING never sends RCPT first, so MAIL times out, unanswered."""
    relay = ScriptedRelay(answers=[], offers_pipelining=False)
    (outcome,) = run_sends(relay, 1)
    assert outcome.verdict is Verdict.RETRY
    assert relay.transactions == []


def test_the_herald_sink_offers_pipelining_and_stores_pipelined_sends(tmp_path: Path) -> None:
    with start_sink(tmp_path / "Maildir", host="127.0.0.1", port=0) as sink:

        async def scenario() -> tuple[bool, list[Outcome]]:
            client = aiosmtplib.SMTP(hostname="127.0.0.1", port=sink.port, start_tls=False)
            await client.connect()
            await client.ehlo()
            offered = client.supports_extension("pipelining")
            await client.quit()
            transport = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, command_timeout=5))
            try:
                outcomes = await asyncio.gather(*(send(transport, n) for n in range(1, 21)))
            finally:
                await transport.aclose()
            return offered, list(outcomes)

        offered, outcomes = asyncio.run(scenario())
    assert offered
    assert [o.verdict for o in outcomes] == [Verdict.SENT] * 20
    stored = sorted((tmp_path / "Maildir" / "new").iterdir())
    assert len(stored) == 20


def test_prepare_hands_back_a_send_ready_for_data() -> None:
    relay = ScriptedRelay(answers=[])

    async def scenario(transport: SmtpTransport) -> object:
        prepared = await transport.prepare(envelope(1))
        assert not isinstance(prepared, Outcome)
        readying = prepared.ready()
        assert readying is not None
        assert await readying is None  # DATA answered 354 on the same connection
        return await prepared.deliver(datetime.now(UTC))

    outcome = asyncio.run(with_relay(relay, scenario))
    assert isinstance(outcome, Outcome)
    assert outcome.verdict is Verdict.SENT
