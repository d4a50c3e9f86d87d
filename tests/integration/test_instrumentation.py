"""The instrumentation seam: a worker announces each named point of a send, in order, and
``before_t4_commit`` runs inside T4's transaction (nothing of it is visible yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.instrumentation import NullInstrumentation
from dispatch.models import rate_limit, send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import ClaimedJob, Lease
from dispatch.transport import Envelope
from dispatch.worker import Worker, WorkerConfig
from scheduler.fanout import materialise
from tests.support.campaign_files import fast_config
from tests.support.smtp_server import LedgerSMTPServer

ONE = """\
name: watched
from: news@herald.test
audience: [alice@example.com]
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""


class Recorder(NullInstrumentation):
    def __init__(self, engine: Engine) -> None:
        # A plain engine: Herald's SQLite engine begins IMMEDIATE, which would wait for T4.
        self.reader = sa.create_engine(engine.url)
        self.events: list[str] = []
        self.state_seen_before_t4_commit: list[str] = []

    async def after_claim_commit(self, jobs: Sequence[ClaimedJob]) -> None:
        self.events.append(f"after_claim_commit:{len(jobs)}")

    async def after_rcpt(self, job: ClaimedJob) -> None:
        self.events.append("after_rcpt")

    async def before_t4(self, job: ClaimedJob) -> None:
        self.events.append("before_t4")

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        self.events.append(f"before_t4_commit:{len(leases)}")
        # Another connection still sees the row as it was: T4 has not committed yet.
        with self.reader.connect() as conn:
            self.state_seen_before_t4_commit.append(
                conn.execute(sa.select(send_job.c.state)).scalar_one()
            )

    async def after_t4_commit(self, job: ClaimedJob) -> None:
        self.events.append("after_t4_commit")

    def after_data_write(self, envelope: Envelope) -> None:
        self.events.append("after_data_write")

    async def after_250_before_t5(self, job: ClaimedJob) -> None:
        self.events.append("after_250_before_t5")

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        self.events.append("after_t5_commit")


# The door to the wire: RCPT, then T4 committed, before any byte of DATA.
DOOR = [
    "after_claim_commit:1",
    "after_rcpt",
    "before_t4",
    "before_t4_commit:1",
    "after_t4_commit",
    "after_data_write",
    "after_250_before_t5",
    "after_t5_commit",
]


def send_one(
    tmp_path: Path,
    engine: Engine,
    smtp_server: LedgerSMTPServer,
    recorder: Recorder,
    config: WorkerConfig,
) -> None:
    """Launch the one-recipient campaign and send it through a real worker and transport."""
    (tmp_path / "c.yaml").write_text(ONE)
    loaded = load_campaign(tmp_path / "c.yaml")
    materialise(
        engine, loaded, register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    )
    smtp = SmtpConfig(smtp_server.host, smtp_server.port, data_timeout=10)
    transport = SmtpTransport(smtp, instrumentation=recorder)
    worker = Worker(engine, {"email": transport}, config, instrumentation=recorder)
    try:
        assert asyncio.run(worker.run()).sent == 1
    finally:
        recorder.reader.dispose()


def test_a_send_passes_every_named_point_in_order(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    recorder = Recorder(engine)
    send_one(tmp_path, engine, smtp_server, recorder, fast_config())
    assert recorder.events == DOOR
    assert recorder.state_seen_before_t4_commit == ["claimed"]


class CellRecorder(Recorder):
    """Also notes, inside T4's transaction, whether another connection sees the slot taken."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.tat_seen_before_t4_commit: list[object] = []

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        super().before_t4_commit(leases)
        with self.reader.connect() as conn:
            self.tat_seen_before_t4_commit.append(
                conn.execute(
                    sa.select(rate_limit.c.tat).where(rate_limit.c.key == "domain:example.com")
                ).scalar_one()
            )


def test_a_rate_limited_send_takes_its_slot_in_t4s_transaction_and_data_follows_it(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    recorder = CellRecorder(engine)
    send_one(
        tmp_path, engine, smtp_server, recorder, fast_config(domain_rates={"example.com": 5.0})
    )
    # The same door: RCPT, then T4 (with the slot), committed before any byte of DATA.
    assert recorder.events == DOOR
    # Inside T4's transaction neither the T4 nor the slot is visible: they commit as one.
    assert recorder.state_seen_before_t4_commit == ["claimed"]
    assert recorder.tat_seen_before_t4_commit == [None]
    with engine.connect() as conn:
        tat = conn.execute(
            sa.select(rate_limit.c.tat).where(rate_limit.c.key == "domain:example.com")
        ).scalar_one()
        started = conn.execute(sa.select(send_job.c.send_started_at)).scalar_one()
    assert tat is not None
    # The slot's moment (TAT minus one interval) is T4's: the same instant on PostgreSQL (one
    # transaction, one now()); SQLite reads its clock per statement, so the slot may come a
    # few milliseconds before T4's stamp, the write lock held in between.
    granted = tat.timestamp() - 1 / 5
    assert started.timestamp() - granted + 1e-3 >= 0
    assert started.timestamp() - granted < 0.5
