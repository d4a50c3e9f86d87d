"""Webhook steps through the real worker and a real local HTTP server, on SQLite and PostgreSQL.

The server counts what it receives; the expected keys are computed here from the campaign's
definition. 127.0.0.1 is reachable only through the operator allowlist, as in production.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.egress import EgressPolicy
from dispatch.keys import KeyTuple
from dispatch.models import send_job
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import is_valid_path
from dispatch.store import OutboxStore
from dispatch.transport import Transport
from dispatch.webhook import WebhookTransport
from dispatch.worker import Worker, WorkerConfig, WorkerReport
from tests.egress_support.servers import LocalHTTPServer, Reply, SeenRequest, redirect
from tests.support.campaign_files import fast_config
from tests.support.factories import launch
from tests.support.smtp_server import LedgerSMTPServer

LAUNCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # in the past: every job is due at once
PEOPLE = ["ann@example.com", "bob@example.com", "cat@example.com"]
SECRET = "s3cr3t-hook-token"


def write_campaign(
    folder: Path,
    url: str,
    *,
    in_doubt: str = "hold",
    email_step: bool = False,
    max_attempts: int = 5,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    audience = "\n".join(
        f"  - {{email: {address}, name: {address[:3].title()}, plan: gold}}" for address in PEOPLE
    )
    email = (
        "  - id: welcome\n    subject: Welcome {{ name }}\n    text: Hello {{ name }}.\n"
        if email_step
        else ""
    )
    path = folder / "campaign.yaml"
    path.write_text(
        f"""\
name: hooks
from: "Acme <news@acme.example>"
max_attempts: {max_attempts}
audience:
{audience}
steps:
{email}  - id: notify
    channel: webhook
    url: "{url}"
    headers:
      Authorization: "Bearer ${{HERALD_SECRET_HOOK_TOKEN}}"
      X-Campaign: hooks
    body:
      event: welcome
      user: {{email: "{{{{ email }}}}", name: "{{{{ name }}}}", plan: "{{{{ plan }}}}"}}
      tags: [new, "{{{{ plan | upper }}}}"]
      score: 1.5
    in_doubt: {in_doubt}
