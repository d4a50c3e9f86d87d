"""``POST /events/<provider>`` with real signatures made in the test (SNS X.509 served by the
injected fetcher, SendGrid ECDSA, Mailgun HMAC, Postmark Basic auth), on SQLite and PostgreSQL.

Signed events suppress; unsigned, forged or altered requests are refused and record nothing;
a retried event is recorded once. The string SNS signs is built here independently of the
product's, so a wrong canonical form in either would show.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from dispatch.models import mail_feedback, send_job, suppression
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.serve.events import routes
from tests.support.factories import pending

TOPIC = "arn:aws:sns:us-east-1:123456789012:herald-bounces"
CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem"
SUBSCRIBE_URL = (
    "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn="
    f"{TOPIC}&Token=2336412f37"
)
MAILGUN_KEY = "mailgun-signing-key-0123456789"
POSTMARK = "hook:correct horse battery staple"


def _self_signed(key: rsa.RSAPrivateKey, *, days: int = 30, start: int = -1) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + timedelta(days=start))
        .not_valid_after(now + timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
EC_PUBLIC = base64.b64encode(
    EC_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()


@dataclass
class Fetcher:
    pem: bytes = field(default_factory=lambda: _self_signed(RSA_KEY))
    fetched: list[str] = field(default_factory=list)
    subscribed: list[str] = field(default_factory=list)
    fail: bool = False

    async def cert(self, url: str) -> bytes:
        self.fetched.append(url)
        if self.fail:
            raise OSError("connection refused")
        return self.pem

    async def subscribe(self, url: str) -> bytes:
        self.subscribed.append(url)
        return b"<ConfirmSubscriptionResponse/>"


class AsgiClient:
    """A synchronous client over httpx's ASGI transport (the app runs in this process)."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    def __enter__(self) -> AsgiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://herald.test") as c:
                return await c.request(method, path, **kw)

        return asyncio.run(go())

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)


SETTINGS = MailSettings(
    sendgrid_public_key=EC_PUBLIC,
    mailgun_signing_key=MAILGUN_KEY,
    postmark_auth=POSTMARK,
    ses_topic_arns=(TOPIC,),
)


@pytest.fixture
def fetcher() -> Fetcher:
    return Fetcher()


@pytest.fixture
def client(engine: Engine, fetcher: Fetcher) -> AsgiClient:
    app = Starlette(
        routes=routes(engine, SETTINGS, cert_fetcher=fetcher.cert, subscribe=fetcher.subscribe)
    )
    return AsgiClient(app)


def suppressions(engine: Engine) -> set[tuple[str, str, str]]:
    with engine.connect() as conn:
        q = sa.select(suppression.c.address, suppression.c.scope, suppression.c.source)
        return {(r.address, r.scope, r.source) for r in conn.execute(q)}


def feedback_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(mail_feedback)).scalar_one()


# ------------------------------------------------------------------------------------- SNS

_SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type",
    ),
}  # fmt: skip


def sns(
    kind: str,
    message: str,
    *,
    version: str = "1",
    topic: str = TOPIC,
    cert_url: str = CERT_URL,
    key: rsa.RSAPrivateKey = RSA_KEY,
    message_id: str = "b1a2c3d4-0000-4000-8000-000000000001",
    **extra: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "Type": kind,
        "MessageId": message_id,
        "TopicArn": topic,
        "Message": message,
        "Timestamp": "2026-12-03T04:00:00.000Z",
        "SignatureVersion": version,
        "SigningCertURL": cert_url,
        **extra,
    }
    text = "".join(f"{n}\n{body[n]}\n" for n in _SIGNED[kind] if n in body)
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()  # noqa: S303 - SNS v1 is SHA1
    signature = key.sign(text.encode(), padding.PKCS1v15(), algorithm)
    body["Signature"] = base64.b64encode(signature).decode()
    return body


def ses_bounce(address: str, bounce_type: str = "Permanent", herald_key: str = "") -> str:
    headers = [{"name": "X-Herald-Key", "value": herald_key}] if herald_key else []
    return json.dumps(
        {
            "notificationType": "Bounce",
            "bounce": {
                "bounceType": bounce_type,
                "bounceSubType": "General",
                "bouncedRecipients": [
                    {"emailAddress": address, "status": "5.1.1", "diagnosticCode": "smtp; 550"}
                ],
            },
            "mail": {"messageId": "ses-1", "headers": headers},
        }
    )


def post_sns(client: AsgiClient, body: dict[str, Any]) -> Any:
    # SNS posts JSON as text/plain.
    return client.post(
        "/events/ses",
        content=json.dumps(body).encode(),
        headers={
            "Content-Type": "text/plain; charset=UTF-8",
            "x-amz-sns-message-type": body["Type"],
        },
    )


