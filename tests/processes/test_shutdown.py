"""Graceful shutdown of a real worker process: SIGTERM finishes started sends, releases the
rest at once, exits 0; a second signal exits immediately and the lease rules keep it safe."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.store import OutboxStore
from tests.support.campaign_files import run_worker, write_campaign
from tests.support.factories import launch
from tests.support.paths import HERALD
from tests.support.smtp_server import Fault, LedgerSMTPServer


def slow_server(tmp_path: Path, delay: float) -> LedgerSMTPServer:
    def plan(key: str, n: int) -> Fault:
        return Fault.DELAY_REPLY if key.startswith("<") else Fault.ACCEPT

    server = LedgerSMTPServer(tmp_path / "ledger.txt", fault_plan=plan, delay=delay)
    server.start()
    return server


def start_worker(db_url: str, server: LedgerSMTPServer) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(HERALD),
            "worker",
            "--database-url",
            db_url,
            "--smtp-url",
            f"smtp://{server.host}:{server.port}",
            "--concurrency",
            "4",
            "--poll",
            "0.05",
            "--lease",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached before the deadline")


def states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(send_job.c.state)).scalars().all())


def test_sigterm_finishes_started_sends_and_releases_the_rest(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    launch(engine, write_campaign(tmp_path / "c", recipients=20)[0])  # 60 jobs
    server = slow_server(tmp_path, delay=1.5)
    try:
        worker = start_worker(db_url, server)
        # Stop while sends are inside DATA (the server holds its 250 for 1.5 s).
        wait_for(lambda: len(server.accepted_ids()) >= 2)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
        assert worker.returncode == 0, stderr
    finally:
        server.stop()

    counts = states(engine)
    assert counts["claimed"] == 0
    assert counts["sending"] == 0
    # Every message the server stored was a started send that was allowed to finish.
    accepted = server.accepted_ids()
    assert counts["sent"] == len(accepted) >= 2
    assert counts["pending"] == 60 - len(accepted)
    with engine.connect() as conn:
        released = conn.execute(
            sa.select(sa.func.count()).where(send_event.c.detail == "released at shutdown")
        ).scalar_one()
    assert released >= 1, "unstarted claims should be released at once, not left to expire"


def test_a_second_signal_exits_at_once_and_leases_keep_it_safe(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    launch(engine, write_campaign(tmp_path / "c", recipients=10)[0])  # 30 jobs
    server = slow_server(tmp_path, delay=30)
    try:
        worker = start_worker(db_url, server)
        wait_for(lambda: len(server.accepted_ids()) >= 1)
        worker.send_signal(signal.SIGTERM)
        assert worker.stderr is not None
        # Signals sent back to back can coalesce into one: wait until the first was handled.
        # (The worker's start-up log line comes first.)
        assert any(line.startswith("stopping") for line in iter(worker.stderr.readline, ""))
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
        assert worker.returncode == 130
    finally:
        server.stop()
    counts = states(engine)
    assert counts["sending"] >= 1, "the forced exit left sends whose outcome is unknown"

    # After the lease expires recovery makes them in_doubt; nothing is sent twice.
    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.lease_expires_at.is_not(None))
            .values(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        )
        report = OutboxStore(engine.dialect.name).recover(conn, grace_seconds=0, actor="test")
    assert report.in_doubt == counts["sending"]
    fresh = LedgerSMTPServer(tmp_path / "ledger2.txt")
    fresh.start()
    try:
        run_worker(engine, fresh.host, fresh.port)
    finally:
        fresh.stop()
    in_doubt_ids = set(server.accepted_ids())
    assert in_doubt_ids.isdisjoint(fresh.accepted_ids())
    final = states(engine)
    assert final["in_doubt"] == counts["sending"]
    assert final["sent"] == 30 - counts["sending"]
