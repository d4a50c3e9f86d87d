"""Herald's drain throughput with a no-op transport: claim → T4 → T5 for every job.

Jobs are enqueued directly with ``OutboxStore.enqueue`` (batches of 1,000, tiny payload), then a
real ``dispatch.worker.Worker`` runs with ``until_idle`` until the outbox is drained. Every job
still crosses three guarded UPDATEs with a journal row each; only the network is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from bench.cpu import CpuUse, cpu_meter
from bench.databases import postgres_database
from bench.held import HERALD_EVENTS, most_at_once
from dispatch.committer import CommitterStats
from dispatch.store import NewJob, OutboxStore
from dispatch.transport import Envelope, Outcome, PreparedSend, Transport, Verdict
from dispatch.worker import Worker, WorkerConfig, WorkerReport
from herald.db import create_engine

ENQUEUE_BATCH = 1_000
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # due long ago: every job is claimable at once
SENT = Outcome(Verdict.SENT, 250, "ok")


class NoopSend:
    def ready(self) -> asyncio.Future[Outcome | None] | None:
        return None

    async def deliver(self, started_at: datetime) -> Outcome:
        return SENT

    async def abandon(self) -> None:
        return None


class NoopTransport:
    """A transport that accepts everything at once: measures Herald, not a network."""

    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        return NoopSend()

    async def aclose(self) -> None:
        return None


def bench_jobs(count: int, *, campaign: str = "bench", start: int = 0) -> Iterator[NewJob]:
    for i in range(start, start + count):
        key = hashlib.sha256(f"{campaign}/{i}".encode()).hexdigest()
        yield NewJob(
            key=key,
            key_tuple=f'["{campaign}","s","{EPOCH.isoformat()}","u{i}@bench.test"]',
            campaign=campaign,
            step="s",
            occurrence_at=EPOCH,
            channel="email",
            sender="bench@herald.test",
            recipient=f"u{i}@bench.test",
            message_id=f"<{i:032d}@herald.test>",
            payload=b"x",
            not_before=EPOCH,
        )


def enqueue(engine: Engine, jobs: Iterator[NewJob], batch_size: int = ENQUEUE_BATCH) -> int:
    """T1 in batches, one transaction each; returns how many rows were new."""
    store = OutboxStore(engine.dialect.name)
    created = 0
    batch: list[NewJob] = []
    for job in jobs:
        batch.append(job)
        if len(batch) == batch_size:
            created += _enqueue_batch(engine, store, batch)
            batch = []
    if batch:
        created += _enqueue_batch(engine, store, batch)
    return created


def _enqueue_batch(engine: Engine, store: OutboxStore, batch: list[NewJob]) -> int:
    with engine.begin() as conn:
        return store.enqueue(conn, batch)


@dataclass(frozen=True)
class DrainResult:
    jobs: int
    seconds: float
    enqueue_seconds: float
    report: WorkerReport
    stats: CommitterStats
    cpu: CpuUse
    held_at_once: int | None = None  # the most jobs leased at once (bench.held)

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def commits_per_job(self) -> float:
        return self.stats.transactions / self.jobs

    @property
    def requests_per_transaction(self) -> float:
        return self.stats.requests / max(1, self.stats.transactions)


def drain_config(concurrency: int) -> WorkerConfig:
    return WorkerConfig(
        concurrency=concurrency,
        poll_interval=0.01,
        until_idle=True,
        idle_horizon_seconds=0.0,
    )


def run_worker(engine: Engine, transport: Transport, config: WorkerConfig) -> Worker:
    worker = Worker(engine, {"email": transport}, config)
    asyncio.run(worker.run())
    return worker


def measure_drain(url: str, jobs: int, concurrency: int) -> DrainResult:
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        created = enqueue(engine, bench_jobs(jobs))
        enqueue_seconds = time.perf_counter() - started
        if created != jobs:
            raise RuntimeError(f"enqueued {created} of {jobs} jobs")
        with cpu_meter(postgres_database(url)) as cpu:
            started = time.perf_counter()
            worker = run_worker(engine, NoopTransport(), drain_config(concurrency))
            seconds = time.perf_counter() - started
        with engine.connect() as conn:
            held = most_at_once(tuple(row) for row in conn.execute(sa.text(HERALD_EVENTS)))
    finally:
        engine.dispose()
    if worker.report.sent != jobs:
        raise RuntimeError(f"drain sent {worker.report.sent} of {jobs}: {worker.report.as_dict()}")
    stats = worker.committer.stats
    return DrainResult(jobs, seconds, enqueue_seconds, worker.report, stats, cpu, held)
