"""Database faults around the point of no return (docs/design.md §6, issue 3 item 4).

A T4 commit whose outcome is unknown never leads to a send before the row is re-read; a
completion write that fails is retried while the lease lasts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.commit_requests import Complete, OutboxRequest, StartSend
from dispatch.committer import GroupCommitter
from dispatch.models import send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import is_valid_path
from dispatch.store import OutboxStore
from dispatch.worker import Worker
from scheduler.fanout import materialise
from tests.support.campaign_files import fast_config
from tests.support.smtp_server import LedgerSMTPServer

CAMPAIGN = """\
name: faults
from: news@herald.test
audience: [a@example.com, b@example.com, c@example.com]
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""


def launch(engine: Engine, folder: Path) -> None:
    folder.mkdir()
    (folder / "c.yaml").write_text(CAMPAIGN)
    loaded = load_campaign(folder / "c.yaml")
    registration = register(engine, loaded, now=datetime.now(UTC))
    materialise(engine, loaded, registration.campaign.launched_at)


def lost_connection() -> OperationalError:
    return OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))


def inject(
    committer: GroupCommitter,
    kind: type[OutboxRequest[Any]],
    times: int,
    *,
    after_commit: bool,
) -> dict[str, int]:
    """Make the next ``times`` batches holding a ``kind`` request fail, before or after commit."""
    original: Callable[[list[Any]], list[Any]] = committer._transaction
    hits = {"count": 0}

    def faulty(batch: list[Any]) -> list[Any]:
        if hits["count"] >= times or not any(isinstance(p.request, kind) for p in batch):
            return original(batch)
        hits["count"] += 1
        if after_commit:
            original(batch)  # committed; the acknowledgement is lost on the way back
        raise lost_connection()

    committer._transaction = faulty  # type: ignore[method-assign]
    return hits


def run(
    engine: Engine,
    server: LedgerSMTPServer,
    kind: type[OutboxRequest[Any]],
    *,
    after_commit: bool,
) -> Worker:
    transport = SmtpTransport(SmtpConfig(server.host, server.port, data_timeout=10))
    worker = Worker(engine, {"email": transport}, fast_config(concurrency=3))
    hits = inject(worker.committer, kind, times=1, after_commit=after_commit)
    asyncio.run(worker.run())
    assert hits["count"] == 1, "the fault was never injected"
    return worker


def assert_each_sent_once(engine: Engine, server: LedgerSMTPServer) -> None:
    accepted = server.accepted_ids()
    assert len(accepted) == len(set(accepted)) == 3
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        states = conn.execute(sa.select(send_job.c.state)).scalars().all()
        events = store.events(conn)
    assert states == ["sent"] * 3
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for e in events:
        paths.setdefault(e.job_id, []).append((e.from_state, e.to_state))
    assert all(is_valid_path(p) for p in paths.values())


def test_t4_committed_but_ack_lost_rereads_then_sends_once(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    run(engine, smtp_server, StartSend, after_commit=True)
    assert_each_sent_once(engine, smtp_server)


def test_t4_rolled_back_is_retried_then_sends_once(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    run(engine, smtp_server, StartSend, after_commit=False)
    assert_each_sent_once(engine, smtp_server)


def test_a_failed_completion_write_is_retried(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    worker = run(engine, smtp_server, Complete, after_commit=False)
    assert worker.report.sent == 3
    assert_each_sent_once(engine, smtp_server)


def test_a_completion_committed_but_ack_lost_is_not_double_counted(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, tmp_path / "c")
    run(engine, smtp_server, Complete, after_commit=True)
    assert_each_sent_once(engine, smtp_server)
