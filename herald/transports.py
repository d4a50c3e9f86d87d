"""Build the worker's transports (one per channel) from settings."""

from __future__ import annotations

import os
from collections.abc import Mapping

from dispatch.egress import EgressPolicy
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.smtp import SmtpTransport
from dispatch.transport import Transport
from dispatch.webhook import WebhookTransport
from herald.dkim_keys import load_return_path, load_signer
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.settings import parse_smtp_url


def build_transports(
    smtp_url: str,
    environ: Mapping[str, str] | None = None,
    *,
    instrumentation: Instrumentation = NULL_INSTRUMENTATION,
) -> dict[str, Transport]:
    """Email over SMTP; webhooks through the egress guard.

    The webhook policy comes from ``HERALD_EGRESS_ALLOW`` / ``_ALLOW_HTTP`` / ``_PORTS``, and
    ``${ENV}`` references in webhook headers are resolved from the same environment at send time.
    DKIM keys (``HERALD_DKIM_*``) are read and tried here, once, and the VERP return path
    (``HERALD_BOUNCE_DOMAIN`` with ``HERALD_SIGNING_KEYS``) is set up: a bad one stops the
    worker before it claims anything.
    """
    env = os.environ if environ is None else environ
    try:
        policy = EgressPolicy.from_env(env)
    except ValueError as exc:
        raise ConfigError(f"invalid egress setting: {exc}") from exc
    mail = MailSettings.from_env(env)
    email = SmtpTransport(
        parse_smtp_url(smtp_url),
        instrumentation=instrumentation,
        signer=load_signer(mail),
        return_path=load_return_path(mail),
    )
    return {
        "email": email,
        "webhook": WebhookTransport(policy, environ=env, instrumentation=instrumentation),
    }
