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
from dispatch.models import send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import ClaimedJob, Lease
from dispatch.transport import Envelope
from dispatch.worker import Worker
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


def test_a_send_passes_every_named_point_in_order(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    (tmp_path / "c.yaml").write_text(ONE)
    loaded = load_campaign(tmp_path / "c.yaml")
    materialise(
        engine, loaded, register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    )
    recorder = Recorder(engine)
    config = SmtpConfig(smtp_server.host, smtp_server.port, data_timeout=10)
    transport = SmtpTransport(config, instrumentation=recorder)
    worker = Worker(engine, {"email": transport}, fast_config(), instrumentation=recorder)

    try:
        assert asyncio.run(worker.run()).sent == 1
    finally:
        recorder.reader.dispose()
    assert recorder.events == [
        "after_claim_commit:1",
        "after_rcpt",
        "before_t4",
        "before_t4_commit:1",
        "after_t4_commit",
        "after_data_write",
        "after_250_before_t5",
        "after_t5_commit",
    ]
    assert recorder.state_seen_before_t4_commit == ["claimed"]
