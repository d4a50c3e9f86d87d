"""Deliverability settings: signing keys, public URL, DKIM, bounce and webhook secrets.

Each is an environment variable (docs/operating.md lists them); every secret is taught to
``known_secrets`` as it is read, so nothing Herald prints afterwards can show it. A malformed
value is a ``ConfigError`` naming the variable, never a traceback or the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dispatch.signed_tokens import SigningKeyError, SigningKeys
from herald.errors import ConfigError
from herald.secrets import known_secrets


@dataclass(frozen=True)
class DkimKey:
    selector: str
    domain: str
    key_file: Path
    algorithm: str  # rsa-sha256 | ed25519-sha256


@dataclass(frozen=True)
class MailSettings:
    signing_keys: SigningKeys | None = None  # HERALD_SIGNING_KEYS="kid:secret,kid:secret"
    public_url: str | None = None  # HERALD_PUBLIC_URL: where herald serve is reached
    unsubscribe_domain: str | None = None  # HERALD_UNSUBSCRIBE_DOMAIN: unsub+<t>@<domain>
    bounce_domain: str | None = None  # HERALD_BOUNCE_DOMAIN: VERP bounce+<t>@<domain>
    dkim: tuple[DkimKey, ...] = ()  # HERALD_DKIM_* (rsa) and HERALD_DKIM_ED25519_* (second)
    sendgrid_public_key: str | None = None  # HERALD_SENDGRID_PUBLIC_KEY (base64 DER)
    mailgun_signing_key: str | None = None  # HERALD_MAILGUN_SIGNING_KEY
    postmark_auth: str | None = None  # HERALD_POSTMARK_AUTH "user:password" (Basic auth)
    ses_topic_arns: tuple[str, ...] = ()  # HERALD_SES_TOPIC_ARNS, comma-separated allowlist

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MailSettings:
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        keys = None
        if raw := get("HERALD_SIGNING_KEYS"):
            known_secrets.learn([part.partition(":")[2] for part in raw.split(",")])
            try:
                keys = SigningKeys.parse(raw)
            except SigningKeyError as exc:
                raise ConfigError(
                    f"HERALD_SIGNING_KEYS: {exc}",
                    hint="e.g. HERALD_SIGNING_KEYS=k2:<new secret>,k1:<old secret> (first signs)",
                ) from None
        public_url = get("HERALD_PUBLIC_URL")
        if public_url is not None:
            public_url = _public_url(public_url)
        dkim: list[DkimKey] = []
        for prefix, algorithm in (
            ("HERALD_DKIM", "rsa-sha256"),
            ("HERALD_DKIM_ED25519", "ed25519-sha256"),
        ):
            selector, key_file = get(f"{prefix}_SELECTOR"), get(f"{prefix}_KEY_FILE")
            domain = get(f"{prefix}_DOMAIN") or get("HERALD_DKIM_DOMAIN")
            if selector is None and key_file is None:
                continue
            if not (selector and key_file and domain):
                raise ConfigError(
                    f"{prefix}_SELECTOR, {prefix}_KEY_FILE and HERALD_DKIM_DOMAIN go together",
                    hint="set all three, or none to send unsigned",
                )
            dkim.append(DkimKey(selector, domain.lower(), Path(key_file), algorithm))
        secrets = [
            get("HERALD_MAILGUN_SIGNING_KEY"),
            get("HERALD_POSTMARK_AUTH"),
        ]
        known_secrets.learn([s for s in secrets if s])
        arns = get("HERALD_SES_TOPIC_ARNS")
        return cls(
            signing_keys=keys,
            public_url=public_url,
            unsubscribe_domain=_lower(get("HERALD_UNSUBSCRIBE_DOMAIN")),
            bounce_domain=_lower(get("HERALD_BOUNCE_DOMAIN")),
            dkim=tuple(dkim),
            sendgrid_public_key=get("HERALD_SENDGRID_PUBLIC_KEY"),
            mailgun_signing_key=secrets[0],
            postmark_auth=secrets[1],
            ses_topic_arns=tuple(a.strip() for a in arns.split(",") if a.strip()) if arns else (),
        )


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


def _public_url(value: str) -> str:
    parts = urlsplit(value)
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and local):
        raise ConfigError(
            "HERALD_PUBLIC_URL must be an https:// URL",
            hint="RFC 8058 one-click needs HTTPS (http:// only for 127.0.0.1 or localhost)",
        )
    if parts.query or parts.fragment or parts.username:
        raise ConfigError(
            "HERALD_PUBLIC_URL: no credentials, query or fragment",
            hint="e.g. https://mail.example.com",
        )
    return value.rstrip("/")
