"""DKIM and the VERP return path, end to end at a real SMTP server, on SQLite and PostgreSQL.

A real worker (built from settings as ``herald worker`` builds it) sends; the aiosmtpd test
server receives; for EVERY message it received both signatures verify (dkimpy, against the TXT
records served by an injected resolver), the unsubscribe headers are in ``h=``, and the
envelope sender the server saw decodes to the job's key.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.outbox_client import OutboxClient
from dispatch.signed_tokens import SigningKeys, read_address_token
from dispatch.smtp import SmtpTransport
from dispatch.store import Lease, NewJob, OutboxStore
from dispatch.transport import Envelope
from herald.app.worker import WorkerOptions, build_worker
from herald.errors import ConfigError
from herald.transports import build_transports
from templates.mime import build_message
from templates.render import RenderedContent
from tests.support.dkim_dns import (
    keys_resolver,
    signature_count,
    signed_headers,
    verifies,
    write_keys,
)
from tests.support.factories import key_of, launch, new_job, write_yaml
from tests.support.mail_reading import parse
from tests.support.smtp_server import Fault, LedgerSMTPServer

SIGNING_KEYS = "k2:a-current-secret-of-some-length,k1:an-older-secret-still-valid"
BOUNCE_DOMAIN = "bounces.herald.test"
OPTIONS = WorkerOptions(until_idle=True, poll=0.05, retry_base=0.01, recovery_interval=0.5)

CAMPAIGN = """\
name: signed
from: News Desk <news@herald.test>
reply_to: help@herald.test
audience:
  - alice@example.com
  - "Zoë Ünïcode <zoe@example.com>"
  - bob@example.org
steps:
  - id: hello
    subject: Grüße, {{ email }} — a long subject that goes on and on and on and on and on
    text: |
      Hello there, ünïcödé text.
      .a line that starts with a dot
      A very long line: {{ "x" * 300 }}
    html: "<p>Hello <b>there</b> — ünïcödé</p>"
