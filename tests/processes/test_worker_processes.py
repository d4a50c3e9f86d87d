"""Three concurrent worker processes on one database: every message exactly once."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.keys import KeyTuple, message_id
from dispatch.states import is_valid_path
from dispatch.store import OutboxStore
from scheduler.fanout import materialise
from tests.support.campaign_files import write_campaign
from tests.support.paths import HERALD
from tests.support.smtp_server import LedgerSMTPServer

RECIPIENTS = 400


def test_three_worker_processes_send_each_message_exactly_once(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    loaded = load_campaign(path)
    launched_at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    assert materialise(engine, loaded, launched_at).new_jobs == RECIPIENTS * 3

    command = [
        str(HERALD), "worker", "--until-idle", "--json",
        "--database-url", db_url,
        "--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}",
        "--concurrency", "10", "--poll", "0.05", "--retry-base", "0.01",
    ]  # fmt: skip
    workers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    reports = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=240)
        assert worker.returncode == 0, stderr
        reports.append(json.loads(stdout))
    assert sum(r["sent"] for r in reports) == RECIPIENTS * 3

    # What the SMTP server saw, against keys computed here from the campaign definition.
    expected = {
        message_id(KeyTuple("onboarding", step, launched_at, address).key(), "herald.test")
        for step in ("welcome", "tips", "later")
        for address in addresses
    }
    accepted = smtp_server.accepted_ids()
    duplicates = [mid for mid, n in Counter(accepted).items() if n > 1]
    assert duplicates == []
    assert set(accepted) == expected

    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        events = store.events(conn)
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for event in events:
        paths.setdefault(event.job_id, []).append((event.from_state, event.to_state))
    assert len(paths) == RECIPIENTS * 3
    invalid = {job: p for job, p in paths.items() if not is_valid_path(p)}
    assert invalid == {}
    assert all(p[-1] == ("sending", "sent") for p in paths.values())
