"""The worker under shared rate limits (dispatch.rate_gate), through a real SMTP server, on
SQLite and PostgreSQL: a campaign's `rate:` and a domain's limit pace the sends (W3 hands the
rest back, uncounted), a job under no limit costs no statement, a 451 slows its domain only."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.instrumentation import NullInstrumentation
from dispatch.models import rate_limit, send_event, send_job
from dispatch.rates import burst
from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.states import State, is_valid_path
from dispatch.store import ClaimedJob, OutboxStore, SlotAsk
from dispatch.worker import Worker, WorkerConfig
from tests.support.campaign_files import fast_config
from tests.support.factories import launch, write_yaml
from tests.support.paths import HERALD
from tests.support.smtp_server import Fault, LedgerSMTPServer


def campaign(folder: Path, recipients: list[str], rate: str | None = None) -> Path:
    lines = [
        f"name: {folder.name}",
        "from: news@herald.test",
        *([f"rate: {rate}"] if rate else []),
        "audience:",
        *(f"  - {r}" for r in recipients),
        "steps:",
        "  - id: hello",
        "    subject: Hello",
        "    text: Hello there",
    ]
    return write_yaml(folder, "\n".join(lines) + "\n")


def run(engine: Engine, server: LedgerSMTPServer, config: WorkerConfig) -> Worker:
    transport = SmtpTransport(
        SmtpConfig(host=server.host, port=server.port, command_timeout=10, data_timeout=10)
    )
    worker = Worker(engine, {"email": transport}, config)
    asyncio.run(worker.run())
    return worker


def sent_rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return OutboxStore(engine.dialect.name).jobs_in_state(conn, State.SENT)


def first_claim(engine: Engine, domain: str) -> datetime:
    """When the first job to ``domain`` was first claimed (the journal's time)."""
    with engine.connect() as conn:
        first = conn.scalar(
            sa.select(sa.func.min(send_event.c.at))
            .join(send_job, send_job.c.id == send_event.c.job_id)
            .where(send_event.c.to_state == "claimed", send_job.c.recipient.like(f"%@{domain}"))
        )
    assert isinstance(first, datetime)
    return first


def most_in_any_window(moments: list[datetime], seconds: float) -> int:
    times = sorted(m.timestamp() for m in moments)
    return max(sum(1 for t in times[i:] if t - first <= seconds) for i, first in enumerate(times))


def test_a_campaign_rate_paces_its_sends_and_hands_back_the_rest_uncounted(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    recipients = [f"r{i}@example.com" for i in range(12)]
    assert launch(engine, campaign(tmp_path / "paced", recipients, "4/s")).new_jobs == 12
    worker = run(engine, smtp_server, fast_config(concurrency=10))
    rows = sent_rows(engine)
    assert len(rows) == 12
    assert Counter(smtp_server.accepted_ids()).most_common(1)[0][1] == 1
    assert all(row.send_attempts == 1 for row in rows)  # a hand-back used no attempt
    assert worker.report.rate_limited > 0
    started = [row.send_started_at for row in rows]
    # Slots: at most the burst (4) plus the rate in any window, 4 + 4 * 1 in one second. The
    # slot is taken in T4's own transaction, so the T4 moments keep that bound exactly.
    assert most_in_any_window(started, 1.0) <= burst(4) + 4
    # 8 after the burst, at 4/s: the last slot comes 2 s after the first, and the first slot was
    # taken after the first claim committed. Measured from that claim, so that a first send
    # delayed by a busy machine cannot shorten the span (as in the per-domain test below).
    span = (max(started) - first_claim(engine, "example.com")).total_seconds()
    assert span >= (12 - burst(4)) / 4 - 0.1
    with engine.connect() as conn:
        events = OutboxStore(engine.dialect.name).events(conn)
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for e in events:
        paths.setdefault(e.job_id, []).append((e.from_state, e.to_state))
    assert all(is_valid_path(p) for p in paths.values())
    assert any(e.detail and e.detail.startswith("rate limited; due") for e in events)


class CountsTransactions(NullInstrumentation):
    """Counts the SMTP transactions that got as far as RCPT accepted."""

    def __init__(self) -> None:
        self.transactions = 0

    async def after_rcpt(self, job: ClaimedJob) -> None:
        self.transactions += 1


def test_under_a_rate_limit_the_relay_sees_no_transaction_without_its_message(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    """A claim let through to its T4 before its slot is refused there, after MAIL and RCPT,
    and its transaction reset: the relay counts it all the same (some count recipients per
    hour). The worker's estimate of the key keeps every claim it lets through within a slot."""
    recipients = [f"r{i}@example.com" for i in range(90)]
    assert launch(engine, campaign(tmp_path / "steady", recipients, "40/s")).new_jobs == 90
    counts = CountsTransactions()
    transport = SmtpTransport(
        SmtpConfig(host=smtp_server.host, port=smtp_server.port, command_timeout=10)
    )
    config = fast_config(concurrency=50)  # one claim of 50: 40 go on, 10 are handed back
    worker = Worker(engine, {"email": transport}, config, instrumentation=counts)
    asyncio.run(worker.run())
    assert len(sent_rows(engine)) == 90
    assert worker.report.rate_limited >= 10  # beyond the burst, whatever the pace
    assert counts.transactions == 90


def test_under_two_limits_a_refusal_at_t4_holds_back_the_next_claims_of_the_key_that_refused(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    """Another worker's sends have run the domain's cell a second or more ahead of this
    worker's estimate (which starts empty). Its first T4s under the campaign's limit and the
    domain's are refused by the domain; the refusal names that key, so the worker's next
    claims of the domain wait for its slots without an SMTP transaction each. At most the
    first claims the worker lets through on its empty estimate (the domain's burst) meet a
    refusal, whatever the machine's pace."""
    domain_rate = 20.0
    recipients = [f"r{i}@example.com" for i in range(30)]
    assert launch(engine, campaign(tmp_path / "both", recipients, "100/s")).new_jobs == 30
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.set_rates(conn, {"domain:example.com": domain_rate})
        others = [SlotAsk((-i, 1), ("domain:example.com",)) for i in range(1, 61)]
        # The burst, then 40 more: 2 s ahead, less what the clock moved meanwhile (SQLite's
        # moves between statements, and a loaded machine takes its time over 60 of them).
        assert len(store.acquire_slots(conn, others)) >= domain_rate
    counts = CountsTransactions()
    transport = SmtpTransport(
        SmtpConfig(host=smtp_server.host, port=smtp_server.port, command_timeout=10)
    )
    config = fast_config(concurrency=50, domain_rates={"example.com": domain_rate})
    worker = Worker(engine, {"email": transport}, config, instrumentation=counts)
    asyncio.run(worker.run())
    assert len(sent_rows(engine)) == 30
    assert Counter(smtp_server.accepted_ids()).most_common(1)[0][1] == 1
    assert counts.transactions <= 30 + burst(domain_rate)


class HeldInFlight(NullInstrumentation):
    """Keeps the one job of campaign ``held`` in flight (after RCPT) until the six of
    ``paced`` are sent, or ``HOLD`` seconds pass."""

    HOLD = 20.0

    def __init__(self) -> None:
        self.paced_sent = 0
        self.all_paced = asyncio.Event()
        self.waited_out = False

    async def after_rcpt(self, job: ClaimedJob) -> None:
        if job.campaign != "held":
            return
        try:
            await asyncio.wait_for(self.all_paced.wait(), self.HOLD)
        except TimeoutError:
            self.waited_out = True

    async def after_t5_commit(self, job: ClaimedJob) -> None:
        if job.campaign == "paced":
            self.paced_sent += 1
            if self.paced_sent == 6:
                self.all_paced.set()


def test_a_claim_comes_when_a_job_handed_back_is_due_not_a_poll_interval_later(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    """A claim that only hands jobs back (their slots are to come) finds the queue "dry"; with
    a send in flight, the next claim was then a poll interval away (1 s by default), while at
    50/s a slot comes every 20 ms: the limit went a third unused. Here the interval is 30 s
    and one send stays in flight throughout: the six sends at 2/s (two at once, then four
    handed back, 0.5 s apart, whatever this machine's speed) must not wait for it."""
    assert launch(engine, campaign(tmp_path / "held", ["h@example.com"])).new_jobs == 1
    paced = [f"p{i}@example.com" for i in range(6)]
    assert launch(engine, campaign(tmp_path / "paced", paced, "2/s")).new_jobs == 6
    watch = HeldInFlight()
    worker = Worker(
        engine,
        {"email": SmtpTransport(SmtpConfig(host=smtp_server.host, port=smtp_server.port))},
        fast_config(concurrency=20, poll_interval=30.0),
        instrumentation=watch,
    )
    asyncio.run(worker.run())
    assert not watch.waited_out  # the paced sends were done within HOLD, not after 30 s
    assert len(sent_rows(engine)) == 7
    assert worker.report.rate_limited >= 4


def test_a_domain_limit_slows_that_domain_while_others_go_at_once(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    slow = [f"s{i}@slow.test" for i in range(8)]
    fast = [f"f{i}@fast.test" for i in range(8)]
    assert launch(engine, campaign(tmp_path / "mixed", slow + fast)).new_jobs == 16
    config = fast_config(concurrency=10, domain_rates={"slow.test": 2.0})
    run(engine, smtp_server, config)
    rows = sent_rows(engine)
    assert len(rows) == 16
    by_domain: dict[str, list[datetime]] = {}
    for row in rows:
        by_domain.setdefault(row.recipient.rpartition("@")[2], []).append(row.send_started_at)
    assert most_in_any_window(by_domain["slow.test"], 1.0) <= burst(2) + 2
    # The limiter's promise, measured so that load cannot bend it: the eighth slot comes 3 s
    # after the first, and the first slot was taken after the first claim committed (a send
    # delayed by a busy machine could shorten the span between the sends themselves).
    slow_span = max(by_domain["slow.test"]) - first_claim(engine, "slow.test")
    assert slow_span.total_seconds() >= (8 - 2) / 2 - 0.1
    # The other domain was not held up behind it: done before the slow one was half done.
    assert max(by_domain["fast.test"]) < sorted(by_domain["slow.test"])[4]


def test_no_statement_about_rates_for_jobs_under_no_limit(
    tmp_path: Path, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    recipients = [f"r{i}@example.com" for i in range(40)]
    assert launch(engine, campaign(tmp_path / "plain", recipients)).new_jobs == 40
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        worker = run(engine, smtp_server, fast_config(concurrency=5))
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert worker.report.sent == 40
    about_rates = [s for s in statements if "rate_limit" in s]
    # The worker's one read of which campaigns are limited (and its domain limits written
    # once); never a slot taken, however many jobs.
    assert not [s for s in about_rates if s.lstrip().upper().startswith("UPDATE")]
    assert len(about_rates) <= 2 * (1 + len(WorkerConfig().domain_rates))
    assert "t4_slot" not in worker.committer.stats.by_kind


def test_a_451_slows_only_its_own_domain(tmp_path: Path, engine: Engine) -> None:
    def plan(key: str, n: int) -> Fault:
        return Fault.RCPT_TEMPFAIL if key == "s0@slow.test" and n == 1 else Fault.ACCEPT

    server = LedgerSMTPServer(tmp_path / "ledger.txt", fault_plan=plan)
    server.start()
    try:
        recipients = ["s0@slow.test", "s1@slow.test", "f0@fast.test", "f1@fast.test"]
        assert launch(engine, campaign(tmp_path / "refused", recipients)).new_jobs == 4
        config = fast_config(domain_rates={"slow.test": 50.0, "fast.test": 50.0})
        worker = run(engine, server, config)
    finally:
        server.stop()
    assert worker.report.sent == 4
    with engine.connect() as conn:
        cells = {r.key: r for r in conn.execute(sa.select(rate_limit))}
    assert cells["domain:slow.test"].factor == 0.5
    assert cells["domain:fast.test"].factor == 1.0
    assert cells["domain:fast.test"].factor_until is None
    until = cells["domain:slow.test"].factor_until
    assert until is not None
    assert 540 < (until - datetime.now(UTC)).total_seconds() <= 601  # ten minutes


def test_launch_writes_the_campaign_limit_and_a_new_version_changes_or_removes_it(
    tmp_path: Path, engine: Engine
) -> None:
    def limits() -> dict[str, float]:
        with engine.connect() as conn:
            return OutboxStore(engine.dialect.name).rate_limits(conn, "campaign:")

    folder = tmp_path / "versions"
    launch(engine, campaign(folder, ["a@example.com"], "300/m"))
    assert limits() == {"campaign:versions": 5.0}
    register(engine, load_campaign(campaign(folder, ["a@example.com"], "2/s")),
             now=datetime.now(UTC), force_new_version=True)  # fmt: skip
    assert limits() == {"campaign:versions": 2.0}
    register(engine, load_campaign(campaign(folder, ["a@example.com"])),
             now=datetime.now(UTC), force_new_version=True)  # fmt: skip
    assert limits() == {}


def test_an_unreadable_domain_rate_setting_stops_the_worker_with_one_line(db_url: str) -> None:
    result = subprocess.run(
        [
            str(HERALD),
            "worker",
            "--until-idle",
            "--database-url",
            db_url,
            "--smtp-url",
            "smtp://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HERALD_DOMAIN_RATES": "gmail.com=fast"},
        check=False,
    )
    assert result.returncode == 2
    assert "HERALD_DOMAIN_RATES: gmail.com: invalid rate 'fast'" in result.stderr
    assert "Traceback" not in result.stderr
