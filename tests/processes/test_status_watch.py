"""``herald status --watch`` as real processes: it refreshes while a real worker sends to a real
SMTP server, piped (JSON Lines, text snapshots after separators) and on a terminal (a pty, rich
Live); Ctrl-C ends it with exit 0 and no traceback; ``--watch-count`` stops it by itself.
Every wait has a deadline; nothing sleeps for a verdict."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import queue
import re
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rich.cells import cell_len
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from scheduler.fanout import materialise
from tests.support.campaign_files import write_campaign
from tests.support.paths import HERALD
from tests.support.smtp_server import Fault, LedgerSMTPServer

RECIPIENTS = 25  # x 3 steps
DEADLINE = 90.0  # seconds for the whole send on a busy machine


def _launch(tmp_path: Path, engine: Engine, name: str = "watched") -> int:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS, name=name)
    loaded = load_campaign(path)
    launched_at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    return materialise(engine, loaded, launched_at).new_jobs


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    """Lines of ``stream`` as they come (None at its end), read on a thread."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next(lines: queue.Queue[str | None], until: float) -> str | None:
    remaining = until - time.monotonic()
    assert remaining > 0, "timed out waiting for status output"
    try:
        return lines.get(timeout=remaining)
    except queue.Empty:
        raise AssertionError("timed out waiting for status output") from None


def _interrupt(process: subprocess.Popen[Any]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(timeout=30)


def test_watch_refreshes_while_a_worker_sends(tmp_path: Path, engine: Engine, db_url: str) -> None:
    total = _launch(tmp_path, engine)
    assert total == RECIPIENTS * 3
    # Each reply a little late: the send takes seconds, long enough to be watched.
    server = LedgerSMTPServer(
        tmp_path / "ledger.txt", fault_plan=lambda key, n: Fault.DELAY_REPLY, delay=0.03
    )
    server.start()
    watch = subprocess.Popen(
        [str(HERALD), "status", "--watch", "--json", "--interval", "0.2",
         "--database-url", db_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    worker_log = (tmp_path / "worker.err").open("w")
    lines = _lines(watch.stdout)  # type: ignore[arg-type]
    try:
        until = time.monotonic() + DEADLINE
        first = json.loads(_next(lines, until) or "null")
        assert first["totals"]["sent"] == 0
        worker = subprocess.Popen(
            [str(HERALD), "worker", "--until-idle", "--database-url", db_url,
             "--smtp-url", f"smtp://{server.host}:{server.port}",
             "--concurrency", "1", "--poll", "0.05"],
            stdout=subprocess.DEVNULL, stderr=worker_log,
        )  # fmt: skip
        seen: list[dict[str, Any]] = []
        while not seen or seen[-1]["campaigns"][0]["status"] != "completed":
            line = _next(lines, until)
            assert line is not None, "status --watch ended before the campaign completed"
            seen.append(json.loads(line))
        sent = [s["totals"]["sent"] for s in seen]
        assert sent == sorted(sent)
        during = [s for s in seen if 0 < s["totals"]["sent"] < total]
        assert during, f"no refresh while the worker sent: {sent}"
        # While sending, the screen knows the pace and when it should be done.
        assert any(s["rate_per_minute"] > 0 and s["eta"] is not None for s in during), during[-1]
        assert seen[-1]["totals"]["sent"] == total
        assert [step["step"] for step in seen[-1]["campaigns"][0]["steps"]] == [
            "welcome",
            "tips",
            "later",
        ]
        assert worker.wait(timeout=DEADLINE) == 0
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        worker_log.close()
        code = _interrupt(watch)
        server.stop()
        errors = _closed(watch, lines)
    assert code == 0, errors
    assert "Traceback" not in errors


def _closed(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> str:
    """After ``process`` ended: the rest of its output read, its pipes closed; its stderr."""
    until = time.monotonic() + 30
    while _next(lines, until) is not None:
        pass
    assert process.stdout is not None
    assert process.stderr is not None
    errors = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    return errors


def test_piped_text_snapshots_are_separated_and_count_stops_them(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    _launch(tmp_path, engine, "spring-sale-2026-reactivation-europe-customers-who-bought-twice")
    done = subprocess.run(
        [str(HERALD), "status", "--watch-count", "3", "--interval", "0.1", "--width", "60",
         "--database-url", db_url],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("--- herald status ") for line in lines) == 3
    assert all(cell_len(line) <= 60 for line in lines)
    assert done.stdout.count("welcome") == 3


def test_on_a_terminal_it_redraws_in_place_and_ctrl_c_exits_0(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    _launch(tmp_path, engine)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 70, 0, 0))  # rows, columns
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    watch = subprocess.Popen(
        [str(HERALD), "status", "--watch", "--interval", "0.2", "--database-url", db_url],
        stdin=slave, stdout=slave, stderr=slave, env=env,
    )  # fmt: skip
    os.close(slave)
    received = b""
    until = time.monotonic() + DEADLINE
    try:
        # Two full screens at least: the first and one refresh (rich Live moves the cursor
        # up to redraw, so "herald status" is written again).
        while received.count(b"herald status") < 2:
            remaining = until - time.monotonic()
            assert remaining > 0, received[-2000:]
            if not select.select([master], [], [], remaining)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty closes when the process ends
                break
            received += chunk
        assert received.count(b"herald status") >= 2, received[-2000:]
        assert b"\x1b[" in received  # drawn for a terminal, not printed as for a pipe
        assert b"--- herald status" not in received
        # Keep reading while it exits: its last redraw and the terminal reset after Ctrl-C are
        # written to the pty, and a pty nobody drains blocks the writer (a hang, not an exit).
        watch.send_signal(signal.SIGINT)
        until = time.monotonic() + DEADLINE
        while watch.poll() is None:
            remaining = until - time.monotonic()
            assert remaining > 0, "Ctrl-C did not end herald status --watch"
            if select.select([master], [], [], min(remaining, 0.1))[0]:
                with contextlib.suppress(OSError):  # the pty closes when the process ends
                    received += os.read(master, 65536)
        code = watch.wait()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        os.close(master)
    assert code == 0
    assert b"Traceback" not in received
    # Every line of the screen fits the terminal's 70 columns.
    text = received.decode("utf-8", errors="replace")
    for line in text.replace("\r", "\n").split("\n"):
        plain = _without_escapes(line)
        assert cell_len(plain) <= 70, plain


def _without_escapes(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line)
