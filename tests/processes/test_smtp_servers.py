"""The two SMTP servers: the dev sink (herald.sink) and the fault-injecting ledger server."""

from __future__ import annotations

import asyncio
import mailbox
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiosmtplib import (
    SMTP,
    SMTPDataError,
    SMTPRecipientRefused,
    SMTPResponse,
    SMTPServerDisconnected,
    SMTPTimeoutError,
)

from herald.sink import (
    NonLoopbackBindRefused,
    SinkedMessage,
    format_sinked,
    is_loopback,
    require_loopback,
    start_sink,
)
from tests.support.paths import REPO_ROOT
from tests.support.smtp_server import (
    Fault,
    FaultPlan,
    LedgerSMTPServer,
    fault_plan_from_spec,
    read_ledger,
    read_ledger_entries,
)

HOST = "127.0.0.1"
SENDER = "campaigns@sender.test"
RECIPIENT = "ada@example.test"
DEADLINE = 10.0


def make_message(message_id: str = "<0123abcd@sender.test>", subject: str = "Hello") -> bytes:
    # CRLF throughout, a leading dot (SMTP dot-stuffing must round-trip) and 8-bit bytes.
    return (
        f"Message-ID: {message_id}\r\n"
        f"From: {SENDER}\r\nTo: {RECIPIENT}\r\nSubject: {subject}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\n"
    ).encode() + "Hi Ada,\r\n.a line starting with a dot\r\ncafé\r\n".encode()


async def open_client(port: int) -> SMTP:
    # local_hostname given so the client does not look up its FQDN.
    client = SMTP(hostname=HOST, port=port, local_hostname="client.test", timeout=DEADLINE)
    await client.connect()
    await client.ehlo()
    return client


async def send(
    port: int,
    message: bytes,
    *,
    rcpt: str = RECIPIENT,
    data_timeout: float = DEADLINE,
) -> SMTPResponse:
    """One transaction with the low-level calls, as Herald's worker does it."""
    client = await open_client(port)
    try:
        await client.mail(SENDER)
        await client.rcpt(rcpt)
        response = await client.data(message, timeout=data_timeout)
        await client.quit()
        return response
    finally:
        client.close()


def always(fault: Fault) -> FaultPlan:
    return lambda key, attempt: fault


def poll_until(condition: Callable[[], bool], *, deadline: float = DEADLINE) -> None:
    give_up = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError("condition not reached before the deadline")
        time.sleep(0.01)


