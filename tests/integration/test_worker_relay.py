"""The worker against an unreachable relay, in-process, on SQLite and PostgreSQL: hand-backs
that cost nothing, however many runs; ``--until-idle`` stops at once; a send that succeeds marks
the relay ok again, whichever worker recorded the outage."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import relay_status, send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import OutboxStore
from dispatch.transport import RelayUnavailable
from dispatch.worker import Worker
from dispatch.worker_report import WorkerReport
from herald.app.status import status
from herald.app.worker import RelayDown, relay_down
from tests.support.campaign_files import fast_config, run_worker, write_campaign
from tests.support.factories import launch
from tests.support.smtp_server import LedgerSMTPServer

RECIPIENTS = 4  # x 3 steps


def rows(engine: Engine) -> set[tuple[str, int, int]]:
    with engine.connect() as conn:
        return {
            (r.state, r.claims, r.send_attempts)
            for r in conn.execute(
                sa.select(send_job.c.state, send_job.c.claims, send_job.c.send_attempts)
            )
        }


def test_until_idle_stops_at_once_and_many_runs_cost_the_jobs_nothing(
    tmp_path: Path, engine: Engine, refused_port: int
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    assert launch(engine, path).new_jobs == RECIPIENTS * 3
    port = refused_port
    for _ in range(12):  # more runs than max_claims (10): each used to cost every job a claim
        started = time.monotonic()
        with pytest.raises(RelayUnavailable) as caught:
            run_worker(engine, "127.0.0.1", port)
        assert time.monotonic() - started < 10
        assert caught.value.line == (
            f"relay unreachable: connection refused (smtp://127.0.0.1:{port})"
        )
        with engine.begin() as conn:
            report = OutboxStore(engine.dialect.name).recover(
                conn, grace_seconds=0, actor="recovery"
            )
        assert report.dead == 0
    assert rows(engine) == {("pending", 0, 0)}
    snapshot = status(engine)
    assert [(r["relay"], r["state"], r["last_error"]) for r in snapshot["relays"]] == [
        (f"smtp://127.0.0.1:{port}", "unreachable", "connection refused")
    ]


def test_the_until_idle_line_says_what_was_sent() -> None:
    error = RelayUnavailable("connection refused", relay="smtp://relay.test:25")
    nothing = relay_down(error, WorkerReport())
    some = relay_down(error, WorkerReport(sent=3))
    assert isinstance(nothing, RelayDown)
    assert nothing.exit_code == 1
    assert nothing.message == (
        "relay unreachable: connection refused (smtp://relay.test:25); nothing sent;"
        " the rest stay pending, no attempt counted"
    )
    assert "3 sent before it" in some.message


def test_a_long_running_worker_holds_claims_and_a_success_marks_the_relay_ok(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer, refused_port: int
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    assert launch(engine, path).new_jobs == RECIPIENTS * 3
    port = refused_port

    async def outage_then_stop() -> Worker:
        # Not --until-idle: the worker waits for the relay instead of giving up.
        transport = SmtpTransport(SmtpConfig("127.0.0.1", port, command_timeout=5))
        worker = Worker(engine, {"email": transport}, fast_config(until_idle=False))
        running = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 20
        while worker.report.relay_unavailable < RECIPIENTS * 3 or not worker.relay.holding():
            assert time.monotonic() < deadline, worker.report
            await asyncio.sleep(0.02)
        # Sampling: while the breaker is open, nothing is claimed. A window counts only if the
        # breaker held all through it (same opening at both ends): on a loaded machine the
        # backoff can run out mid-window and a probe's claim is then allowed.
        circuit = worker.relay.circuits["email"]
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, worker.report
            opening, claimed = (circuit.openings, circuit.open_until), worker.report.claimed
            await asyncio.sleep(min(0.3, circuit.wait() / 2))
            if circuit.holding() and (circuit.openings, circuit.open_until) == opening:
                break
        assert worker.report.claimed == claimed
        worker.stop()
        await running
        return worker

    worker = asyncio.run(outage_then_stop())
    assert worker.fatal is None  # a long-running worker does not give up on the relay
    assert worker.report.sent == 0
    assert rows(engine) == {("pending", 0, 0)}

    # Another worker, another relay name: record the outage under the real server's name, as a
    # worker that met it would have; a send that succeeds there marks it ok again.
    relay = f"smtp://127.0.0.1:{smtp_server.port}"
    with engine.begin() as conn:
        OutboxStore(engine.dialect.name).record_relay(
            conn, relay, reachable=False, error="connection refused", worker="elsewhere"
        )
    assert "relay unreachable" in _status_line(engine, relay)
    report = run_worker(engine, smtp_server.host, smtp_server.port)
    assert report.sent == RECIPIENTS * 3
    with engine.connect() as conn:
        states = dict(conn.execute(sa.select(relay_status.c.relay, relay_status.c.state)).all())
    assert states[relay] == "ok"
    assert states[f"smtp://127.0.0.1:{port}"] == "unreachable"
    assert {(s, c, a) for s, c, a in rows(engine)} == {("sent", 1, 1)}


def _status_line(engine: Engine, relay: str) -> str:
    from io import StringIO

    from rich.console import Console

    from herald.cli.status import render

    buffer = StringIO()
    render(Console(file=buffer, width=300, no_color=True), status(engine))
    lines = [line for line in buffer.getvalue().splitlines() if relay in line]
    assert len(lines) == 1, buffer.getvalue()
    return lines[0]
