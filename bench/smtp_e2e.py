"""End to end over SMTP: jobs through ``SmtpTransport`` into Herald's dev sink on loopback.

The sink (``herald.sink.start_sink``) stores every message in a Maildir and fsyncs it (file and
directory) before replying 250, so this figure includes a durable write per message on the
receiving side, on the same two cores as the worker.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from bench.drain import EPOCH, bench_jobs, enqueue, run_worker
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.store import NewJob
from dispatch.worker import WorkerConfig, WorkerReport
from herald.db import create_engine
from herald.sink import start_sink

BODY = "Hello,\r\n\r\nthis is a benchmark message from Herald.\r\n"


@dataclass(frozen=True)
class SmtpResult:
    messages: int
    seconds: float
    report: WorkerReport
    stored: int

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


def measure_smtp(url: str, messages: int, concurrency: int) -> SmtpResult:
    with tempfile.TemporaryDirectory(prefix="herald-bench-sink-") as folder:
        maildir = Path(folder) / "Maildir"
        engine = create_engine(url)
        try:
            enqueue(engine, mail_jobs(messages))
            with start_sink(maildir, port=0) as sink:
                transport = SmtpTransport(
                    SmtpConfig(host=sink.host, port=sink.port, command_timeout=30, data_timeout=60)
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
        stored = sum(1 for _ in (maildir / "new").iterdir())
    if worker.report.sent != messages or stored != messages:
        raise RuntimeError(
            f"SMTP run: {worker.report.sent} sent, {stored} stored, {messages} expected"
        )
    return SmtpResult(messages, seconds, worker.report, stored)