class Child:
    """A subprocess whose stdout lines can be awaited with a deadline."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str] = queue.Queue()
        # A reader thread, because select() cannot see lines already in Python's buffer.
        self._reader = threading.Thread(target=self._read_lines, daemon=True)
        self._reader.start()

    def _read_lines(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))

    def read_line(self, *, deadline: float = DEADLINE) -> str:
        try:
            return self._lines.get(timeout=deadline)
        except queue.Empty:
            raise AssertionError(f"no output line within {deadline}s") from None

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, *, deadline: float = DEADLINE) -> int:
        return self.process.wait(timeout=deadline)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=DEADLINE)
        assert self.process.stdout is not None
        self.process.stdout.close()


@contextmanager
def running(command: list[str]) -> Iterator[Child]:
    child = Child(command)
    try:
        yield child
    finally:
        child.close()


# --- the sink ---------------------------------------------------------------------------------


def test_sink_stores_exact_bytes_and_reports_each_message(tmp_path: Path) -> None:
    maildir = tmp_path / "Maildir"
    reported: list[SinkedMessage] = []
    message = make_message(subject="=?utf-8?q?Caf=C3=A9?= news")

    with start_sink(maildir, port=0, on_message=reported.append) as sink:
        assert sink.host == HOST
        assert sink.port != 0
        response = asyncio.run(send(sink.port, message))

    assert response.code == 250
    stored = mailbox.Maildir(maildir, create=False)
    assert [stored.get_bytes(key) for key in stored.iterkeys()] == [message]
    # on_message runs before the 250, so it has been called by the time data() returned.
    [report] = reported
    assert report.message_id == "<0123abcd@sender.test>"
    assert report.mail_from == SENDER
    assert report.rcpt_tos == (RECIPIENT,)
    assert report.subject == "Café news"
    assert report.size == len(message)
    assert report.path.parent == maildir / "new"
    assert report.path.read_bytes() == message


def test_sink_port_zero_gives_distinct_real_ports(tmp_path: Path) -> None:
    with start_sink(tmp_path / "a", port=0) as first, start_sink(tmp_path / "b", port=0) as second:
        assert 0 not in (first.port, second.port)
        assert first.port != second.port


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.0.2.10", "mail.example.test"])
def test_sink_refuses_non_loopback_bind_without_allow_remote(tmp_path: Path, host: str) -> None:
    with pytest.raises(NonLoopbackBindRefused):
        start_sink(tmp_path / "Maildir", host=host, port=0)
    # Refused before anything was created or bound.
    assert not (tmp_path / "Maildir").exists()


def test_allow_remote_lifts_the_loopback_restriction() -> None:
    # Checked without binding: tests stay on 127.0.0.1.
    require_loopback("0.0.0.0", allow_remote=True)
    with pytest.raises(NonLoopbackBindRefused):
        require_loopback("0.0.0.0", allow_remote=False)


def test_a_failing_on_message_still_gets_a_250(tmp_path: Path) -> None:
    def broken_report(message: SinkedMessage) -> None:
        raise BrokenPipeError

    with start_sink(tmp_path / "Maildir", port=0, on_message=broken_report) as sink:
        assert asyncio.run(send(sink.port, make_message())).code == 250
    assert len(list((tmp_path / "Maildir" / "new").iterdir())) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_are_recognised(host: str) -> None:
    assert is_loopback(host)


def test_format_sinked_is_one_line() -> None:
    message = SinkedMessage(
        message_id="<id@sender.test>",
        mail_from=SENDER,
        rcpt_tos=(RECIPIENT, "bob@example.test"),
        subject="Hello there",
        path=Path("maildir/new/x"),
        size=123,
    )
    line = format_sinked(message, at=0.0)
    assert line.endswith(
        f" <id@sender.test> {SENDER} -> {RECIPIENT},bob@example.test Hello there (123 bytes)"
    )


SINK_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from herald.sink import serve_sink_forever

    def ready(handle):
        print(f"READY {handle.port}", flush=True)
        if len(sys.argv) > 2:  # on_ready holds the main thread until that file appears
            while not Path(sys.argv[2]).exists():
                time.sleep(0.01)

    serve_sink_forever(
        Path(sys.argv[1]), host="127.0.0.1", port=0,
        echo=lambda line: print(line, flush=True), on_ready=ready,
    )
    print("RETURNED", flush=True)
    """
)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_sink_forever_echoes_and_stops_cleanly(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    with running([sys.executable, "-c", SINK_SCRIPT, str(tmp_path / "Maildir")]) as process:
        port = int(process.read_line().removeprefix("READY "))
        asyncio.run(send(port, make_message()))
        echoed = process.read_line()
        process.send_signal(stop_signal)
        assert process.read_line() == "RETURNED"
        assert process.wait() == 0
    assert f"<0123abcd@sender.test> {SENDER} -> {RECIPIENT} Hello (" in echoed


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_before_the_sink_waits_still_stops_it_cleanly(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    """A signal that comes while on_ready still holds the main thread (as one did once under
    load, right after the READY line) stops the sink cleanly too."""
    go_on = tmp_path / "go-on"
    command = [sys.executable, "-c", SINK_SCRIPT, str(tmp_path / "Maildir"), str(go_on)]
    with running(command) as process:
        process.read_line()  # READY: the child is now inside on_ready
        process.send_signal(stop_signal)
        go_on.touch()
        assert process.read_line() == "RETURNED"
        assert process.wait() == 0


# --- the ledger server: each fault, seen from the client ---------------------------------------

MESSAGE_ID = "<0123abcd@sender.test>"


def test_accept_ledgers_before_250_and_keeps_the_bytes(tmp_path: Path) -> None:
    message = make_message(MESSAGE_ID)
    with LedgerSMTPServer(tmp_path / "ledger", store_dir=tmp_path / "store") as server:
        response = asyncio.run(send(server.port, message))
        # Checked right after the 250 with no waiting: the ledger line precedes the reply.
        assert server.accepted_ids() == [MESSAGE_ID]
        assert server.messages() == [message]
        assert server.seen(MESSAGE_ID) == 1
    assert response.code == 250
    assert read_ledger_entries(tmp_path / "ledger") == [(MESSAGE_ID, RECIPIENT, "accept")]
    assert [path.read_bytes() for path in (tmp_path / "store").iterdir()] == [message]


@pytest.mark.parametrize(("fault", "code"), [(Fault.TEMPFAIL, 451), (Fault.REJECT, 550)])
def test_refusing_faults_reply_at_data_end_and_store_nothing(
    tmp_path: Path, fault: Fault, code: int
) -> None:
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=always(fault)) as server:
        with pytest.raises(SMTPDataError) as refused:
            asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        assert refused.value.code == code
        assert server.accepted_ids() == []
        assert server.messages() == []
        assert server.seen(MESSAGE_ID) == 1


def test_drop_after_store_is_the_rfc1047_gap(tmp_path: Path) -> None:
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=always(Fault.DROP_AFTER_STORE)) as server:
        with pytest.raises(SMTPServerDisconnected):
            asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        # Stored before the drop: accepted, although the client never heard a 250.
        assert server.accepted_ids() == [MESSAGE_ID]
        assert read_ledger_entries(server.ledger_path)[0].fault == "drop_after_store"


