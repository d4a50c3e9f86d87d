"""`herald scheduler --once` (one real pass, for cron users and checks) on SQLite and PostgreSQL,
and the scheduler loop with the real pass: a one-shot fires when its time comes."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.engine import Engine

from herald.app.scheduler import SchedulerOptions, SchedulerService
from tests.support.factories import cli
from tests.support.schedules import jobs, launch_at, write_scheduled

PEOPLE = ["ada@example.com", "bob@example.com", "cy@example.com"]
ONE_SHOT = """\
start_at: "{at}"
audience: people.csv
steps:
  - id: news
    subject: "News"
    text: "Hello {{{{ name }}}}"
"""


def one_shot(folder: Path, at: datetime) -> Path:
    return write_scheduled(folder, ONE_SHOT.format(at=at.strftime("%Y-%m-%dT%H:%M:%SZ")), PEOPLE)


def test_once_fires_what_is_due_then_finds_nothing(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    launch_at(engine, one_shot(tmp_path / "c", due), due - timedelta(days=1))
    assert jobs(engine) == []

    first = cli(db_url, "scheduler", "--once")
    assert first.exit_code == 0, first.output
    assert first.stdout.strip() == f"digest: fired {due:%Y-%m-%dT%H:%M:%S}Z, 3 new job(s)"
    assert {job.occurrence_at for job in jobs(engine)} == {due}

    again = cli(db_url, "scheduler", "--once", "--json")
    assert again.exit_code == 0, again.output
    document = json.loads(again.stdout)
    assert (document["fired"], document["new_jobs"]) == (0, 0)
    assert [c["campaign"] for c in document["campaigns"]] == ["digest"]
    assert len(jobs(engine)) == 3


def test_once_on_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    result = cli(f"sqlite:///{tmp_path / 'missing' / 'herald.db'}", "scheduler", "--once")
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot create the database file")


def test_the_loop_fires_a_one_shot_when_its_time_comes(engine: Engine, tmp_path: Path) -> None:
    """The real pass and wake query: the wake job is armed at the one-shot's time (the tick is
    an hour, so nothing else would run a pass before the test's deadline)."""
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    launch_at(engine, one_shot(tmp_path / "c", at), datetime.now(UTC))
    lines: list[str] = []
    service = SchedulerService(engine, options=SchedulerOptions(tick=3600), say=lines.append)

    async def scenario() -> None:
        task = asyncio.create_task(service.run())
        try:
            async with asyncio.timeout(60):
                while len(lines) < 2:  # started, then the first pass that fired something
                    assert not task.done()
                    await asyncio.sleep(0.05)
        finally:
            service.stop()
            await asyncio.wait_for(task, 60)

    asyncio.run(scenario())
    assert lines[1].endswith(f"Z digest: fired {at:%Y-%m-%dT%H:%M:%S}Z, 3 new job(s)")
    assert {job.occurrence_at for job in jobs(engine)} == {at}
    assert (service.totals.busy_passes, service.totals.errors) == (1, 0)
