"""The raw-SQL floor: the least a PostgreSQL queue can do per job, for information.

Its own table (``job``: id, state, payload) with a partial index on the claimable rows, in a
fresh database on the same server. Four connections (psycopg 3, autocommit, one asyncio task
each) loop: claim up to 100 rows with one ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP
LOCKED LIMIT 100) RETURNING id``, then mark them all done with one batched ``UPDATE``. Two
statements and two commits per 100 jobs, no lease, no fencing, no journal, no state checks: the
ratio herald/raw-SQL says what Herald's guarantees cost, it has no target.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import psycopg

from bench.cpu import CpuUse, cpu_meter
from bench.databases import fresh_postgres, postgres_database

CONNECTIONS = 4
BATCH = 100

SCHEMA = (
    "CREATE TABLE job (id bigserial PRIMARY KEY, state text NOT NULL, payload bytea NOT NULL)",
    "CREATE INDEX job_todo ON job (id) WHERE state = 'todo'",
)
ENQUEUE = (
    "INSERT INTO job (state, payload) SELECT 'todo', '\\x78'::bytea FROM generate_series(1, %s)"
)
CLAIM = (
    "UPDATE job SET state = 'running' WHERE id IN (SELECT id FROM job WHERE state = 'todo' "
    "ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %s) RETURNING id"
)
COMPLETE = "UPDATE job SET state = 'done' WHERE id = ANY(%s)"


@dataclass(frozen=True)
class RawSqlResult:
    jobs: int
    seconds: float
    cpu: CpuUse

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds


def measure_rawsql(jobs: int, connections: int = CONNECTIONS) -> RawSqlResult:
    with fresh_postgres("herald_bench_raw", migrate=False) as url:
        return asyncio.run(_enqueue_then_drain(url, jobs, connections))


async def _enqueue_then_drain(url: str, jobs: int, connections: int) -> RawSqlResult:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as setup:
        for statement in SCHEMA:
            await setup.execute(statement)
        await setup.execute(ENQUEUE, (jobs,))
        await setup.execute("ANALYZE job")  # as a long-lived queue table would be
    conns = [
        await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(connections)
    ]
    try:
        with cpu_meter(postgres_database(url)) as cpu:  # ends before the connections close
            started = time.perf_counter()
            done = sum(await asyncio.gather(*(_loop(conn) for conn in conns)))
            seconds = time.perf_counter() - started
    finally:
        for conn in conns:
            await conn.close()
    if done != jobs:
        raise RuntimeError(f"raw SQL drained {done} of {jobs} jobs")
    return RawSqlResult(jobs, seconds, cpu)


async def _loop(conn: psycopg.AsyncConnection[tuple[int]]) -> int:
    done = 0
    while True:
        cursor = await conn.execute(CLAIM, (BATCH,))
        ids = [row[0] for row in await cursor.fetchall()]
        if not ids:
            return done
        await conn.execute(COMPLETE, (ids,))
        done += len(ids)
