"""Webhook tests' tools: keys and a self-signed SNS certificate made here, an injected
certificate fetcher, and a synchronous client over httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from dispatch.models import mail_feedback, suppression
from herald.mail_settings import MailSettings
from herald.serve.events import routes

TOPIC = "arn:aws:sns:us-east-1:123456789012:herald-bounces"
CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem"
SUBSCRIBE_URL = (
    "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn="
    f"{TOPIC}&Token=2336412f37"
)
MAILGUN_KEY = "mailgun-signing-key-0123456789"
POSTMARK = "hook:correct horse battery staple"


def self_signed(key: rsa.RSAPrivateKey, *, days: int = 30, start: int = -1) -> bytes:
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
    pem: bytes = field(default_factory=lambda: self_signed(RSA_KEY))
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


def app_for(engine: Engine, fetcher: Fetcher, settings: MailSettings = SETTINGS) -> AsgiClient:
    return AsgiClient(
        Starlette(
            routes=routes(engine, settings, cert_fetcher=fetcher.cert, subscribe=fetcher.subscribe)
        )
    )


def suppressions(engine: Engine) -> set[tuple[str, str, str]]:
    with engine.connect() as conn:
        q = sa.select(suppression.c.address, suppression.c.scope, suppression.c.source)
        return {(r.address, r.scope, r.source) for r in conn.execute(q)}


def feedback_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(mail_feedback)).scalar_one()
