"""A real SMTP server that notes WHEN it received each message, and can answer 421 at RCPT for
chosen recipients: the evidence for rate limits is the receiving side's clock, not the
sender's account of itself. It can also be slow to accept chosen domains' messages (a relay
under load), which keeps a worker's connections busy."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import NamedTuple

from aiosmtpd.smtp import SMTP, Envelope, Session

from herald.sink import BoundPortController, start_controller
from tests.support.smtp_server import LOOPBACK, SERVER_NAME, message_id_of

# (recipient domain, how many RCPTs for that domain this server has seen, from 1) -> 421 it?
Refuse = Callable[[str, int], bool]
# recipient domain -> seconds the server takes before it answers that message's DATA
Latency = Callable[[str], float]


class Received(NamedTuple):
    at: float  # time.time() when the message was accepted
    rcpt: str
    message_id: str


class TimedSMTPServer:
    def __init__(self, refuse: Refuse | None = None, latency: Latency | None = None) -> None:
        self.host = LOOPBACK
        self.port = 0
        self._refuse = refuse or (lambda domain, n: False)
        self._latency = latency or (lambda domain: 0.0)
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._rcpts: Counter[str] = Counter()
        self.refused: list[tuple[float, str]] = []
        self._controller: BoundPortController | None = None

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        domain = address.rpartition("@")[2].lower()
        with self._lock:
            self._rcpts[domain] += 1
            nth = self._rcpts[domain]
        if self._refuse(domain, nth):
            with self._lock:
                self.refused.append((time.time(), address))
            return "421 4.7.0 Too many messages, slow down"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content: bytes = envelope.original_content or b""
        with self._lock:
            for rcpt in envelope.rcpt_tos:
                self._received.append(Received(time.time(), rcpt, message_id_of(content)))
        slow = max(
            (self._latency(r.rpartition("@")[2].lower()) for r in envelope.rcpt_tos), default=0
        )
        if slow:
            await asyncio.sleep(slow)  # the relay's pace, not the test's: it holds the 250
        return "250 OK"

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def start(self) -> TimedSMTPServer:
        self._controller = start_controller(self, host=self.host, port=0, server_name=SERVER_NAME)
        self.port = self._controller.port
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> TimedSMTPServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
