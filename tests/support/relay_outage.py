"""A ledger SMTP server that can go down and come back on the same port: a relay outage.

``go_down`` is a relay stopping between transactions: it stops listening (new connections are
refused), drops every open connection at its next MAIL (the client sees the connection closed,
as after a restart), waits — on an event, with a deadline — for the transactions already past
MAIL to finish their DATA, then stops the server entirely. A kill in the middle of DATA would
rightly make that one job ``in_doubt`` (RFC 1047, docs/design.md §6); the outage tests are
about what happens to everything else, so they stop the relay where it cannot cut a DATA.
``come_back`` starts it again on the same port (the ledger is appended to, so every message
ever accepted is in it once per acceptance).

While the relay is down its port is free, and the suite runs other tests beside this one
(xdist): a port the kernel hands out (``port=0``, or the local end of any outgoing connection)
could be given to someone else in the meantime, and the workers would then talk to another
test's server, or the relay could not come back. So the relay listens on a port *below* the
kernel's ephemeral range, which only an explicit bind can take.
"""

from __future__ import annotations

import asyncio
import errno
import random
import threading
import time
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.support.smtp_server import LedgerSMTPServer, _drop_connection, _LedgerHandler


class _OutageHandler(_LedgerHandler):
    """Counts transactions between MAIL and their end (DATA's reply, RSET), and drops
    connections at MAIL while the relay is going down."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.draining = False
        self.active = 0
        self.idle = threading.Condition()

    def _ended(self, envelope: Envelope) -> None:
        with self.idle:
            if getattr(envelope, "_outage_counted", False):
                envelope._outage_counted = False  # type: ignore[attr-defined]
                self.active -= 1
                self.idle.notify_all()

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.draining:
            await _drop_connection(server)
        with self.idle:
            self.active += 1
            envelope._outage_counted = True  # type: ignore[attr-defined]
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RSET(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self._ended(envelope)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        try:
            return await super().handle_DATA(server, session, envelope)
        finally:
            self._ended(envelope)


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; elsewhere the range differs, and a clash fails loudly


class OutageSMTPServer(LedgerSMTPServer):
    def __init__(self, ledger_path: Path, **kwargs: Any) -> None:
        super().__init__(ledger_path, **kwargs)
        old = self._handler
        self._handler = _OutageHandler(old.ledger_path, old.fault_plan, old.delay, old.store_dir)
        self.outages = 0

    def start(self) -> None:
        if self._requested_port != 0:  # a given port, or coming back on our own
            super().start()
            return
        top = _ephemeral_ports_start()
        for _ in range(100):
            self._requested_port = random.randrange(max(1024, top - 10_000), top)
            try:
                super().start()
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
        raise AssertionError("no free port below the ephemeral range")

    def go_down(self, *, deadline: float = 15.0) -> None:
        handler = self._handler
        assert isinstance(handler, _OutageHandler)
        controller = self._controller
        assert controller is not None, "not running"
        handler.draining = True
        server = controller.server
        assert isinstance(server, asyncio.Server)
        stopped = threading.Event()

        def stop_listening() -> None:
            server.close()  # the listening socket only: open connections go on
            stopped.set()

        controller.loop.call_soon_threadsafe(stop_listening)
        assert stopped.wait(5)
        until = time.monotonic() + deadline
        with handler.idle:
            while handler.active and time.monotonic() < until:
                handler.idle.wait(until - time.monotonic())
        self.stop()
        self.outages += 1

    def come_back(self) -> None:
        handler = self._handler
        assert isinstance(handler, _OutageHandler)
        handler.draining = False
        handler.active = 0
        self._requested_port = self.port
        self.start()
