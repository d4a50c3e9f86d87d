"""A worker SIGKILLed between claim and T4: a second worker takes its unstarted claims back at
their lease's expiry (the pass is timed to the expiry it saw, not to the next fixed interval,
and owes no grace to claims their holder can no longer start) and sends each exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from dispatch.models import send_event, send_job
from dispatch.store import OutboxStore
from dispatch.transport import Envelope, Outcome, PreparedSend, Verdict
from dispatch.worker import Worker, WorkerConfig
from herald.db import create_engine
from tests.support.outboxes import new_job

REPO = Path(__file__).resolve().parents[2]
JOBS = 200
LEASE = 2.0
# The grace a started send gets before it is made in_doubt. Longer than SLACK, so a pass that
# waited for it on unstarted claims fails the test.
GRACE = 5.0
# From the lease's expiry to the pass that took the claims back (both on the database clock):
# the pass's own lateness on a loaded two-core machine. Below GRACE and far below the interval
# below, so a pass that waited for either fails the test. (Start-up and the sends themselves
# are not in it: they take longer the busier the machine, and are not what is judged.)
SLACK = 4.0
INTERVAL = 60.0


class _Send:
    def __init__(self, sent: list[str], key: str) -> None:
        self.sent, self.key = sent, key

    def ready(self) -> asyncio.Future[Outcome | None] | None:
        return None

    async def deliver(self, started_at: datetime) -> Outcome:
        self.sent.append(self.key)
        return Outcome(Verdict.SENT, 250, "ok")

    async def abandon(self) -> None:
        return None


class RecordingTransport:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        return _Send(self.sent, envelope.recipient)

    async def aclose(self) -> None:
        return None


def _kill_after_claim(url: str) -> float:
    """Run the doomed claimer, SIGKILL it once it holds every claim; returns the kill's time."""
    command = [sys.executable, "-m", "tests.processes.doomed_claimer", url, str(JOBS), str(LEASE)]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert json.loads(child.stdout.readline()) == {"claimed": JOBS}
            os.kill(child.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            assert child.wait(30) == -signal.SIGKILL
            return killed_at
        finally:
            if child.poll() is None:
                child.kill()


def test_a_killed_workers_unstarted_claims_are_sent_at_lease_expiry(
    db_url: str,
) -> None:
    engine = create_engine(db_url)
    try:
        store = OutboxStore(engine.dialect.name)
        due = datetime.now(UTC) - timedelta(seconds=1)
        with engine.begin() as conn:
            store.enqueue(conn, [new_job(f"k{i}", due) for i in range(JOBS)])
        _kill_after_claim(db_url)
        with engine.connect() as conn:
            expiry = conn.execute(sa.select(sa.func.max(send_job.c.lease_expires_at))).scalar_one()

        transport = RecordingTransport()
        config = WorkerConfig(
            concurrency=50,
            lease_seconds=30,
            recovery_interval=INTERVAL,
            recovery_grace_seconds=GRACE,
            until_idle=True,
            idle_horizon_seconds=0,
        )
        worker = Worker(engine, {"email": transport}, config)
        report = asyncio.run(asyncio.wait_for(worker.run(), LEASE + GRACE + INTERVAL))

        assert report.sent == JOBS
        assert Counter(transport.sent) == Counter({f"k{i}@example.com": 1 for i in range(JOBS)})
        with engine.connect() as conn:
            states = Counter(conn.execute(sa.select(send_job.c.state)).scalars())
            released = (
                conn.execute(
                    sa.select(send_event.c.at).where(
                        send_event.c.from_state == "claimed", send_event.c.to_state == "pending"
                    )
                )
                .scalars()
                .all()
            )
        assert states == Counter({"sent": JOBS})
        assert len(released) == JOBS  # every one by R1, journalled
        # Not before the lease expired, and neither a grace nor an interval later: the
        # journal's moments and the lease are both on the database clock.
        late = [(at - expiry).total_seconds() for at in released]
        assert min(late) >= 0, min(late)
        assert max(late) <= SLACK, max(late)
    finally:
        engine.dispose()
