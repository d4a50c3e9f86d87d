"""A development SMTP sink: accepts every message and files it, byte for byte, in a Maildir.

It is a dev tool, so it binds loopback only unless told otherwise, and it stores before it replies
250 (written, fsync'd, renamed into ``new/``, the rename fsync'd) so that what it acknowledged is
really on disk. Concurrent deliveries are made durable together (``herald.sink_store``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import mailbox
import signal
import socket
import time
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesHeaderParser
from pathlib import Path
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from herald.errors import UsageError
from herald.signal_stop import SignalStop, signal_sets
from herald.sink_store import GroupFlusher, MaildirFlush, default_flush
from herald.sink_store import fsync_directory as fsync_directory  # still importable from here

log = logging.getLogger(__name__)

DEFAULT_SINK_PORT = 1025
# Generous: a dev sink should never be the reason a big test message bounces.
SINK_DATA_SIZE_LIMIT = 50 * 1024 * 1024
# Named explicitly so aiosmtpd does not call socket.getfqdn(), which can stall on DNS.
SINK_SERVER_NAME = "herald-sink"
# Seconds a server's stop waits for its cancelled sessions to end before its loop closes.
STOP_GRACE_SECONDS = 5.0


class NonLoopbackBindRefused(UsageError):
    """The sink was asked to listen on an address reachable from other machines."""


@dataclass(frozen=True)
class SinkedMessage:
    message_id: str | None
    mail_from: str
    rcpt_tos: tuple[str, ...]
    subject: str | None
    path: Path
    size: int


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Racy by nature: prefer ``port=0`` where it is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A host name other than localhost may resolve anywhere; "" means every interface.
        return False


def require_loopback(host: str, *, allow_remote: bool) -> None:
    if allow_remote or is_loopback(host):
        return
    raise NonLoopbackBindRefused(
        f"refusing to listen on {host!r}: the sink accepts mail from anyone who can reach it",
        hint="use a loopback address such as 127.0.0.1, or pass allow_remote explicitly",
    )


class BoundPortController(Controller):
    """aiosmtpd's threaded Controller, made to work with ``port=0``.

    ``Controller.start`` probes readiness by connecting to ``self.port``, which would be 0. The
    listening socket already exists when the probe runs, so read the kernel-chosen port from it
    first: no window in which another process could take the port, unlike ``free_port()``.
    """

    def _trigger_server(self) -> None:
        server = self.server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]  # unannotated in aiosmtpd

    def cancel_tasks(self, stop_loop: bool = True) -> None:
        """What ``stop`` runs in the server's loop: take no new session, cancel every task, and
        stop the loop once they have all ended (or after ``STOP_GRACE_SECONDS``).

        aiosmtpd's own stops the loop in the same turn as it cancels: a session whose
        cancellation took more turns than the loop then ran (a handler's clean-up, a session
        accepted meanwhile) was closed with the loop while still pending, and its garbage
        warned "Task was destroyed but it is pending!" later, in whatever code ran then."""
        if self.server is not None:
            self.server.close()  # no new session; those already open are cancelled below
        cancelled = asyncio.all_tasks(self.loop)
        for task in cancelled:
            task.cancel()
        if stop_loop:
            self.loop.create_task(self._stop_when_ended(cancelled))

    async def _stop_when_ended(self, cancelled: set[asyncio.Task[Any]]) -> None:
        loop = asyncio.get_running_loop()
        this = asyncio.current_task()
        deadline = loop.time() + STOP_GRACE_SECONDS
        while loop.time() < deadline:
            # A task made by another's cancellation is cancelled too, once.
            late = asyncio.all_tasks() - cancelled - {this}
            for task in late:
                task.cancel()
            cancelled |= late
            pending = {task for task in cancelled if not task.done()}
            if not pending:
                break
            await asyncio.wait(pending, timeout=deadline - loop.time())
        loop.stop()


def offering_pipelining(responses: list[str]) -> list[str]:
    """aiosmtpd's EHLO reply lines with PIPELINING (RFC 2920) added: aiosmtpd reads commands one
    line at a time from a buffered stream and answers each in order, so a client may send
    several at once (Herald sends MAIL, RCPT and DATA together: one round trip for the three)."""
    *lines, last = responses
    return [*lines, "250-PIPELINING", last]


class MaildirSink:
    """aiosmtpd handler storing every message in a Maildir, durably, then replying 250.

    Storing is ``herald.sink_store``'s flusher thread, which makes concurrent deliveries durable
    as one group; ``flush`` is how (a seam: by default syncfs(2) where the C library has it,
    else one fsync per file in parallel; then one fsync of ``new/`` per group). ``close`` stops
    the flusher.
    """

    def __init__(
        self,
        maildir: Path,
        on_message: Callable[[SinkedMessage], None] | None = None,
        *,
        flush: MaildirFlush | None = None,
    ) -> None:
        self.maildir = Path(maildir)
        self.on_message = on_message
        # Creates tmp/, new/ and cur/ if missing; delivery itself is ours, because mailbox does
        # not fsync and a 250 must mean "on disk".
        self.maildir.parent.mkdir(parents=True, exist_ok=True)
        mailbox.Maildir(self.maildir, create=True)
        self._flusher = GroupFlusher(self.maildir, flush if flush is not None else default_flush())

    def close(self) -> None:
        self._flusher.close()

    @property
    def queued(self) -> int:
        """Messages received and waiting for the next durable group."""
        return self._flusher.queued

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        """aiosmtpd's EHLO, plus PIPELINING (``offering_pipelining``)."""
        session.host_name = hostname  # what aiosmtpd does when no hook is given
        return offering_pipelining(responses)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content: bytes = envelope.original_content or b""
        try:
            path = await self._deliver(content)
        except OSError as exc:
            # Not stored, so not acknowledged: a temporary failure keeps it with the client.
            log.error(
                "could not store a message: %s",
                exc,
                extra={"event": "sink_store_failed", "error": str(exc)},
            )
            return "451 4.3.0 Requested action aborted: could not store the message"
        if self.on_message is not None:
            try:
                self.on_message(self._describe(envelope, content, path))
            except Exception:
                # The message is already durable: a failing report (say, a closed stdout) must
                # not turn it into an error reply, or the client would send it again.
                log.warning(
                    "on_message failed for %s",
                    path,
                    exc_info=True,
                    extra={"event": "sink_report_failed", "path": str(path)},
                )
        return "250 OK: stored"

    async def _deliver(self, content: bytes) -> Path:
        """The message's path in ``new/``, once it is durable (file and rename)."""
        loop = asyncio.get_running_loop()
        stored: asyncio.Future[Path] = loop.create_future()

        def settle(result: Path | OSError) -> None:
            if stored.done():  # the session went away (client gone, sink stopping)
                return
            if isinstance(result, OSError):
                stored.set_exception(result)
            else:
                stored.set_result(result)

        def done(result: Path | OSError) -> None:  # on the flusher thread
            with suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(settle, result)

        self._flusher.submit(content, done)
        return await stored

    @staticmethod
    def _describe(envelope: Envelope, content: bytes, path: Path) -> SinkedMessage:
        headers = BytesHeaderParser().parsebytes(content)
        return SinkedMessage(
            message_id=_header_text(headers, "Message-ID"),
            mail_from=envelope.mail_from or "",
            rcpt_tos=tuple(envelope.rcpt_tos),
            subject=_header_text(headers, "Subject"),
            path=path,
            size=len(content),
        )


