"""Is this webhook really from the provider? Signature checks over the RAW request bytes.

One function per provider; each returns None or raises ``Refused`` with the HTTP status to
answer (401: no credentials at all; 403: credentials that do not verify, or a request we will
not accept). Refusals say what failed in general words only: a forger learns nothing from them.

- SES via SNS: RSA PKCS#1 v1.5 over the canonical "Name\\nValue\\n" string (SHA1 for
  SignatureVersion 1, SHA256 for 2) with the X.509 certificate at ``SigningCertURL``, which must
  be ``https://sns.<region>.amazonaws.com[.cn]/….pem``: "ends with amazonaws.com" would accept
  any S3 bucket. The certificate is fetched through an injected fetcher (tests serve their own
  self-signed one) and cached. The TopicArn allowlist is checked before anything is fetched.
- SendGrid: ECDSA P-256/SHA-256 over ``timestamp + raw body`` with the public key from settings
  (base64 DER, as SendGrid shows it, or PEM); re-serialised JSON or a stripped CRLF fails, which
  is why the raw bytes are kept. A timestamp more than 5 minutes away is refused (replay).
- Mailgun: HMAC-SHA256(signing key, timestamp + token), hex, compared in constant time; the same
  5-minute window. Exact replays inside it are harmless: the event id deduplicates them.
- Postmark signs nothing: HTTP Basic credentials from settings, compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from hashlib import sha256
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from herald.errors import ConfigError

REPLAY_WINDOW = 300.0  # seconds either side of our clock
CertFetcher = Callable[[str], Awaitable[bytes]]

_SNS_HOST = re.compile(r"sns\.[a-z0-9-]{3,}\.amazonaws\.com(?:\.cn)?")
_SNS_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
_SNS_FIELDS["UnsubscribeConfirmation"] = _SNS_FIELDS["SubscriptionConfirmation"]
_SNS_HASHES: dict[str, type[hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
_CERT_CACHE_SIZE = 16


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


# ------------------------------------------------------------------------------------- SNS


def sns_url_ok(url: str, *, pem: bool) -> bool:
    """An https URL on an SNS regional endpoint (a certificate, or the confirmation action)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    host = parts.hostname or ""
    if parts.scheme != "https" or parts.username or parts.password or port not in (None, 443):
        return False
    if not _SNS_HOST.fullmatch(host) or parts.netloc.lower() != host:
        return False
    if pem:
        return parts.path.endswith(".pem") and not parts.query and not parts.fragment
    return parts.path in ("", "/") and parse_qs(parts.query).get("Action") == [
        "ConfirmSubscription"
    ]


def sns_string_to_sign(message: Mapping[str, Any]) -> bytes:
    fields = _SNS_FIELDS.get(str(message.get("Type")))
    if fields is None:
        raise Refused(403, "unsupported SNS message type")
    lines = []
    for name in fields:
        value = message.get(name)
        if value is None and name == "Subject":
            continue  # the only optional field
        if not isinstance(value, str):
            raise Refused(403, "SNS message lacks a signed field")
        lines.append(f"{name}\n{value}\n")
    return "".join(lines).encode("utf-8")


class SnsVerifier:
    """Verifies SNS messages; caches certificates by URL (they rotate rarely)."""

    def __init__(self, topic_arns: tuple[str, ...], fetch: CertFetcher) -> None:
        self.topic_arns = frozenset(topic_arns)
        self.fetch = fetch
        self._certs: dict[str, rsa.RSAPublicKey] = {}

    async def verify(self, message: Mapping[str, Any], now: float) -> None:
        topic = message.get("TopicArn")
        if not isinstance(topic, str) or topic not in self.topic_arns:
            raise Refused(403, "topic not allowed")
        algorithm = _SNS_HASHES.get(str(message.get("SignatureVersion")))
        url = message.get("SigningCertURL")
        if algorithm is None or not isinstance(url, str) or not sns_url_ok(url, pem=True):
            raise Refused(403, "invalid signature")
        signed = sns_string_to_sign(message)
        try:
            signature = base64.b64decode(str(message.get("Signature")), validate=True)
        except (binascii.Error, ValueError):
            raise Refused(403, "invalid signature") from None
        key = await self._key(url, now)
        try:
            key.verify(signature, signed, padding.PKCS1v15(), algorithm())
        except InvalidSignature:
            raise Refused(403, "invalid signature") from None

    async def _key(self, url: str, now: float) -> rsa.RSAPublicKey:
        key = self._certs.get(url)
        if key is None:
            try:
                cert = x509.load_pem_x509_certificate(await self.fetch(url))
            except ValueError:
                raise Refused(403, "invalid signing certificate") from None
            when = datetime.fromtimestamp(now, UTC)
            if not cert.not_valid_before_utc <= when <= cert.not_valid_after_utc:
                raise Refused(403, "signing certificate not valid now")
            public = cert.public_key()
            if not isinstance(public, rsa.RSAPublicKey):
                raise Refused(403, "invalid signing certificate")
            if len(self._certs) >= _CERT_CACHE_SIZE:
                self._certs.pop(next(iter(self._certs)))
            self._certs[url] = key = public
        return key


# -------------------------------------------------------------------------------- SendGrid


def load_sendgrid_key(text: str) -> ec.EllipticCurvePublicKey:
    """The verification key as SendGrid shows it (base64 DER), or PEM; ConfigError if not."""
    try:
        if "BEGIN PUBLIC KEY" in text:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        else:
            key = serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error, UnicodeError, TypeError):
        key = None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(
            "HERALD_SENDGRID_PUBLIC_KEY is not an ECDSA public key",
            hint="paste the verification key from SendGrid's signed event webhook settings",
        )
    return key


def _fresh(timestamp: str, now: float) -> None:
    try:
        when = float(int(timestamp.strip()))
    except (ValueError, OverflowError):
        raise Refused(403, "invalid timestamp") from None
    if abs(now - when) > REPLAY_WINDOW:
        raise Refused(403, "stale or future timestamp")


def verify_sendgrid(
    key: ec.EllipticCurvePublicKey,
    signature: str | None,
    timestamp: str | None,
    body: bytes,
    now: float,
) -> None:
    if not signature or not timestamp:
        raise Refused(401, "signature required")
    _fresh(timestamp, now)
    try:
        der = base64.b64decode(signature, validate=True)
        key.verify(der, timestamp.encode("utf-8") + body, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, binascii.Error, ValueError):
        raise Refused(403, "invalid signature") from None


# --------------------------------------------------------------------------------- Mailgun


def verify_mailgun(signing_key: str, signature: Any, now: float) -> None:
    if not isinstance(signature, dict):
        raise Refused(401, "signature required")
    timestamp, token, given = (signature.get(k) for k in ("timestamp", "token", "signature"))
    if not (_text(timestamp) and _text(token) and _text(given)):
        raise Refused(401, "signature required")
    timestamp, token, given = str(timestamp), str(token), str(given)
    _fresh(timestamp, now)
    expected = hmac.new(signing_key.encode(), (timestamp + token).encode(), sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.strip().lower().encode()):
        raise Refused(403, "invalid signature")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


# -------------------------------------------------------------------------------- Postmark


def verify_basic(expected: str, authorization: str | None) -> None:
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "basic" or not value:
        raise Refused(401, "credentials required")
    try:
        given = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Refused(401, "credentials required") from None
    if not hmac.compare_digest(given, expected.encode("utf-8")):
        raise Refused(401, "invalid credentials")
