"""The whole feedback loop through one real `herald serve` process (SQLite and PostgreSQL).

Real `herald launch` and `herald worker` processes send to a real SMTP server with VERP return
paths; then, to the same `herald serve --smtp-port 0`: a mailto unsubscribe to the address in
the received List-Unsubscribe header suppresses in the campaign's list; a DSN to the return path
the relay saw suppresses globally; a signed Mailgun webhook suppresses, a forged one does not.
Whom to suppress comes from the tokens, never from what the reports say.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import hashlib
import hmac
import json
import re
import subprocess
import time
from pathlib import Path

import aiosmtplib
import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import suppression
from tests.support import reports
from tests.support.paths import HERALD
from tests.support.serve_process import herald_env, herald_serve
from tests.support.smtp_server import LedgerSMTPServer

MAILGUN_KEY = "mailgun-signing-key-0123456789"
SETTINGS = {
    "HERALD_SIGNING_KEYS": "k1:loop-secret-0123456789",
    "HERALD_PUBLIC_URL": "https://u.herald.test",
    "HERALD_UNSUBSCRIBE_DOMAIN": "unsub.herald.test",
    "HERALD_BOUNCE_DOMAIN": "bounce.herald.test",
    "HERALD_MAILGUN_SIGNING_KEY": MAILGUN_KEY,
}
CAMPAIGN = """\
name: loop-0301
list: newsletter
from: "Herald News <news@herald.test>"
audience: [ann@example.com, bob@example.com, cy@example.com]
steps:
  - id: issue
    subject: "Issue 1"
    text: "Hello"
"""


def herald(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HERALD), *args], capture_output=True, text=True, env=herald_env(SETTINGS), timeout=120
    )


def smtp_send(port: int, rcpt: str, message: bytes, sender: str = "") -> None:
    async def go() -> None:
        async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=10) as smtp:
            await smtp.sendmail(sender, [rcpt], message)

    asyncio.run(go())


def suppressed(engine: Engine) -> set[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(suppression.c.address, suppression.c.scope, suppression.c.source)
        )
        return {(r.address, r.scope, r.source) for r in rows}


def mailgun(recipient: str, event_id: str, key: str = MAILGUN_KEY) -> dict[str, object]:
    stamp, token = str(int(time.time())), "b" * 50
    digest = hmac.new(key.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
    event = {
        "id": event_id,
        "event": "failed",
        "severity": "permanent",
        "recipient": recipient,
        "delivery-status": {"code": 550, "message": "5.1.1 no such user"},
    }
    return {
        "signature": {"timestamp": stamp, "token": token, "signature": digest},
        "event-data": event,
    }


def test_unsubscribe_bounce_and_webhook_reach_one_serve_process(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(CAMPAIGN, encoding="utf-8")
    launched = herald("launch", str(path), "--database-url", db_url)
    assert launched.returncode == 0, launched.stderr
    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    sent = herald(
        "worker", "--until-idle", "--json", "--database-url", db_url,
        "--smtp-url", smtp_url, "--poll", "0.05",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["sent"] == 3

    by_recipient: dict[str, tuple[str, str]] = {}  # to -> (return path, mailto address)
    for mail_from, raw in smtp_server.received():
        message = email.message_from_bytes(raw, policy=email.policy.SMTP)
        assert re.fullmatch(r"bounce\+[a-z0-9.]+@bounce\.herald\.test", mail_from), mail_from
        mailto = re.search(r"<mailto:(unsub\+[^?>]+)", str(message["List-Unsubscribe"]))
        assert mailto is not None
        by_recipient[str(message["To"])] = (mail_from, mailto[1])
    assert sorted(by_recipient) == ["ann@example.com", "bob@example.com", "cy@example.com"]

    with herald_serve(db_url, SETTINGS, inbound_smtp=True) as served:
        assert served.smtp_port is not None
        # Apple Mail style: from the recipient, empty subject, to the mailto address.
        smtp_send(
            served.smtp_port,
            by_recipient["ann@example.com"][1],
            reports.apple_mail_unsubscribe(by_recipient["ann@example.com"][1]),
            sender="ann@example.com",
        )
        # A hard bounce for bob, to the return path the relay saw; it names someone else.
        smtp_send(
            served.smtp_port,
            by_recipient["bob@example.com"][0],
            reports.dsn(recipient="mallory@example.org"),
        )
        with httpx.Client(base_url=served.base_url, timeout=10) as client:
            forged = client.post(
                "/events/mailgun", json=mailgun("cy@example.com", "mg-0", key="guessed-key-0000")
            )
            assert forged.status_code == 403
            assert ("cy@example.com", "global", "mailgun") not in suppressed(engine)
            signed = client.post("/events/mailgun", json=mailgun("cy@example.com", "mg-1"))
            assert signed.status_code == 200
    assert suppressed(engine) == {
        ("ann@example.com", "list:newsletter", "mailto"),
        ("bob@example.com", "global", "dsn"),
        ("cy@example.com", "global", "mailgun"),
    }
    assert any("inbound SMTP on 127.0.0.1" in line for line in served.lines)
