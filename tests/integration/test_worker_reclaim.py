"""A job claimed again while the send of its earlier claim is still finishing, through a real
SMTP server, on SQLite and PostgreSQL.

A claim refused its rate-limit slot at T4 is handed back (W3) in T4's own transaction, and its
send then resets its SMTP transaction (RSET): a round trip. If the job's slot comes meanwhile,
the dispatch loop claims it again and starts a second send of the same job. The first send's
clean-up must touch only its own claim: dropping "job 7" instead of "job 7's first claim" took
the new claim's lease, rate-limit keys and concurrency slot, so the new send went out
without a slot (found as a rate test that failed under load: 12 sends in 1.85 s at 4/s).

Here the first send's reset is held until the second claim's send has RCPT accepted, so the
clean-up always comes between that claim's admission and its T4.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.instrumentation import NullInstrumentation
from dispatch.models import rate_limit, send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import ClaimedJob, OutboxStore
from dispatch.transport import Envelope, Outcome, PreparedSend
from dispatch.worker import Worker
from tests.integration.test_worker_rates import campaign, sent_rows
from tests.support.campaign_files import fast_config
from tests.support.factories import launch
from tests.support.smtp_server import LedgerSMTPServer

DEADLINE = 20.0  # seconds: a step that never comes fails the test instead of hanging it
KEY = "campaign:reclaimed"
# How far ahead the test runs the cell just before the first T4: that T4 is refused however
# slow the machine, and the refusal tells the worker its slot is this far away, so the job's
# next claim is admitted that much later, while the first send's reset is still held.
AHEAD = timedelta(seconds=3)


class Slots:
    """The test's hand on the campaign's rate cell and the job's due moment (the database's
    clock), so that which claim is refused does not depend on how fast this machine is."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = OutboxStore(engine.dialect.name)
        self.freed_at: datetime | None = None

    def take_the_next_seconds(self) -> None:
        with self.engine.begin() as conn:
            later = self.store.database_now(conn) + AHEAD
            conn.execute(sa.update(rate_limit).where(rate_limit.c.key == KEY).values(tat=later))

    def free_now(self) -> None:
        """The slot is free again and the handed-back job due: the dispatch loop claims it."""
        with self.engine.begin() as conn:
            self.freed_at = self.store.database_now(conn)
            conn.execute(sa.update(rate_limit).where(rate_limit.c.key == KEY).values(tat=None))
            conn.execute(sa.update(send_job).values(not_before=self.freed_at))


class HeldReset:
    """A prepared send whose ``abandon`` (the RSET after a refused T4) frees the slot, then
    waits until the job's next claim has RCPT accepted."""

    def __init__(self, inner: PreparedSend, watch: Watch) -> None:
        self.inner = inner
        self.watch = watch

    def ready(self) -> asyncio.Future[Outcome | None] | None:
        return self.inner.ready()

    async def deliver(self, started_at: datetime) -> Outcome:
        return await self.inner.deliver(started_at)

    async def abandon(self) -> None:
        self.watch.first_abandoned = True
        await asyncio.to_thread(self.watch.slots.free_now)
        await asyncio.wait_for(self.watch.second_at_rcpt.wait(), DEADLINE)
        await self.inner.abandon()
        self.watch.first_done.set()  # this claim's clean-up runs next, without a yield


class HoldingTransport:
    def __init__(self, inner: SmtpTransport, watch: Watch) -> None:
        self.inner = inner
        self.watch = watch

    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        prepared = await self.inner.prepare(envelope, with_ready=with_ready)
        if isinstance(prepared, Outcome) or self.watch.first_abandoned:
            return prepared
        return HeldReset(prepared, self.watch)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Watch(NullInstrumentation):
    """Takes the slot away just before the first claim's T4; lets the second claim's send go
    on to its T4 only after the first one's clean-up ran, and records whether the worker still
    held the second claim's lease then."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.worker: Worker | None = None
        self.tokens: list[int] = []
        self.first_abandoned = False
        self.second_at_rcpt = asyncio.Event()
        self.first_done = asyncio.Event()
        self.held_at_t4: list[bool] = []

    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        self.tokens += [job.token for job in jobs]

    async def after_rcpt(self, job: ClaimedJob) -> None:
        if not self.first_abandoned:
            return
        self.second_at_rcpt.set()
        await asyncio.wait_for(self.first_done.wait(), DEADLINE)
        await asyncio.sleep(0)  # the first send's task finishes (its clean-up) first

    async def before_t4(self, job: ClaimedJob) -> None:
        if not self.first_abandoned:
            await asyncio.to_thread(self.slots.take_the_next_seconds)

    async def after_t4_commit(self, job: ClaimedJob) -> None:
        assert self.worker is not None
        self.held_at_t4.append(self.worker.leases.holds(job.lease))


def test_the_clean_up_of_an_earlier_claim_leaves_the_new_claim_of_its_job_alone(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, campaign(tmp_path / "reclaimed", ["r@example.com"], "1/s")).new_jobs
    slots = Slots(engine)
    watch = Watch(slots)
    transport = HoldingTransport(
        SmtpTransport(SmtpConfig(host=smtp_server.host, port=smtp_server.port)), watch
    )
    config = fast_config(concurrency=5)
    worker = Worker(engine, {"email": transport}, config, instrumentation=watch)
    watch.worker = worker
    asyncio.run(worker.run())

    assert watch.first_abandoned
    assert watch.first_done.is_set()
    assert len(sent_rows(engine)) == 1
    assert len(smtp_server.accepted_ids()) == 1
    # Refused at T4 once; claims of it before the slot the refusal named go back at once.
    assert worker.report.rate_limited >= 1
    assert len(set(watch.tokens)) == len(watch.tokens)  # each claim its own token
    # The second claim kept its lease through the first one's clean-up...
    assert watch.held_at_t4 == [True]
    # ...and took its slot at T4: the cell, freed, moved one interval (1 s) on.
    with engine.connect() as conn:
        tat = conn.scalar(sa.select(rate_limit.c.tat).where(rate_limit.c.key == KEY))
    assert slots.freed_at is not None
    assert tat is not None
    assert tat >= slots.freed_at + timedelta(seconds=1.0 - 0.01)
