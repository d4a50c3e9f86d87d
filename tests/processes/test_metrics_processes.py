"""``/metrics`` of real processes scraped over HTTP while they work (issue 11, item 3).

A ``herald worker`` with ``--metrics-port 0`` sends a launched campaign to a real SMTP server
that holds one recipient's RCPT: scraped while those sends wait, the documented names are there
with the values of a send in progress (jobs claimed, a live lease, the relay up, sends so far);
once released, the counts equal what the database and the server say. ``herald run`` counts its
scheduler's fire and the jobs it materialised. A busy metrics port is one line and exit 1.
"""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from dispatch.models import send_job
from herald.db import normalise_url as normalise_database_url
from herald.schema import HEAD_REVISION as HEAD
from scheduler.fanout import materialise
from tests.support.campaign_files import write_audience, write_campaign
from tests.support.metrics_scrape import Scrape, metrics_process, wait_for
from tests.support.paths import HERALD
from tests.support.schedules import launch_at
from tests.support.smtp_server import LedgerSMTPServer, RcptHold

RECIPIENTS = 20
JOBS = RECIPIENTS * 3  # write_campaign's three steps, all due at once
STATES = ("pending", "claimed", "sending", "sent", "failed", "cancelled", "in_doubt")


def job_states(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(send_job.c.state, sa.func.count()).group_by("state"))
        return {state: n for state, n in rows}


def total_claims(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.sum(send_job.c.claims))) or 0)


