"""Herald's drain through PgBouncer in transaction pooling mode, beside the same drain direct.

``measure_drain_via_pgbouncer`` is bench/drain.py's ``measure_drain`` on a fresh database reached
through a private PgBouncer (tests/support/pgbouncer.py: Debian's 1.18, ``pool_mode =
transaction``, a small pool) with ``HERALD_DATABASE_POOLER=transaction``, so psycopg prepares
nothing. Its result is a ``DrainResult`` that also carries the CPU PgBouncer itself spent: the
backends' CPU alone would hide the pooler's share of the cost.

``python -m bench.pooler`` runs, in one go on the same machine, the drain direct (psycopg's
prepared statements on, the default), direct with preparation off (what the setting alone
costs PostgreSQL), and through PgBouncer, and prints the three.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from bench.cpu import CLOCK_TICKS
from bench.databases import fresh_postgres, postgres_reachable
from bench.drain import DrainResult, measure_drain

POOL_SIZE = 4  # server connections; the drain's worker opens two or three clients


class Unavailable(Exception):
    """PgBouncer (or PostgreSQL) is not there to measure through; the message says why."""


@dataclass(frozen=True)
class PooledDrainResult(DrainResult):
    pooler_seconds: float | None = None  # CPU seconds of the PgBouncer process during the drain

    def pooler_us_per_job(self) -> float | None:
        return None if self.pooler_seconds is None else self.pooler_seconds / self.jobs * 1e6


@contextmanager
def pooler_setting(value: str | None) -> Iterator[None]:
    """``HERALD_DATABASE_POOLER`` for engines created inside the block (measure_drain makes its
    own); the caller's value is restored after."""
    before = os.environ.get("HERALD_DATABASE_POOLER")
    if value is None:
        os.environ.pop("HERALD_DATABASE_POOLER", None)
    else:
        os.environ["HERALD_DATABASE_POOLER"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HERALD_DATABASE_POOLER", None)
        else:
            os.environ["HERALD_DATABASE_POOLER"] = before


def _process_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime (man 5 proc)


def measure_drain_via_pgbouncer(jobs: int, concurrency: int) -> PooledDrainResult:
    """The no-op drain of ``jobs`` jobs through PgBouncer; Unavailable if it cannot run here."""
    # Imported here: the test support module needs pytest, which only this benchmark uses.
    from tests.support.pgbouncer import PgBouncerUnavailable, running_pgbouncer

    if not postgres_reachable():
        raise Unavailable("PostgreSQL not reachable")
    with fresh_postgres("herald_bench_pgb") as direct, ExitStack() as stack:
        try:
            bouncer = stack.enter_context(running_pgbouncer(direct, POOL_SIZE))
        except (PgBouncerUnavailable, RuntimeError) as exc:
            raise Unavailable(str(exc)) from exc
        pid = bouncer.process.pid
        before = _process_cpu_seconds(pid)
        with pooler_setting("transaction"):
            result = measure_drain(bouncer.url(direct), jobs, concurrency)
        after = _process_cpu_seconds(pid)
    # The enqueue went through PgBouncer too; its share is small beside the drain's
    # (one multi-row INSERT per thousand jobs) and is counted here with it.
    spent = None if before is None or after is None else after - before
    return PooledDrainResult(
        result.jobs,
        result.seconds,
        result.enqueue_seconds,
        result.report,
        result.stats,
        result.cpu,
        result.held_at_once,
        pooler_seconds=spent,
    )


def measure_drain_direct(jobs: int, concurrency: int, *, prepared: bool = True) -> DrainResult:
    """The same drain without a pooler; ``prepared=False``: as if the setting were on."""
    if not postgres_reachable():
        raise Unavailable("PostgreSQL not reachable")
    setting = None if prepared else "transaction"
    with fresh_postgres("herald_bench_pgd") as direct, pooler_setting(setting):
        return measure_drain(direct, jobs, concurrency)


def _line(label: str, result: DrainResult, pooler_us: float | None = None) -> str:
    python_us, backend_us = result.cpu.per_job_us(result.jobs)
    backend = "n/a" if backend_us is None else f"{backend_us:.0f}"
    extra = "" if pooler_us is None else f" + PgBouncer {pooler_us:.0f}"
    return (
        f"{label:<34} {result.jobs_per_second:>8,.0f} jobs/s   CPU/job µs: Python "
        f"{python_us:.0f} + PG backends {backend}{extra}   commits/job {result.commits_per_job:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="alternate the three this often")
    options = parser.parse_args(argv)
    for _ in range(options.rounds):
        direct = measure_drain_direct(options.jobs, options.concurrency)
        print(_line("direct, prepared statements on", direct), flush=True)
        unprepared = measure_drain_direct(options.jobs, options.concurrency, prepared=False)
        print(_line("direct, prepared statements off", unprepared), flush=True)
        try:
            pooled = measure_drain_via_pgbouncer(options.jobs, options.concurrency)
        except Unavailable as exc:
            print(f"through PgBouncer: unavailable ({exc})")
            continue
        print(_line("through PgBouncer (transaction)", pooled, pooled.pooler_us_per_job()))
        ratio = pooled.jobs_per_second / direct.jobs_per_second
        print(f"  throughput through PgBouncer / direct: {ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
