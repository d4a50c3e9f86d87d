"""At a real SMTP server, on SQLite and PostgreSQL: a message's Date is the moment it crossed
T4 (also when T4's acknowledgement was lost and the row was re-read), an old payload's Date is
kept, and a job outside its send window is handed back uncounted until the window opens
(docs/design.md §6)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.message_date import has_date
from dispatch.models import send_event, send_job
from dispatch.outbox_client import OutboxClient
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import is_valid_path
from dispatch.store import Lease, NewJob, OutboxStore
from dispatch.wallclock import SendWindow, zone
from dispatch.worker import Worker
from tests.support.campaign_files import fast_config, run_worker
from tests.support.factories import key_of, launch, new_job, write_yaml
from tests.support.mail_reading import parse
from tests.support.smtp_server import LedgerSMTPServer

ONE_STEP = """\
name: dated
from: news@herald.test
audience:
  - alice@example.com
steps:
  - id: hello
    subject: Hello
    text: Hello there
"""

EVERY_DAY = frozenset(range(7))
# RFC 5322 §3.3 date-time, as Herald writes it: day, date, time with seconds, numeric zone.
RFC5322_DATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}"
)


def the_job(engine: Engine) -> Any:
    with engine.connect() as conn:
        (row,) = conn.execute(sa.select(send_job)).all()
    return row


def journal(engine: Engine) -> list[tuple[str | None, str, str | None]]:
    E = send_event.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(E.from_state, E.to_state, E.detail).order_by(E.id))
        return [(r.from_state, r.to_state, r.detail) for r in rows]


def date_values(raw: bytes) -> list[str]:
    """The value of every Date field in the header block (a duplicate would show twice)."""
    head = raw.split(b"\r\n\r\n", 1)[0].decode("ascii")
    return [line[5:].strip() for line in head.split("\r\n") if line.lower().startswith("date:")]


def enqueue(engine: Engine, *jobs: NewJob) -> None:
    with engine.begin() as conn:
        assert OutboxStore(engine.dialect.name).enqueue(conn, list(jobs)) == len(jobs)


def minute_of_day(at: datetime) -> int:
    return at.hour * 60 + at.minute


# ---------------------------------------------------------------------- Date


def test_the_date_is_when_the_message_crossed_t4(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, write_yaml(tmp_path / "c", ONE_STEP)).new_jobs == 1
    assert not has_date(the_job(engine).payload)  # the stored message has no Date
    before_claim = datetime.now(UTC).replace(microsecond=0)  # a Date has whole seconds

    report = run_worker(engine, smtp_server.host, smtp_server.port)

    after_send = datetime.now(UTC)
    assert report.sent == 1
    (raw,) = smtp_server.messages()
    (value,) = date_values(raw)  # exactly one Date
    assert RFC5322_DATE.fullmatch(value), value
    sent = parsedate_to_datetime(value)
    assert before_claim <= sent <= after_send
    job = the_job(engine)
    assert sent == job.send_started_at.replace(microsecond=0)  # T4's moment, database clock
    message = parse(raw)
    assert message["Message-ID"] == job.message_id
    assert message["X-Herald-Key"] == job.key
    names = [name for name, _ in message.raw_items()]
    assert names.index("Date") + 1 == names.index("Message-ID")  # where it always was


def test_a_payload_that_already_holds_a_date_is_sent_unchanged(
    engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    # As a Herald before issue 9 stored it: rendered at launch, Date included.
    payload = (
        b"From: news@herald.test\r\nTo: old@example.com\r\nSubject: Old\r\n"
        b"Date: Tue, 04 Mar 2025 05:06:07 +0000\r\nMessage-ID: <old@herald.test>\r\n"
        b"MIME-Version: 1.0\r\n\r\nLaunched long ago.\r\n"
    )
    old = new_job(key_of("old"), due=datetime.now(UTC) - timedelta(seconds=1))
    enqueue(engine, dataclasses.replace(old, payload=payload, message_id="<old@herald.test>"))

    assert run_worker(engine, smtp_server.host, smtp_server.port).sent == 1

    (raw,) = smtp_server.messages()
    assert date_values(raw) == ["Tue, 04 Mar 2025 05:06:07 +0000"]
    assert raw == payload


class LostT4Acknowledgement(OutboxClient):
    """T4 commits, but the worker hears an error (the connection dropped during COMMIT)."""

    lost = 0

    async def start_send(self, lease: Lease) -> datetime | None:
        started = await super().start_send(lease)
        if not self.lost:
            self.lost += 1
            raise ConnectionError("server closed the connection during COMMIT")
        return started


def test_a_t4_whose_acknowledgement_was_lost_is_sent_with_the_date_t4_recorded(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, write_yaml(tmp_path / "c", ONE_STEP))
    transport = SmtpTransport(SmtpConfig(smtp_server.host, smtp_server.port, data_timeout=10))
    # A worker clock far from the truth: the Date must come from the row, not from here.
    worker = Worker(
        engine,
        {"email": transport},
        fast_config(),
        clock=lambda: datetime(2030, 1, 1, tzinfo=UTC),
    )
    worker.outbox = LostT4Acknowledgement(worker.committer)

    report = asyncio.run(worker.run())

    assert worker.outbox.lost == 1
    assert report.sent == 1
    (raw,) = smtp_server.messages()
    (value,) = date_values(raw)
    assert parsedate_to_datetime(value) == the_job(engine).send_started_at.replace(microsecond=0)
    path = [(source, target) for source, target, _ in journal(engine)]
    assert path == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "sending"),
        ("sending", "sent"),
    ]


# ---------------------------------------------------------------------- send windows (W2)


def windowed_job(name: str, window: SendWindow | str) -> NewJob:
    job = new_job(key_of(name), due=datetime.now(UTC) - timedelta(seconds=1))
    text = window if isinstance(window, str) else window.to_json()
    return dataclasses.replace(job, send_window=text)


def test_a_job_outside_its_window_waits_for_the_opening_without_counting_the_claim(
    engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    now = datetime.now(UTC)
    opens_in_two_hours = (minute_of_day(now) + 120) % 1440
    window = SendWindow(EVERY_DAY, opens_in_two_hours, (opens_in_two_hours + 60) % 1440, "UTC")
    enqueue(engine, windowed_job("closed", window))

    report = run_worker(engine, smtp_server.host, smtp_server.port, clock=lambda: now)

    assert (report.claimed, report.outside_window, report.sent) == (1, 1, 0)
    assert smtp_server.messages() == []
    job = the_job(engine)
    assert (job.state, job.claims, job.send_attempts) == ("pending", 0, 0)
    assert abs(job.not_before - window.next_opening(now)) < timedelta(milliseconds=1)
    assert job.not_before > now + timedelta(minutes=60)
    events = journal(engine)
    assert [(s, t) for s, t, _ in events] == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "pending"),
    ]
    assert events[-1][2] == f"outside send window; due {window.next_opening(now).isoformat()}"
    assert is_valid_path([(s, t) for s, t, _ in events])


def test_a_job_inside_its_window_on_the_worker_clock_is_sent(
    engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    office = SendWindow(frozenset(range(5)), 9 * 60, 17 * 60, "Europe/Berlin")
    monday_morning_in_berlin = datetime(2026, 3, 2, 10, 0, tzinfo=zone("Europe/Berlin"))
    enqueue(engine, windowed_job("open", office))

    report = run_worker(
        engine, smtp_server.host, smtp_server.port, clock=lambda: monday_morning_in_berlin
    )

    assert (report.sent, report.outside_window) == (1, 0)
    assert len(smtp_server.messages()) == 1
    assert the_job(engine).state == "sent"


def clock_of(*instants: datetime) -> Callable[[], datetime]:
    """A clock that gives these instants in turn, then the last one forever."""
    ticks = itertools.chain(instants, itertools.repeat(instants[-1]))
    return lambda: next(ticks)


def test_a_window_that_closes_while_the_job_waits_is_checked_again_before_sending(
    engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    now = datetime.now(UTC)
    around_now = SendWindow(
        EVERY_DAY, (minute_of_day(now) - 60) % 1440, (minute_of_day(now) + 60) % 1440, "UTC"
    )
    enqueue(engine, windowed_job("closing", around_now))
    later = now + timedelta(hours=2)  # open when claimed, closed when the send starts

    report = run_worker(engine, smtp_server.host, smtp_server.port, clock=clock_of(now, later))

    assert (report.outside_window, report.sent) == (1, 0)
    assert smtp_server.messages() == []
    job = the_job(engine)
    assert (job.state, job.claims) == ("pending", 0)
    assert abs(job.not_before - around_now.next_opening(later)) < timedelta(milliseconds=1)


def test_an_unreadable_window_fails_the_job_before_anything_is_sent(
    engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    enqueue(engine, windowed_job("corrupt", '{"days": [0], "start": 60'))

    report = run_worker(engine, smtp_server.host, smtp_server.port)

    assert (report.failed, report.sent) == (1, 0)
    job = the_job(engine)
    assert (job.state, job.send_attempts) == ("failed", 0)
    assert "unreadable send window" in job.outcome_text
    assert smtp_server.messages() == []
