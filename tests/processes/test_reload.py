"""Graceful reload (SIGHUP) of real processes: stop as on SIGTERM, then re-execute the same
command line (same pid), so new settings and code take effect without losing or repeating a
send."""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from tests.support.campaign_files import write_campaign
from tests.support.factories import launch
from tests.support.service_process import ServiceProcess, wait_until
from tests.support.smtp_server import Fault, LedgerSMTPServer

RELOADING = "reloading: re-executing"


def states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(send_job.c.state)).scalars().all())


def slow_server(tmp_path: Path, delay: float) -> LedgerSMTPServer:
    def plan(key: str, n: int) -> Fault:
        return Fault.DELAY_REPLY

    server = LedgerSMTPServer(tmp_path / "ledger.txt", fault_plan=plan, delay=delay)
    server.start()
    return server


def start_worker(db_url: str, server: LedgerSMTPServer) -> ServiceProcess:
    return ServiceProcess(
        [
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
        ]
    )


def test_sighup_while_sending_restarts_the_worker_and_loses_or_repeats_nothing(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    launch(engine, write_campaign(tmp_path / "a", recipients=12, name="first")[0])  # 36 jobs
    server = slow_server(tmp_path, delay=0.4)
    worker = start_worker(db_url, server)
    try:
        # Reload while sends are inside DATA (the server holds each 250 for 0.4 s).
        wait_until(lambda: len(server.accepted_ids()) >= 2, timeout=60, what="2 sent")
        worker.signal(signal.SIGHUP)
        worker.wait_for_line(RELOADING, timeout=60)
        pid = worker.pid
        wait_until(lambda: states(engine)["sent"] == 36, timeout=120, what="all 36 sent")
        # The new incarnation keeps working: a campaign launched after the reload goes out too.
        launch(engine, write_campaign(tmp_path / "b", recipients=4, name="second")[0])
        wait_until(lambda: states(engine)["sent"] == 48, timeout=120, what="all 48 sent")
        assert worker.process.poll() is None
        assert worker.pid == pid
    finally:
        code = worker.stop()
        server.stop()
    assert code == 0, worker.stderr_lines
    # One report per incarnation: the first before the re-exec, the second at the SIGTERM.
    assert len([line for line in worker.stdout_lines if line.startswith("worker done")]) == 2
    assert len(worker.lines_with(RELOADING)) == 1
    accepted = server.accepted_ids()
    assert len(accepted) == len(set(accepted)) == 48, "a message lost or sent twice"
    assert states(engine) == Counter({"sent": 48})
    assert not worker.lines_with("Traceback")


def test_sigterm_after_sighup_stops_for_good(tmp_path: Path, engine: Engine, db_url: str) -> None:
    launch(engine, write_campaign(tmp_path / "a", recipients=4)[0])
    server = slow_server(tmp_path, delay=3)
    worker = start_worker(db_url, server)
    try:
        wait_until(lambda: states(engine)["sending"] >= 1, timeout=60, what="a send started")
        worker.signal(signal.SIGHUP)
        worker.wait_for_line("reloading: finishing")
        worker.signal(signal.SIGTERM)  # while the started sends are still inside DATA
        code = worker.finish(timeout=60)
    finally:
        worker.stop()
        server.stop()
    assert code == 0, worker.stderr_lines
    assert not worker.lines_with(RELOADING)
    counts = states(engine)
    assert counts["sending"] == counts["claimed"] == 0
    assert counts["sent"] == len(server.accepted_ids()) >= 1


def test_sighup_restarts_the_scheduler(tmp_path: Path, db_url: str) -> None:
    scheduler = ServiceProcess(["scheduler", "--database-url", db_url, "--tick", "0.5"])
    try:
        scheduler.wait_for_line("scheduler running")
        scheduler.signal(signal.SIGHUP)
        scheduler.wait_for_line("scheduler running", count=2)
        assert scheduler.process.poll() is None
    finally:
        code = scheduler.stop()
    assert code == 0, scheduler.stderr_lines
    assert len(scheduler.lines_with(RELOADING)) == 1
    assert len([line for line in scheduler.stdout_lines if "scheduler done" in line]) == 2


LISTENING = re.compile(r"herald serve: listening on (http://127\.0\.0\.1:\d+)")


def test_sighup_restarts_serve_and_it_serves_again(db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env["HERALD_SIGNING_KEYS"] = "k1:old-secret-0123456789"
    served = ServiceProcess(
        ["serve", "--host", "127.0.0.1", "--port", "0", "--database-url", db_url], env=env
    )
    try:
        first = served.wait_for_line("listening on")
        served.signal(signal.SIGHUP)
        second = served.wait_for_line("listening on", count=2)[1]
        found = LISTENING.search(second)
        assert found is not None, second
        # Serving again after the re-exec: an unknown token is a 404 page, not a refusal.
        answer = httpx.get(f"{found[1]}/u/not-a-token", timeout=30)
        assert answer.status_code in (400, 404)
        assert served.process.poll() is None
    finally:
        code = served.stop()
    assert code == 0, served.stderr_lines
    assert len(first) == 1
    assert len(served.lines_with(RELOADING)) == 1


def test_sighup_restarts_run_and_it_keeps_sending(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    run = ServiceProcess(
        [
            "run",
            "--database-url",
            db_url,
            "--smtp-url",
            f"smtp://{smtp_server.host}:{smtp_server.port}",
            "--tick",
            "0.5",
            "--poll",
            "0.05",
        ]
    )
    try:
        run.wait_for_line("scheduler running")
        run.signal(signal.SIGHUP)
        run.wait_for_line("scheduler running", count=2)
        launch(engine, write_campaign(tmp_path / "a", recipients=3)[0])  # 9 jobs
        wait_until(lambda: states(engine)["sent"] == 9, timeout=60, what="all 9 sent")
    finally:
        code = run.stop()
    assert code == 0, run.stderr_lines
    assert len([line for line in run.stdout_lines if line.startswith("run done")]) == 2
    accepted = smtp_server.accepted_ids()
    assert len(accepted) == len(set(accepted)) == 9