def _header_text(headers: Message, name: str) -> str | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        text = str(make_header(decode_header(str(raw))))
    except (HeaderParseError, LookupError, UnicodeError):
        # An undecodable encoded-word is still worth showing as-is.
        text = str(raw)
    # Unfold: the echo line must stay one line.
    return " ".join(text.split())


class SinkHandle:
    """A running sink. ``port`` is the real port, also when 0 was asked for."""

    def __init__(
        self, controller: BoundPortController, on_stop: Callable[[], None] | None = None
    ) -> None:
        self._controller: BoundPortController | None = controller
        self._on_stop = on_stop
        self.host: str = controller.hostname
        self.port: int = controller.port

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None
            if self._on_stop is not None:
                self._on_stop()  # after the server: no session is left to submit a message

    def __enter__(self) -> SinkHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def start_controller(
    handler: Any, *, host: str, port: int, server_name: str
) -> BoundPortController:
    """Start a threaded aiosmtpd server that hands the handler exact bytes (no decoding)."""
    controller = BoundPortController(
        handler,
        hostname=host,
        port=port,
        server_hostname=server_name,
        data_size_limit=SINK_DATA_SIZE_LIMIT,
        decode_data=False,
        # Our own loop, so a controller never inherits (or closes) the caller's.
        loop=asyncio.new_event_loop(),
    )
    controller.start()
    return controller


def start_sink(
    maildir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_SINK_PORT,
    on_message: Callable[[SinkedMessage], None] | None = None,
    allow_remote: bool = False,
    flush: MaildirFlush | None = None,
) -> SinkHandle:
    """Start the sink in a background thread. ``on_message`` is called from that thread.

    ``flush`` is how a group of messages is made durable (``herald.sink_store``).
    """
    require_loopback(host, allow_remote=allow_remote)
    handler = MaildirSink(maildir, on_message, flush=flush)
    try:
        controller = start_controller(handler, host=host, port=port, server_name=SINK_SERVER_NAME)
    except BaseException:
        handler.close()
        raise
    return SinkHandle(controller, on_stop=handler.close)


def format_sinked(message: SinkedMessage, *, at: float | None = None) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    return (
        f"{clock} {message.message_id or '-'} {message.mail_from or '<>'}"
        f" -> {','.join(message.rcpt_tos)} {message.subject or '(no subject)'}"
        f" ({message.size} bytes)"
    )


def serve_sink_forever(
    maildir: Path,
    *,
    host: str,
    port: int,
    echo: Callable[[str], None],
    allow_remote: bool = False,
    on_ready: Callable[[SinkHandle], None] | None = None,
) -> None:
    """Run the sink until Ctrl-C or SIGTERM, echoing one line per message.

    ``on_ready`` receives the running handle (e.g. to print the real port when ``port=0``).
    """
    with (
        closing(SignalStop()) as stop_requested,  # its pipe closed however the sink ends
        # Ctrl-C (the usual way to stop a dev server) and SIGTERM only set the stop, whenever
        # they come: a KeyboardInterrupt lands wherever the main thread is, and once landed
        # in on_ready, outside any handler (a traceback, and no clean stop).
        signal_sets(signal.SIGTERM, stop_requested),
        signal_sets(signal.SIGINT, stop_requested),
        start_sink(
            maildir,
            host=host,
            port=port,
            allow_remote=allow_remote,
            on_message=lambda message: echo(format_sinked(message)),
        ) as handle,
    ):
        if on_ready is not None:
            on_ready(handle)
        stop_requested.wait()