def test_ses_hard_bounce_suppresses_once(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("Alice@Example.COM"), Subject="Amazon SES Email Event")
    response = post_sns(client, body)
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] == 1
    assert suppressions(engine) == {("alice@example.com", "global", "ses")}
    again = post_sns(client, body)  # SNS retries reuse the MessageId
    assert again.json() == {"recorded": 0, "suppressed": 0, "duplicates": 1, "ignored": 0}
    assert feedback_count(engine) == 1
    assert fetcher.fetched == [CERT_URL]  # cached


def test_ses_signature_version_2_and_complaints(engine, client) -> None:
    complaint = json.dumps(
        {
            "notificationType": "Complaint",
            "complaint": {"complainedRecipients": [{"emailAddress": "bob@example.com"}]},
        }
    )
    assert post_sns(client, sns("Notification", complaint, version="2")).status_code == 200
    assert suppressions(engine) == {("bob@example.com", "global", "ses")}


def test_ses_soft_bounce_is_counted_only(engine, client) -> None:
    body = sns("Notification", ses_bounce("carol@example.com", "Transient"))
    assert post_sns(client, body).json()["recorded"] == 1
    assert suppressions(engine) == set()


def test_ses_altered_or_forged_records_nothing(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("alice@example.com"))
    body["Message"] = ses_bounce("victim@example.com")
    assert post_sns(client, body).status_code == 403
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert (
        post_sns(client, sns("Notification", ses_bounce("x@example.com"), key=other)).status_code
        == 403
    )
    unsigned = sns("Notification", ses_bounce("y@example.com"))
    del unsigned["Signature"]
    assert post_sns(client, unsigned).status_code == 403
    wrong_version = sns("Notification", ses_bounce("z@example.com"), version="3")
    assert post_sns(client, wrong_version).status_code == 403
    assert client.post("/events/ses", content=b"{not json").status_code == 400
    assert suppressions(engine) == set()
    assert feedback_count(engine) == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.us-east-1.amazonaws.com.evil.example/cert.pem",
        "https://sns-bucket.s3.amazonaws.com/cert.pem",  # "ends with amazonaws.com" is unsafe
        "https://evil.example/sns.us-east-1.amazonaws.com/cert.pem",
        "http://sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.txt",
        "https://user@sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com:8443/cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.pem?x=1",
    ],
)
def test_ses_cert_url_must_be_an_sns_endpoint(engine, client, fetcher, url: str) -> None:
    body = sns("Notification", ses_bounce("alice@example.com"), cert_url=url)
    assert post_sns(client, body).status_code == 403
    assert fetcher.fetched == []
    assert feedback_count(engine) == 0


def test_ses_topic_allowlist_checked_before_any_fetch(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("a@example.com"), topic=TOPIC + "-other")
    assert post_sns(client, body).status_code == 403
    assert fetcher.fetched == []


def test_ses_expired_certificate_and_fetch_failures(engine, fetcher) -> None:
    fetcher.pem = _self_signed(RSA_KEY, days=-1, start=-10)
    app = Starlette(
        routes=routes(engine, SETTINGS, cert_fetcher=fetcher.cert, subscribe=fetcher.subscribe)
    )
    with AsgiClient(app) as expired:
        assert (
            post_sns(expired, sns("Notification", ses_bounce("a@example.com"))).status_code == 403
        )
    down = Fetcher(fail=True)
    app = Starlette(
        routes=routes(engine, SETTINGS, cert_fetcher=down.cert, subscribe=down.subscribe)
    )
    with AsgiClient(app) as unavailable:
        assert (
            post_sns(unavailable, sns("Notification", ses_bounce("a@example.com"))).status_code
            == 503
        )
    assert feedback_count(engine) == 0


def test_ses_subscription_confirmation(engine, client, fetcher) -> None:
    confirm = sns(
        "SubscriptionConfirmation",
        "You have chosen to subscribe to the topic",
        SubscribeURL=SUBSCRIBE_URL,
        Token="2336412f37",
    )
    assert post_sns(client, confirm).status_code == 200
    assert fetcher.subscribed == [SUBSCRIBE_URL]
    # Signed, but pointing elsewhere: refused, nothing fetched.
    evil = sns(
        "SubscriptionConfirmation",
        "subscribe",
        SubscribeURL="https://evil.example/?Action=ConfirmSubscription",
        Token="t",
    )
    assert post_sns(client, evil).status_code == 403
    other_topic = sns(
        "SubscriptionConfirmation",
        "subscribe",
        SubscribeURL=SUBSCRIBE_URL.replace("herald-bounces", "someone-elses"),
        Token="t",
    )
    assert post_sns(client, other_topic).status_code == 403
    forged = dict(confirm, SubscribeURL=SUBSCRIBE_URL + "&x=1")
    assert post_sns(client, forged).status_code == 403
    assert fetcher.subscribed == [SUBSCRIBE_URL]
    assert feedback_count(engine) == 0


# -------------------------------------------------------------------------------- SendGrid


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
