"""The inbound SMTP listener of ``herald serve``: bounces, complaints and mailto unsubscribes.

It accepts mail for exactly two kinds of recipient, both carrying a signed address token
(dispatch.signed_tokens) that names ONE job:

- ``bounce+<token>@HERALD_BOUNCE_DOMAIN``, the VERP return path the worker sends with: DSNs and
  ARF complaints. The report is parsed (campaigns.feedback_report); a hard bounce or a
  complaint suppresses the job's mailbox globally, a soft bounce or a policy block is recorded.
- ``unsub+<token>@HERALD_UNSUBSCRIBE_DOMAIN``, the mailto of ``List-Unsubscribe``: any message
  (Apple Mail sends an empty subject and a canned body) unsubscribes the job's mailbox in the
  job's list scope (global for a job without one).

Every other recipient, and a token that does not verify (forged, altered, a key taken out of
the ring, a bounce token used as an unsubscribe), is refused at RCPT with 550: nothing is
accepted for addresses we cannot resolve, so the listener cannot be used as a relay or a sink.
The mailbox comes from the job the token names, never from the message's ``To:`` or ``From:``.

A message is acknowledged (250) only after its evidence is committed; a database failure is a
451, so the sending MTA tries again later. Reports we cannot read are acknowledged and ignored:
bouncing a bounce helps nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import sqlalchemy as sa
from aiosmtpd.smtp import SMTP, Envelope, Session
from sqlalchemy.engine import Engine

from campaigns.feedback import Report
from campaigns.feedback_report import parse_report
from campaigns.feedback_store import (
    Feedback,
    JobRef,
    Recorded,
    digest_ref,
    job_by_prefix,
    record_feedback,
    report_feedback,
)
from dispatch.signed_tokens import BadToken, Purpose, read_address_token
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.sink import BoundPortController

log = logging.getLogger(__name__)

# DSNs usually return the original message; 10 MB covers that without inviting abuse.
DATA_SIZE_LIMIT = 10 * 1024 * 1024
MAX_RECIPIENTS = 20
_LOCAL_PREFIX: dict[Purpose, str] = {"bounce": "bounce+", "unsub": "unsub+"}


@dataclass(frozen=True)
class Target:
    purpose: Purpose
    prefix: str  # the job-key prefix the verified token names (hex)


def resolve_recipient(address: str, settings: MailSettings) -> Target | None:
    """The verified target of a RCPT address, or None (refuse it). Pure: no database."""
    keys = settings.signing_keys
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if keys is None or not at:
        return None
    local, domain = local.lower(), domain.lower().rstrip(".")
    domains: dict[Purpose, str | None] = {
        "bounce": settings.bounce_domain,
        "unsub": settings.unsubscribe_domain,
    }
    for purpose, prefix in _LOCAL_PREFIX.items():
        if domains[purpose] is None or domain != domains[purpose]:
            continue
        if not local.startswith(prefix) or len(local) > 64:
            continue
        try:
            return Target(purpose, read_address_token(keys, purpose, local[len(prefix) :]))
        except BadToken:
            return None
    return None


class InboundHandler:
    """The aiosmtpd handler: token check at RCPT, parse + record at DATA (in a thread)."""

    def __init__(self, engine: Engine, settings: MailSettings) -> None:
        self.engine = engine
        self.settings = settings

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        if resolve_recipient(address, self.settings) is None:
            return "550 5.1.1 No such recipient here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        if isinstance(content, str):  # decode_data=True would give str; we ask for bytes
            content = content.encode("utf-8", "surrogateescape")
        null_sender = envelope.mail_from in ("", "<>", None)
        try:
            await asyncio.to_thread(self.process, list(envelope.rcpt_tos), content, null_sender)
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            log.warning(
                "inbound: not recorded, asking the sender to retry: %s",
                type(exc).__name__,
                extra={"event": "inbound_not_recorded", "cause": type(exc).__name__},
            )
            return "451 4.3.0 Temporary failure, please try again later"
        return "250 OK"

    def process(self, rcpts: list[str], content: bytes, null_sender: bool) -> list[Recorded]:
        """Record what ``content`` means for each recipient's job; one transaction each."""
        results = []
        report: Report | None = None
        for address in rcpts:
            target = resolve_recipient(address, self.settings)
            if target is None:  # settings cannot change mid-transaction; defensive only
                continue
            if target.purpose == "bounce" and report is None:
                # Parsed once, outside any transaction: it is CPU work on up to 2 MB.
                report = parse_report(content, null_sender=null_sender)
            with self.engine.begin() as conn:
                job = job_by_prefix(conn, target.prefix)
                if job is None:
                    log.info(
                        "inbound: token for job %s names no job; ignored",
                        target.prefix,
                        extra={"event": "inbound_unknown_job", "prefix": target.prefix},
                    )
                    continue
                if target.purpose == "unsub":
                    fb: Feedback | None = _unsubscribe(job)
                else:
                    assert report is not None  # parsed above for every bounce target
                    fb = _bounce(job, report, content)
                if fb is None:
                    log.info(
                        "inbound: report for job %s not recorded",
                        job.key[:16],
                        extra={
                            "event": "inbound_ignored",
                            "campaign": job.campaign,
                            "key": job.key,
                        },
                    )
                    continue
                recorded = record_feedback(conn, fb)
            results.append(recorded)
            outcome = "suppressed" if recorded.suppressed else "new" if recorded.new else "seen"
            log.info(
                "inbound: %s (%s) for job %s: %s",
                fb.kind,
                fb.source,
                job.key[:16],
                outcome,
                extra={
                    "event": "feedback_recorded",
                    "campaign": job.campaign,
                    "key": job.key,
                    "kind": str(fb.kind),
                    "source": str(fb.source),
                    "outcome": outcome,
                },
            )
        return results


