"""Settings from the environment (docs/design.md §9); every one is also a CLI option.

Parsing a setting is the one place a malformed value becomes a ``ConfigError``: one line that
names the setting and shows its URL redacted (``dispatch.egress.redact``), plus a hint; never a
traceback, never the password. Each URL parsed here also teaches ``known_secrets`` its
credentials, so whatever the CLI prints afterwards is scrubbed of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from dispatch.egress.redact import redact_setting, url_secrets
from herald.defaults import DEFAULT_DATABASE_URL as DEFAULT_DATABASE_URL
from herald.defaults import DEFAULT_SMTP_URL as DEFAULT_SMTP_URL
from herald.errors import ConfigError
from herald.secrets import SecretBook as SecretBook  # re-exported: its old home
from herald.secrets import known_secrets

if TYPE_CHECKING:
    from dispatch.smtp import SmtpConfig

SMTP_HINT = (
    "use smtp://host:port, smtps://user:pass@host:465 or smtp://user:pass@host:587"
    " (percent-encode special characters in the password; options: starttls=true, timeout=,"
    " data_timeout=, verify=false, insecure_auth=true)"
)
DATABASE_HINT = "use sqlite:///path/to/herald.db or postgresql://user@host:5432/db"


def parse_smtp_url(url: str) -> SmtpConfig:
    """The SMTP settings, or ConfigError (exit 2) naming what is wrong, without the password."""
    from dispatch.smtp import SmtpConfig, SmtpUrlError  # aiosmtplib: only when sending

    known_secrets.learn(url_secrets(url))
    try:
        config = SmtpConfig.from_url(url)
    except SmtpUrlError as exc:
        raise ConfigError(f"HERALD_SMTP_URL / --smtp-url: {exc}", hint=SMTP_HINT) from None
    known_secrets.learn(config.secrets())
    return config


def parse_database_url(url: str) -> sa.URL:
    """The database URL for SQLAlchemy (psycopg 3 for PostgreSQL), or ConfigError (exit 2)."""
    known_secrets.learn(url_secrets(url))
    shown = redact_setting(url)
    normalised = normalise_database_url(url)
    try:
        parsed = make_url(normalised)
    except (ArgumentError, ValueError):
        # SQLAlchemy's own message can quote the URL (and a port it could not read): not shown.
        raise ConfigError(
            f"invalid database URL {shown} (a port that is not a number, or no scheme?)",
            hint=DATABASE_HINT,
        ) from None
    if parsed.password:
        known_secrets.learn([str(parsed.password)])
    for name, value in parsed.query.items():
        if "pass" in name.lower():
            known_secrets.learn([value] if isinstance(value, str) else list(value))
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"unsupported database {backend!r} in {shown}",
            hint="Herald runs on SQLite or PostgreSQL",
        )
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigError(f"invalid port {parsed.port} in database URL {shown}", hint=DATABASE_HINT)
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def normalise_database_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and select the psycopg 3 driver for them."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    smtp_url: str = DEFAULT_SMTP_URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings, each checked: a malformed one is a ConfigError here, not later."""
        env = os.environ if environ is None else environ
        settings = cls(
            database_url=env.get("HERALD_DATABASE_URL", DEFAULT_DATABASE_URL),
            smtp_url=env.get("HERALD_SMTP_URL", DEFAULT_SMTP_URL),
        )
        parse_database_url(settings.database_url)
        parse_smtp_url(settings.smtp_url)
        return settings
