"""Who is asking: the signed session cookie, the login check and bearer tokens.

The cookie is ``<login>.<session id>.<expires>.<mac>``: ``login`` says which secret was typed
(``password`` or ``token``), the session id is random (the CSRF token is bound to it), and the
MAC (HMAC-SHA256 with ``DashboardSettings.session_key``) covers the rest. Nothing is stored on
the server; a cookie is valid until it expires or the secrets change. Every comparison of a
secret or MAC is ``hmac.compare_digest``.

Failed logins are limited by count, not slowed by sleeping: after ``MAX_FAILURES`` in
``FAILURE_WINDOW`` the login answers 429 until the window has passed (per process, all
clients together: the secret is shared, so is its guessing budget).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from herald.app.common import Clock
from herald.serve.dashboard.settings import DashboardSettings

COOKIE = "herald_session"
MAX_FAILURES = 20
FAILURE_WINDOW = timedelta(minutes=5)
LOGINS = ("password", "token")


@dataclass(frozen=True)
class Session:
    login: str  # password | token
    session_id: str
    bearer: bool = False  # Authorization header: no cookie, no CSRF

    @property
    def actor(self) -> str:
        return f"dashboard:{self.login}"


def _mac(key: bytes, purpose: str, message: str) -> str:
    return hmac.new(key, f"{purpose}\0{message}".encode(), hashlib.sha256).hexdigest()


def _same(given: str, expected: str | None) -> bool:
    if not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def login_for(settings: DashboardSettings, secret: str) -> str | None:
    """Which login ``secret`` is (``password`` or ``token``), or None. Both are compared, so
    the time taken does not say which one was close."""
    is_password = _same(secret, settings.password)
    is_token = _same(secret, settings.token)
    if is_password:
        return "password"
    if is_token:
        return "token"
    return None


def new_cookie(settings: DashboardSettings, login: str, now: datetime) -> str:
    expires = int((now + timedelta(hours=settings.session_hours)).timestamp())
    body = f"{login}.{secrets.token_hex(16)}.{expires}"
    return f"{body}.{_mac(settings.session_key, 'session', body)}"


def read_cookie(settings: DashboardSettings, value: str | None, now: datetime) -> Session | None:
    """The session of a cookie with a valid MAC that has not expired; None otherwise."""
    if not value or len(value) > 200:
        return None
    body, _, mac = value.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or not _same(mac, _mac(settings.session_key, "session", body)):
        return None
    login, session_id, expires = parts
    if login not in LOGINS or not expires.isdigit() or int(expires) <= now.timestamp():
        return None
    if (login == "password" and not settings.password) or (login == "token" and not settings.token):
        return None
    return Session(login, session_id)


def bearer(settings: DashboardSettings, authorization: str | None) -> Session | None:
    """The session of ``Authorization: Bearer <dashboard token>``; None for anything else."""
    if not authorization or settings.token is None:
        return None
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not _same(credentials.strip(), settings.token):
        return None
    return Session("token", "bearer", bearer=True)


def csrf_token(settings: DashboardSettings, session: Session) -> str:
    """The synchronizer token of ``session``: a MAC of its id, so it changes with each login."""
    return _mac(settings.session_key, "csrf", session.session_id)


def csrf_ok(settings: DashboardSettings, session: Session, given: str | None) -> bool:
    return given is not None and _same(given, csrf_token(settings, session))


def sign_flash(settings: DashboardSettings, session: Session, text: str) -> str:
    """A flash message for the next page, bound to the session (nobody can plant one)."""
    encoded = text.encode("utf-8").hex()
    return f"{encoded}.{_mac(settings.session_key, 'flash:' + session.session_id, encoded)}"


def read_flash(settings: DashboardSettings, session: Session, value: str | None) -> str | None:
    if not value or len(value) > 4000:
        return None
    encoded, _, mac = value.partition(".")
    if not _same(mac, _mac(settings.session_key, "flash:" + session.session_id, encoded)):
        return None
    try:
        return bytes.fromhex(encoded).decode("utf-8")
    except ValueError:
        return None


class LoginLimiter:
    """At most ``MAX_FAILURES`` failed logins per ``FAILURE_WINDOW`` (see the docstring)."""

    def __init__(self, clock: Clock, limit: int = MAX_FAILURES) -> None:
        self.clock = clock
        self.limit = limit
        self.failures: deque[datetime] = deque()

    def _forget_old(self) -> None:
        cutoff = self.clock() - FAILURE_WINDOW
        while self.failures and self.failures[0] <= cutoff:
            self.failures.popleft()

    def blocked(self) -> bool:
        self._forget_old()
        return len(self.failures) >= self.limit

    def failed(self) -> None:
        self.failures.append(self.clock())
