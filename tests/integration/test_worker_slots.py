"""The worker's ``concurrency`` counts sends on the wire: a send whose reply to DATA is in gives
its slot to the next one while its outcome (T5) is still being committed, and no more than
``concurrency`` sends are ever between their RCPT and their reply to DATA."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.engine import Engine

from dispatch.instrumentation import NullInstrumentation
from dispatch.states import State
from dispatch.store import ClaimedJob, OutboxStore
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
