"""End to end over SMTP: jobs through ``SmtpTransport`` into Herald's dev sink on loopback.

The sink (``herald.sink.start_sink``) stores every message in a Maildir and makes it durable
before replying 250, so this figure includes a durable write per message on the receiving side,
on the same two cores as the worker. The sink runs in a process of its own, as a relay would: in
the benchmark's process it would share the worker's interpreter lock and bill its parsing and
storing to the worker.

``measure_bare_smtp`` is the ceiling: the same messages, the same sink and concurrency, through
plain aiosmtplib with no outbox at all (each coroutine keeps one connection and sends message
after message). ``python -m bench.smtp_e2e`` prints both and their ratio;
``--reply-delay 0.005`` puts a relay 5 ms a round trip away in the sink's place (a relay across
a network, where the time a send waits is round trips rather than CPU; it offers PIPELINING,
as real relays do, so Herald sends MAIL, RCPT and DATA in one round trip there and the bare
loop, as aiosmtplib does, in three).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import aiosmtplib

from bench.databases import fresh_database
from bench.drain import EPOCH, bench_jobs, enqueue, run_worker
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import NewJob
from dispatch.worker import WorkerConfig, WorkerReport
from herald.db import create_engine

BODY = "Hello,\r\n\r\nthis is a benchmark message from Herald.\r\n"
HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]

# The sink's process: start_sink on a free port, print the port, stop (storing what it
# acknowledged) when stdin closes.
SINK_PROCESS = """
import sys
from pathlib import Path
from herald.sink import start_sink
with start_sink(Path(sys.argv[1]), host="127.0.0.1", port=0) as sink:
    print(sink.port, flush=True)
    sys.stdin.read()
"""


@dataclass(frozen=True)
class SmtpResult:
    messages: int
    seconds: float
    report: WorkerReport
    stored: int

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds


@dataclass(frozen=True)
class BareSmtpResult:
    messages: int
    seconds: float

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds


def rfc5322(job: NewJob) -> bytes:
    headers = [
        f"From: Herald Bench <{job.sender}>",
        f"To: <{job.recipient}>",
        "Subject: Herald benchmark",
        f"Date: {EPOCH.strftime('%a, %d %b %Y %H:%M:%S +0000')}",
        f"Message-ID: {job.message_id}",
        f"X-Herald-Key: {job.key}",
        "MIME-Version: 1.0",
        'Content-Type: text/plain; charset="utf-8"',
        "Content-Transfer-Encoding: 7bit",
    ]
    return ("\r\n".join(headers) + "\r\n\r\n" + BODY).encode("ascii")


def mail_jobs(count: int) -> Iterator[NewJob]:
    for job in bench_jobs(count, campaign="bench-smtp"):
        yield replace(job, payload=rfc5322(job))


# A relay one network round trip away, as far as the sender can tell: every reply after the
# greeting leaves ``delay`` seconds after its command arrived, as if each crossed a network with
# that round trip. Commands that arrive together (PIPELINING, which it offers as real relays do)
# are answered together; one command at a time, each waits its own round trip. It stores
# nothing (durability is the dev sink's part, and unflushed files on a slow disk would make it
# the ceiling again); at its stop it writes how many messages it accepted to ``KEPT`` in the
# Maildir, which ``stored_messages`` reads.
KEPT = "kept"
SLOW_RELAY_PROCESS = """
import asyncio, sys
from pathlib import Path
from aiosmtpd.smtp import SMTP
from herald.sink import BoundPortController, offering_pipelining
delay = float(sys.argv[2])
accepted = 0
class Count:
    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        return offering_pipelining(responses)
    async def handle_DATA(self, server, session, envelope):
        global accepted
        accepted += 1
        return "250 accepted"
class Distant(SMTP):
    async def push(self, status):
        if status.startswith(("220", "221")):  # the greeting and QUIT's reply are not timed
            await super().push(status)
            return
        # The reply is on its way: the relay reads the next command meanwhile, as a relay
        # across a network would have it already.
        # Each due after the one before, strictly: timers due at the same moment may swap.
        loop = asyncio.get_running_loop()
        due = max(loop.time() + delay, getattr(self, "last_due", 0.0) + 1e-6)
        self.last_due = due
        loop.call_at(due, self._writer.write, (status + "\\r\\n").encode("utf-8"))
class Controller(BoundPortController):
    def factory(self):
        return Distant(self.handler)
