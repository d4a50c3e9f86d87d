"""A real SMTP server for tests that counts effects where the world sees them.

Every message it takes responsibility for is appended to a ledger file and fsync'd *before* the
250 goes out, so after any crash of the sender the ledger is the ground truth for "was it
accepted?". Faults (temporary/permanent refusals, dropped connections before and after storing,
slow replies) are injected per message so the sender's handling of each DATA outcome can be
proven, including the RFC 1047 gap: stored, but the sender never hears about it.

Run standalone (e.g. by chaos tests, so killing workers never kills the server)::

    python -m tests.support.smtp_server --ledger PATH [--faults SPEC] [--delay S] [--port 0]

It prints ``LISTENING 127.0.0.1 <port>`` once ready and runs until SIGTERM (or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import os
import random
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from email.parser import BytesHeaderParser
from pathlib import Path
from types import FrameType, TracebackType
from typing import NamedTuple, NoReturn

from aiosmtpd.smtp import SMTP, Envelope, Session

from herald.sink import BoundPortController, fsync_directory, start_controller

LOOPBACK = "127.0.0.1"
SERVER_NAME = "ledger.test"
DEFAULT_SPEC_SEED = 0


class Fault(enum.Enum):
    ACCEPT = "accept"
    TEMPFAIL = "451"  # reply 451 to DATA end, do not store
    REJECT = "550"  # reply 550 to DATA end, do not store
    DROP_BEFORE_STORE = "drop_before_store"  # close after receiving the body, before storing
    DROP_AFTER_STORE = "drop_after_store"  # store (fsync'd), then close without replying
    DELAY_REPLY = "delay_reply"  # store, then wait `delay` seconds before replying 250
    RCPT_REJECT = "rcpt_550"  # reply 550 at RCPT TO
    RCPT_TEMPFAIL = "rcpt_451"  # reply 451 at RCPT TO


# (message-id or recipient address, n-th time this server has seen it, from 1) -> Fault.
# The same plan is asked at RCPT (with the address) and at DATA (with the Message-ID); each stage
# acts only on its own faults and treats the others as ACCEPT.
FaultPlan = Callable[[str, int], Fault]

RCPT_FAULTS = frozenset({Fault.RCPT_REJECT, Fault.RCPT_TEMPFAIL})
STORING_FAULTS = frozenset({Fault.ACCEPT, Fault.DROP_AFTER_STORE, Fault.DELAY_REPLY})


def accept_everything(key: str, attempt: int) -> Fault:
    return Fault.ACCEPT


class LedgerEntry(NamedTuple):
    message_id: str
    rcpt: str  # comma-separated if a transaction had several recipients
    fault: str  # Fault.value under which it was stored


def read_ledger_entries(path: Path) -> list[LedgerEntry]:
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    entries = []
    for line in text.splitlines(keepends=True):
        # A line without its newline is a write still in progress (or torn by a crash): the 250
        # for it cannot have been sent yet, so it does not count as accepted.
        if not line.endswith("\n"):
            continue
        message_id, rcpt, fault = line.rstrip("\n").split("\t")
        entries.append(LedgerEntry(message_id, rcpt, fault))
    return entries


def read_ledger(path: Path) -> list[str]:
    """Message-IDs of the stored messages, in order, duplicates included."""
    return [entry.message_id for entry in read_ledger_entries(path)]


def message_id_of(content: bytes) -> str:
    value = BytesHeaderParser().parsebytes(content).get("Message-ID")
    # Unfolded and whitespace-free so it fits one tab-separated ledger field; "" = no header.
    return "".join(str(value).split()) if value is not None else ""


class RcptHold:
    """Holds the reply to RCPT TO for the addresses ``matches`` selects until ``release()``.

    A test uses it to catch senders between RCPT and DATA on cue (no sleeps): ``wait_held(n)``
    returns once ``n`` RCPTs are waiting. The wait is an asyncio.Event on the server's loop, so
    a held connection occupies no thread and every other connection carries on.
    """

    def __init__(self, matches: Callable[[str], bool]) -> None:
        self.matches = matches
        self.held: list[str] = []  # addresses held, in order
        self._cond = threading.Condition()
        self._released = False
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def wait(self, address: str) -> None:
        if not self.matches(address):
            return
        with self._cond:
            if self._released:
                return
            if self._event is None:
                self._event, self._loop = asyncio.Event(), asyncio.get_running_loop()
            event = self._event
            self.held.append(address)
            self._cond.notify_all()
        await event.wait()

    def wait_held(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.held) >= count, timeout)

    def release(self) -> None:
        with self._cond:
            self._released = True
            if self._event is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(self._event.set)


class _LedgerHandler:
    """The aiosmtpd handler: applies the fault plan and keeps the ledger."""

    def __init__(
        self,
        ledger_path: Path,
        fault_plan: FaultPlan,
        delay: float,
        store_dir: Path | None,
        rcpt_hold: RcptHold | None = None,
    ) -> None:
        self.ledger_path = ledger_path
        self.fault_plan = fault_plan
        self.delay = delay
        self.store_dir = store_dir
        self.rcpt_hold = rcpt_hold
        # Counters and the message list are read from the test's thread while the server thread
        # writes them; the ledger has its own lock so an fsync never blocks the event loop.
        self._lock = threading.Lock()
        self._ledger_lock = threading.Lock()
        self._seen_ids: Counter[str] = Counter()
        self._seen_rcpts: Counter[str] = Counter()
        self._messages: list[bytes] = []
        self._mail_froms: list[str] = []  # the envelope sender of each stored message
        self._data_senders: list[tuple[str, str]] = []  # (MAIL FROM, Message-ID) of each DATA
        self._ledger_fd: int | None = None
        self._stored_count = 0

    def open(self) -> None:
        self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND + one write() per line: lines never interleave, even across processes.
        self._ledger_fd = os.open(self.ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fsync_directory(self.ledger_path.parent)
        if self.store_dir is not None:
            self.store_dir.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        with self._ledger_lock:
            if self._ledger_fd is not None:
                os.close(self._ledger_fd)
                self._ledger_fd = None

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        with self._lock:
            self._seen_rcpts[address] += 1
            attempt = self._seen_rcpts[address]
        if self.rcpt_hold is not None:
            await self.rcpt_hold.wait(address)
        fault = self.fault_plan(address, attempt)
        if fault is Fault.RCPT_REJECT:
            return "550 5.1.1 Recipient rejected (injected fault)"
        if fault is Fault.RCPT_TEMPFAIL:
            return "451 4.3.0 Recipient temporarily unavailable (injected fault)"
        # Defining this hook replaces aiosmtpd's default, which records the recipient.
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content: bytes = envelope.original_content or b""
        message_id = message_id_of(content)
        with self._lock:
            self._seen_ids[message_id] += 1
            attempt = self._seen_ids[message_id]
            self._data_senders.append((envelope.mail_from or "", message_id))
        fault = self.fault_plan(message_id, attempt)
        if fault in RCPT_FAULTS:
            fault = Fault.ACCEPT
        if fault is Fault.TEMPFAIL:
            return "451 4.3.0 Try again later (injected fault)"
        if fault is Fault.REJECT:
            return "550 5.7.1 Message refused (injected fault)"
        if fault is Fault.DROP_BEFORE_STORE:
            await _drop_connection(server)
        rcpt = ",".join(envelope.rcpt_tos)
        # In a worker thread so one fsync does not stall every other connection's I/O. If the
        # client vanishes meanwhile, the store still completes: stored-but-unanswered is real.
        mail_from = envelope.mail_from or ""
        await asyncio.to_thread(self._store, content, message_id, rcpt, fault, mail_from)
        if fault is Fault.DROP_AFTER_STORE:
            await _drop_connection(server)
        if fault is Fault.DELAY_REPLY:
            await asyncio.sleep(self.delay)
        return "250 OK: stored"

    def _store(
        self, content: bytes, message_id: str, rcpt: str, fault: Fault, mail_from: str = ""
    ) -> None:
        line = f"{message_id}\t{rcpt}\t{fault.value}\n".encode()
        with self._ledger_lock:
            assert self._ledger_fd is not None, "server not running"
            self._stored_count += 1
            if self.store_dir is not None:
                self._write_copy(self._stored_count, content)
            # The ledger line is the commit point, so it goes last.
            os.write(self._ledger_fd, line)
            os.fsync(self._ledger_fd)
        with self._lock:
            self._messages.append(content)
            self._mail_froms.append(mail_from)

    def _write_copy(self, number: int, content: bytes) -> None:
        assert self.store_dir is not None
        with open(self.store_dir / f"{number:06d}.eml", "xb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())

    def messages(self) -> list[bytes]:
        with self._lock:
            return list(self._messages)

    def received(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return list(zip(self._mail_froms, self._messages, strict=True))

    def data_senders(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._data_senders)

    def seen(self, message_id: str) -> int:
        with self._lock:
            return self._seen_ids[message_id]


async def _drop_connection(server: SMTP) -> NoReturn:
    """Close the client's connection from inside a handler hook, without sending any reply.

    Returning a status would make aiosmtpd write it; raising would make it reply 500. Instead
    close the transport and wait: aiosmtpd's ``connection_lost`` cancels the session task, and
    the resulting CancelledError unwinds this hook and ``smtp_DATA`` before any reply is written.
    The client sees EOF while waiting for the DATA reply (SMTPServerDisconnected).
    """
    transport = server.transport
    if transport is not None:
        transport.close()
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable: connection_lost cancels this task")


class LedgerSMTPServer:
    """Real aiosmtpd server on 127.0.0.1 (a free port). Ledgers each accepted Message-ID,
    fsync'd, before replying 250."""

    def __init__(
        self,
        ledger_path: Path,
        *,
        fault_plan: FaultPlan | None = None,
        delay: float = 0.0,
        store_dir: Path | None = None,
        port: int = 0,
        rcpt_hold: RcptHold | None = None,
    ) -> None:
        self.ledger_path = Path(ledger_path)
        self.host: str = LOOPBACK
        self.port: int = port
        self._requested_port = port
        self._handler = _LedgerHandler(
            self.ledger_path,
            fault_plan or accept_everything,
            delay,
            Path(store_dir) if store_dir is not None else None,
            rcpt_hold,
        )
        self._controller: BoundPortController | None = None

    def start(self) -> None:
        assert self._controller is None, "already running"
        self._handler.open()
        try:
            self._controller = start_controller(
                self._handler, host=self.host, port=self._requested_port, server_name=SERVER_NAME
            )
        except BaseException:
            self._handler.close()
            raise
        self.port = self._controller.port

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None
        self._handler.close()

    def __enter__(self) -> LedgerSMTPServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def accepted_ids(self) -> list[str]:
        # From the file, not memory: the same answer a test gets for a server in another process.
        return read_ledger(self.ledger_path)

    def messages(self) -> list[bytes]:
        return self._handler.messages()

    def received(self) -> list[tuple[str, bytes]]:
        """(MAIL FROM, message) of every stored message, in order: the return path too."""
        return self._handler.received()

    def data_senders(self) -> list[tuple[str, str]]:
        """(MAIL FROM, Message-ID) of every DATA that reached the server, stored or not."""
        return self._handler.data_senders()

    def seen(self, message_id: str) -> int:
        """How many DATA bodies with this Message-ID reached the server, stored or not."""
        return self._handler.seen(message_id)


