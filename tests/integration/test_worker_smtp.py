"""What the worker does with each kind of SMTP reply, through a real server, on both databases."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.job_send import PAYLOAD_PRUNED
from dispatch.models import send_job
from dispatch.states import State, is_valid_path
from dispatch.store import OutboxStore
from tests.support.campaign_files import run_worker
from tests.support.factories import launch, write_yaml
from tests.support.smtp_server import Fault, FaultPlan, LedgerSMTPServer

ONE_STEP = """\
name: outcomes
from: news@herald.test
audience:
  - alice@example.com
max_attempts: {max_attempts}
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""


def launch_one(engine: Engine, folder: Path, max_attempts: int = 5) -> None:
    path = write_yaml(folder, ONE_STEP.format(max_attempts=max_attempts))
    assert launch(engine, path).new_jobs == 1


StartServer = Callable[[FaultPlan], LedgerSMTPServer]


@pytest.fixture
def server_with(tmp_path: Path) -> Iterator[StartServer]:
    servers: list[LedgerSMTPServer] = []

    def start(plan: FaultPlan) -> LedgerSMTPServer:
        server = LedgerSMTPServer(tmp_path / f"ledger{len(servers)}.txt", fault_plan=plan)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def is_message_id(key: str) -> bool:
    """The fault plan is asked at RCPT (with the address) and at DATA (with the Message-ID)."""
    return key.startswith("<")


def at_data(fault_for_nth: Callable[[int], Fault]) -> FaultPlan:
    return lambda key, n: fault_for_nth(n) if is_message_id(key) else Fault.ACCEPT


def only_job(engine: Engine) -> tuple[Any, list[tuple[str | None, str]], list[Any]]:
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        rows = [row for state in State for row in store.jobs_in_state(conn, state)]
        assert len(rows) == 1
        events = store.events(conn, [rows[0].id])
    return rows[0], [(e.from_state, e.to_state) for e in events], events


def test_451_then_250_is_sent_after_one_retry(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(at_data(lambda n: Fault.TEMPFAIL if n == 1 else Fault.ACCEPT))
    launch_one(engine, tmp_path / "c")
    report = run_worker(engine, server.host, server.port)
    job, path, _ = only_job(engine)
    assert (report.sent, report.retried) == (1, 1)
    assert job.state == "sent"
    assert job.send_attempts == 2
    assert path == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "sending"),
        ("sending", "pending"),
        ("pending", "claimed"),
        ("claimed", "sending"),
        ("sending", "sent"),
    ]
    assert server.accepted_ids() == [job.message_id]
    assert server.seen(job.message_id) == 2


def test_550_in_data_fails_with_the_reply_text(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(at_data(lambda n: Fault.REJECT))
    launch_one(engine, tmp_path / "c")
    report = run_worker(engine, server.host, server.port)
    job, path, _ = only_job(engine)
    assert report.failed == 1
    assert job.state == "failed"
    assert job.outcome_code == 550
    assert "Message refused (injected fault)" in job.outcome_text
    assert path[-1] == ("sending", "failed")
    assert server.accepted_ids() == []


def test_550_at_rcpt_fails_before_data(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(lambda key, n: Fault.ACCEPT if is_message_id(key) else Fault.RCPT_REJECT)
    launch_one(engine, tmp_path / "c")
    run_worker(engine, server.host, server.port)
    job, path, _ = only_job(engine)
    assert job.state == "failed"
    assert job.outcome_code == 550
    assert job.send_attempts == 0, "no DATA was attempted"
    assert "RCPT" in job.outcome_text
    assert path[-1] == ("claimed", "failed")
    assert is_valid_path(path)


def test_451_every_time_uses_up_the_attempts(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(at_data(lambda n: Fault.TEMPFAIL))
    launch_one(engine, tmp_path / "c", max_attempts=3)
    report = run_worker(engine, server.host, server.port)
    job, path, _ = only_job(engine)
    assert job.state == "failed"
    assert job.send_attempts == 3
    assert "attempts exhausted" in job.outcome_text
    assert report.retried == 2
    assert report.failed == 1
    assert server.seen(job.message_id) == 3
    assert is_valid_path(path)


def test_drop_after_the_body_is_in_doubt_and_never_resent(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(at_data(lambda n: Fault.DROP_AFTER_STORE))
    launch_one(engine, tmp_path / "c")
    report = run_worker(engine, server.host, server.port)
    assert report.in_doubt == 1
    job, path, _ = only_job(engine)
    assert job.state == "in_doubt"
    assert "SMTPServerDisconnected" in job.in_doubt_reason
    assert path[-1] == ("sending", "in_doubt")
    # The server did store it (the RFC 1047 gap): a resend would be a duplicate.
    assert server.accepted_ids() == [job.message_id]

    again = run_worker(engine, server.host, server.port)
    assert again.claimed == 0
    assert server.seen(job.message_id) == 1


def test_a_claimed_job_whose_payload_was_pruned_fails_before_the_relay_is_asked(
    tmp_path: Path, engine: Engine, server_with: StartServer
) -> None:
    server = server_with(lambda key, n: Fault.ACCEPT)
    launch_one(engine, tmp_path / "c")
    with engine.begin() as conn:  # what `herald prune` leaves of a payload
        conn.execute(sa.update(send_job).values(payload=b""))
    report = run_worker(engine, server.host, server.port)
    job, path, _ = only_job(engine)
    assert (report.failed, report.sent) == (1, 0)
    assert (job.state, job.outcome_text, job.send_attempts) == ("failed", PAYLOAD_PRUNED, 0)
    assert path[-1] == ("claimed", "failed")
    assert server.accepted_ids() == []
    assert server.seen(job.message_id) == 0
