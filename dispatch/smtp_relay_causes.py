"""Why an SMTP relay could not be used, in a few words (``dispatch.smtp`` raises
``RelayUnavailable`` with it when connecting, greeting, STARTTLS or AUTH fails)."""

from __future__ import annotations

import socket
import ssl

import aiosmtplib


def relay_cause(exc: BaseException, *, host: str, timeout: float) -> str:
    """A short phrase for why the relay could not be used: what the operator needs first."""
    if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
        return f"authentication refused: {exc.code} {exc.message}"
    if isinstance(exc, aiosmtplib.SMTPConnectResponseError):
        return f"connection refused by the relay's greeting: {exc.code} {exc.message}"
    if isinstance(exc, aiosmtplib.SMTPHeloError):
        return f"EHLO refused: {exc.code} {exc.message}"
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"refused before MAIL: {exc.code} {exc.message}"
    root = exc.__cause__ if exc.__cause__ is not None else exc
    if isinstance(root, socket.gaierror):
        return f"DNS lookup failed for {host}: {root.strerror or root}"
    if isinstance(root, ConnectionRefusedError):
        return "connection refused"
    if isinstance(root, ssl.SSLError):
        return f"TLS failure: {root.reason or root}"
    if isinstance(exc, aiosmtplib.SMTPConnectTimeoutError):
        return f"connect timeout after {timeout:g}s"
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout:g}s before MAIL"
    if isinstance(root, ConnectionError):
        return "connection closed by the relay before MAIL"
    if isinstance(root, OSError) and root.strerror:
        return f"network error: {root.strerror}"
    return f"{type(exc).__name__}: {exc}"
