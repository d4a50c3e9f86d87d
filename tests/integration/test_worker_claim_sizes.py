"""A draining worker never claims for less than an eighth of a wave (``dispatch.claim_room``):
a claim is a transaction on the dispatch loop's path, as long for one job as for a wave, so the
loop does not ask for the one job of room a send that ended ahead of its wave leaves. Before, a
drain could fall into claims of 500, 1 and 499 in turn (bench/profiles/drain-cpu.md, session
33). A real worker drains a real outbox with a no-op transport; every claim it asks for is
recorded."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import Engine

from bench.drain import NoopTransport, bench_jobs, drain_config, enqueue
from dispatch.committer import GroupCommitter
from dispatch.outbox_client import OutboxClient
from dispatch.store import ClaimedJob
from dispatch.worker import Worker

JOBS = 3_000
CONCURRENCY = 100


class RecordedClaims(OutboxClient):
    def __init__(self, committer: GroupCommitter) -> None:
        super().__init__(committer)
        self.asked: list[int] = []
        self.got: list[int] = []

    async def claim(self, limit: int) -> list[ClaimedJob]:
        self.asked.append(limit)
        jobs = await super().claim(limit)
        self.got.append(len(jobs))
        return jobs


def test_a_drain_never_claims_for_a_straggler(engine: Engine) -> None:
    assert enqueue(engine, bench_jobs(JOBS)) == JOBS
    worker = Worker(engine, {"email": NoopTransport()}, drain_config(CONCURRENCY))
    claims = RecordedClaims(worker.committer)
    worker.outbox = claims
    report = asyncio.run(worker.run())
    assert report.sent == JOBS
    assert sum(claims.got) == JOBS
    assert min(claims.asked) >= CONCURRENCY // 8, claims.asked
    assert max(claims.asked) <= CONCURRENCY
    # Waves of a hundred: thirty claims that found jobs, give or take a partial one per
    # straggling wave and the claims that found the queue empty at the end.
    assert sum(1 for got in claims.got if got) <= JOBS // (CONCURRENCY // 2), claims.got
