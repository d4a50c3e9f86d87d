"""SMTP transport on aiosmtplib's low-level commands (DESIGN §6).

One recipient per SMTP transaction, so the single DATA reply maps to exactly one job.
``prepare`` = connect/EHLO/STARTTLS/AUTH/MAIL/RCPT: nothing can be delivered by these, so any
failure here is a clean pre-DATA outcome (T6). ``deliver`` = DATA: a 250 means sent, a 4xx/5xx
reply is definitive, and anything else (timeout, disconnect, cancellation) leaves the outcome
unknown — the connection is then closed and never reused, since a late reply would otherwise
be read as the answer to the next command.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from dispatch.transport import Envelope, Outcome, PreparedSend, Verdict

COMMAND_TIMEOUT = 60.0  # seconds: connect, EHLO, MAIL, RCPT
# RFC 5321 §4.5.3.2 asks clients to wait 10 minutes for the reply to the final dot. A shorter
# wait only turns slow acceptances into in-doubt jobs; lease heartbeats cover the wait.
DATA_TIMEOUT = 600.0


class SmtpUrlError(ValueError):
    """An SMTP URL that cannot be used."""


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int
    use_tls: bool = False  # implicit TLS (smtps://)
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    command_timeout: float = COMMAND_TIMEOUT
    data_timeout: float = DATA_TIMEOUT
    validate_certs: bool = True

    @classmethod
    def from_url(cls, url: str) -> SmtpConfig:
        """``smtp://host:1025``, ``smtps://user:pass@host:465``, ``smtp://host:587?starttls=true``."""
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise SmtpUrlError(f"SMTP URL must start with smtp:// or smtps://, got {url!r}")
        if not parts.hostname:
            raise SmtpUrlError(f"SMTP URL has no host: {url!r}")
        query = {k: v[-1].lower() for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"starttls", "timeout", "data_timeout", "verify"}
        if unknown:
            raise SmtpUrlError(f"unknown SMTP URL option(s): {', '.join(sorted(unknown))}")
        use_tls = parts.scheme == "smtps"
        try:
            port = parts.port or (465 if use_tls else 25)
            return cls(
                host=parts.hostname,
                port=port,
                use_tls=use_tls,
                starttls=query.get("starttls") in ("1", "true", "yes"),
                username=unquote(parts.username) if parts.username else None,
                password=unquote(parts.password) if parts.password else None,
                command_timeout=float(query.get("timeout", COMMAND_TIMEOUT)),
                data_timeout=float(query.get("data_timeout", DATA_TIMEOUT)),
                validate_certs=query.get("verify", "true") not in ("0", "false", "no"),
            )
        except ValueError as exc:
            raise SmtpUrlError(f"invalid SMTP URL {url!r}: {exc}") from exc


def _refused(exc: aiosmtplib.SMTPResponseException, where: str) -> Outcome:
    verdict = Verdict.RETRY if 400 <= exc.code < 500 else Verdict.FAILED
    return Outcome(verdict, exc.code, f"{where}: {exc.message}")


class SmtpTransport:
    """A pool of reusable SMTP connections, one transaction per job."""

    def __init__(
        self,
        config: SmtpConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        on_data_written: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.ssl_context = ssl_context
        # Crash-point seam: called once the message and its final dot are handed to the
        # socket, before the server's reply is read (the RFC 1047 gap).
        self.on_data_written = on_data_written
        self._idle: list[aiosmtplib.SMTP] = []

    async def _connection(self) -> aiosmtplib.SMTP:
        while self._idle:
            client = self._idle.pop()
            if client.is_connected:
                return client
        cfg = self.config
        client = aiosmtplib.SMTP(
            hostname=cfg.host,
            port=cfg.port,
            use_tls=cfg.use_tls,
            start_tls=cfg.starttls,
            timeout=cfg.command_timeout,
            validate_certs=cfg.validate_certs,
            tls_context=self.ssl_context,
        )
        await client.connect()
        await client.ehlo()
        if cfg.username is not None:
            await client.login(cfg.username, cfg.password or "")
        return client

    def _reuse(self, client: aiosmtplib.SMTP) -> None:
        if client.is_connected:
            self._idle.append(client)

    async def prepare(self, envelope: Envelope) -> PreparedSend | Outcome:
        client: aiosmtplib.SMTP | None = None
        try:
            client = await self._connection()
            options, encoding = _mail_options(envelope)
            await client.mail(envelope.sender, options=options, encoding=encoding)
            await client.rcpt(envelope.recipient, encoding=encoding)
        except aiosmtplib.SMTPResponseException as exc:
            where = "RCPT" if isinstance(exc, aiosmtplib.SMTPRecipientRefused) else "SMTP"
            if isinstance(exc, aiosmtplib.SMTPSenderRefused):
                where = "MAIL"
            if client is not None:
                await _reset_or_close(client, self)
            return _refused(exc, where)
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            # Nothing was delivered: no DATA was sent. Safe to retry later.
            if client is not None:
                client.close()
            return Outcome(Verdict.RETRY, None, f"before DATA: {type(exc).__name__}: {exc}")
        return _PreparedSmtp(self, client, envelope)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for client in idle:
            try:
                await asyncio.wait_for(client.quit(), timeout=5)
            except (TimeoutError, aiosmtplib.SMTPException, OSError):
                client.close()


class _PreparedSmtp:
    def __init__(self, transport: SmtpTransport, client: aiosmtplib.SMTP, envelope: Envelope):
        self.transport = transport
        self.client = client
        self.envelope = envelope

    async def deliver(self) -> Outcome:
        client = self.client
        if self.transport.on_data_written is not None:
            _watch_for_end_of_data(client, self.transport.on_data_written)
        try:
            response = await client.data(
                self.envelope.payload, timeout=self.transport.config.data_timeout
            )
        except aiosmtplib.SMTPDataError as exc:
            # A definitive refusal; still, never reuse a connection after data() raised.
            client.close()
            return _refused(exc, "DATA")
        except asyncio.CancelledError:
            client.close()
            return Outcome(Verdict.IN_DOUBT, None, "cancelled inside DATA")
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            client.close()
            return Outcome(Verdict.IN_DOUBT, None, f"inside DATA: {type(exc).__name__}: {exc}")
        self.transport._reuse(client)
        return Outcome(Verdict.SENT, response.code, response.message)

    async def abandon(self) -> None:
        await _reset_or_close(self.client, self.transport)


async def _reset_or_close(client: aiosmtplib.SMTP, transport: SmtpTransport) -> None:
    try:
        await client.rset()
    except (TimeoutError, aiosmtplib.SMTPException, OSError):
        client.close()
        return
    transport._reuse(client)


def _watch_for_end_of_data(client: aiosmtplib.SMTP, callback: Callable[[], None]) -> None:
    transport = client.transport
    if not isinstance(transport, asyncio.WriteTransport):
        return
    write = transport.write

    def write_then_notify(data: bytes | bytearray | memoryview) -> None:
        write(data)
        if bytes(data).endswith(b"\r\n.\r\n"):
            callback()

    transport.write = write_then_notify  # type: ignore[method-assign]


def _mail_options(envelope: Envelope) -> tuple[list[str], str]:
    if envelope.sender.isascii() and envelope.recipient.isascii():
        return [], "ascii"
    # Internationalised local parts need the server's SMTPUTF8 extension (RFC 6531).
    return ["SMTPUTF8"], "utf-8"
