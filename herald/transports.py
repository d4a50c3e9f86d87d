"""Build the worker's transports (one per channel) from settings."""

from __future__ import annotations

from collections.abc import Mapping

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.transport import Transport


def build_transports(
    smtp_url: str, environ: Mapping[str, str] | None = None
) -> dict[str, Transport]:
    return {"email": SmtpTransport(SmtpConfig.from_url(smtp_url))}
