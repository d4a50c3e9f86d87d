"""A whole campaign through a real SMTP server, on SQLite and PostgreSQL."""

from __future__ import annotations

import email
import email.policy
import json
from collections import Counter
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple, message_id
from dispatch.states import is_valid_path
from dispatch.store import OutboxStore
from tests.support.campaign_files import run_worker, write_campaign
from tests.support.factories import invoke, launch
from tests.support.smtp_server import LedgerSMTPServer

LAUNCH = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_three_steps_to_200_recipients_each_arrive_once(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=200)
    assert launch(engine, path, now=LAUNCH).new_jobs == 600

    report = run_worker(engine, smtp_server.host, smtp_server.port)
    assert report.sent == 600

    # The expected keys are computed here, from the campaign's definition, not read back.
    expected = {
        message_id(KeyTuple("onboarding", step, LAUNCH, address).key(), "herald.test"): (
            step,
            address,
        )
        for step in ("welcome", "tips", "later")
        for address in addresses
    }
    accepted = smtp_server.accepted_ids()
    assert Counter(accepted).most_common(1)[0][1] == 1, "a Message-ID was accepted twice"
    assert set(accepted) == set(expected)

    for raw in smtp_server.messages():
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)  # what policy.default builds
        step, address = expected[msg["Message-ID"]]
        number = int(address[4:9])
        assert msg["To"].addresses[0].addr_spec == address
        assert msg["To"].addresses[0].display_name == f"User {number}"
        assert msg["X-Herald-Key"] == KeyTuple("onboarding", step, LAUNCH, address).key()
        assert msg["Date"] is not None
        if step == "welcome":
            assert msg["Subject"] == f"Welcome User {number}"
            assert msg.get_content_type() == "multipart/alternative"
            text, html = msg.iter_parts()
            assert text.get_content_type() == "text/plain"
            assert text.get_content().strip() == f"Hello User {number} from City{number % 7}."
            assert html.get_content_type() == "text/html"
            assert f"<b>User {number}</b>" in html.get_content()
        elif step == "tips":
            assert msg["Subject"] == f"Tips for City{number % 7}"
            assert msg.get_content_type() == "text/plain"
            assert msg.get_content().strip() == f"Tip for {address}"
        else:
            assert msg.get_content_type() == "multipart/alternative"
            text, html = msg.iter_parts()
            assert f"See you, User {number}" in text.get_content()

    result = invoke("status", "--json", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    snapshot = json.loads(result.output)
    assert snapshot["totals"]["sent"] == len(accepted) == 600
    assert snapshot["in_doubt"] == 0
    assert snapshot["failed"] == 0
    steps = {s["step"]: s for s in snapshot["campaigns"][0]["steps"]}
    assert {k: v["counts"]["sent"] for k, v in steps.items()} == {
        "welcome": 200,
        "tips": 200,
        "later": 200,
    }

    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        events = store.events(conn)
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for event in events:
        paths.setdefault(event.job_id, []).append((event.from_state, event.to_state))
    assert len(paths) == 600
    assert all(is_valid_path(p) for p in paths.values())
    assert all(p[-1][1] == "sent" for p in paths.values())


def test_later_steps_wait_for_their_delay(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=5, later="3d")
    assert launch(engine, path).new_jobs == 15
    store = OutboxStore(engine.dialect.name)
    run_worker(engine, smtp_server.host, smtp_server.port, config=None)
    # --until-idle waits for due work only while something is due within its poll: the
    # 3-day step must still be pending, untouched, and nothing of it was sent.
    with engine.connect() as conn:
        counts = {(step, state): n for _, step, state, n in store.counts(conn)}
    assert counts[("welcome", "sent")] == 5
    assert counts[("tips", "sent")] == 5
    assert counts[("later", "pending")] == 5
    assert len(smtp_server.accepted_ids()) == 10
