"""A scheduled campaign's occurrence (information; issue 12, session 40).

A weekly campaign (`schedule: {cron: ...}`) over an N-row CSV is launched, then its first
occurrence fires in a scheduler pass: the list snapshotted, every message composed and
enqueued. Measured twice on fresh databases, composing in the pass's own process and in one
process per core (scheduler.occurrence_pool), so each run shows what the pool buys on this
machine (bench/profiles/fanout.md, session 40).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.fanout import write_campaign
from herald.app.launch import launch
from herald.db import create_engine
from scheduler.check_pool import CheckPool, pool_of
from scheduler.passes import run_pass

LAUNCH_AT = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # a Monday, an hour before it fires
FIRES_AT = LAUNCH_AT + timedelta(hours=1)
SCHEDULE = 'schedule:\n  cron: "0 9 * * mon"\n'


@dataclass(frozen=True)
class OccurrenceFigures:
    recipients: int
    seconds: float  # the pass that fans the occurrence out
    jobs: int


def write_weekly(folder: Path, recipients: int, name: str) -> Path:
    path = write_campaign(folder, recipients, name)
    path.write_text(path.read_text().replace("steps:", SCHEDULE + "steps:", 1))
    return path


def measure_occurrence(
    url: str, path: Path, recipients: int, pool: CheckPool | None
) -> OccurrenceFigures:
    engine = create_engine(url)
    try:
        launch(engine, path, clock=lambda: LAUNCH_AT, actor="bench")
        started = time.perf_counter()
        report = run_pass(engine, now=FIRES_AT + timedelta(minutes=1), actor="bench", pool=pool)
        seconds = time.perf_counter() - started
    finally:
        engine.dispose()
    if report.new_jobs != recipients:
        raise RuntimeError(f"the occurrence enqueued {report.new_jobs} jobs of {recipients}")
    return OccurrenceFigures(recipients, seconds, report.new_jobs)


def default_pool() -> CheckPool | None:
    """What ``herald scheduler`` composes with on this machine (None: one process)."""
    return pool_of()