def test_drop_before_store_loses_the_message(tmp_path: Path) -> None:
    plan = always(Fault.DROP_BEFORE_STORE)
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=plan) as server:
        with pytest.raises(SMTPServerDisconnected):
            asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        assert server.seen(MESSAGE_ID) == 1
        assert server.accepted_ids() == []


def test_delay_reply_past_the_client_timeout_is_stored_but_unanswered(tmp_path: Path) -> None:
    # The delay is never actually waited out: the client gives up first and stop() cancels it.
    plan = always(Fault.DELAY_REPLY)
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=plan, delay=600.0) as server:
        with pytest.raises(SMTPTimeoutError):
            asyncio.run(send(server.port, make_message(MESSAGE_ID), data_timeout=0.5))
        # Polled: under load the fsync could in principle outlast the client's short timeout.
        poll_until(lambda: server.accepted_ids() == [MESSAGE_ID])


def test_delay_reply_within_the_client_timeout_is_a_late_250(tmp_path: Path) -> None:
    plan = always(Fault.DELAY_REPLY)
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=plan, delay=0.05) as server:
        response = asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        assert response.code == 250
        assert server.accepted_ids() == [MESSAGE_ID]


@pytest.mark.parametrize(("fault", "code"), [(Fault.RCPT_REJECT, 550), (Fault.RCPT_TEMPFAIL, 451)])
def test_rcpt_faults_refuse_the_recipient(tmp_path: Path, fault: Fault, code: int) -> None:
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=always(fault)) as server:
        with pytest.raises(SMTPRecipientRefused) as refused:
            asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        assert refused.value.code == code
        assert server.seen(MESSAGE_ID) == 0
        assert server.accepted_ids() == []


