"""pgqueuer on the same PostgreSQL, same machine, same run: the comparison for the drain figure.

Configured like pgqueuer's own drain benchmark (``tools/benchmark.py --strategy drain``): the
asyncpg driver, 5 queue managers each on its own connection, drain mode, uvloop when installed;
run twice, with that benchmark's dequeue batch of 10 and with batches of 100 (closer to Herald's
claims of up to 400), so the ratio is taken against pgqueuer's better figure.

Its jobs are no-ops: pgqueuer dequeues (one UPDATE per batch) and logs each completion (a
buffered DELETE + INSERT into its log table). Herald does three fenced transitions per job, each
with a journal row, so the comparison favours pgqueuer.

pgqueuer and asyncpg are not Herald dependencies. If they are missing they are installed into the
running venv with pip on first use (``bench.extras``); if that fails, the caller reports the
reference figure.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.cpu import CpuUse, cpu_meter
from bench.databases import fresh_postgres, postgres_database
from bench.extras import NotMeasured, ensure_installed, package_version
from bench.held import PGQUEUER_EVENTS, most_at_once

PACKAGES = {"pgqueuer": "pgqueuer", "asyncpg": "asyncpg"}
REFERENCE_JOBS_PER_SECOND = 16_500.0  # the product owner's figure for this machine
DEQUEUERS = 5
BATCH_SIZES = (10, 100)  # --pgqueuer-batches; the default run measures 100 only
ENQUEUE_BATCH = 1_000
ATTEMPTS = 2


@dataclass(frozen=True)
class PgqResult:
    jobs: int
    batch_size: int
    seconds: float
    cpu: CpuUse
    version: str
    event_loop: str
    failed_runs: list[str]
    held_at_once: int | None = None  # the most jobs picked at once (bench.held)

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds


def measure_pgqueuer(jobs: int, batch_size: int) -> PgqResult:
    ensure_installed(PACKAGES)
    try:
        import pgqueuer  # noqa: F401  (import check before creating a database)
    except ImportError as exc:
        raise NotMeasured(f"cannot import pgqueuer: {exc}") from exc
    runner, loop_name = _runner()
    failures: list[str] = []
    for _ in range(ATTEMPTS):
        try:
            with fresh_postgres("herald_bench_pgq", migrate=False) as url:
                seconds, cpu, held = runner(_enqueue_then_drain(url, jobs, batch_size))
        except NotMeasured:
            raise
        except Exception as exc:  # e.g. asyncpg "another operation is in progress" at start-up
            failures.append(f"{type(exc).__name__}: {exc}")
            print(f"  pgqueuer run failed ({failures[-1]}); retrying on a fresh database")
            continue
        return PgqResult(
            jobs, batch_size, seconds, cpu, package_version("pgqueuer"), loop_name, failures, held
        )
    raise NotMeasured(f"{ATTEMPTS} runs failed, last: {failures[-1]}")


def _runner() -> tuple[Callable[[Awaitable[Any]], Any], str]:
    try:
        uvloop: Any = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.run, "asyncio"  # type: ignore[return-value]
    return uvloop.run, "uvloop"


async def _enqueue_then_drain(url: str, jobs: int, batch_size: int) -> tuple[float, CpuUse, int]:
    import asyncpg  # type: ignore[import-untyped]
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    dsn = url.replace("postgresql://", "postgres://", 1)
    setup = await asyncpg.connect(dsn=dsn)
    try:
        queries = Queries(AsyncpgDriver(setup))
        await queries.install()
        for start in range(0, jobs, ENQUEUE_BATCH):
            size = min(ENQUEUE_BATCH, jobs - start)
            await queries.enqueue(["noop"] * size, [b"x"] * size, [0] * size)
    finally:
        await setup.close()

    done = 0

    async def noop(job: Job) -> None:
        nonlocal done
        done += 1

    connections = [await asyncpg.connect(dsn=dsn) for _ in range(DEQUEUERS)]
    try:
        managers = [QueueManager(Queries(AsyncpgDriver(conn))) for conn in connections]
        for manager in managers:
            manager.entrypoint("noop")(noop)
        with cpu_meter(postgres_database(url)) as cpu:  # ends before the connections close
            started = time.perf_counter()
            await asyncio.gather(
                *(m.run(batch_size=batch_size, mode=QueueExecutionMode.drain) for m in managers)
            )
            seconds = time.perf_counter() - started
        held = most_at_once(tuple(row) for row in await connections[0].fetch(PGQUEUER_EVENTS))
    finally:
        for conn in connections:
            await conn.close()
    if done != jobs:
        raise NotMeasured(f"pgqueuer ran {done} of {jobs} jobs")
    return seconds, cpu, held


__all__ = ["REFERENCE_JOBS_PER_SECOND", "NotMeasured", "PgqResult", "measure_pgqueuer"]
