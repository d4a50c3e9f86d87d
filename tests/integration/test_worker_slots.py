"""The worker's ``concurrency`` counts sends on the wire: a send whose reply to DATA is in gives
its slot to the next one while its outcome (T5) is still being committed, and no more than
``concurrency`` sends are ever between their RCPT and their reply to DATA. A slot freed while
the worker waits for a claim's commit goes to the next job of the backlog at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.engine import Engine

from dispatch.committer import GroupCommitter
from dispatch.instrumentation import NullInstrumentation
from dispatch.outbox_client import OutboxClient
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import State
from dispatch.store import ClaimedJob, Lease, OutboxStore
from dispatch.worker import Worker
from tests.support.campaign_files import fast_config, run_worker
from tests.support.factories import launch, write_yaml
from tests.support.smtp_server import LedgerSMTPServer

THREE = """\
name: slots
from: news@herald.test
audience: [a@example.com, b@example.com, c@example.com]
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""

# A deadline, not a pause: the wait ends as soon as the next send's RCPT is accepted.
NEXT_SEND_DEADLINE = 20.0


class HoldOutcomeUntilNextRcpt(NullInstrumentation):
    """Holds each send (but the last) between its 250 and its T5 until another send's RCPT
    has been accepted, and counts the sends between RCPT and the reply to DATA."""

    def __init__(self, sends: int) -> None:
        self.sends = sends
        self.replied = 0
        self.on_wire = 0
        self.most_on_wire = 0
        self.missed = 0  # holds that met their deadline: no other send started meanwhile
        self.next_rcpt = asyncio.Event()

    async def after_rcpt(self, job: ClaimedJob) -> None:
        self.on_wire += 1
        self.most_on_wire = max(self.most_on_wire, self.on_wire)
        self.next_rcpt.set()

    async def after_250_before_t5(self, job: ClaimedJob) -> None:
        self.on_wire -= 1
        self.replied += 1
        if self.replied == self.sends:
            return  # the last send: nobody is left to take its slot
        self.next_rcpt.clear()
        try:
            await asyncio.wait_for(self.next_rcpt.wait(), NEXT_SEND_DEADLINE)
        except TimeoutError:
            self.missed += 1


def test_a_send_whose_outcome_is_being_committed_holds_no_slot(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, write_yaml(tmp_path / "c", THREE)).new_jobs == 3
    watch = HoldOutcomeUntilNextRcpt(sends=3)

    report = run_worker(
        engine,
        smtp_server.host,
        smtp_server.port,
        config=fast_config(concurrency=1),
        instrumentation=watch,
    )

    # With the slot held through T5, the next send could not start while this one waited.
    assert watch.missed == 0
    assert watch.most_on_wire == 1  # yet never two sends on the wire with concurrency 1
    assert report.sent == 3
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        sent = store.jobs_in_state(conn, State.SENT)
    assert sorted(smtp_server.accepted_ids()) == sorted(job.message_id for job in sent)


# Enough jobs that a claim made while the backlog holds jobs surely comes up: with twelve, a
# loaded machine sometimes drained them without one (3 of 8 runs at load 14).
MANY = 48
BACKLOG = THREE.replace(
    "audience: [a@example.com, b@example.com, c@example.com]",
    "audience: [" + ", ".join(f"r{i}@example.com" for i in range(MANY)) + "]",
)


class NewSendWatch(NullInstrumentation):
    """Tells a waiting claim when a send that was not on the wire when the claim began has its
    RCPT accepted."""

    def __init__(self) -> None:
        self.on_wire_before: set[Lease] = set()
        self.new_send = asyncio.Event()

    async def after_rcpt(self, job: ClaimedJob) -> None:
        if job.lease not in self.on_wire_before:
            self.new_send.set()


class ClaimsWaitForANewSend(OutboxClient):
    """A claim made while the backlog holds jobs is held until a new send has started (or a
    deadline passes: then it counts as missed). A worker that refills slots only between
    claims starts nothing meanwhile."""

    def __init__(self, committer: GroupCommitter, worker: Worker, watch: NewSendWatch) -> None:
        super().__init__(committer)
        self.worker = worker
        self.watch = watch
        self.held = 0
        self.missed = 0

    async def claim(self, limit: int) -> list[ClaimedJob]:
        if self.worker._backlog and self.held < 3:
            self.held += 1
            self.watch.on_wire_before = set(self.worker.sender._on_wire)
            self.watch.new_send.clear()
            try:
                await asyncio.wait_for(self.watch.new_send.wait(), NEXT_SEND_DEADLINE)
            except TimeoutError:
                self.missed += 1
        return await super().claim(limit)


def test_a_slot_freed_while_a_claim_commits_goes_to_the_backlog_at_once(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, write_yaml(tmp_path / "c", BACKLOG)).new_jobs == MANY
    watch = NewSendWatch()
    transport = SmtpTransport(
        SmtpConfig(host=smtp_server.host, port=smtp_server.port, command_timeout=10)
    )
    worker = Worker(engine, {"email": transport}, fast_config(concurrency=2), instrumentation=watch)
    claims = ClaimsWaitForANewSend(worker.committer, worker, watch)
    worker.outbox = claims
    report = asyncio.run(worker.run())
    assert report.sent == MANY
    assert claims.held > 0  # the situation arose
    # Each time, a send that left the wire gave its slot to the backlog while the claim was
    # still out: the relay connection did not idle until the claim's commit came back.
    assert claims.missed == 0