def test_concurrent_connections_each_get_one_ledger_line(tmp_path: Path) -> None:
    ids = [f"<{n:04d}@sender.test>" for n in range(25)]

    async def send_all(port: int) -> list[SMTPResponse]:
        return await asyncio.gather(*(send(port, make_message(mid)) for mid in ids))

    with LedgerSMTPServer(tmp_path / "ledger") as server:
        responses = asyncio.run(send_all(server.port))
        assert sorted(server.accepted_ids()) == ids
    assert {response.code for response in responses} == {250}


def test_server_restarts_on_a_new_port_and_appends_to_the_ledger(tmp_path: Path) -> None:
    server = LedgerSMTPServer(tmp_path / "ledger")
    with server:
        asyncio.run(send(server.port, make_message("<a@sender.test>")))
    with server:
        asyncio.run(send(server.port, make_message("<b@sender.test>")))
    assert read_ledger(tmp_path / "ledger") == ["<a@sender.test>", "<b@sender.test>"]


# --- fault plans from a spec ------------------------------------------------------------------


def test_fault_plan_from_spec_is_deterministic_for_a_seed() -> None:
    spec = "drop_after_store:0.02,451:0.05,550:0.01,delay_reply:0.01,drop_before_store:0.02"
    keys = [(f"<{n}@sender.test>", attempt) for n in range(2000) for attempt in (1, 2)]

    def outcomes(plan: FaultPlan) -> list[Fault]:
        return [plan(key, attempt) for key, attempt in keys]

    seeded = outcomes(fault_plan_from_spec(spec + ",seed=7"))
    assert seeded == outcomes(fault_plan_from_spec("seed=7," + spec))
    assert seeded != outcomes(fault_plan_from_spec(spec + ",seed=8"))
    # The draws follow the probabilities (deterministically, so these bounds never flake).
    share = seeded.count(Fault.TEMPFAIL) / len(seeded)
    assert 0.035 < share < 0.065
    assert seeded.count(Fault.ACCEPT) / len(seeded) > 0.85


def test_first_fault_applies_only_to_the_first_sighting() -> None:
    plan = fault_plan_from_spec("first:451")
    assert [plan(MESSAGE_ID, attempt) for attempt in (1, 2, 3)] == [
        Fault.TEMPFAIL,
        Fault.ACCEPT,
        Fault.ACCEPT,
    ]


def test_first_451_through_the_server_then_accepted(tmp_path: Path) -> None:
    plan = fault_plan_from_spec("first:451")
    with LedgerSMTPServer(tmp_path / "ledger", fault_plan=plan) as server:
        with pytest.raises(SMTPDataError) as refused:
            asyncio.run(send(server.port, make_message(MESSAGE_ID)))
        assert refused.value.code == 451
        assert asyncio.run(send(server.port, make_message(MESSAGE_ID))).code == 250
        assert server.seen(MESSAGE_ID) == 2
        assert server.accepted_ids() == [MESSAGE_ID]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("nonsense:0.1", "unknown fault"),
        ("451", "is not <fault>:<probability>"),
        ("451:1.5", "must be in"),
        ("451:0.6,550:0.6", "sum to <= 1"),
        ("seed=x", "invalid literal"),
    ],
)
def test_bad_fault_specs_are_rejected(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        fault_plan_from_spec(spec)


# --- the server as a separate process ---------------------------------------------------------


def test_standalone_server_process(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    command = [sys.executable, "-m", "tests.support.smtp_server", "--ledger", str(ledger)]
    with running([*command, "--faults", "first:451,seed=7", "--port", "0"]) as process:
        announced = process.read_line().split()
        assert announced[:2] == ["LISTENING", HOST]
        port = int(announced[2])

        with pytest.raises(SMTPDataError):
            asyncio.run(send(port, make_message(MESSAGE_ID)))
        assert asyncio.run(send(port, make_message(MESSAGE_ID))).code == 250
        assert read_ledger(ledger) == [MESSAGE_ID]

        process.send_signal(signal.SIGTERM)
        assert process.wait() == 0
