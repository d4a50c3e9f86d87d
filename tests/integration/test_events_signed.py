"""``POST /events/sendgrid|mailgun|postmark`` with real signatures made in the test (SendGrid
ECDSA, Mailgun HMAC, Postmark Basic auth), on SQLite and PostgreSQL: signed events suppress;
unsigned, forged or altered requests are refused and record nothing; a retry is recorded once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from dispatch.models import send_job
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.serve.events import routes
from tests.support.factories import pending
from tests.support.webhooks import (
    EC_KEY,
    MAILGUN_KEY,
    POSTMARK,
    AsgiClient,
    Fetcher,
    app_for,
    feedback_count,
    suppressions,
)


@pytest.fixture
def fetcher() -> Fetcher:
    return Fetcher()


@pytest.fixture
def client(engine: Engine, fetcher: Fetcher) -> AsgiClient:
    return app_for(engine, fetcher)


def sendgrid_post(
    client: AsgiClient,
    events: list[dict[str, Any]],
    *,
    ts: int | None = None,
    key=EC_KEY,
    body: bytes | None = None,
):
    raw = json.dumps(events).encode() + b"\r\n"  # SendGrid's body ends in CRLF: sign it as is
    stamp = str(int(time.time()) if ts is None else ts)
    signature = base64.b64encode(key.sign(stamp.encode() + raw, ec.ECDSA(hashes.SHA256())))
    return client.post(
        "/events/sendgrid",
        content=raw if body is None else body,
        headers={
            "Content-Type": "application/json",
            "X-Twilio-Email-Event-Webhook-Signature": signature.decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": stamp,
        },
    )


def test_sendgrid_signed_events(engine, client) -> None:
    news = pending(engine, "dana")
    with engine.begin() as conn:
        conn.execute(send_job.update().where(send_job.c.key == news).values(list_scope="list:news"))
    events = [
        {
            "event": "bounce",
            "type": "bounce",
            "email": "erin@example.com",
            "sg_event_id": "sg-1",
            "status": "5.1.1",
        },
        {"event": "spamreport", "email": "frank@example.com", "sg_event_id": "sg-2"},
        {
            "event": "unsubscribe",
            "email": "ignored@example.com",
            "sg_event_id": "sg-3",
            "herald_key": news,
        },
        {"event": "delivered", "email": "x@example.com", "sg_event_id": "sg-4"},
    ]
    response = sendgrid_post(client, events)
    assert response.status_code == 200, response.text
    assert response.json()["suppressed"] == 3
    assert suppressions(engine) == {
        ("erin@example.com", "global", "sendgrid"),
        ("frank@example.com", "global", "sendgrid"),
        ("dana@example.com", "list:news", "sendgrid"),  # the job's mailbox and list, by its key
    }


def test_sendgrid_forgeries_record_nothing(engine, client) -> None:
    events = [{"event": "bounce", "email": "a@example.com", "sg_event_id": "sg-9"}]
    altered = json.dumps([{"event": "bounce", "email": "b@example.com", "sg_event_id": "sg-9"}])
    assert sendgrid_post(client, events, body=altered.encode() + b"\r\n").status_code == 403
    stripped = json.dumps(events).encode()  # the CRLF is part of what was signed
    assert sendgrid_post(client, events, body=stripped).status_code == 403
    assert (
        sendgrid_post(client, events, key=ec.generate_private_key(ec.SECP256R1())).status_code
        == 403
    )
    assert sendgrid_post(client, events, ts=int(time.time()) - 3600).status_code == 403
    unsigned = client.post("/events/sendgrid", content=json.dumps(events).encode())
    assert unsigned.status_code == 401
    assert feedback_count(engine) == 0


def test_a_malformed_sendgrid_key_stops_at_start(engine) -> None:
    with pytest.raises(ConfigError, match="HERALD_SENDGRID_PUBLIC_KEY"):
        routes(engine, MailSettings(sendgrid_public_key="bm90IGEga2V5"))


# --------------------------------------------------------------------------------- Mailgun


def mailgun_body(
    event: dict[str, Any], *, ts: int | None = None, key: str = MAILGUN_KEY
) -> dict[str, Any]:
    stamp = str(int(time.time()) if ts is None else ts)
    token = "a" * 50
    digest = hmac.new(key.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
    return {
        "signature": {"timestamp": stamp, "token": token, "signature": digest},
        "event-data": event,
    }


def test_mailgun_signed_and_forged(engine, client) -> None:
    failed = {
        "id": "mg-1",
        "event": "failed",
        "severity": "permanent",
        "recipient": "gail@example.com",
        "delivery-status": {"code": 550, "message": "5.1.1 no such user"},
    }
    assert client.post("/events/mailgun", json=mailgun_body(failed)).status_code == 200
    assert suppressions(engine) == {("gail@example.com", "global", "mailgun")}
    assert client.post("/events/mailgun", json=mailgun_body(failed)).json()["duplicates"] == 1
    forged = mailgun_body(dict(failed, id="mg-2", recipient="victim@example.com"), key="guess")
    assert client.post("/events/mailgun", json=forged).status_code == 403
    altered = mailgun_body(failed)
    altered["signature"]["timestamp"] = str(int(time.time()) + 1)
    assert client.post("/events/mailgun", json=altered).status_code == 403
    stale = mailgun_body(dict(failed, id="mg-3"), ts=int(time.time()) - 3600)
    assert client.post("/events/mailgun", json=stale).status_code == 403
    assert client.post("/events/mailgun", json={"event-data": failed}).status_code == 401
    assert feedback_count(engine) == 1


# -------------------------------------------------------------------------------- Postmark


def test_postmark_basic_auth(engine, client) -> None:
    bounce = {"RecordType": "Bounce", "ID": 7, "Type": "HardBounce", "Email": "hal@example.com",
              "Details": "smtp;550 5.1.1 The email account does not exist"}  # fmt: skip
    user, _, password = POSTMARK.partition(":")
    assert client.post("/events/postmark", json=bounce, auth=(user, password)).status_code == 200
    assert suppressions(engine) == {("hal@example.com", "global", "postmark")}
    wrong = client.post("/events/postmark", json=dict(bounce, ID=8), auth=(user, "guess"))
    assert wrong.status_code == 401
    missing = client.post("/events/postmark", json=dict(bounce, ID=9))
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Basic")
    assert feedback_count(engine) == 1


def test_unconfigured_providers_accept_nothing(engine) -> None:
    with AsgiClient(Starlette(routes=routes(engine, MailSettings()))) as bare:
        for provider in ("ses", "sendgrid", "mailgun", "postmark"):
            response = bare.post(f"/events/{provider}", json={"anything": 1})
            assert response.status_code == 404
            assert bare.get(f"/events/{provider}").status_code == 405
    assert feedback_count(engine) == 0


def test_oversized_bodies_are_refused(engine, client) -> None:
    response = client.post("/events/postmark", content=b"x" * (5 * 1024 * 1024 + 1))
    assert response.status_code == 413
