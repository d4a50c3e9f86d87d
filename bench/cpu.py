"""CPU time per job, for this process and for the PostgreSQL backends serving a database.

Wall-clock throughput on a shared 2-core machine moves with whatever else runs; CPU seconds
spent per job move much less, so the drain and pgqueuer figures also report them. Backend CPU is
read from /proc/<pid>/stat of the server processes connected to the benchmark's database, so it
is only available when PostgreSQL runs on this machine and /proc is readable (else None).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa

from bench.databases import admin_engine

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pid_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def backend_cpu_seconds(database: str) -> dict[int, float] | None:
    """CPU seconds so far of every client backend connected to ``database``; None if unknown."""
    engine = admin_engine()
    try:
        with engine.connect() as conn:
            pids = conn.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = :db "
                    "AND backend_type = 'client backend'"
                ),
                {"db": database},
            ).scalars()
            times = {pid: _pid_cpu_seconds(pid) for pid in pids}
    finally:
        engine.dispose()
    if not times or any(t is None for t in times.values()):
        return None
    return {pid: t for pid, t in times.items() if t is not None}


@dataclass
class CpuUse:
    process_seconds: float = 0.0
    backend_seconds: float | None = None

    def per_job_us(self, jobs: int) -> tuple[float, float | None]:
        backend = self.backend_seconds
        return (
            self.process_seconds / jobs * 1e6,
            None if backend is None else backend / jobs * 1e6,
        )


@contextmanager
def cpu_meter(database: str | None) -> Iterator[CpuUse]:
    """Measure this process's CPU and, given a PostgreSQL database name, its backends' CPU.

    Backends that connect during the block count from zero; ones that leave it are lost, so the
    block should end while the measured connections are still open (pooled).
    """
    use = CpuUse()
    before = backend_cpu_seconds(database) if database else None
    started = process_cpu_seconds()
    yield use
    use.process_seconds = process_cpu_seconds() - started
    if database:
        after = backend_cpu_seconds(database)
        if after is not None and before is not None:
            use.backend_seconds = sum(t - before.get(pid, 0.0) for pid, t in after.items())
