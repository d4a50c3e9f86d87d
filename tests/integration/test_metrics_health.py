"""The metrics' parts on both databases: the outbox collector (jobs by state, in doubt, the
oldest lease, relays, its cache), the worker's observer as a real worker run calls it
(recoveries, a relay found down), ``/readyz`` and ``/metrics`` of ``herald serve``'s app when
the database is gone. The processes' HTTP side: tests/processes/test_metrics_processes.py."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.models import send_job
from dispatch.outbox.jobs import RecoveryReport
from dispatch.store import OutboxStore
from herald.app.worker import RelayDown, WorkerOptions, build_worker, run_worker
from herald.db import create_engine
from herald.mail_settings import MailSettings
from herald.metrics import ProcessMetrics
from herald.metrics_outbox import OutboxCollector
from herald.serve.app import build_app
from scheduler.fanout import materialise
from tests.support.campaign_files import fast_config, write_campaign
from tests.support.campaign_files import run_worker as run_test_worker
from tests.support.metrics_scrape import Scrape, parse
from tests.support.smtp_server import LedgerSMTPServer

RECIPIENTS = 5
JOBS = RECIPIENTS * 3


def launched(engine: Engine, tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    loaded = load_campaign(path)
    at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    assert materialise(engine, loaded, at).new_jobs == JOBS


def scraped(metrics: ProcessMetrics) -> Scrape:
    return parse(generate_latest(metrics.registry).decode())


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_collector_reads_jobs_by_state_and_the_oldest_lease(
    engine: Engine, tmp_path: Path
) -> None:
    ticks = Ticks()
    hour_later = lambda: datetime.now(UTC) + timedelta(hours=1)  # noqa: E731
    collector = OutboxCollector(engine, clock=hour_later, cache_seconds=5.0, monotonic=ticks)
    metrics = ProcessMetrics()
    metrics.registry.register(collector)

    empty = scraped(metrics)
    assert empty.value("herald_database_up") == 1
    assert empty.values("herald_jobs") == {}
    assert empty.value("herald_jobs_in_doubt") == 0
    assert empty.value("herald_lease_oldest_age_seconds") == 0

    launched(engine, tmp_path)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        claimed = store.claim(conn, owner="held", limit=4, lease_seconds=600)
    assert len(claimed) == 4
    cached = scraped(metrics)
    assert cached.values("herald_jobs") == {}  # within the cache's 5 s: the old reading

    ticks.now += 5.0
    fresh = scraped(metrics)
    assert fresh.value("herald_jobs", campaign="onboarding", state="pending") == JOBS - 4
    assert fresh.value("herald_jobs", campaign="onboarding", state="claimed") == 4
    for state in ("sending", "sent", "failed", "cancelled", "in_doubt"):
        assert fresh.value("herald_jobs", campaign="onboarding", state=state) == 0
    # Claimed moments ago, read on a clock an hour ahead: about an hour old.
    age = fresh.value("herald_lease_oldest_age_seconds") or 0
    assert 3500 < age < 3700

    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job).where(send_job.c.id == claimed[0].id).values(state="in_doubt")
        )
    ticks.now += 5.0
    assert scraped(metrics).value("herald_jobs_in_doubt") == 1


def test_a_database_that_does_not_answer_is_database_up_0_and_not_ready(
    tmp_path: Path, refused_port: int
) -> None:
    gone = create_engine(
        f"postgresql://herald@127.0.0.1:{refused_port}/herald", connect_args={"connect_timeout": 2}
    )
    metrics = ProcessMetrics(gone)
    down = scraped(metrics)
    assert down.value("herald_database_up") == 0
    assert down.values("herald_jobs") == {}  # absent, not a misleading 0

    settings = MailSettings.from_env({"HERALD_SIGNING_KEYS": "k1:a-secret-of-16-chars"})
    app = build_app(gone, settings)

    async def ask() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://herald") as client:
            return (
                await client.get("/readyz"),
                await client.get("/metrics"),
                await client.get("/healthz"),
            )

    ready, exposition, alive = asyncio.run(ask())
    gone.dispose()
    assert ready.status_code == 503
    assert ready.text.startswith("not ready: database not answering")
    assert "\n" not in ready.text.strip()
    assert exposition.status_code == 200
    assert parse(exposition.text).value("herald_database_up") == 0
    assert alive.status_code == 200  # alive all the same: the process is fine


def test_recoveries_and_outcomes_are_counted_as_a_worker_runs(
    engine: Engine, tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    launched(engine, tmp_path)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:  # a worker that died holding three claims
        assert len(store.claim(conn, owner="dead", limit=3, lease_seconds=0.2)) == 3
    deadline = time.monotonic() + 30
    while True:  # until the database's clock has seen the leases expire
        with engine.connect() as conn:
            expired = conn.scalar(
                sa.select(sa.func.count())
                .select_from(send_job)
                .where(send_job.c.lease_expires_at < sa.func.current_timestamp())
            )
        if expired == 3:
            break
        assert time.monotonic() < deadline, "the leases never expired"
        time.sleep(0.1)  # polling the database, not a verdict
    metrics = ProcessMetrics(engine, worker=True)
    assert metrics.worker is not None
    report = run_test_worker(
        engine, smtp_server.host, smtp_server.port, config=fast_config(), observer=metrics.worker
    )
    assert report.sent == JOBS
    got = scraped(metrics)
    assert got.value("herald_recoveries_total", category="released") == 3
    assert got.value("herald_recoveries_total", category="dead") == 0
    assert got.value("herald_sends_total", outcome="sent") == JOBS
    assert got.value("herald_smtp_send_seconds_count") == JOBS
    assert got.value("herald_claim_batch_size_sum") == JOBS  # the three again, and the rest


def test_a_relay_found_down_is_relay_up_0_here_and_unreachable_in_the_database(
    engine: Engine, tmp_path: Path, refused_port: int
) -> None:
    launched(engine, tmp_path)
    metrics = ProcessMetrics(engine, worker=True, cache_seconds=0)
    options = WorkerOptions(until_idle=True, poll=0.05)
    worker = build_worker(
        engine, f"smtp://127.0.0.1:{refused_port}", options, environ={}, observer=metrics.worker
    )
    with pytest.raises(RelayDown):
        run_worker(worker)
    got = scraped(metrics)
    relays = got.values("herald_relay_up")
    assert list(relays.values()) == [0.0], relays
    (labels,) = relays
    assert got.value("herald_relay_reachable", **dict(labels)) == 0
    assert got.value("herald_sends_total", outcome="sent") == 0
    assert got.value("herald_jobs", campaign="onboarding", state="pending") == JOBS


def test_the_worker_observer_counts_each_recovery_category() -> None:
    metrics = ProcessMetrics(worker=True)
    assert metrics.worker is not None
    metrics.worker.on_recovery(RecoveryReport(released=2, in_doubt=1, dead=3))
    metrics.worker.on_recovery(RecoveryReport())
    metrics.worker.on_claim_batch(7)
    metrics.worker.on_outcome("retry")
    got = scraped(metrics)
    assert got.value("herald_recoveries_total", category="released") == 2
    assert got.value("herald_recoveries_total", category="in_doubt") == 1
    assert got.value("herald_recoveries_total", category="dead") == 3
    assert got.value("herald_claim_batch_size_bucket", le="5.0") == 0
    assert got.value("herald_claim_batch_size_bucket", le="10.0") == 1
    assert got.value("herald_sends_total", outcome="retry") == 1
    assert "herald_database_up" not in got.types  # no engine: no database gauges
