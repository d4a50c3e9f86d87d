"""What a worker does before its first send, on both databases, with a real SMTP server.

A worker started with ``--until-idle`` (a cron job, a drain after a launch) pays its start-up on
every run: its lanes' connections are checked out as the threads start, its first claim goes
before its first recovery pass (its domain limits are written meanwhile, before any job is
admitted), and a claim asks for at most one wave of sends, so the first sends start while the
next claim runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.committer import GroupCommitter
from dispatch.instrumentation import NullInstrumentation
from dispatch.models import rate_limit
from dispatch.outbox_client import OutboxClient
from dispatch.rates import domain_key
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import ClaimedJob, OutboxStore
from dispatch.worker import Worker
from herald.db import create_engine
from tests.support.campaign_files import fast_config
from tests.support.factories import launch, write_yaml
from tests.support.smtp_server import LedgerSMTPServer

DEADLINE = 30.0  # seconds: a wait that takes longer is a failure, not a hang


def campaign(folder: Path, count: int) -> Path:
    audience = ", ".join(f"r{i}@slow.test" for i in range(count))
    return write_yaml(
        folder,
        f"name: start\nfrom: news@herald.test\naudience: [{audience}]\n"
        "steps:\n  - id: hello\n    subject: Hello\n    text: Hello there\n",
    )


def smtp(server: LedgerSMTPServer) -> SmtpTransport:
    return SmtpTransport(SmtpConfig(host=server.host, port=server.port, command_timeout=10))


class LimitsAtFirstClaim(NullInstrumentation):
    """Reads the rate-limit table when the worker's first claim has committed."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.keys: set[str] | None = None

    async def after_claim_commit(self, jobs: object) -> None:
        if self.keys is None:
            self.keys = await asyncio.to_thread(self._read)

    def _read(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(sa.select(rate_limit.c.key)).scalars())


def test_the_domain_limits_are_written_before_the_first_claim(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, campaign(tmp_path / "c", 3)).new_jobs == 3
    watch = LimitsAtFirstClaim(engine)
    config = fast_config(domain_rates={"slow.test": 100.0})
    worker = Worker(engine, {"email": smtp(smtp_server)}, config, instrumentation=watch)

    report = asyncio.run(worker.run())

    assert report.sent == 3
    assert watch.keys is not None
    assert domain_key("slow.test") in watch.keys


class ClaimLimits(OutboxClient):
    """The worker's outbox client, noting how many jobs each claim asks for."""

    def __init__(self, committer: GroupCommitter) -> None:
        super().__init__(committer)
        self.limits: list[int] = []

    async def claim(self, limit: int) -> list[ClaimedJob]:
        self.limits.append(limit)
        return await super().claim(limit)


def test_a_claim_asks_for_at_most_a_wave_of_sends(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, campaign(tmp_path / "c", 12)).new_jobs == 12
    worker = Worker(engine, {"email": smtp(smtp_server)}, fast_config(concurrency=3))
    claims = ClaimLimits(worker.committer)
    worker.outbox = claims

    report = asyncio.run(worker.run())

    assert report.sent == 12
    assert claims.limits
    assert max(claims.limits) == 3  # the first claim had room for the whole prefetch (6)


def committer_for(engine: Engine) -> GroupCommitter:
    return GroupCommitter(
        engine, OutboxStore(engine.dialect.name), owner="w", lease_seconds=60, t4_margin_seconds=1
    )


def test_each_lane_holds_its_connection_from_the_start(engine: Engine) -> None:
    committer = committer_for(engine)
    committer.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while engine.pool.checkedout() < committer.lanes:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the lanes never connected"
            time.sleep(0.005)
        assert engine.pool.checkedout() == committer.lanes  # type: ignore[attr-defined]
        assert committer.stats.transactions == 0  # before any request
    finally:
        committer.stop()
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_database_unreachable_at_the_start_fails_requests_not_the_lanes(
    refused_port: int,
) -> None:
    """The early connection's failure is swallowed: each request then fails as it would have
    (the caller retries), and the lanes keep serving until they are stopped."""
    engine = create_engine(f"postgresql://postgres@127.0.0.1:{refused_port}/none")
    committer = committer_for(engine)
    committer.start()
    try:
        for attempt in (1, 2):
            with pytest.raises(sa.exc.OperationalError):
                asyncio.run(asyncio.wait_for(OutboxClient(committer).has_work(0.0), DEADLINE))
            assert committer.stats.failures == attempt
    finally:
        committer.stop()
        engine.dispose()


class ClaimResults(OutboxClient):
    """The worker's outbox client, noting how many jobs each claim took."""

    def __init__(self, committer: GroupCommitter) -> None:
        super().__init__(committer)
        self.taken: list[int] = []

    async def claim(self, limit: int) -> list[ClaimedJob]:
        jobs = await super().claim(limit)
        self.taken.append(len(jobs))
        return jobs


def test_a_worker_started_over_a_dead_workers_expired_claims_sends_them_all(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    """The first claim goes before the first recovery pass, so here it finds nothing: every
    job is an expired claim of a dead worker. Recovery then puts them back, they are claimed
    at once, and the ``--until-idle`` worker checks for work only after recovery, so it does
    not stop with them unsent."""
    assert launch(engine, campaign(tmp_path / "c", 4)).new_jobs == 4
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        dead = store.claim(conn, owner="dead", limit=10, lease_seconds=0.05)
    assert len(dead) == 4
    deadline = time.monotonic() + DEADLINE
    while not _all_expired(engine):
        assert time.monotonic() < deadline, "the dead worker's leases never expired"
        time.sleep(0.02)
    worker = Worker(engine, {"email": smtp(smtp_server)}, fast_config())
    claims = ClaimResults(worker.committer)
    worker.outbox = claims

    report = asyncio.run(worker.run())

    assert claims.taken[0] == 0
    assert report.sent == 4
    assert report.recovered == 4
    assert len(smtp_server.accepted_ids()) == 4


def _all_expired(engine: Engine) -> bool:
    with engine.connect() as conn:
        expired = conn.execute(
            sa.text(
                "SELECT count(*) FROM send_job WHERE state = 'claimed'"
                " AND lease_expires_at < CURRENT_TIMESTAMP"
            )
        ).scalar_one()
    return bool(expired == 4)
