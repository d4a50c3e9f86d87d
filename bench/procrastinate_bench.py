"""procrastinate on the same PostgreSQL, same run: the second library comparison for the drain.

A fresh database gets procrastinate's schema (``schema_manager.apply_schema_async``); N no-op
jobs are deferred in batches (``batch_defer_async``, one statement per 1,000), then one worker
runs them with ``run_worker_async(wait=False)``, which returns once the queue is empty. The
worker uses procrastinate's own connector (psycopg 3 with a psycopg_pool pool sized for the
concurrency), LISTEN/NOTIFY off (nothing is deferred while it drains), jobs kept after
completion (its default, ``delete_jobs="never"``).

procrastinate fetches one job per statement (its ``procrastinate_fetch_job`` function) and
finishes each with another, so it is far slower per job than batch-claiming queues: N is smaller
by default (``--procrastinate-jobs``); the figure is a rate, so the ratio stays comparable.

procrastinate is not a Herald dependency; it is installed into the venv on first use with the
venv's own versions pinned (``bench.extras``), or reported as not measured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from bench.cpu import CpuUse, cpu_meter
from bench.databases import fresh_postgres, postgres_database
from bench.extras import NotMeasured, ensure_installed, package_version

PACKAGES = {"procrastinate": "procrastinate"}
CONCURRENCY = 10
DEFER_BATCH = 1_000


@dataclass(frozen=True)
class ProcrastinateResult:
    jobs: int
    concurrency: int
    seconds: float
    cpu: CpuUse
    version: str

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds


def measure_procrastinate(jobs: int, concurrency: int = CONCURRENCY) -> ProcrastinateResult:
    ensure_installed(PACKAGES)
    try:
        import procrastinate  # noqa: F401  (import check before creating a database)
    except ImportError as exc:
        raise NotMeasured(f"cannot import procrastinate: {exc}") from exc
    # Its worker logs every job at INFO; the benchmark's output is the figures.
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    with fresh_postgres("herald_bench_procrastinate", migrate=False) as url:
        seconds, cpu, done = asyncio.run(_defer_then_drain(url, jobs, concurrency))
    if done != jobs:
        raise NotMeasured(f"procrastinate ran {done} of {jobs} jobs")
    return ProcrastinateResult(jobs, concurrency, seconds, cpu, package_version("procrastinate"))


async def _defer_then_drain(url: str, jobs: int, concurrency: int) -> tuple[float, CpuUse, int]:
    import procrastinate

    connector: Any = procrastinate.PsycopgConnector(
        conninfo=url, min_size=concurrency + 2, max_size=concurrency + 2
    )
    app = procrastinate.App(connector=connector)
    done = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, jobs, DEFER_BATCH):
            await noop.batch_defer_async(*({} for _ in range(min(DEFER_BATCH, jobs - start))))
        # The pool's connections stay open through the block: their backends' CPU is counted.
        with cpu_meter(postgres_database(url)) as cpu:
            started = time.perf_counter()
            await app.run_worker_async(
                wait=False,
                concurrency=concurrency,
                listen_notify=False,
                install_signal_handlers=False,
            )
            seconds = time.perf_counter() - started
    return seconds, cpu, done