def test_worker_metrics_scraped_during_a_real_send(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    loaded = load_campaign(path)
    launched_at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
    assert materialise(engine, loaded, launched_at).new_jobs == JOBS
    held = addresses[0]
    hold = RcptHold(lambda address: address == held)  # its three steps wait at RCPT
    with LedgerSMTPServer(tmp_path / "ledger.txt", rcpt_hold=hold) as smtp:
        smtp_url = f"smtp://{smtp.host}:{smtp.port}"
        worker_args = [
            "worker", "--database-url", db_url, "--smtp-url", smtp_url,
            "--concurrency", "5", "--poll", "0.05",
        ]  # fmt: skip
        with metrics_process(worker_args) as worker:
            assert hold.wait_held(1, timeout=60), worker.stderr()

            def during() -> Scrape | None:
                got = worker.scrape()
                claimed = got.value("herald_jobs", campaign="onboarding", state="claimed")
                sent = got.value("herald_sends_total", outcome="sent") or 0
                # Everything but the held recipient's sends has gone; the held ones are claimed.
                done = sent >= JOBS - 3 and claimed is not None and claimed >= 1
                return got if done else None

            mid = wait_for(during, "the sends of every other recipient, the held ones claimed")
            assert mid.types["herald_sends"] == "counter"
            assert mid.types["herald_smtp_send_seconds"] == "histogram"
            assert mid.types["herald_claim_batch_size"] == "histogram"
            assert mid.types["herald_jobs"] == "gauge"
            assert mid.value("herald_database_up") == 1
            assert mid.value("herald_sends_total", outcome="sent") == JOBS - 3
            for outcome in ("failed", "retry", "in_doubt"):
                assert mid.value("herald_sends_total", outcome=outcome) == 0
            # A held RCPT is before T4: the lease is live and its age grows.
            assert (mid.value("herald_lease_oldest_age_seconds") or 0) > 0
            assert mid.value("herald_jobs_in_doubt") == 0
            relays = mid.values("herald_relay_up")
            assert list(relays.values()) == [1.0], relays
            assert smtp_url.split("//")[1] in dict(next(iter(relays))).get("relay", "")
            assert mid.value("herald_smtp_send_seconds_count") == JOBS - 3
            # The gauges per state are all there for the campaign, and add up to its jobs.
            by_state = {
                state: mid.value("herald_jobs", campaign="onboarding", state=state)
                for state in STATES
            }
            assert None not in by_state.values(), by_state
            assert sum(v or 0 for v in by_state.values()) == JOBS

            hold.release()

            def finished() -> Scrape | None:
                got = worker.scrape()
                sent = got.value("herald_sends_total", outcome="sent")
                db_sent = got.value("herald_jobs", campaign="onboarding", state="sent")
                return got if sent == JOBS and db_sent == JOBS else None

            end = wait_for(finished, f"{JOBS} sends counted and read back from the database")
            assert worker.stop() == 0, worker.stderr()
    assert job_states(engine) == {"sent": JOBS}
    assert len(smtp.accepted_ids()) == JOBS
    # Every delivery timed once; every claim's jobs counted once.
    assert end.value("herald_smtp_send_seconds_count") == JOBS
    assert (end.value("herald_smtp_send_seconds_sum") or 0) > 0
    assert end.value("herald_claim_batch_size_sum") == total_claims(engine) == JOBS
    batches = end.value("herald_claim_batch_size_count") or 0
    assert 1 <= batches <= JOBS
    assert end.value("herald_lease_oldest_age_seconds") == 0  # no lease left
    for category in ("released", "in_doubt", "dead"):
        assert end.value("herald_recoveries_total", category=category) == 0


ONE_SHOT = """\
name: hello
from: "Herald Tests <news@herald.test>"
audience: people.csv
start_at: "{start}"
steps:
  - id: hello
    subject: "Hello {{{{ name }}}}"
    text: "Hello {{{{ name }}}}."
"""


def test_herald_run_counts_its_fire_and_the_jobs_it_materialised(
    tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    db_url = f"sqlite:///{tmp_path / 'herald.db'}"
    from herald.db import create_engine
    from herald.schema import upgrade

    engine = create_engine(db_url)
    upgrade(engine)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    folder = tmp_path / "hello"
    folder.mkdir()
    write_audience(folder / "people.csv", 7)
    path = folder / "campaign.yaml"
    path.write_text(ONE_SHOT.format(start=due.strftime("%Y-%m-%dT%H:%M:%SZ")))
    # Launched the day before it was due: the first pass of `herald run` fires it.
    assert launch_at(engine, path, due - timedelta(days=1)).fanout.new_jobs == 0
    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    run_args = [
        "run", "--database-url", db_url, "--smtp-url", smtp_url, "--tick", "0.5", "--poll", "0.05",
    ]  # fmt: skip
    with metrics_process(run_args) as run:

        def all_sent() -> Scrape | None:
            got = run.scrape()
            return got if got.value("herald_sends_total", outcome="sent") == 7 else None

        got = wait_for(all_sent, "7 sends by herald run")
        assert run.stop() == 0, run.stderr()
    engine.dispose()
    assert got.value("herald_scheduler_fires_total", campaign="hello") == 1
    assert got.value("herald_jobs_materialised_total", campaign="hello") == 7
    assert (got.value("herald_scheduler_passes_total") or 0) >= 1
    assert got.value("herald_scheduler_pass_errors_total") == 0
    assert got.value("herald_smtp_send_seconds_count") == 7
    assert len(smtp_server.accepted_ids()) == 7


def probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own server
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def test_worker_metrics_port_answers_the_probes_and_readyz_follows_the_schema(db_url: str) -> None:
    """The metrics port of a worker is also its /healthz and /readyz: ready while the schema is
    the code's, 503 naming the revision when it is not (a rolling upgrade half done)."""
    engine = sa.create_engine(normalise_database_url(db_url))
    args = ["worker", "--database-url", db_url, "--smtp-url", "smtp://127.0.0.1:9", "--poll", "0.2"]
    try:
        with metrics_process(args) as worker:
            base = worker.url.removesuffix("/metrics")
            assert probe(base + "/healthz") == (200, "ok")
            assert probe(base + "/readyz") == (200, "ready")
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
            status, body = probe(base + "/readyz")
            assert status == 503
            assert "schema at 0001" in body
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": HEAD})
            assert probe(base + "/readyz") == (200, "ready")
            assert worker.stop() == 0, worker.stderr()
    finally:
        engine.dispose()


def test_scheduler_metrics_from_the_environment(db_url: str) -> None:
    args = ["scheduler", "--database-url", db_url, "--tick", "0.2"]
    with metrics_process(args, via_env=True) as scheduler:

        def passes() -> Scrape | None:
            got = scheduler.scrape()
            return got if (got.value("herald_scheduler_passes_total") or 0) >= 2 else None

        got = wait_for(passes, "two scheduler passes")
        base = scheduler.url.removesuffix("/metrics")
        assert probe(base + "/healthz") == (200, "ok")
        assert probe(base + "/readyz") == (200, "ready")
        assert probe(base + "/nothing")[0] == 404
        assert scheduler.stop() == 0, scheduler.stderr()
    assert got.value("herald_database_up") == 1
    assert got.value("herald_scheduler_pass_errors_total") == 0
    assert got.values("herald_scheduler_fires_total") == {}  # nothing was launched
    assert "herald_sends" not in got.types  # a scheduler sends nothing


def test_a_busy_metrics_port_is_one_line_and_exit_1(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for command in ("worker", "scheduler"):
            result = subprocess.run(
                [str(HERALD), command, "--database-url", db_url, "--metrics-port", str(port)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, result.stderr
            assert f"metrics port {port} on 127.0.0.1 is already in use" in result.stderr
            assert "Traceback" not in result.stderr
