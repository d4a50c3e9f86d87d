"""Relay outages with real processes (issue 10, item 6): the relay goes away in the middle of a
campaign and comes back; a wrong port ends ``--until-idle`` at once with one line.

The outage is the issue's 30 seconds on PostgreSQL, the production database, and 8 on SQLite
(the same thing to the worker — longer than its breaker backoff ladder up to 8 s, many probes,
every claim handed back several times — at a quarter of the suite's time). Nothing may be lost
or counted: every job is sent once, with exactly one attempt and one claim.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.keys import KeyTuple, message_id
from dispatch.models import relay_status, send_job
from dispatch.states import T, is_valid_path
from dispatch.store import OutboxStore
from scheduler.fanout import materialise
from tests.support.campaign_files import write_campaign
from tests.support.paths import HERALD
from tests.support.relay_outage import OutageSMTPServer
from tests.support.smtp_server import Fault

RECIPIENTS = 40  # x 3 steps
OUTAGES = {"postgresql": 30.0, "sqlite": 8.0}  # seconds the relay is down, by backend
DOWN_AFTER = 30  # messages accepted before the relay goes away
# Seconds from the worker's first claim to its exit: "within seconds, not minutes". Counted
# from the claim (the journal's time), not from the process's start: start-up is imports,
# whose time grows with the machine's load, and is not what the test is about.
WRONG_PORT_DEADLINE = 10.0


def _launch(tmp_path: Path, engine: Engine, recipients: int) -> tuple[datetime, list[str]]:
    path, addresses = write_campaign(tmp_path / "c", recipients=recipients)
    loaded = load_campaign(path)
    launched_at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    assert materialise(engine, loaded, launched_at).new_jobs == recipients * 3
    return launched_at, addresses


def _until(what: str, check: object, deadline: float) -> None:
    assert callable(check)
    until = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.05)


def _states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(state for (state,) in conn.execute(sa.select(send_job.c.state)))


def _status_json(db_url: str) -> dict[str, object]:
    done = subprocess.run(
        [str(HERALD), "status", "--json", "--database-url", db_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_relay_outage_mid_campaign_costs_time_not_attempts(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    outage = OUTAGES[engine.dialect.name]
    launched_at, addresses = _launch(tmp_path, engine, RECIPIENTS)
    total = RECIPIENTS * 3
    # Each reply a little late, so the campaign is still going when the relay goes away.
    server = OutageSMTPServer(
        tmp_path / "ledger.txt", fault_plan=lambda key, n: Fault.DELAY_REPLY, delay=0.03
    )
    server.start()
    logs = [tmp_path / f"worker{i}.err" for i in range(2)]
    command = [
        str(HERALD), "worker",
        "--database-url", db_url,
        "--smtp-url", f"smtp://{server.host}:{server.port}",
        "--concurrency", "3", "--poll", "0.05", "--retry-base", "0.01", "--lease", "30",
    ]  # fmt: skip
    workers = []
    try:
        for log in logs:
            with log.open("w") as stderr:
                workers.append(
                    subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
                )
        _until("the first messages", lambda: len(server.accepted_ids()) >= DOWN_AFTER, 60)
        server.go_down()
        went_down = time.monotonic()
        accepted_before = len(server.accepted_ids())
        assert accepted_before < total, "the campaign finished before the outage"

        # While it is down: nothing fails, nothing is in doubt, and status says why.
        def recorded_down() -> bool:
            with engine.connect() as conn:
                return bool(
                    conn.execute(
                        sa.select(sa.func.count())
                        .select_from(relay_status)
                        .where(relay_status.c.state == "unreachable")
                    ).scalar()
                )

        _until("relay_status to say unreachable", recorded_down, outage)
        snapshot = _status_json(db_url)
        relays = snapshot["relays"]
        assert isinstance(relays, list)
        assert [(r["relay"], r["state"]) for r in relays] == [
            (f"smtp://127.0.0.1:{server.port}", "unreachable")
        ]
        text = subprocess.run(
            [str(HERALD), "status", "--database-url", db_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "relay unreachable since" in text.stdout, text.stdout
        while time.monotonic() - went_down < outage:
            states = _states(engine)
            assert states["failed"] == 0, states
            assert states["in_doubt"] == 0, states
            time.sleep(0.2)  # sampling the outage, not synchronising
        assert len(server.accepted_ids()) == accepted_before
        server.come_back()

        _until("every job sent", lambda: _states(engine)["sent"] == total, 90)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
        server.stop()
    assert [w.returncode for w in workers] == [0, 0]

    # Every expected message accepted exactly once (keys computed here, not read back).
    expected = {
        message_id(KeyTuple("onboarding", step, launched_at, address).key(), "herald.test")
        for step in ("welcome", "tips", "later")
        for address in addresses
    }
    accepted = server.accepted_ids()
    assert [mid for mid, n in Counter(accepted).items() if n > 1] == []
    assert set(accepted) == expected

    # Nothing counted against any job: one attempt, one claim each, whatever it went through.
    with engine.connect() as conn:
        rows = list(conn.execute(sa.select(send_job.c.send_attempts, send_job.c.claims)))
        relay_rows = list(conn.execute(sa.select(relay_status.c.state)))
    assert Counter((r.send_attempts, r.claims) for r in rows) == {(1, 1): total}
    assert [r.state for r in relay_rows] == ["ok"]

    with engine.connect() as conn:
        events = OutboxStore(engine.dialect.name).events(conn)
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for event in events:
        paths.setdefault(event.job_id, []).append((event.from_state, event.to_state))
    assert all(is_valid_path(p) for p in paths.values())
    assert all(p[-1] == ("sending", "sent") for p in paths.values())
    handed_back = [e for e in events if (e.detail or "").startswith("relay unreachable:")]
    assert handed_back, "the outage never reached a claim"
    assert all((e.from_state, e.to_state) == ("claimed", "pending") for e in handed_back)

    # One line per worker that met the outage (at once), not one per job or per probe.
    lines = [
        [line for line in log.read_text().splitlines() if "relay unreachable:" in line]
        for log in logs
    ]
    assert 1 <= sum(len(found) for found in lines) <= 2, lines
    assert all(len(found) <= 1 for found in lines), lines
    assert all(f"(smtp://127.0.0.1:{server.port})" in line for found in lines for line in found)


def test_a_wrong_port_gives_one_clear_line_and_exit_1_at_once(
    tmp_path: Path, engine: Engine, db_url: str, refused_port: int
) -> None:
    _launch(tmp_path, engine, 8)
    port = refused_port
    done = subprocess.run(
        [
            str(HERALD),
            "worker",
            "--until-idle",
            "--database-url",
            db_url,
            "--smtp-url",
            f"smtp://herald:s3cret-pw@127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"},
    )
    ended = datetime.now(UTC)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    (line,) = lines
    assert f"relay unreachable: connection refused (smtp://127.0.0.1:{port})" in line
    assert "nothing sent" in line
    assert "s3cret" not in line

    with engine.connect() as conn:
        rows = list(
            conn.execute(sa.select(send_job.c.state, send_job.c.send_attempts, send_job.c.claims))
        )
    assert {(r.state, r.send_attempts, r.claims) for r in rows} == {("pending", 0, 0)}
    with engine.connect() as conn:
        events = OutboxStore(engine.dialect.name).events(conn)
    first_claim = min(e.at for e in events if e.to_state == "claimed")
    after_claim = (ended - first_claim).total_seconds()
    assert after_claim < WRONG_PORT_DEADLINE, after_claim
    moves = {(e.from_state, e.to_state, e.detail) for e in events if e.from_state is not None}
    assert moves <= {
        ("pending", "claimed", None),
        ("claimed", "pending", f"relay unreachable: connection refused (smtp://127.0.0.1:{port})"),
        ("claimed", "pending", "released at shutdown"),
    }, moves
    assert T.RELAY_UNAVAILABLE.code == "W4"
