"""A T4 that takes a rate-limit slot (dispatch.rate_gate's ``SlotThenStart``) and whose commit
outcome is unknown: the worker re-reads the row, and a job it finds handed back (refused a
slot, W3 committed with its token) is treated as a refusal that was answered: nothing sent,
no longer held, and counted in the worker's report like any other hand-back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import rate_limit, send_job
from dispatch.rate_requests import SlotThenStart
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.worker import Worker
from tests.integration.test_db_faults import inject, launch
from tests.support.campaign_files import fast_config
from tests.support.smtp_server import LedgerSMTPServer

DOMAIN_KEY = "domain:example.com"
PER_SECOND = 1 / 3600  # a burst of one, then an hour


def test_a_slot_refusal_found_by_the_re_read_is_counted_and_nothing_is_sent(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")  # three recipients at example.com
    # Another worker took the domain's slot: the cell is dry for an hour. This worker does not
    # know it, so it lets a burst's worth (one job) wait for T4, which is refused there.
    with engine.begin() as conn:
        conn.execute(
            sa.insert(rate_limit).values(
                key=DOMAIN_KEY,
                per_second=PER_SECOND,
                factor=1.0,
                tat=datetime.now(UTC) + timedelta(hours=1),
            )
        )
    transport = SmtpTransport(SmtpConfig(smtp_server.host, smtp_server.port, data_timeout=10))
    config = fast_config(concurrency=3, domain_rates={"example.com": PER_SECOND})
    worker = Worker(engine, {"email": transport}, config)
    hits = inject(worker.committer, SlotThenStart, times=1, after_commit=True)
    report = asyncio.run(worker.run())

    assert hits["count"] == 1, "the fault was never injected"
    assert smtp_server.accepted_ids() == []
    with engine.connect() as conn:
        rows = conn.execute(sa.select(send_job.c.state, send_job.c.claims)).all()
    assert sorted(rows) == [("pending", 0)] * 3  # every claim handed back, none counted
    # Two handed back at the claim (the worker's own estimate), one refused at T4 and learnt
    # from the re-read: all three are in the report.
    assert report.rate_limited == 3
    assert report.lost_leases == 0
