"""SMTP transport on aiosmtplib's low-level commands (docs/design.md §6).

One recipient per SMTP transaction, so the single DATA reply maps to exactly one job.
``prepare`` = connect/EHLO/STARTTLS/AUTH/MAIL/RCPT: nothing can be delivered by these, so any
failure here is a clean pre-DATA outcome (T6). MAIL and RCPT go in one write to a relay that
offers PIPELINING (``dispatch.smtp_plain``), and DATA with them when the worker says it will
start ``ready`` anyway (``with_ready``): its refusal is then a T6 too. ``ready`` = the DATA
command, to its 354 (unless it went with MAIL and RCPT): still nothing of the message, so the
worker runs it while T4 commits (its round trip hides behind the commit); a refusal or a lost
connection there is definitive (after T4: T7). ``deliver`` = the
message and its final dot, written only once T4 has committed: a 250 means sent, a 4xx/5xx
reply is definitive, and anything else (timeout, disconnect, cancellation) leaves the outcome
unknown — the connection is then closed and never reused, since a late reply would otherwise
be read as the answer to the next command. A T4 refused after the 354 closes the connection:
the receiver, still waiting for the message, then delivers nothing.

The bytes DATA sends are fixed once T4 has given the attempt its ``Date``: the stored payload,
that Date, CRLF line endings, then the DKIM signatures (``dispatch.dkim_signing``) over exactly
those bytes (``final_bytes``). With a bounce domain, MAIL FROM is the job's VERP return path
(``dispatch.return_path``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import ssl
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from dispatch.egress.redact import Redactor, redact_setting, smtp_auth_forms
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.message_date import with_date
from dispatch.return_path import VerpReturnPath
from dispatch.smtp_plain import LostAfterMail, is_plain, mail_plain, mail_rcpt_pipelined, rcpt_plain
from dispatch.smtp_relay_causes import relay_cause
from dispatch.transport import (
    Envelope,
    Outcome,
    PreparedSend,
    RelayUnavailable,
    TransportConfigError,
    Verdict,
)
from dispatch.wire_form import dot_stuffed, wire_form

if TYPE_CHECKING:
    from dispatch.dkim_signing import DkimSigner


COMMAND_TIMEOUT = 60.0  # seconds: connect, EHLO, MAIL, RCPT
# RFC 5321 §4.5.3.2 asks clients to wait 10 minutes for the reply to the final dot. A shorter
# wait only turns slow acceptances into in-doubt jobs; lease heartbeats cover the wait.
DATA_TIMEOUT = 600.0
QUIT_TIMEOUT = 5.0  # seconds: a pooled connection's QUIT at shutdown


OPTIONS = ("starttls", "timeout", "data_timeout", "verify", "insecure_auth", "pipelining")
_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


class SmtpUrlError(ValueError):
    """An SMTP URL that cannot be used. The message never contains the URL's password."""


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

    insecure_auth: bool = False  # allow AUTH on a connection that is not encrypted
    # Send MAIL, RCPT and DATA together to a relay that offers PIPELINING; false for a relay
    # (or a middlebox inspecting SMTP) that offers it and mishandles it.
    pipelining: bool = True

    @classmethod
    def from_url(cls, url: str) -> SmtpConfig:
        """``smtp://host:1025``, ``smtps://user:pass@host:465``, ``smtp://host:587?starttls=true``.

        Every error names the URL redacted (``redact_url``): a typo must not print the password.
        """
        shown = redact_setting(url)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise SmtpUrlError(
                f"invalid SMTP URL {shown}: the port must be a number from 0 to 65535"
                " (percent-encode any /, ?, # or @ in the user name or password)"
            ) from None
        if parts.scheme not in ("smtp", "smtps"):
            raise SmtpUrlError(f"SMTP URL must start with smtp:// or smtps://, got {shown}")
        if not parts.hostname:
            raise SmtpUrlError(f"SMTP URL has no host: {shown}")
        query = {k: v[-1].lower() for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - set(OPTIONS)
        if unknown:
            raise SmtpUrlError(
                f"unknown SMTP URL option(s) in {shown}: {', '.join(sorted(unknown))}"
                f" (known: {', '.join(OPTIONS)})"
            )
        for flag in ("starttls", "verify", "insecure_auth", "pipelining"):
            if flag in query and query[flag] not in _TRUE + _FALSE:
                raise SmtpUrlError(f"SMTP URL option {flag} must be true or false in {shown}")
        use_tls = parts.scheme == "smtps"
        starttls = query.get("starttls") in _TRUE
        if use_tls and starttls:
            raise SmtpUrlError(f"starttls=true makes no sense with smtps:// (already TLS): {shown}")
        try:
            command_timeout = float(query.get("timeout", COMMAND_TIMEOUT))
            data_timeout = float(query.get("data_timeout", DATA_TIMEOUT))
        except ValueError:
            raise SmtpUrlError(f"SMTP URL timeouts must be numbers of seconds: {shown}") from None
        if not (command_timeout > 0 and data_timeout > 0):
            raise SmtpUrlError(f"SMTP URL timeouts must be positive: {shown}")
        return cls(
            host=parts.hostname,
            port=port or (465 if use_tls else 25),
            use_tls=use_tls,
            starttls=starttls,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            command_timeout=command_timeout,
            data_timeout=data_timeout,
            validate_certs=query.get("verify", "true") not in _FALSE,
            insecure_auth=query.get("insecure_auth") in _TRUE,
            pipelining=query.get("pipelining", "true") not in _FALSE,
        )

    def secrets(self) -> list[str]:
        """What must never be stored or printed: the password, and AUTH's encodings of it."""
        if not self.password:
            return []
        return smtp_auth_forms(self.username or "", self.password)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def _refused(code: int, message: str, where: str) -> Outcome:
    """A definitive refusal (``code`` and the relay's ``message``) at ``where``."""
    verdict = Verdict.RETRY if 400 <= code < 500 else Verdict.FAILED
    return Outcome(verdict, code, f"{where}: {message}")


def _scrubbed(outcome: Outcome, redact: Redactor) -> Outcome:
    """The outcome with the server's words cleaned of our credentials, before anyone stores it.

    A server may echo what it got (a failed AUTH, a verbose proxy): the text is stored in the
    outbox and the journal and shown by ``dead list``, so it passes here first.
    """
    text = redact(outcome.text)
    return outcome if text == outcome.text else dataclasses.replace(outcome, text=text)


@dataclass(frozen=True)
class _Stale:
    """A connection found dead at MAIL or RCPT (nothing was delivered)."""

    error: str


class SmtpTransport:
    """A pool of reusable SMTP connections, one transaction per job."""

    def __init__(
        self,
        config: SmtpConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        instrumentation: Instrumentation = NULL_INSTRUMENTATION,
        signer: DkimSigner | None = None,
        return_path: VerpReturnPath | None = None,
    ) -> None:
        self.config = config
        self.ssl_context = ssl_context
        # Keys parsed once, when the worker starts (herald.dkim_keys): None sends unsigned.
        self.signer = signer
        # With a bounce domain, MAIL FROM is the job's VERP address instead of its sender.
        self.return_path = return_path
        # Told ``after_data_write`` once the message and its final dot are handed to the
        # socket, before the server's reply is read (the RFC 1047 gap).
        self.instrumentation = instrumentation
        self._idle: list[aiosmtplib.SMTP] = []
        # Every connection opened and not yet collected, pooled or not (``aclose``).
        self._opened: weakref.WeakSet[aiosmtplib.SMTP] = weakref.WeakSet()
        self.redact = Redactor(config.secrets())
        # This host's name for EHLO, looked up once per event loop (``_local_name``).
        self._naming: tuple[asyncio.AbstractEventLoop, asyncio.Future[str]] | None = None

    @property
    def relay_name(self) -> str:
        """The relay as logs, ``relay_status`` and ``herald status`` name it: scheme, host and
        port, never the credentials."""
        cfg = self.config
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        return f"{'smtps' if cfg.use_tls else 'smtp'}://{host}:{cfg.port}"

    def _idle_connection(self) -> aiosmtplib.SMTP | None:
        while self._idle:
            client = self._idle.pop()
            if client.is_connected:
                return client
        return None

    async def _open(self) -> aiosmtplib.SMTP:
        """A new connection, greeted, secured and logged in.

        Anything that goes wrong here happens before MAIL and has nothing to do with the
        message or its recipient: an unusable setting is ``TransportConfigError`` (the worker
        stops), everything else (refused, DNS, timeout, TLS, greeting, EHLO, AUTH) is
        ``RelayUnavailable`` (the worker hands the job back uncounted and backs off).
        """
        cfg = self.config
        client = aiosmtplib.SMTP(
            hostname=cfg.host,
            port=cfg.port,
            local_hostname=await self._local_name(),
            use_tls=cfg.use_tls,
            start_tls=False,  # decided below, where a missing STARTTLS can be refused clearly
            timeout=cfg.command_timeout,
            validate_certs=cfg.validate_certs,
            tls_context=self.ssl_context,
        )
        self._opened.add(client)
        try:
            await client.connect()
            await self._secure_and_login(client)
        except TransportConfigError:
            client.close()
            raise
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            client.close()
            cause = self.redact(relay_cause(exc, host=cfg.host, timeout=cfg.command_timeout))
            detail = self.redact(_named(exc))
            raise RelayUnavailable(cause, relay=self.relay_name, detail=detail) from None
        except BaseException:
            client.close()
            raise
        return client

    async def _local_name(self) -> str:
        """The name EHLO gives: this host's fully qualified name, as aiosmtplib would send it.
        aiosmtplib looks it up (``socket.getfqdn``, a DNS query that can stall on a host with a
        slow resolver) for every new connection; here every connection of this event loop
        shares one lookup, even the dozens a worker opens at once when it starts."""
        loop = asyncio.get_running_loop()
        if self._naming is None or self._naming[0] is not loop:
            self._naming = (loop, asyncio.ensure_future(asyncio.to_thread(socket.getfqdn)))
        return await asyncio.shield(self._naming[1])

    async def _secure_and_login(self, client: aiosmtplib.SMTP) -> None:
        """STARTTLS whenever offered; AUTH only over TLS unless the URL says ``insecure_auth``.

        A connection that would put the password on the wire in clear, a required STARTTLS the
        server does not offer, or a certificate that does not verify is a configuration
        problem, not a property of the message: ``TransportConfigError``, raised before MAIL.
        """
        cfg = self.config
        await client.ehlo()
        if not cfg.use_tls:
            if client.supports_extension("starttls"):
                try:
                    await client.starttls()
                except ssl.SSLCertVerificationError as exc:
                    raise TransportConfigError(
                        f"the TLS certificate of the SMTP server {cfg.where} does not verify:"
                        f" {exc.verify_message}",
                        hint="fix the server's certificate (or, for development only, add"
                        " verify=false to the SMTP URL)",
                    ) from None
                await client.ehlo()
            elif cfg.starttls:
                raise TransportConfigError(
                    f"the SMTP server {cfg.where} does not offer STARTTLS, which the SMTP URL"
                    " requires (starttls=true); nothing was sent",
                    hint="use a server that offers STARTTLS, or smtps:// for implicit TLS",
                )
        if cfg.username is None:
            return
        encrypted = client.get_transport_info("sslcontext") is not None
        if not encrypted and not cfg.insecure_auth:
            raise TransportConfigError(
                f"refusing to send the SMTP password to {cfg.where} unencrypted: the server"
                " offers no STARTTLS; nothing was sent",
                hint="use smtps:// or a server with STARTTLS (or, if the network is trusted,"
                " add insecure_auth=true to the SMTP URL)",
            )
        await client.login(cfg.username, cfg.password or "")

    def _reuse(self, client: aiosmtplib.SMTP) -> None:
        if client.is_connected:
            self._idle.append(client)

    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        outcome = await self._prepare(envelope, with_ready)
        return _scrubbed(outcome, self.redact) if isinstance(outcome, Outcome) else outcome

    async def _prepare(self, envelope: Envelope, with_ready: bool) -> PreparedSend | Outcome:
        pooled = self._idle_connection()
        if pooled is not None:
            result = await self._transaction(pooled, envelope, with_ready)
            if not isinstance(result, _Stale):
                return result
            # The relay closed this pooled connection (idle timeout, restart, outage): not the
            # job's fault. Try once on a new connection, which says whether the relay is there.
        client = await self._open()
        result = await self._transaction(client, envelope, with_ready)
        if isinstance(result, _Stale):
            # Let in, then dropped before MAIL was answered: the relay is going away (a
            # restart, an overloaded proxy), whoever the recipient.
            cause = "connection closed by the relay before MAIL"
            raise RelayUnavailable(cause, relay=self.relay_name, detail=self.redact(result.error))
        return result

    async def _transaction(
        self, client: aiosmtplib.SMTP, envelope: Envelope, with_ready: bool
    ) -> PreparedSend | Outcome | _Stale:
        """MAIL and RCPT on ``client`` (and DATA ``with_ready``, when pipelined); ``_Stale`` if
        the connection was found dead at MAIL (a drop at RCPT, once MAIL was answered, is this
        transaction's: T6 as before)."""
        mail_answered = False
        data: aiosmtplib.SMTPResponse | None = None
        try:
            sender = self.mail_from(envelope)
            recipient = envelope.recipient
            if is_plain(sender) and is_plain(recipient):
                if self.config.pipelining and client.supports_extension("pipelining"):
                    data = await mail_rcpt_pipelined(
                        client,
                        sender,
                        recipient,
                        reply_wait=self.config.command_timeout,
                        data=with_ready,
                    )
                else:
                    await mail_plain(client, sender)
                    mail_answered = True
                    await rcpt_plain(client, recipient)
            else:
                options, encoding = _mail_options(sender, recipient)
                await client.mail(sender, options=options, encoding=encoding)
                mail_answered = True
                await client.rcpt(recipient, encoding=encoding)
        except aiosmtplib.SMTPResponseException as exc:
            where = "RCPT" if isinstance(exc, aiosmtplib.SMTPRecipientRefused) else "SMTP"
            if isinstance(exc, aiosmtplib.SMTPSenderRefused):
                where = "MAIL"
            await _reset_or_close(client, self)
            return _refused(exc.code, exc.message, where)
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            # Nothing was delivered: no DATA was sent. Safe to retry later.
            client.close()
            stale = not (mail_answered or isinstance(exc, LostAfterMail))
            if isinstance(exc, ConnectionError) and stale:
                return _Stale(_named(exc))  # disconnected, reset, broken pipe
            return Outcome(Verdict.RETRY, None, f"before DATA: {_named(exc)}")
        if data is None:
            return _PreparedSmtp(self, client, envelope)
        if data.code == aiosmtplib.SMTPStatus.start_input:
            return _PreparedSmtp(self, client, envelope, waiting=True)
        # DATA refused before any of the message, and before T4: the session is still in
        # command mode, and the job never reached sending (T6).
        await _reset_or_close(client, self)
        return _refused(data.code, data.message, "DATA")

    def mail_from(self, envelope: Envelope) -> str:
        """The envelope sender: the job's VERP return path when configured, else its From."""
        if self.return_path is None:
            return envelope.sender
        return self.return_path.sender_for(envelope.key, envelope.sender)

    def final_bytes(self, envelope: Envelope, started_at: datetime) -> bytes:
        """Exactly what DATA transmits for this attempt (before dot-stuffing).

        A function of the stored payload and T4's ``started_at`` only (the Date, DKIM's
        ``t=``), so a re-read of the same attempt yields the same bytes. The signature comes
        last: nothing may change a signed byte after it, and aiosmtplib's ``data()`` sends
        bytes as given (it only normalises line endings, which ``wire_form`` already did).
        """
        # CRLF first: the Date goes into the header block, which is found by its CRLF CRLF end.
        message = with_date(wire_form(envelope.payload), started_at)
        if self.signer is None:
            return message
        return self.signer.sign(message, started_at)

    async def aclose(self) -> None:
        """QUIT on every idle connection at once: a worker's shutdown waits one relay round
        trip (at most ``QUIT_TIMEOUT``), not one per pooled connection. A connection that does
        not answer in time is closed, and so is any other still open: a send cancelled at
        shutdown may have left its connection waiting in DATA (closing it delivers nothing)."""
        idle, self._idle = self._idle, []
        await asyncio.gather(*(_quit(client) for client in idle))
        for client in list(self._opened):
            if client.is_connected:
                client.close()


class _PreparedSmtp:
    """MAIL and RCPT done on ``client``; ``ready`` sends DATA, ``deliver`` the message.

    Between the DATA command's 354 and the message's final dot the receiver waits for content:
    a connection in that state can only be closed (closing it delivers nothing, RFC 5321
    §4.1.1.4), never reset or reused.
    """

    def __init__(
        self,
        transport: SmtpTransport,
        client: aiosmtplib.SMTP,
        envelope: Envelope,
        *,
        waiting: bool = False,
    ) -> None:
        """``waiting``: DATA was already answered 354 (sent with MAIL and RCPT)."""
        self.transport = transport
        self.client = client
        self.envelope = envelope
        self._waiting = waiting  # DATA was answered 354: the receiver waits for the message
        self._readying: asyncio.Future[Outcome | None] | None = None
        if waiting:
            self._readying = asyncio.get_running_loop().create_future()
            self._readying.set_result(None)

    def ready(self) -> asyncio.Future[Outcome | None]:
        if self._readying is None:
            self._readying = asyncio.ensure_future(self._ready())
        return self._readying

    async def _ready(self) -> Outcome | None:
        client = self.client
        try:
            response = await client.execute_command(b"DATA")
        except asyncio.CancelledError:
            client.close()
            raise
        except Exception as exc:  # (timeout, disconnect, or anything else: none of it sent)
            client.close()
            return self._scrubbed(
                Outcome(Verdict.RETRY, None, f"at DATA, before the message: {_named(exc)}")
            )
        if response.code != aiosmtplib.SMTPStatus.start_input:
            # Refused before any of the message: the session is still in command mode.
            await _reset_or_close(client, self.transport)
            return self._scrubbed(_refused(response.code, response.message, "DATA"))
        self._waiting = True
        return None

    def _scrubbed(self, outcome: Outcome) -> Outcome:
        return _scrubbed(outcome, self.transport.redact)

    async def deliver(self, started_at: datetime) -> Outcome:
        return self._scrubbed(await self._deliver(started_at))

    async def _deliver(self, started_at: datetime) -> Outcome:
        client = self.client
        envelope = self.envelope
        # The Date is the moment of sending: T4's, so every re-read of this attempt agrees.
        try:
            message = self.transport.final_bytes(envelope, started_at)
        except Exception as exc:
            # Nothing of the message went out. The same payload would fail the same way
            # again, so this is final for the job, not a retry.
            await self.abandon()
            return Outcome(Verdict.FAILED, None, f"cannot sign: {_named(exc)}")
        try:
            not_ready = await self.ready()
        except asyncio.CancelledError:
            client.close()  # (the ready step closed it too)
            return Outcome(Verdict.RETRY, None, "cancelled at DATA, before the message")
        if not_ready is not None:
            return not_ready
        protocol = client.protocol
        try:
            if protocol is None:  # lost after the 354
                raise aiosmtplib.SMTPServerDisconnected("Connection lost")
            # Written and answered as aiosmtplib's data() does after its 354, whose DATA
            # command ``ready`` sent; a write that raises has handed nothing to the socket.
            protocol.write(dot_stuffed(message))
        except (aiosmtplib.SMTPException, OSError) as exc:
            client.close()
            return Outcome(Verdict.RETRY, None, f"at DATA, before the message: {_named(exc)}")
        self.transport.instrumentation.after_data_write(envelope)
        try:
            response = await protocol.read_response(timeout=self.transport.config.data_timeout)
        except asyncio.CancelledError:
            client.close()
            return Outcome(Verdict.IN_DOUBT, None, "cancelled inside DATA")
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            client.close()
            return Outcome(Verdict.IN_DOUBT, None, f"inside DATA: {_named(exc)}")
        if response.code != aiosmtplib.SMTPStatus.completed:
            # A definitive refusal; still, never reuse a connection after a refused message.
            client.close()
            return _refused(response.code, response.message, "DATA")
        self.transport._reuse(client)
        return Outcome(Verdict.SENT, response.code, response.message)

    async def abandon(self) -> None:
        if self._readying is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._readying
        if self._waiting:
            self.client.close()  # in DATA: closing is the only way out, and delivers nothing
        else:
            await _reset_or_close(self.client, self.transport)


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _quit(client: aiosmtplib.SMTP) -> None:
    try:
        await asyncio.wait_for(client.quit(), timeout=QUIT_TIMEOUT)
    except (TimeoutError, aiosmtplib.SMTPException, OSError):
        client.close()


async def _reset_or_close(client: aiosmtplib.SMTP, transport: SmtpTransport) -> None:
    try:
        await client.rset()
    except (TimeoutError, aiosmtplib.SMTPException, OSError):
        client.close()
        return
    transport._reuse(client)


def _mail_options(sender: str, recipient: str) -> tuple[list[str], str]:
    if sender.isascii() and recipient.isascii():
        return [], "ascii"
    # Internationalised local parts need the server's SMTPUTF8 extension (RFC 6531).
    return ["SMTPUTF8"], "utf-8"