""",
        encoding="utf-8",
    )
    return path


def policy_for(server: LocalHTTPServer, **overrides: Any) -> EgressPolicy:
    environ = {
        "HERALD_EGRESS_ALLOW": "127.0.0.1/32",
        "HERALD_EGRESS_ALLOW_HTTP": "1",
        "HERALD_EGRESS_PORTS": str(server.port),
    }
    return EgressPolicy.from_env(environ, **overrides)


def run_worker(
    engine: Engine,
    policy: EgressPolicy,
    *,
    smtp: LedgerSMTPServer | None = None,
    config: WorkerConfig | None = None,
) -> WorkerReport:
    """A real Worker with both transports, as `herald worker` builds them."""
    smtp_host, smtp_port = (smtp.host, smtp.port) if smtp else ("127.0.0.1", 9)
    transports: dict[str, Transport] = {
        "email": SmtpTransport(SmtpConfig(smtp_host, smtp_port, command_timeout=10)),
        "webhook": WebhookTransport(policy, environ={"HERALD_SECRET_HOOK_TOKEN": SECRET}),
    }
    worker = Worker(engine, transports, config or fast_config())
    return asyncio.run(worker.run())


def jobs(engine: Engine) -> dict[str, Any]:
    """The webhook jobs by recipient."""
    J = send_job.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(send_job).where(J.channel == "webhook").order_by(J.id))
        return {row.recipient: row for row in rows}


def key_of(address: str, step: str = "notify") -> str:
    return KeyTuple("hooks", step, LAUNCH, address).key()


def by_key(requests: list[SeenRequest]) -> Counter[str]:
    return Counter(r.headers["idempotency-key"] for r in requests)


def test_each_key_is_delivered_once_through_a_503_retry(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    answered: Counter[str] = Counter()

    def hook(request: SeenRequest) -> Reply:
        key = request.headers["idempotency-key"]
        answered[key] += 1
        if answered[key] == 1:
            return Reply(status=503, body=b"busy, try again")
        return Reply(status=200, headers={"Content-Type": "application/json"}, body=b'{"ok":1}')

    with LocalHTTPServer({"/hook": hook}) as server:
        path = write_campaign(tmp_path, server.url("/hook"), email_step=True)
        assert launch(engine, path, now=LAUNCH).new_jobs == 2 * len(PEOPLE)
        report = run_worker(engine, policy_for(server), smtp=smtp_server)

    assert report.sent == 2 * len(PEOPLE)
    assert len(smtp_server.accepted_ids()) == len(PEOPLE)  # the email step went by SMTP
    expected = {key_of(address): address for address in PEOPLE}
    # Every key arrived twice (503, then 200): the same key both times, one 2xx each.
    assert by_key(server.requests) == {key: 2 for key in expected}
    for request in server.requests:
        address = expected[request.headers["idempotency-key"]]
        assert request.method == "POST"
        assert request.headers["authorization"] == f"Bearer {SECRET}"
        assert request.headers["x-campaign"] == "hooks"
        assert request.headers["content-type"] == "application/json"
        assert json.loads(request.body) == {
            "event": "welcome",
            "user": {"email": address, "name": address[:3].title(), "plan": "gold"},
            "tags": ["new", "GOLD"],
            "score": 1.5,
        }
    rows = jobs(engine)
    assert {row.state for row in rows.values()} == {"sent"}
    assert {row.send_attempts for row in rows.values()} == {2}
    assert {row.outcome_code for row in rows.values()} == {200}
    # The secret never reached the database: the payload keeps the reference.
    for row in rows.values():
        payload = json.loads(row.payload)
        assert payload["headers"]["Authorization"] == "Bearer ${HERALD_SECRET_HOOK_TOKEN}"
        assert SECRET.encode() not in row.payload
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        paths: dict[int, list[tuple[str | None, str]]] = {}
        for event in store.events(conn):
            paths.setdefault(event.job_id, []).append((event.from_state, event.to_state))
    assert all(is_valid_path(p) for p in paths.values())


@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_429_retry_after_is_honoured(tmp_path: Path, engine: Engine, form: str) -> None:
    wait = 300
    when: datetime | None = None
    if form == "seconds":
        retry_after = str(wait)
    else:
        # An absolute moment (whole seconds, as HTTP dates are): the wait it leaves shrinks
        # while the test runs, so the check below is against the moment, not a duration.
        when = (datetime.now(UTC) + timedelta(seconds=wait + 100)).replace(microsecond=0)
        retry_after = email.utils.format_datetime(when, usegmt=True)
    reply = Reply(status=429, headers={"Retry-After": retry_after})
    with LocalHTTPServer({"/hook": reply}) as server:
        launch(engine, write_campaign(tmp_path, server.url("/hook")), now=LAUNCH)
        report = run_worker(engine, policy_for(server))
    assert (report.retried, report.sent) == (len(PEOPLE), 0)
    assert len(server.requests) == len(PEOPLE)  # not retried within the run: it must wait
    for row in jobs(engine).values():
        assert (row.state, row.outcome_code) == ("pending", 429)
        if when is None:
            # not_before and outcome_at come from the same database clock reading.
            waited = (row.not_before - row.outcome_at).total_seconds()
            assert waited >= wait - 2, waited
        else:
            # Not before the date the server named (the database clock and ours are one host's).
            assert abs((row.not_before - when).total_seconds()) <= 2, (row.not_before, when)


@pytest.mark.parametrize(
    ("reply", "code", "text"),
    [
        (Reply(status=400, body=b"bad payload"), 400, "HTTP 400 Bad Request: bad payload"),
        (Reply(status=404), 404, "HTTP 404 Not Found"),
        (redirect("/elsewhere", status=307), None, "redirect not allowed"),
    ],
    ids=["400", "404", "307"],
)
def test_other_answers_fail_for_good(
    tmp_path: Path, engine: Engine, reply: Reply, code: int | None, text: str
) -> None:
    with LocalHTTPServer({"/hook": reply}) as server:
        launch(engine, write_campaign(tmp_path, server.url("/hook")), now=LAUNCH)
        report = run_worker(engine, policy_for(server))
    assert report.failed == len(PEOPLE)
    assert [r.path for r in server.requests] == ["/hook"] * len(PEOPLE)  # once each
    for row in jobs(engine).values():
        assert (row.state, row.outcome_code, row.send_attempts) == ("failed", code, 1)
        assert text in row.outcome_text
    if code is None:
        assert all("/elsewhere" in row.outcome_text for row in jobs(engine).values())


def test_a_denied_url_fails_with_the_rule_and_is_never_contacted(
    tmp_path: Path, engine: Engine
) -> None:
    with LocalHTTPServer({}) as server:
        # 127.0.0.2 is loopback too, but only 127.0.0.1 is on the allowlist.
        url = f"http://127.0.0.2:{server.port}/hook"
        launch(engine, write_campaign(tmp_path, url), now=LAUNCH)
        report = run_worker(engine, policy_for(server))
    assert report.failed == len(PEOPLE)
    assert server.requests == []
    for row in jobs(engine).values():
        assert row.state == "failed"
        assert row.send_attempts == 0  # refused in prepare: nothing was ever started
        assert "egress denied" in row.outcome_text
        assert "loopback (127.0.0.0/8)" in row.outcome_text


def test_connection_refused_is_retried_never_in_doubt(
    tmp_path: Path, engine: Engine, refused_port: int
) -> None:
    port = refused_port
    url = f"http://127.0.0.1:{port}/hook"
    launch(engine, write_campaign(tmp_path, url, max_attempts=2), now=LAUNCH)
    environ = {
        "HERALD_EGRESS_ALLOW": "127.0.0.1/32",
        "HERALD_EGRESS_ALLOW_HTTP": "1",
        "HERALD_EGRESS_PORTS": str(port),
    }
    report = run_worker(engine, EgressPolicy.from_env(environ))
    assert (report.in_doubt, report.failed) == (0, len(PEOPLE))
    for row in jobs(engine).values():
        assert (row.state, row.send_attempts) == ("failed", 2)
        assert "before the request was sent" in row.outcome_text


def stall_once() -> tuple[Counter[str], Any]:
    calls: Counter[str] = Counter()

    def hook(request: SeenRequest) -> Reply:
        key = request.headers["idempotency-key"]
        calls[key] += 1
        return Reply(stall=True) if calls[key] == 1 else Reply(status=200)

    return calls, hook


@pytest.mark.parametrize("policy", ["hold", "resend"])
def test_timeout_after_sending_is_in_doubt_and_resent_only_by_policy(
    tmp_path: Path, engine: Engine, policy: str
) -> None:
    calls, hook = stall_once()
    with LocalHTTPServer({"/hook": hook}) as server:
        launch(engine, write_campaign(tmp_path, server.url("/hook"), in_doubt=policy), now=LAUNCH)
        guard = policy_for(server, total_timeout=1.0)
        # No recovery pass inside the first run, so its outcome is observable in between.
        first = run_worker(engine, guard, config=fast_config(recovery_interval=3600))
        assert first.in_doubt == len(PEOPLE)
        for row in jobs(engine).values():
            assert (row.state, row.in_doubt_policy) == ("in_doubt", policy)
            assert "after the request was sent" in row.in_doubt_reason
        # A later worker's start-up recovery applies the step's policy.
        second = run_worker(engine, guard)
    rows = jobs(engine)
    if policy == "hold":
        assert second.sent == 0
        assert {row.state for row in rows.values()} == {"in_doubt"}
        assert by_key(server.requests) == {key_of(a): 1 for a in PEOPLE}
    else:
        assert second.sent == len(PEOPLE)
        assert {(row.state, row.send_attempts) for row in rows.values()} == {("sent", 2)}
        assert {row.resolution for row in rows.values()} == {"policy: resend"}
        # Resent once each, with the same key the receiver deduplicates on.
        assert by_key(server.requests) == {key_of(a): 2 for a in PEOPLE}
    assert calls == by_key(server.requests)
