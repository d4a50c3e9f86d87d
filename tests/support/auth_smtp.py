"""A real aiosmtpd server on 127.0.0.1 with optional STARTTLS and AUTH, that records, for every
command that matters, whether the session was encrypted when it arrived.

It exists to prove where the password goes: ``auth_seen`` lists every AUTH attempt with the TLS
state of the session at that moment and the credentials the server decoded.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from herald.sink import BoundPortController

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Seen:
    command: str
    tls: bool


@dataclass(frozen=True)
class AuthSeen:
    mechanism: str
    tls: bool
    login: str
    password: str


@dataclass
class _Record:
    lock: threading.Lock = field(default_factory=threading.Lock)
    commands: list[Seen] = field(default_factory=list)
    auths: list[AuthSeen] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)


class _RecordingSMTP(SMTP):
    record: _Record

    def _note(self, command: str) -> None:
        with self.record.lock:
            self.record.commands.append(Seen(command, self._tls_protocol is not None))

    async def smtp_AUTH(self, arg: str) -> None:
        self._note("AUTH")
        await super().smtp_AUTH(arg)

    async def smtp_MAIL(self, arg: str | None) -> None:
        self._note("MAIL")
        await super().smtp_MAIL(arg)

    async def smtp_STARTTLS(self, arg: str) -> None:
        self._note("STARTTLS")
        await super().smtp_STARTTLS(arg)


class _Handler:
    def __init__(self, record: _Record, reply: str) -> None:
        self.record = record
        self.reply = reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.record.lock:
            self.record.messages.append(envelope.original_content or b"")
        return self.reply


class AuthSMTPServer:
    """``tls``: offer STARTTLS with this server context. ``check``: (login, password) -> the
    AUTH answer (True accepts; a string is the failure reply, e.g. one echoing the password)."""

    def __init__(
        self,
        *,
        tls: ssl.SSLContext | None = None,
        check: Callable[[str, str], bool | str] | None = None,
        reply: str = "250 OK",
    ) -> None:
        self.tls = tls
        self.check = check or (lambda login, password: True)
        self.record = _Record()
        self.reply = reply
        self.port = 0
        self._controller: BoundPortController | None = None

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        login, password = data.login.decode(), data.password.decode()
        with self.record.lock:
            self.record.auths.append(
                AuthSeen(mechanism, server._tls_protocol is not None, login, password)
            )
        verdict = self.check(login, password)
        if verdict is True:
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False, message=str(verdict) or None)

    def start(self) -> None:
        record = self.record
        recording = type("RecordingSMTP", (_RecordingSMTP,), {"record": record})
        server_kwargs: dict[str, Any] = {
            "authenticator": self._authenticate,
            "auth_require_tls": False,  # the client, not the server, must refuse clear-text AUTH
            "decode_data": False,
        }
        if self.tls is not None:
            server_kwargs["tls_context"] = self.tls

        class Controller(BoundPortController):
            def factory(self) -> SMTP:
                return recording(self.handler, **self.SMTP_kwargs)  # type: ignore[no-any-return]

        self._controller = Controller(
            _Handler(record, self.reply),
            hostname=LOOPBACK,
            port=0,
            server_hostname="auth.test",
            loop=asyncio.new_event_loop(),
            **server_kwargs,
        )
        self._controller.start()
        self.port = self._controller.port

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> AuthSMTPServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def commands(self) -> list[Seen]:
        with self.record.lock:
            return list(self.record.commands)

    def auths(self) -> list[AuthSeen]:
        with self.record.lock:
            return list(self.record.auths)

    def messages(self) -> list[bytes]:
        with self.record.lock:
            return list(self.record.messages)
