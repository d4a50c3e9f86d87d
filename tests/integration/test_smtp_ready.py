"""The DATA command goes out while T4 commits; the message only after T4 has committed.

Against a real aiosmtpd server on 127.0.0.1 whose DATA command can be watched, refused or
dropped: ``ready`` (DATA, to its 354) delivers nothing, so the worker runs it beside T4 and its
round trip hides behind the commit. What must hold (dispatch/smtp.py, dispatch/job_send.py):
no byte of the message before T4 is durable; a T4 refused while the relay waits for the message
closes the connection (the relay then delivers nothing, and the session is never reused); a
DATA command refused or lost is definitive, never in doubt. The worker tests run on both
databases.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from aiosmtpd.smtp import SMTP, Envelope, Session
from hypothesis import given, settings
from sqlalchemy.engine import Engine

from dispatch.instrumentation import NullInstrumentation
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import State, is_valid_path
from dispatch.store import ClaimedJob, Lease, OutboxStore
from dispatch.transport import Outcome, PreparedSend, Verdict
from dispatch.worker import Worker
from herald.sink import BoundPortController, offering_pipelining
from tests.integration.test_smtp_pool import envelope
from tests.support.campaign_files import fast_config
from tests.support.examples import examples
from tests.support.factories import launch, write_yaml
from tests.support.hostile import MESSAGE_TEXT

DEADLINE = 10.0  # seconds: a wait that takes longer is a failure, not a hang
DROP = "drop"  # a DATA command answered by closing the connection


@dataclass
class DataDoor:
    """What the server's DATA commands met. ``answer(n)`` for the n-th DATA command: None lets
    it through (354, then the message), a reply line refuses it, ``DROP`` closes the
    connection. Written by the server's thread, read by the test's."""

    answer: Callable[[int], str | None] = lambda n: None
    commands: int = 0
    data_seen: threading.Event = field(default_factory=threading.Event)
    stored: list[tuple[bytes, float]] = field(default_factory=list)  # (message, arrived at)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def messages(self) -> list[bytes]:
        with self.lock:
            return [message for message, _ in self.stored]


@contextlib.contextmanager
def watched_server(watched: DataDoor, *, pipelining: bool = False) -> Iterator[int]:
    """A real aiosmtpd server whose DATA commands go through ``watched``; yields its port.
    With ``pipelining`` it offers PIPELINING (aiosmtpd reads commands in order either way)."""

    class Handler:
        async def handle_EHLO(
            self,
            server: SMTP,
            session: Session,
            envelope: Envelope,
            hostname: str,
            lines: list[str],
        ) -> list[str]:
            session.host_name = hostname
            return offering_pipelining(lines) if pipelining else lines

        async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
            with watched.lock:
                watched.stored.append((envelope.original_content or b"", time.monotonic()))
            return "250 stored"

    class WatchedSMTP(SMTP):
        async def smtp_DATA(self, arg: str) -> None:
            with watched.lock:
                watched.commands += 1
                answer = watched.answer(watched.commands)
            watched.data_seen.set()
            if answer == DROP:
                assert self.transport is not None
                self.transport.close()
            elif answer is not None:
                await self.push(answer)
            else:
                await super().smtp_DATA(arg)

    class Controller(BoundPortController):
        def factory(self) -> SMTP:
            return WatchedSMTP(self.handler)

    controller = Controller(Handler(), hostname="127.0.0.1", port=0)
    controller.start()
    try:
        yield controller.port
    finally:
        controller.stop()


@pytest.fixture
def door() -> Iterator[tuple[DataDoor, int]]:
    watched = DataDoor()
    with watched_server(watched) as port:
        yield watched, port


def transport_for(port: int) -> SmtpTransport:
    return SmtpTransport(SmtpConfig("127.0.0.1", port, command_timeout=DEADLINE))


async def prepared_then_ready(
    transport: SmtpTransport, n: int
) -> tuple[PreparedSend, Outcome | None]:
    """Message ``n`` prepared (MAIL, RCPT) and its DATA command answered."""
    prepared = await transport.prepare(envelope(n))
    assert not isinstance(prepared, Outcome)
    readying = prepared.ready()
    assert readying is not None
    return prepared, await readying


# ---------------------------------------------------------------- the transport alone


def test_ready_sends_the_data_command_and_nothing_of_the_message(
    door: tuple[DataDoor, int],
) -> None:
    watched, port = door

    async def scenario() -> tuple[Outcome | None, int, Outcome, int]:
        transport = transport_for(port)
        try:
            prepared, ready = await prepared_then_ready(transport, 1)
            stored_while_waiting = len(watched.messages())
            outcome = await prepared.deliver(datetime.now(UTC))
            return ready, stored_while_waiting, outcome, len(transport._idle)
        finally:
            await transport.aclose()

    ready, stored_while_waiting, outcome, pooled = asyncio.run(scenario())
    assert ready is None
    assert stored_while_waiting == 0
    assert outcome.verdict is Verdict.SENT
    assert watched.commands == 1  # deliver did not send DATA again
    assert len(watched.messages()) == 1
    assert pooled == 1


def test_abandoning_after_the_354_closes_the_connection_and_delivers_nothing(
    door: tuple[DataDoor, int],
) -> None:
    """The relay waits for the message: RSET would be read as message text, so the session
    is closed, never pooled; the next message goes out whole on a new one."""
    watched, port = door

    async def scenario() -> tuple[int, Outcome]:
        transport = transport_for(port)
        try:
            prepared, ready = await prepared_then_ready(transport, 1)
            assert ready is None
            await prepared.abandon()
            pooled = len(transport._idle)
            following = await transport.prepare(envelope(2))
            assert not isinstance(following, Outcome)
            return pooled, await following.deliver(datetime.now(UTC))
        finally:
            await transport.aclose()

    pooled, outcome = asyncio.run(scenario())
    assert pooled == 0
    assert outcome.verdict is Verdict.SENT
    (message,) = watched.messages()
    assert b"<m2@herald.test>" in message
    assert b"<m1@herald.test>" not in message


@pytest.mark.parametrize(
    ("reply", "verdict", "code"),
    [
        ("451 4.3.0 not now", Verdict.RETRY, 451),
        ("554 5.3.4 no thanks", Verdict.FAILED, 554),
        (DROP, Verdict.RETRY, None),
    ],
)
def test_a_data_command_refused_or_dropped_is_definitive_and_sends_nothing(
    door: tuple[DataDoor, int], reply: str, verdict: Verdict, code: int | None
) -> None:
    """Nothing of the message went out: a refusal is the reply's verdict and a lost
    connection a retry, never in doubt; ``deliver`` then returns that and sends nothing."""
    watched, port = door
    watched.answer = lambda n: reply

    async def scenario() -> tuple[Outcome | None, Outcome]:
        transport = transport_for(port)
        try:
            prepared, ready = await prepared_then_ready(transport, 1)
            return ready, await prepared.deliver(datetime.now(UTC))
        finally:
            await transport.aclose()

    ready, delivered = asyncio.run(scenario())
    assert ready is not None
    assert (ready.verdict, ready.code) == (verdict, code)
    assert delivered == ready
    assert "DATA" in ready.text
    assert watched.messages() == []


@settings(max_examples=examples(25))
@given(body=MESSAGE_TEXT)
def test_any_message_text_reaches_the_relay_byte_for_byte(body: bytes) -> None:
    """The message is written by our code now (after ``ready``'s 354), so its dot-stuffing is
    ours: whatever the text (dot lines, a lone ``.``, CR and LF alone, the end marker itself),
    the relay stores exactly the bytes signed and dated for this attempt, and nothing more."""
    watched = DataDoor()
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    payload = b"Message-ID: <m1@herald.test>\r\nSubject: hi\r\n\r\n" + body
    letter = dataclasses.replace(envelope(1), payload=payload)

    async def scenario(port: int) -> tuple[Outcome, bytes]:
        transport = transport_for(port)
        try:
            prepared = await transport.prepare(letter)
            assert not isinstance(prepared, Outcome)
            return await prepared.deliver(at), transport.final_bytes(letter, at)
        finally:
            await transport.aclose()

    with watched_server(watched) as port:
        outcome, sent = asyncio.run(scenario(port))
    assert outcome.verdict is Verdict.SENT
    assert watched.messages() == [sent]


# ---------------------------------------------------------------- in the worker

CAMPAIGN = """\
name: {name}
from: news@herald.test
audience: [{audience}]
max_attempts: 3
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""


def launch_campaign(engine: Engine, folder: Path, name: str, *recipients: str) -> None:
    text = CAMPAIGN.format(name=name, audience=", ".join(recipients))
    assert launch(engine, write_yaml(folder / name, text)).new_jobs == len(recipients)


def run(engine: Engine, port: int, watch: NullInstrumentation, **config: Any) -> Worker:
    worker = Worker(
        engine, {"email": transport_for(port)}, fast_config(**config), instrumentation=watch
    )
    asyncio.run(worker.run())
    return worker


def jobs_and_paths(engine: Engine) -> list[tuple[Any, list[tuple[str | None, str]]]]:
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        rows = sorted((r for s in State for r in store.jobs_in_state(conn, s)), key=lambda r: r.id)
        return [(r, [(e.from_state, e.to_state) for e in store.events(conn, [r.id])]) for r in rows]


class HoldT4UntilData(NullInstrumentation):
    """Holds T4's open transaction until the relay has seen the DATA command (or a deadline)."""

    def __init__(self, watched: DataDoor) -> None:
        self.watched = watched
        self.overlapped: list[bool] = []
        self.released_at = 0.0

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        self.overlapped.append(self.watched.data_seen.wait(DEADLINE))
        self.released_at = time.monotonic()


def test_the_data_command_goes_out_while_t4_commits_and_the_message_after(
    tmp_path: Path, engine: Engine, door: tuple[DataDoor, int]
) -> None:
    """A worker that sent DATA only after T4 would leave the relay without a DATA command for
    as long as T4's transaction is held: ``overlapped`` would be False."""
    watched, port = door
    launch_campaign(engine, tmp_path, "overlap", "ada@example.com")
    hold = HoldT4UntilData(watched)

    worker = run(engine, port, hold)

    assert hold.overlapped == [True]
    ((message, arrived_at),) = watched.stored
    assert b"Hello there" in message
    assert arrived_at > hold.released_at  # the message only once T4 could have committed
    assert worker.report.sent == 1
    ((job, path),) = jobs_and_paths(engine)
    assert job.state == "sent"
    assert path[-2:] == [("claimed", "sending"), ("sending", "sent")]


class CancelWhileTheRelayWaits(NullInstrumentation):
    """Before the first T4: waits until the relay has seen DATA, then cancels that job's
    campaign, so its T4 is refused while the relay waits for the message."""

    def __init__(self, engine: Engine, watched: DataDoor) -> None:
        self.engine = engine
        self.watched = watched
        self.cancelled: str | None = None

    async def before_t4(self, job: ClaimedJob) -> None:
        if self.cancelled is None:
            self.cancelled = job.campaign
            assert await asyncio.to_thread(self.watched.data_seen.wait, DEADLINE)
            await asyncio.to_thread(self._cancel, job.campaign)

    def _cancel(self, campaign: str) -> None:
        with self.engine.begin() as conn:
            OutboxStore(self.engine.dialect.name).cancel_campaign(conn, campaign, actor="test")


def test_a_t4_refused_while_the_relay_waits_for_the_message_closes_the_connection(
    tmp_path: Path, engine: Engine, door: tuple[DataDoor, int]
) -> None:
    """One connection (concurrency 1) for two jobs: had the session been reset and pooled in
    the middle of DATA, the second job's commands would become the first one's message text."""
    watched, port = door
    launch_campaign(engine, tmp_path, "first", "ada@example.com")
    launch_campaign(engine, tmp_path, "second", "bob@example.com")
    cancel = CancelWhileTheRelayWaits(engine, watched)

    worker = run(engine, port, cancel, concurrency=1)

    rows = jobs_and_paths(engine)
    by_state = {job.state: job for job, _ in rows}
    assert sorted(by_state) == ["cancelled", "sent"]
    assert by_state["cancelled"].campaign == cancel.cancelled
    (message,) = watched.messages()
    assert by_state["sent"].message_id.encode() in message
    assert by_state["cancelled"].message_id.encode() not in message
    assert watched.commands == 2  # one DATA each; the refused one's session was not reused
    assert worker.report.sent == 1
    assert all(is_valid_path(path) for _, path in rows)


@pytest.mark.parametrize(
    ("first", "state", "tail"),
    [
        ("554 5.3.4 no thanks", "failed", [("claimed", "sending"), ("sending", "failed")]),
        ("451 4.3.0 not now", "sent", [("sending", "pending"), ("pending", "claimed")]),
        (DROP, "sent", [("sending", "pending"), ("pending", "claimed")]),
    ],
)
def test_a_data_command_refused_after_t4_is_recorded_as_refused_never_in_doubt(
    tmp_path: Path,
    engine: Engine,
    door: tuple[DataDoor, int],
    first: str,
    state: str,
    tail: list[Any],
) -> None:
    """T4 committed beside the DATA command, so its refusal comes after T4: sending → failed
    or pending (T7f/T7), with the reply; a connection lost there retries the job."""
    watched, port = door
    watched.answer = lambda n: first if n == 1 else None
    launch_campaign(engine, tmp_path, "refused", "ada@example.com")

    run(engine, port, NullInstrumentation())

    ((job, path),) = jobs_and_paths(engine)
    assert job.state == state
    assert "in_doubt" not in {to for _, to in path}
    assert all(edge in path for edge in tail)
    assert is_valid_path(path)
    assert len(watched.messages()) == (1 if state == "sent" else 0)
    if first != DROP:
        with engine.connect() as conn:
            texts = conn.execute(sa.text("SELECT detail FROM send_event")).scalars()
            assert any(first.split(" ", 1)[1] in (text or "") for text in texts)