"""


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **write_keys(tmp_path / "keys"),
        "HERALD_SIGNING_KEYS": SIGNING_KEYS,
        "HERALD_BOUNCE_DOMAIN": BOUNCE_DOMAIN,
        **extra,
    }


def smtp_url(server: LedgerSMTPServer) -> str:
    return f"smtp://{server.host}:{server.port}?timeout=10&data_timeout=10"


def with_unsubscribe(job: NewJob, number: int) -> NewJob:
    """A job whose payload carries the RFC 8058 headers, as the scheduler composes them."""
    payload = build_message(
        sender="news@herald.test",
        sender_name="News",
        recipient=job.recipient,
        recipient_name=None,
        reply_to=None,
        content=RenderedContent(subject=f"Newsletter {number}", text="Read on.\n", html=None),
        message_id=job.message_id,
        key=job.key,
        extra_headers={
            "List-Unsubscribe": f"<https://mail.herald.test/u/1.k2.t{number}.m>,"
            f" <mailto:unsub+t{number}@herald.test>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            "List-Id": "Newsletter <news.herald.test>",
        },
    )
    return dataclasses.replace(job, payload=payload)


def enqueue(engine: Engine, jobs: list[NewJob]) -> None:
    with engine.begin() as conn:
        assert OutboxStore(engine.dialect.name).enqueue(conn, jobs) == len(jobs)


def jobs_by_message_id(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return {row.message_id: row for row in conn.execute(sa.select(send_job))}


def assert_every_message_verifies(server: LedgerSMTPServer, engine: Engine) -> None:
    dns = keys_resolver()
    jobs = jobs_by_message_id(engine)
    keys = SigningKeys.parse(SIGNING_KEYS)
    received = server.received()
    assert received, "nothing was received"
    for mail_from, raw in received:
        assert signature_count(raw) == 2
        assert verifies(raw, dns, 0), raw[:2000]  # rsa-sha256, topmost
        assert verifies(raw, dns, 1), raw[:2000]  # ed25519-sha256
        for idx in (0, 1):
            h = signed_headers(raw, idx)
            assert h.count("list-unsubscribe") >= 1
            assert h.count("list-unsubscribe-post") >= 1
        job = jobs[parse(raw)["Message-ID"]]
        local, _, domain = mail_from.partition("@")
        assert domain == BOUNCE_DOMAIN
        assert local.startswith("bounce+")
        assert read_address_token(keys, "bounce", local.removeprefix("bounce+")) == job.key[:16]


def test_every_message_a_real_worker_sends_is_signed_twice_and_carries_its_verp_sender(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, write_yaml(tmp_path / "c", CAMPAIGN))
    due = datetime.now(UTC) - timedelta(seconds=1)
    enqueue(engine, [with_unsubscribe(new_job(key_of(f"n{i}"), due=due), i) for i in range(5)])
    worker = build_worker(engine, smtp_url(smtp_server), OPTIONS, environ=environment(tmp_path))

    report = asyncio.run(worker.run())

    assert report.sent == 8
    assert len(smtp_server.received()) == 8
    assert_every_message_verifies(smtp_server, engine)
    # The unsubscribe headers are signed where present, once more to forbid a second copy.
    with_headers = [raw for _, raw in smtp_server.received() if b"List-Unsubscribe:" in raw]
    assert len(with_headers) == 5
    for raw in with_headers:
        h = signed_headers(raw)
        assert (h.count("list-unsubscribe"), h.count("list-unsubscribe-post")) == (2, 2)
        assert "list-id" in h


def test_a_retried_job_keeps_its_return_path_and_its_retry_is_signed_anew(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    job = with_unsubscribe(new_job(key_of("retry"), due=datetime.now(UTC)), 1)
    enqueue(engine, [job])
    failing = LedgerSMTPServer(
        tmp_path / "ledger-451.txt",
        fault_plan=lambda key, n: (
            Fault.TEMPFAIL if n == 1 and key.startswith("<") else Fault.ACCEPT
        ),
    )
    with failing:
        worker = build_worker(engine, smtp_url(failing), OPTIONS, environ=environment(tmp_path))
        report = asyncio.run(worker.run())
        assert (report.sent, report.retried) == (1, 1)
        attempts = failing.data_senders()
        assert len(attempts) == 2
        assert attempts[0] == attempts[1]  # same MAIL FROM on the retry: greylisting clears
        assert_every_message_verifies(failing, engine)


class LostT4Acknowledgement(OutboxClient):
    """T4 commits, but the worker hears an error: it re-reads the row before sending."""

    lost = 0

    async def start_send(self, lease: Lease) -> datetime | None:
        started = await super().start_send(lease)
        if not self.lost:
            self.lost += 1
            raise ConnectionError("server closed the connection during COMMIT")
        return started


def test_a_reread_of_the_same_attempt_yields_the_same_signed_bytes(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    job = with_unsubscribe(new_job(key_of("reread"), due=datetime.now(UTC)), 7)
    enqueue(engine, [job])
    env = environment(tmp_path)
    worker = build_worker(engine, smtp_url(smtp_server), OPTIONS, environ=env)
    worker.outbox = LostT4Acknowledgement(worker.committer)

    assert asyncio.run(worker.run()).sent == 1

    assert worker.outbox.lost == 1
    ((_, raw),) = smtp_server.received()
    row = jobs_by_message_id(engine)[job.message_id]
    # Derived again, by another transport built from the same settings, from the row alone.
    transport = build_transports(smtp_url(smtp_server), env)["email"]
    assert isinstance(transport, SmtpTransport)
    envelope = Envelope(
        row.id, row.key, row.channel, row.sender, row.recipient, row.message_id, row.payload
    )
    assert transport.final_bytes(envelope, row.send_started_at) == raw
    assert_every_message_verifies(smtp_server, engine)


def test_without_dkim_settings_messages_go_out_unsigned_from_their_sender(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    enqueue(engine, [new_job(key_of("plain"), due=datetime.now(UTC))])
    worker = build_worker(engine, smtp_url(smtp_server), OPTIONS, environ={})

    assert asyncio.run(worker.run()).sent == 1

    ((mail_from, raw),) = smtp_server.received()
    assert mail_from == "news@herald.test"
    assert signature_count(raw) == 0


def test_a_payload_that_cannot_be_signed_fails_its_job_without_sending_anything(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    # Not something Herald renders: a stored payload whose header block is not RFC 5322.
    broken = dataclasses.replace(
        new_job(key_of("unsignable"), due=datetime.now(UTC)),
        payload=b"From: news@herald.test\r\nthis is not a header\r\n\r\nbody\r\n",
    )
    fine = with_unsubscribe(new_job(key_of("fine"), due=datetime.now(UTC)), 2)
    enqueue(engine, [broken, fine])
    worker = build_worker(engine, smtp_url(smtp_server), OPTIONS, environ=environment(tmp_path))

    report = asyncio.run(worker.run())

    assert (report.sent, report.failed) == (1, 1)
    row = jobs_by_message_id(engine)[broken.message_id]
    assert row.state == "failed"
    assert row.outcome_text.startswith("cannot sign: MessageFormatError")
    assert [mid for _, mid in smtp_server.data_senders()] == [fine.message_id]
    assert_every_message_verifies(smtp_server, engine)


# ---------------------------------------------------------------------- settings


def test_an_unreadable_key_file_stops_the_worker_with_a_clear_error(tmp_path: Path) -> None:
    env = environment(tmp_path, HERALD_DKIM_KEY_FILE=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError) as caught:
        build_transports("smtp://127.0.0.1:1", env)
    assert caught.value.message.startswith("HERALD_DKIM_KEY_FILE: cannot read the DKIM key file")
    assert "missing.pem" in caught.value.message
    assert caught.value.exit_code == 2


def test_an_invalid_key_stops_the_worker_without_showing_the_key(tmp_path: Path) -> None:
    secret = base64.b64encode(b"a-secret-seed-that-is-too-long-for-ed25519").decode()
    bad = tmp_path / "ed.key"
    bad.write_text(secret + "\n")
    env = environment(tmp_path, HERALD_DKIM_ED25519_KEY_FILE=str(bad))
    with pytest.raises(ConfigError) as caught:
        build_transports("smtp://127.0.0.1:1", env)
    message = caught.value.message + (caught.value.hint or "")
    assert message.startswith("HERALD_DKIM_ED25519_KEY_FILE: the DKIM key in")
    assert "32 bytes" in message
    assert secret not in message
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_a_bounce_domain_without_signing_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="HERALD_BOUNCE_DOMAIN needs HERALD_SIGNING_KEYS"):
        build_transports("smtp://127.0.0.1:1", {"HERALD_BOUNCE_DOMAIN": BOUNCE_DOMAIN})
