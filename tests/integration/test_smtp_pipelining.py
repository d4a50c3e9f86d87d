"""SMTP PIPELINING (RFC 2920): to a relay that offers it, MAIL and RCPT go in one write (and DATA
with them when the worker will ask for it beside T4 anyway), and every way the relay may answer
them means what it meant one command at a time.

The relay is ``tests.support.scripted_relay``: real sockets on 127.0.0.1, and a whole group read
before any reply, so a client that waited for a reply in between would hang until its command
timeout. The Herald sink (aiosmtpd) offers PIPELINING too, and sends through it are stored
whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime
from pathlib import Path

import aiosmtplib
import pytest
import trustme

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Outcome, RelayUnavailable, Verdict
from herald.sink import start_sink
from tests.egress_support.servers import tls_pair
from tests.integration.test_smtp_pool import envelope
from tests.support.scripted_relay import COMMAND_TIMEOUT, Reply, ScriptedRelay, with_relay


async def send(transport: SmtpTransport, n: int, *, with_ready: bool = False) -> Outcome:
    prepared = await transport.prepare(envelope(n), with_ready=with_ready)
    if isinstance(prepared, Outcome):
        return prepared
    return await prepared.deliver(datetime.now(UTC))


def run_sends(relay: ScriptedRelay, count: int) -> list[Outcome]:
    """``count`` messages one after the other; DATA in the group when the relay expects it."""

    async def scenario(transport: SmtpTransport) -> list[Outcome]:
        early = relay.group == 3
        return [await send(transport, n, with_ready=early) for n in range(1, count + 1)]

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
            Reply(b"250 sender ok\r\n250 recipient ok\r\n", trickle=True),
            Reply(b"250-sender\r\n250 ok\r\n250-recipient\r\n250-is\r\n250 fine\r\n"),
        ]
    )
    assert [o.verdict for o in run_sends(relay, 3)] == [Verdict.SENT] * 3
    assert relay.sessions == 1


@pytest.mark.parametrize(
    ("group", "answer", "verdict", "where"),
    [
        (2, b"550 no such sender\r\n503 need MAIL first\r\n", Verdict.FAILED, "MAIL"),
        (2, b"451 try later\r\n503 need MAIL first\r\n", Verdict.RETRY, "MAIL"),
        (2, b"250 ok\r\n550 no such user\r\n", Verdict.FAILED, "RCPT"),
        (2, b"250 ok\r\n452 mailbox full\r\n", Verdict.RETRY, "RCPT"),
        (3, b"550 no such sender\r\n503 need MAIL\r\n503 need RCPT\r\n", Verdict.FAILED, "MAIL"),
        (3, b"250 ok\r\n450 mailbox busy\r\n554 no valid recipients\r\n", Verdict.RETRY, "RCPT"),
        (3, b"250 ok\r\n250 ok\r\n451 not now\r\n", Verdict.RETRY, "DATA"),
        (3, b"250 ok\r\n250 ok\r\n554 no thanks\r\n", Verdict.FAILED, "DATA"),
    ],
)
def test_a_refusal_is_the_outcome_and_the_connection_stays_in_step(
    group: int, answer: bytes, verdict: Verdict, where: str
) -> None:
    """Refused before the message (and, with DATA in the group, before T4: T6): the replies
    after a refusal are read and set aside, so the RSET and the next message's replies on the
    same connection pair with their own commands."""
    relay = ScriptedRelay(answers=[Reply(answer)], group=group)
    first, second = run_sends(relay, 2)
    assert first.verdict is verdict
    assert first.text.startswith(where), first.text
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 1
    assert len(relay.messages) == 1


def test_a_connection_lost_after_mail_was_accepted_is_this_messages_retry() -> None:
    relay = ScriptedRelay(answers=[Reply(b"250 ok\r\n", then="drop")])
    first, second = run_sends(relay, 2)
    assert first.verdict is Verdict.RETRY
    assert "before DATA" in first.text
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2  # the dropped connection is never reused


def test_a_refused_mail_then_a_lost_connection_is_still_the_refusal() -> None:
    relay = ScriptedRelay(answers=[Reply(b"421 closing\r\n", then="drop")])
    first, second = run_sends(relay, 2)
    assert (first.verdict, first.code) == (Verdict.RETRY, 421)
    assert first.text.startswith("MAIL")
    assert second.verdict is Verdict.SENT


def test_a_new_connection_dropped_before_any_reply_means_the_relay_is_unavailable() -> None:
    relay = ScriptedRelay(answers=[Reply(b"", then="drop")])

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
    relay = ScriptedRelay(answers=[Reply(answer)])
    first, second = run_sends(relay, 2)
    assert first.verdict is Verdict.RETRY
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2
    assert len(relay.messages) == 1


def test_a_reply_that_never_comes_is_a_retry_within_the_command_timeout() -> None:
    relay = ScriptedRelay(answers=[Reply(b"250 ok\r\n", then="hang")])
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


# ---------------------------------------------------------------- DATA in the group


def test_data_goes_with_mail_and_rcpt_and_the_message_only_on_deliver() -> None:
    """The relay reads MAIL, RCPT and DATA before it answers: had DATA waited for RCPT's
    reply, nothing would be answered. ``ready`` is then settled, and nothing of the message
    has gone out until ``deliver``."""
    relay = ScriptedRelay(answers=[], group=3)

    async def scenario(transport: SmtpTransport) -> object:
        prepared = await transport.prepare(envelope(1), with_ready=True)
        assert not isinstance(prepared, Outcome)
        readying = prepared.ready()
        assert readying is not None
        assert readying.done()
        assert readying.result() is None
        before = list(relay.messages)
        return (
            before,
            await prepared.deliver(datetime.now(UTC)),
            await send(transport, 2, with_ready=True),
        )

    result = asyncio.run(with_relay(relay, scenario))
    assert isinstance(result, tuple)
    before, first, second = result
    assert before == []
    assert (first.verdict, second.verdict) == (Verdict.SENT, Verdict.SENT)
    assert relay.transactions[0] == (
        b"MAIL FROM:<news@herald.test>",
        b"RCPT TO:<r1@example.com>",
        b"DATA",
    )
    assert relay.sessions == 1
    assert len(relay.messages) == 2


def test_a_relay_that_says_354_after_refusing_rcpt_is_left_at_once() -> None:
    """A relay that waits for a message after refusing its recipient would take a RSET as that
    message's text and never answer it: the connection is closed at once instead, without
    waiting out a command timeout, and the next message goes on a connection of its own."""
    relay = ScriptedRelay(
        answers=[Reply(b"250 ok\r\n550 no such user\r\n354 go ahead\r\n")], group=3
    )

    async def scenario(transport: SmtpTransport) -> object:
        started = time.monotonic()
        first = await send(transport, 1, with_ready=True)
        took = time.monotonic() - started
        return first, took, await send(transport, 2, with_ready=True)

    result = asyncio.run(with_relay(relay, scenario))
    assert isinstance(result, tuple)
    first, took, second = result
    assert first.verdict is Verdict.FAILED
    assert took < COMMAND_TIMEOUT
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2
    (message,) = relay.messages
    assert b"RSET" not in message
    assert b"Message-ID: <m2@herald.test>" in message


def test_a_connection_lost_before_the_data_reply_is_a_retry_before_data() -> None:
    relay = ScriptedRelay(answers=[Reply(b"250 ok\r\n250 ok\r\n", then="drop")], group=3)
    first, second = run_sends(relay, 2)
    assert first.verdict is Verdict.RETRY
    assert "before DATA" in first.text
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2


def test_abandoning_a_send_whose_data_was_answered_closes_the_connection() -> None:
    """T4 refused while the relay waits for the message: closing is the only way out."""
    relay = ScriptedRelay(answers=[], group=3)

    async def scenario(transport: SmtpTransport) -> object:
        prepared = await transport.prepare(envelope(1), with_ready=True)
        assert not isinstance(prepared, Outcome)
        await prepared.abandon()
        return list(transport._idle), await send(transport, 2, with_ready=True)

    result = asyncio.run(with_relay(relay, scenario))
    assert isinstance(result, tuple)
    idle_after_abandon, second = result
    assert idle_after_abandon == []
    assert second.verdict is Verdict.SENT
    assert relay.sessions == 2
    assert len(relay.messages) == 1


def test_over_tls_the_group_and_its_replies_cross_the_encrypted_transport() -> None:
    """The reader is lent to the TLS transport (implicit TLS): replies that arrive a byte per
    TLS record are read whole, and the connection carries the next message."""
    pair = tls_pair(trustme.CA(), "127.0.0.1")
    relay = ScriptedRelay(
        answers=[Reply(b"250 ok\r\n250 ok\r\n354 go ahead\r\n", trickle=True)], group=3
    )

    async def scenario(transport: SmtpTransport) -> object:
        return [await send(transport, n, with_ready=True) for n in (1, 2)]

    outcomes = asyncio.run(with_relay(relay, scenario, tls=(pair.server, pair.client)))
    assert isinstance(outcomes, list)
    assert [o.verdict for o in outcomes] == [Verdict.SENT] * 2
    assert relay.sessions == 1
    assert len(relay.messages) == 2


def test_pipelining_false_in_the_url_sends_one_command_at_a_time() -> None:
    """For a relay (or a middlebox inspecting SMTP) that offers PIPELINING and mishandles it:
    with ``pipelining=false`` the client waits for MAIL's reply before RCPT, so this relay,
    which answers only whole groups, never answers."""
    relay = ScriptedRelay(answers=[])

    async def scenario(transport: SmtpTransport) -> object:
        transport.config = dataclasses.replace(transport.config, pipelining=False)
        return await send(transport, 1, with_ready=True)

    outcome = asyncio.run(with_relay(relay, scenario))
    assert isinstance(outcome, Outcome)
    assert outcome.verdict is Verdict.RETRY
    assert relay.transactions == []


def test_closing_the_transport_closes_a_connection_left_waiting_in_data() -> None:
    """A send cancelled at a worker's shutdown (in T4, after DATA was answered) leaves its
    connection out of the pool, waiting for a message: ``aclose`` closes it all the same, and
    the relay delivers nothing."""
    relay = ScriptedRelay(answers=[], group=3)

    async def scenario(transport: SmtpTransport) -> object:
        prepared = await transport.prepare(envelope(1), with_ready=True)
        assert not isinstance(prepared, Outcome)
        client = prepared.client  # type: ignore[attr-defined]
        assert client.is_connected
        assert transport._idle == []
        await transport.aclose()
        return client.is_connected

    still_connected = asyncio.run(with_relay(relay, scenario))
    assert still_connected is False
    assert relay.messages == []
