"""The dev sink's group flush: a 250 only once the message is durable, many messages per flush.

The order is recorded through ``MaildirSink``'s ``flush`` seam (the same calls the default makes,
with a record of each), the crash test kills a real sink process with SIGKILL mid-stream.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiosmtplib import SMTP, SMTPDataError, SMTPException

from herald.sink import SINK_SERVER_NAME, MaildirSink, start_controller
from herald.sink_store import fsync_directory
from tests.processes.test_smtp_servers import (
    DEADLINE,
    HOST,
    RECIPIENT,
    SENDER,
    make_message,
    open_client,
    poll_until,
    running,
)

MESSAGE_ID = re.compile(rb"^Message-ID: (<[^>]+>)", re.MULTILINE)


def message_id(content: bytes) -> str:
    found = MESSAGE_ID.search(content)
    assert found is not None
    return found.group(1).decode()


class RecordingFlush:
    """The real fsyncs, each recorded in ``events`` (shared with the clients' 250s)."""

    def __init__(self, events: list[tuple[str, tuple[str, ...]]], lock: threading.Lock) -> None:
        self.events = events
        self.lock = lock
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.groups: list[int] = []
        self.in_flush = 0

    def files(self, fds: Sequence[int]) -> None:
        self.in_flush = len(fds)
        self.entered.set()
        assert self.release.wait(DEADLINE), "the test never released the flush"
        ids = []
        for fd in fds:
            os.fsync(fd)
            ids.append(message_id(Path(os.readlink(f"/proc/self/fd/{fd}")).read_bytes()))
        self.groups.append(len(fds))
        with self.lock:
            self.events.append(("files durable", tuple(ids)))

    def directory(self, path: Path) -> None:
        fsync_directory(path)
        with self.lock:
            self.events.append(("renames durable", ()))


@contextmanager
def sink_with(maildir: Path, flush: object) -> Iterator[tuple[MaildirSink, int]]:
    handler = MaildirSink(maildir, flush=flush)  # type: ignore[arg-type]
    controller = start_controller(handler, host=HOST, port=0, server_name=SINK_SERVER_NAME)
    try:
        yield handler, controller.port
    finally:
        controller.stop()
        handler.close()


async def send_one(port: int, message: bytes) -> int:
    client = await open_client(port)
    try:
        await client.mail(SENDER)
        await client.rcpt(RECIPIENT)
        return (await client.data(message)).code
    finally:
        client.close()


def test_each_250_follows_its_files_and_rename_being_durable_and_groups_form(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, tuple[str, ...]]] = []
    lock = threading.Lock()
    flush = RecordingFlush(events, lock)
    flush.release.clear()  # the first group waits, so the others queue up behind it
    count = 20
    messages = {f"<m{i}@sender.test>": make_message(f"<m{i}@sender.test>") for i in range(count)}

    async def client(port: int, mid: str) -> None:
        code = await send_one(port, messages[mid])
        assert code == 250
        with lock:
            events.append(("250", (mid,)))

    async def scenario(handler: MaildirSink, port: int) -> None:
        ids = list(messages)
        tasks = [asyncio.create_task(client(port, ids[0]))]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, flush.entered.wait, DEADLINE)
        # The first message's flush has started (and waits): the others queue behind it.
        tasks += [asyncio.create_task(client(port, mid)) for mid in ids[1:]]
        await loop.run_in_executor(
            None, lambda: poll_until(lambda: handler.queued + flush.in_flush == count)
        )
        # The first group is being flushed and all the others wait: nobody has a 250 yet.
        assert not any(kind == "250" for kind, _ in events)
        assert not any(task.done() for task in tasks)
        flush.release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)

    with sink_with(tmp_path / "Maildir", flush) as (handler, port):
        asyncio.run(scenario(handler, port))

    assert flush.groups == [1, count - 1]  # the waiting ones went to disk as one group
    for mid in messages:
        files_at = next(
            i for i, (k, ids) in enumerate(events) if k == "files durable" and mid in ids
        )
        renames_at = next(
            i for i, (k, _) in enumerate(events) if k == "renames durable" and i > files_at
        )
        acked_at = events.index(("250", (mid,)))
        assert files_at < renames_at < acked_at, (mid, events)
    stored = sorted(p.read_bytes() for p in (tmp_path / "Maildir" / "new").iterdir())
    assert stored == sorted(messages.values())
    assert list((tmp_path / "Maildir" / "tmp").iterdir()) == []


class FailingFlush(RecordingFlush):
    def files(self, fds: Sequence[int]) -> None:
        raise OSError(5, "Input/output error")


def test_a_failed_flush_is_a_451_and_nothing_is_delivered(tmp_path: Path) -> None:
    flush = FailingFlush([], threading.Lock())
    with (
        sink_with(tmp_path / "Maildir", flush) as (_, port),
        pytest.raises(SMTPDataError) as refused,
    ):
        asyncio.run(send_one(port, make_message()))
    assert refused.value.code == 451
    assert list((tmp_path / "Maildir" / "new").iterdir()) == []


CRASH_SINK = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from herald.sink import start_sink

    sink = start_sink(Path(sys.argv[1]), port=0)
    print(f"READY {sink.port}", flush=True)
    threading.Event().wait()
    """
)


def test_kill_9_mid_stream_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    maildir = tmp_path / "Maildir"
    acked: dict[str, bytes] = {}
    enough = 150  # acknowledged messages before the kill: several groups, others in flight

    with running([sys.executable, "-c", CRASH_SINK, str(maildir)]) as sink:
        port = int(sink.read_line().removeprefix("READY "))
        killed = asyncio.Event()

        async def client(number: int) -> None:
            smtp: SMTP = await open_client(port)
            sequence = 0
            try:
                while True:
                    sequence += 1
                    mid = f"<c{number}.{sequence}@sender.test>"
                    message = make_message(mid)
                    await smtp.mail(SENDER)
                    await smtp.rcpt(RECIPIENT)
                    response = await smtp.data(message)
                    assert response.code == 250
                    acked[mid] = message
                    if len(acked) >= enough and not killed.is_set():
                        killed.set()
                        sink.process.send_signal(signal.SIGKILL)
            except (SMTPException, OSError):
                assert killed.is_set(), "the sink failed before it was killed"
            finally:
                smtp.close()

        async def stream() -> None:
            await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(20))), DEADLINE * 3)

        asyncio.run(stream())
        assert sink.process.wait(timeout=DEADLINE) == -signal.SIGKILL

    stored = {message_id(p.read_bytes()): p.read_bytes() for p in (maildir / "new").iterdir()}
    assert len(acked) >= enough
    missing = [mid for mid in acked if stored.get(mid) != acked[mid]]
    assert missing == [], f"{len(missing)} acknowledged messages not in the Maildir"
    # Nothing half-written is visible: every stored file is a whole message that was sent.
    assert all(content == make_message(mid) for mid, content in stored.items())