def _bounce(job: JobRef, report: Report, content: bytes) -> Feedback | None:
    source = "arf" if report.form == "arf" else "dsn"
    # The same report delivered twice (our 250 was lost) is one event: keyed by its Message-ID,
    # or by its bytes when it has none.
    ref = digest_ref(source, job.key, report.report_id or content)
    return report_feedback(job, report, source=source, event_ref=ref)


def _unsubscribe(job: JobRef) -> Feedback:
    # One unsubscribe per job: a second mail to the same address is the same request.
    return Feedback(
        "unsubscribe",
        "mailto",
        digest_ref("mailto", job.key),
        job.mailbox,
        job.key,
        detail="mailto unsubscribe",
        scope=job.unsubscribe_scope,
    )


def check_settings(settings: MailSettings) -> str:
    """The listener's server name, or ConfigError when its settings are missing."""
    if settings.signing_keys is None:
        raise ConfigError(
            "the inbound SMTP listener needs HERALD_SIGNING_KEYS",
            hint="set it to the keys the workers sign return paths and unsubscribe links with",
        )
    name = settings.bounce_domain or settings.unsubscribe_domain
    if name is None:
        raise ConfigError(
            "the inbound SMTP listener needs HERALD_BOUNCE_DOMAIN or HERALD_UNSUBSCRIBE_DOMAIN",
            hint="it accepts only bounce+<token>@ and unsub+<token>@ those domains",
        )
    return name


def _smtp(handler: InboundHandler, server_name: str) -> SMTP:
    return SMTP(
        handler,
        hostname=server_name,  # named, so aiosmtpd never calls socket.getfqdn() (DNS stalls)
        data_size_limit=DATA_SIZE_LIMIT,
        decode_data=False,
        timeout=60,
    )


async def start_inbound(
    engine: Engine,
    settings: MailSettings,
    *,
    host: str,
    port: int,
    sock: socket.socket | None = None,
) -> asyncio.Server:
    """Listen in the running event loop (``herald serve`` beside uvicorn); close() to stop.
    ``sock``: an already bound socket (``herald serve`` binds before starting, so a busy port
    is one clear error at once), used instead of ``host``/``port``."""
    server_name = check_settings(settings)
    handler = InboundHandler(engine, settings)
    loop = asyncio.get_running_loop()
    if sock is not None:
        return await loop.create_server(lambda: _smtp(handler, server_name), sock=sock)
    return await loop.create_server(lambda: _smtp(handler, server_name), host=host, port=port)


@contextlib.asynccontextmanager
async def running_inbound(
    engine: Engine,
    settings: MailSettings,
    *,
    host: str,
    port: int,
    sock: socket.socket | None = None,
) -> AsyncIterator[asyncio.Server]:
    """``start_inbound`` for the length of a block (e.g. a Starlette lifespan)."""
    server = await start_inbound(engine, settings, host=host, port=port, sock=sock)
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()


async def serve_inbound(
    engine: Engine,
    settings: MailSettings,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str, int], None] | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Listen until cancelled: the coroutine ``herald serve`` runs beside uvicorn
    (``herald.serve.app.serve(alongside=...)``). ``on_ready(host, port)`` once listening."""
    async with running_inbound(engine, settings, host=host, port=port, sock=sock) as server:
        if on_ready is not None:
            bound_host, bound_port = server.sockets[0].getsockname()[:2]
            on_ready(bound_host, bound_port)
        await server.serve_forever()


class InboundListener:
    """The listener in a thread of its own (tests, or a shell without an event loop).

    ``port=0`` picks a free port; ``port`` holds the real one after ``start()``.
    """

    def __init__(
        self, engine: Engine, settings: MailSettings, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        server_name = check_settings(settings)
        self.handler = InboundHandler(engine, settings)
        self._controller = BoundPortController(
            self.handler,
            hostname=host,
            port=port,
            server_hostname=server_name,
            data_size_limit=DATA_SIZE_LIMIT,
            decode_data=False,
            loop=asyncio.new_event_loop(),
        )
        self.host = host
        self.port = port

    def start(self) -> InboundListener:
        self._controller.start()
        self.port = self._controller.port
        return self

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> InboundListener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
