"""``herald run``'s use case (herald.app.run): the scheduler loop and a worker on one event loop,
through a real SMTP server, stopped by SIGTERM like the command (docs/design.md §7).

The scheduler pass here is a stand-in that fans out one launch occurrence on its first pass;
the real pass is exercised by tests/processes/test_scheduler_processes.py.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple, message_id
from herald.app.run import run_all
from herald.app.scheduler import SchedulerOptions, SchedulerService
from herald.app.worker import WorkerOptions, build_worker
from tests.support.campaign_files import write_campaign
from tests.support.factories import launch
from tests.support.smtp_server import LedgerSMTPServer

LAUNCH = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DEADLINE = 60.0


@dataclass
class Fired:
    jobs: int

    @property
    def did_something(self) -> bool:
        return self.jobs > 0

    def line(self) -> str:
        return f"{self.jobs} new job(s)"

    def as_dict(self) -> dict[str, object]:
        return {"jobs": self.jobs}


def test_scheduler_and_worker_in_one_loop_deliver_and_stop_on_sigterm(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=15)
    passes: list[datetime] = []

    def run_pass(engine: Engine, *, now: datetime, actor: str) -> Fired:
        passes.append(now)
        return Fired(launch(engine, path, now=LAUNCH).new_jobs)  # idempotent after the first

    lines: list[str] = []
    service = SchedulerService(
        engine,
        options=SchedulerOptions(tick=0.2),
        run_pass=run_pass,
        next_wake=lambda engine, now: None,
        say=lines.append,
    )
    worker = build_worker(
        engine,
        f"smtp://{smtp_server.host}:{smtp_server.port}",
        WorkerOptions(poll=0.05, recovery_interval=0.5, retry_base=0.01),
    )
    expected = {
        message_id(KeyTuple("onboarding", step, LAUNCH, address).key(), "herald.test")
        for step in ("welcome", "tips", "later")
        for address in addresses
    }
    stopping: list[str] = []
    ended = threading.Event()
    sender = threading.Thread(target=_sigterm_when, args=(smtp_server, len(expected), ended))
    sender.start()
    try:
        report = run_all(
            worker, service, handle_signals=True, on_stopping=lambda: stopping.append("x")
        )
    finally:
        ended.set()  # never signal a process whose loop (and handler) is gone
        sender.join()
    assert stopping == ["x"]
    accepted = smtp_server.accepted_ids()
    assert Counter(accepted).most_common(1)[0][1] == 1
    assert set(accepted) == expected
    assert report.worker.sent == len(expected)
    assert report.scheduler.passes == len(passes) >= 1
    assert lines[0] == "scheduler running: a pass at least every 0.2s"
    assert lines[1].endswith(f" {len(expected)} new job(s)")
    assert report.as_dict()["scheduler"]["errors"] == 0


def _sigterm_when(server: LedgerSMTPServer, count: int, ended: threading.Event) -> None:
    """SIGTERM this process (the loop's handler) once the server holds ``count`` messages, or
    at the deadline; nothing if the run ``ended`` on its own (a failure)."""
    for _ in range(int(DEADLINE / 0.02)):
        if len(server.accepted_ids()) >= count or ended.is_set():
            break
        ended.wait(0.02)
    if not ended.is_set():
        os.kill(os.getpid(), signal.SIGTERM)