def parse_fault(name: str) -> Fault:
    """A fault by value ("451", "drop_after_store") or by name ("TEMPFAIL")."""
    for fault in Fault:
        if name == fault.value or name.upper() == fault.name:
            return fault
    choices = ", ".join(fault.value for fault in Fault)
    raise ValueError(f"unknown fault {name!r} (one of: {choices})")


def fault_plan_from_spec(spec: str) -> FaultPlan:
    """Build a plan from e.g. ``"drop_after_store:0.02,451:0.05,seed=7,first:451"``.

    ``<fault>:<p>`` gives each RCPT/DATA that probability of that fault; ``first:<fault>`` applies
    it to the first time an id (or address) is seen, the probabilities to later times;
    ``seed=N`` (default 0) fixes the draws. Each draw is derived from (seed, id, n) rather than
    from a shared random stream, so it does not depend on the order concurrent senders arrive in.
    """
    seed = DEFAULT_SPEC_SEED
    first: Fault | None = None
    weighted: list[tuple[Fault, float]] = []
    for raw_entry in spec.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        if entry.startswith("seed="):
            seed = int(entry.removeprefix("seed="))
        elif entry.startswith("first:"):
            first = parse_fault(entry.removeprefix("first:"))
        else:
            name, separator, probability = entry.rpartition(":")
            if not separator:
                raise ValueError(f"fault spec entry {entry!r} is not <fault>:<probability>")
            weighted.append((parse_fault(name), float(probability)))
    if any(not 0.0 <= p <= 1.0 for _, p in weighted) or sum(p for _, p in weighted) > 1.0:
        raise ValueError(f"fault probabilities in {spec!r} must be in [0, 1] and sum to <= 1")

    def plan(key: str, attempt: int) -> Fault:
        if first is not None and attempt == 1:
            return first
        # Seeding Random with a str hashes it with SHA-512: stable across processes and runs.
        draw = random.Random(f"{seed}\x00{key}\x00{attempt}").random()
        for fault, probability in weighted:
            if draw < probability:
                return fault
            draw -= probability
        return Fault.ACCEPT

    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--faults", default="", help="fault spec, see fault_plan_from_spec()")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds, for delay_reply")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--store-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    # Installed before listening, so a SIGTERM right after the LISTENING line is never lost.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    server = LedgerSMTPServer(
        args.ledger,
        fault_plan=fault_plan_from_spec(args.faults),
        delay=args.delay,
        store_dir=args.store_dir,
        port=args.port,
    )
    with server:
        print(f"LISTENING {server.host} {server.port}", flush=True)
        stop_requested.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