controller = Controller(Count(), hostname="127.0.0.1", port=0)
controller.start()
print(controller.port, flush=True)
sys.stdin.read()
controller.stop()
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[1]) / sys.argv[3]).write_text(str(accepted))
"""


@contextmanager
def sink_process(maildir: Path, reply_delay: float = 0.0) -> Iterator[int]:
    """``herald.sink.start_sink`` in a child process; yields its port. With ``reply_delay``,
    a relay ``reply_delay`` seconds a round trip away instead (``SLOW_RELAY_PROCESS``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    code, extra = (
        (SLOW_RELAY_PROCESS, [str(reply_delay), KEPT]) if reply_delay > 0 else (SINK_PROCESS, [])
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(maildir), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        line = child.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the sink did not start (exit {child.wait()})")
        yield int(line)
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def stored_messages(maildir: Path) -> int:
    kept = maildir / KEPT  # the slow relay's count
    if kept.exists():
        return int(kept.read_text())
    return sum(1 for _ in (maildir / "new").iterdir())


# Where a series of runs keeps its sinks' Maildirs: a fresh folder for each run inside one
# folder for the whole series, removed when the series ends, never between its runs. ext4
# without a journal will not reuse an inode freed in the last minute (five, until its inode
# table block is written back), and checks every such inode, one at a time, for each file it
# creates (``recently_deleted`` in fs/ext4/ialloc.c). So a run that starts right after the one
# before removed its thousands of files paid for that removal in every message its sink
# stored: on such a machine (bench/profiles/smtp.md, session 42) that check was a third of the
# sink's time, its system time rose from 40 to 300 µs a message, and both sides ran a third
# slower, Herald more (it needs more of the two cores the sink shares). The rounds measured
# the harness's own clean-up.
@contextmanager
def run_maildir(series: Path | None) -> Iterator[Path]:
    """A Maildir path for one run: in ``series`` (kept until the series' folder is removed),
    or, with no series, in a temporary folder of its own, removed after the run."""
    if series is not None:
        yield Path(tempfile.mkdtemp(prefix="run-", dir=series)) / "Maildir"
        return
    with tempfile.TemporaryDirectory(prefix="herald-bench-sink-") as folder:
        yield Path(folder) / "Maildir"


def measure_smtp(
    url: str,
    messages: int,
    concurrency: int,
    reply_delay: float = 0.0,
    series: Path | None = None,
) -> SmtpResult:
    with run_maildir(series) as maildir:
        engine = create_engine(url)
        try:
            enqueue(engine, mail_jobs(messages))
            with sink_process(maildir, reply_delay) as port:
                transport = SmtpTransport(
                    SmtpConfig(host=HOST, port=port, command_timeout=30, data_timeout=60)
                )
                config = WorkerConfig(
                    concurrency=concurrency,
                    poll_interval=0.01,
                    until_idle=True,
                    idle_horizon_seconds=0.0,
                )
                started = time.perf_counter()
                worker = run_worker(engine, transport, config)
                seconds = time.perf_counter() - started
        finally:
            engine.dispose()
        stored = stored_messages(maildir)
    if worker.report.sent != messages or stored != messages:
        raise RuntimeError(
            f"SMTP run: {worker.report.sent} sent, {stored} stored, {messages} expected"
        )
    return SmtpResult(messages, seconds, worker.report, stored)


def measure_bare_smtp(
    messages: int,
    concurrency: int,
    reply_delay: float = 0.0,
    series: Path | None = None,
) -> BareSmtpResult:
    """The same messages into the same sink through a bare aiosmtplib loop: the SMTP ceiling."""
    jobs = list(mail_jobs(messages))
    with run_maildir(series) as maildir:
        with sink_process(maildir, reply_delay) as port:
            started = time.perf_counter()
            asyncio.run(bare_loop(port, jobs, concurrency))
            seconds = time.perf_counter() - started
        stored = stored_messages(maildir)
    if stored != messages:
        raise RuntimeError(f"bare SMTP run: {stored} stored, {messages} expected")
    return BareSmtpResult(messages, seconds)


async def bare_loop(port: int, jobs: list[NewJob], concurrency: int) -> None:
    queue = iter(jobs)  # shared: each coroutine takes the next message when it is free

    async def client() -> None:
        smtp = aiosmtplib.SMTP(hostname=HOST, port=port, start_tls=False, timeout=30)
        await smtp.connect()
        try:
            for job in queue:
                await smtp.sendmail(job.sender, [job.recipient], job.payload)
        finally:
            await smtp.quit()

    await asyncio.gather(*(client() for _ in range(concurrency)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.smtp_e2e")
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--reply-delay",
        type=float,
        default=0.0,
        help="seconds: instead of the dev sink, a relay that answers each command this late",
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="herald-bench-sinks-") as folder:
        series = Path(folder)
        bare = measure_bare_smtp(args.messages, args.concurrency, args.reply_delay, series)
        with fresh_database(args.backend) as url:
            herald = measure_smtp(url, args.messages, args.concurrency, args.reply_delay, series)
    relay = f"a relay {args.reply_delay * 1000:g} ms a reply" if args.reply_delay else "the sink"
    print(
        f"N={args.messages:,}, concurrency {args.concurrency}, {args.backend}, {relay},"
        f" load {load:.1f}"
    )
    print(f"bare aiosmtplib: {bare.messages_per_second:8.1f} msg/s ({bare.seconds:.2f} s)")
    print(f"Herald:          {herald.messages_per_second:8.1f} msg/s ({herald.seconds:.2f} s)")
    print(f"ratio:           {herald.messages_per_second / bare.messages_per_second:8.2f}x")


if __name__ == "__main__":
    main()
