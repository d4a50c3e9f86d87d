"""`herald prune` as a real process, stopped mid-way: killed (SIGKILL: no chance to clean up) or
asked to stop (SIGINT: it finishes its batch). Either way every job is whole (pruned with its
journal trimmed, or untouched with its journal complete), and running it again finishes the
work. On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.store import OutboxStore
from tests.support.paths import HERALD

JOBS = 800
EVENTS = 3  # per job: claim, start send, sent (the enqueue row is left out: fewer rows to write)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE_SECONDS = 120.0
J, E = send_job.c, send_event.c


def _old_sent_jobs(engine: Engine) -> None:
    with engine.begin() as conn:
        old = OutboxStore(engine.dialect.name).database_now(conn) - timedelta(days=200)
        payloads = [f"Subject: {i}\r\n\r\nbody {i}\r\n".encode() for i in range(JOBS)]
        conn.execute(
            sa.insert(send_job),
            [
                {
                    "id": i + 1,
                    "key": hashlib.sha256(f"{i}".encode()).hexdigest(),
                    "key_tuple": "[]",
                    "campaign": "c",
                    "step": "s",
                    "occurrence_at": EPOCH,
                    "channel": "email",
                    "sender": "s@herald.test",
                    "recipient": f"u{i}@example.com",
                    "mailbox": f"u{i}@example.com",
                    "message_id": f"<{i}@herald.test>",
                    "payload": payload,
                    "payload_hash": hashlib.sha256(payload).hexdigest(),
                    "state": "sent",
                    "not_before": EPOCH,
                    "max_claims": 10,
                    "max_send_attempts": 5,
                    "updated_at": old,
                }
                for i, payload in enumerate(payloads)
            ],
        )
        conn.execute(
            sa.insert(send_event),
            [
                {"job_id": i + 1, "token": 1, "to_state": "sent", "actor": "t"}
                for i in range(JOBS)
                for _ in range(EVENTS)
            ],
        )


def _reader_engine(engine: Engine, **connect_args: Any) -> Engine:
    """A plain engine on the same database, for the census.

    Not Herald's: on SQLite it begins every transaction IMMEDIATE, i.e. takes the writer's
    lock even to read, and that lock is not queued: a waiter polls with a growing back-off
    while ``prune --batch-size 1`` commits and takes it again at once. The census then waited
    seconds while hundreds of batches committed (measured: 10 s, 581 batches), so the kill
    landed after the pass had ended ("the kill did not land mid-way"), or the second pass
    finished the last few jobs before the test saw it start. A plain reader (WAL) never waits
    for a writer and sees the last committed batch.
    """
    return sa.create_engine(engine.url, connect_args=connect_args)


@pytest.fixture
def reader(engine: Engine) -> Iterator[Engine]:
    plain = _reader_engine(engine)
    yield plain
    plain.dispose()


def _census(engine: Engine) -> tuple[int, int]:
    """(pruned jobs, untouched jobs); fails on any job that is neither."""
    with engine.connect() as conn:
        counted = sa.select(E.job_id, sa.func.count().label("n")).group_by(E.job_id).subquery()
        empty = sa.func.length(J.payload) == sa.literal_column("0")
        found = conn.execute(
            sa.select(empty, counted.c.n, sa.func.count())
            .join(counted, counted.c.job_id == J.id)
            .group_by(empty, counted.c.n)
        ).all()
    shapes = {(bool(pruned), n): count for pruned, n, count in found}
    assert set(shapes) <= {(True, 1), (False, EVENTS)}, shapes
    assert sum(shapes.values()) == JOBS
    return shapes.get((True, 1), 0), shapes.get((False, EVENTS), 0)


def _start(db_url: str) -> subprocess.Popen[str]:
    command = [str(HERALD), "prune", "--older-than", "90d", "--batch-size", "1"]
    return subprocess.Popen(
        [*command, "--database-url", db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_progress(engine: Engine, process: subprocess.Popen[str], beyond: int) -> None:
    """Until more than ``beyond`` jobs are pruned (the process is mid-way)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while _census(engine)[0] <= beyond:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "prune made no progress"
        time.sleep(0.01)


def test_the_census_never_waits_for_a_writer(engine: Engine) -> None:
    """The census reads while a writer holds its transaction open (here the test's own,
    as a pass's batch would): on SQLite with a busy timeout of 0, so a wait for the writer's
    lock would fail at once instead of taking time."""
    _old_sent_jobs(engine)
    no_wait = {"timeout": 0} if engine.dialect.name == "sqlite" else {}
    impatient = _reader_engine(engine, **no_wait)
    try:
        with engine.begin() as writer:
            writer.execute(sa.update(send_job).where(J.id == 1).values(payload=b""))
            last = sa.select(sa.func.max(E.id)).where(E.job_id == 1).scalar_subquery()
            writer.execute(sa.delete(send_event).where(E.job_id == 1, E.id < last))
            assert _census(impatient) == (0, JOBS)  # the last committed state
        assert _census(impatient) == (1, JOBS - 1)
    finally:
        impatient.dispose()


def test_a_killed_or_stopped_prune_leaves_whole_jobs_and_a_rerun_finishes(
    engine: Engine, reader: Engine, db_url: str
) -> None:
    _old_sent_jobs(engine)
    assert _census(reader) == (0, JOBS)

    killed = _start(db_url)
    _wait_for_progress(reader, killed, 0)
    killed.kill()
    killed.communicate(timeout=30)
    pruned, _ = _census(reader)
    assert 0 < pruned < JOBS, "the kill did not land mid-way"

    stopped = _start(db_url)
    _wait_for_progress(reader, stopped, pruned)
    stopped.send_signal(signal.SIGINT)
    _, stderr = stopped.communicate(timeout=DEADLINE_SECONDS)
    assert stopped.returncode == 130, stderr
    assert "stopped:" in stderr
    assert "Traceback" not in stderr
    later, _ = _census(reader)
    assert pruned < later < JOBS

    finished = _start(db_url)
    stdout, stderr = finished.communicate(timeout=DEADLINE_SECONDS * 3)
    assert finished.returncode == 0, stderr
    assert f"pruned {JOBS - later} job(s)" in stdout
    assert _census(reader) == (JOBS, 0)
