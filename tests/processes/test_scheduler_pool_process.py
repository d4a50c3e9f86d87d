"""``herald scheduler`` composing a large occurrence in one process per core
(scheduler.occurrence_pool): the real service forks from the thread its pass runs in, beside
its asyncio loop and signal handlers, and writes the snapshot while its children compose; the
occurrence is fanned out whole, the ``fired`` record says how many processes composed it, and a
SIGTERM afterwards stops it gracefully. And ``herald run``, whose worker's threads run beside the
fork, delivers every message of such an occurrence once."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple, message_id
from dispatch.models import send_job
from herald.db import create_engine
from herald.schema import upgrade
from scheduler.check_pool import MAX_PROCESSES, MIN_BYTES
from tests.processes.test_metrics_processes import ONE_SHOT as ONE_STEP
from tests.processes.test_scheduler_processes import (
    ONE_SHOT,
    READY,
    Service,
    fire_states,
    herald_run,
    iso,
    job_count,
    wait_until,
    whole_seconds_after,
)
from tests.support.campaign_files import write_audience
from tests.support.paths import HERALD
from tests.support.schedules import launch_at
from tests.support.smtp_server import LedgerSMTPServer

RECIPIENTS = 8000  # a file over MIN_BYTES: composed beside the snapshot's writing
JOBS = 2 * RECIPIENTS  # ONE_SHOT has two steps


def test_a_scheduler_composes_a_large_occurrence_in_processes_and_stops_cleanly(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    assert len(os.sched_getaffinity(0)) >= 2, "one core: the pass composes in its own process"
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    folder = tmp_path / "large"
    folder.mkdir()
    addresses = write_audience(folder / "people.csv", RECIPIENTS)
    assert (folder / "people.csv").stat().st_size >= MIN_BYTES
    path = folder / "campaign.yaml"
    path.write_text(ONE_SHOT.format(name="large", start=iso(due)))
    assert launch_at(engine, path, due - timedelta(days=1)).fanout.new_jobs == 0

    command = [str(HERALD), "scheduler", "--database-url", db_url, "--log-format", "json"]
    service = Service("scheduler", command, tmp_path)
    service.start()
    try:
        wait_until(
            lambda: fire_states(engine) == ["done"] or not service.alive,
            lambda: job_count(engine),
            "the occurrence was not fanned out",
        )
        assert service.terminate(READY["scheduler"]) == 0, service.stderr()
    finally:
        if service.alive:
            service.kill()
    records = [json.loads(line) for line in service.logs[-1].read_text().splitlines() if line]
    [fired] = [record for record in records if record.get("event") == "fired"]
    cores = min(len(os.sched_getaffinity(0)), MAX_PROCESSES)
    assert (fired["campaign"], fired["jobs"], fired["processes"]) == ("large", JOBS, cores)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(send_job.c.step, send_job.c.recipient)).all()
    assert len(rows) == len(set(rows)) == JOBS
    assert {recipient for _, recipient in rows} == set(addresses)


def test_herald_run_composes_a_large_occurrence_in_processes_beside_its_worker(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    """``herald run`` (scheduler and worker in one process, on SQLite): its pass forks while the
    worker's database threads and event loop run beside it, and every message of the
    occurrence reaches the relay once."""
    assert len(os.sched_getaffinity(0)) >= 2, "one core: the pass composes in its own process"
    db_url = f"sqlite:///{tmp_path / 'herald.db'}"
    folder = tmp_path / "large"
    folder.mkdir()
    addresses = write_audience(folder / "people.csv", RECIPIENTS)
    start = whole_seconds_after(2)
    path = folder / "campaign.yaml"
    path.write_text(ONE_STEP.format(start=iso(start)))  # one step, campaign "hello"
    # Launched "a day before" (its own pass would fire the occurrence if the launch took longer
    # than the two seconds, as it can on a slow machine): ``herald run`` fires it.
    launcher = create_engine(db_url)
    try:
        upgrade(launcher)
        assert launch_at(launcher, path, start - timedelta(days=1)).fanout.new_jobs == 0
    finally:
        launcher.dispose()
    run = herald_run(tmp_path, db_url, smtp_server, "--log-format", "json")
    run.start()
    try:
        wait_until(
            lambda: len(smtp_server.accepted_ids()) >= RECIPIENTS or not run.alive,
            lambda: len(smtp_server.accepted_ids()),
            "herald run did not deliver the occurrence",
        )
        assert run.terminate(READY["scheduler"]) == 0, run.stderr()
    finally:
        if run.alive:
            run.kill()
    expected = {
        message_id(KeyTuple("hello", "hello", start, address).key(), "herald.test")
        for address in addresses
    }
    assert sorted(smtp_server.accepted_ids()) == sorted(expected)  # each once
    records = [json.loads(line) for line in run.logs[-1].read_text().splitlines() if line]
    [fired] = [record for record in records if record.get("event") == "fired"]
    assert fired["processes"] == min(len(os.sched_getaffinity(0)), MAX_PROCESSES)
