"""Service mode against a PostgreSQL that is down, restarting or misconfigured — simulated by a
TCP proxy on 127.0.0.1 (tests/support/tcp_proxy.py) in front of the shared server, which other
tests use at the same time and which is never stopped here."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from tests.conftest import PG_HOST, PG_PORT
from tests.support.campaign_files import write_campaign
from tests.support.factories import launch
from tests.support.service_process import ServiceProcess, wait_until
from tests.support.smtp_server import LedgerSMTPServer
from tests.support.tcp_proxy import TcpProxy

postgres_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
WAITING = "waiting for the database"


def through(proxy: TcpProxy, db_url: str) -> str:
    return db_url.replace(f"{PG_HOST}:{PG_PORT}", proxy.url_netloc)


def states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(send_job.c.state)).scalars().all())


def worker_args(url: str, server: LedgerSMTPServer, *extra: str) -> list[str]:
    return [
        "worker",
        "--database-url",
        url,
        "--smtp-url",
        f"smtp://{server.host}:{server.port}",
        "--concurrency",
        "4",
        "--poll",
        "0.05",
        "--recovery-interval",
        "0.5",
        *extra,
    ]


@postgres_only
def test_a_worker_started_before_its_database_waits_then_sends_everything_once(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    launch(engine, write_campaign(tmp_path / "c", recipients=10)[0])  # 30 jobs
    proxy = TcpProxy((PG_HOST, PG_PORT))  # not listening yet: the database is "down"
    worker = ServiceProcess(worker_args(through(proxy, db_url), smtp_server))
    try:
        waiting = worker.wait_for_line(WAITING, count=3)
        assert all("connection refused" in line for line in waiting), waiting
        assert worker.process.poll() is None, "the worker gave up instead of waiting"
        assert states(engine)["pending"] == 30
        proxy.open()  # the database is up
        wait_until(lambda: states(engine)["sent"] == 30, timeout=60, what="all 30 sent")
    finally:
        code = worker.stop()
        proxy.stop()
    assert code == 0, worker.stderr_lines
    accepted = smtp_server.accepted_ids()
    assert len(accepted) == len(set(accepted)) == 30
    assert not worker.lines_with("Traceback")


@postgres_only
def test_a_database_restart_mid_run_loses_and_duplicates_nothing(
    tmp_path: Path, engine: Engine, db_url: str
) -> None:
    launch(engine, write_campaign(tmp_path / "c", recipients=40)[0])  # 120 jobs
    proxy = TcpProxy((PG_HOST, PG_PORT))
    proxy.open()
    server = LedgerSMTPServer(tmp_path / "ledger.txt", delay=0.05)
    server.start()
    # A short lease: a job whose outcome could not be recorded during the outage is left to
    # recovery, which acts only once its lease has expired (120 s by default).
    worker = ServiceProcess(worker_args(through(proxy, db_url), server, "--lease", "10"))
    try:
        wait_until(lambda: states(engine)["sent"] >= 10, timeout=60, what="10 sent")
        # The "restart": every connection reset, new ones refused until it is back.
        said_before = len(worker.stderr_lines)
        proxy.close()
        wait_until(
            lambda: len(worker.stderr_lines) > said_before,
            timeout=30,
            what="the worker noticing the database went away",
        )
        assert worker.process.poll() is None, worker.stderr_lines
        connections_before = proxy.accepted
        proxy.open()
        wait_until(
            lambda: proxy.accepted > connections_before,
            timeout=30,
            what="the worker reconnecting",
        )
        wait_until(
            lambda: sum(states(engine)[s] for s in ("sent", "in_doubt")) == 120,
            timeout=120,
            what="every job sent (or, cut inside its send, in doubt)",
        )
        assert worker.process.poll() is None, worker.stderr_lines
    finally:
        code = worker.stop()
        proxy.stop()
        server.stop()
    assert code == 0, worker.stderr_lines
    accepted = server.accepted_ids()
    assert len(accepted) == len(set(accepted)), "a message went out twice"
    final = states(engine)
    # Every sent job reached the relay once; an in-doubt one (its outcome lost with the
    # connection) at most once — never resent automatically.
    assert final["sent"] <= len(accepted) <= final["sent"] + final["in_doubt"]
    assert not worker.lines_with("Traceback")


@postgres_only
@pytest.mark.parametrize("command", ["worker", "scheduler", "run"])
@pytest.mark.parametrize(
    ("mistake", "expected"),
    [("no such database", "does not exist"), ("no such role", 'role "nobody"')],
)
def test_a_wrong_database_or_login_fails_at_once_with_one_line(
    db_url: str, command: str, mistake: str, expected: str
) -> None:
    if mistake == "no such database":
        url = db_url.rsplit("/", 1)[0] + "/herald_no_such_database"
    else:
        url = db_url.replace("postgres@", "nobody:secret-pw@")
    # Service mode: the default wait is forever, so only the classification stops it.
    service = ServiceProcess([command, "--database-url", url])
    code = service.finish(timeout=30)
    assert code == 1
    errors = [line for line in service.stderr_lines if line.startswith("error:")]
    assert len(errors) == 1, service.stderr_lines
    assert expected in errors[0], service.stderr_lines
    assert not service.lines_with(WAITING)
    assert "secret-pw" not in "\n".join(service.stderr_lines)
    assert not service.lines_with("Traceback")


def test_an_unusable_sqlite_path_is_a_setting_not_a_wait(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    url = f"sqlite:///{tmp_path / 'a-file' / 'herald.db'}"
    service = ServiceProcess(["worker", "--database-url", url])
    code = service.finish(timeout=30)
    assert code == 1
    errors = [line for line in service.stderr_lines if line.startswith("error:")]
    assert len(errors) == 1, service.stderr_lines
    assert "a-file" in errors[0], service.stderr_lines
    assert not service.lines_with(WAITING)


@postgres_only
def test_a_bounded_wait_gives_up_with_one_line_saying_why(db_url: str) -> None:
    proxy = TcpProxy((PG_HOST, PG_PORT))  # never opened
    # The wait counts from before the first attempt, which also imports the driver: under load
    # that alone took most of a 1.5 s wait, leaving no room for the second attempt asserted
    # below. 5 s leaves room for it (retries come 0.5 s, then 1 s, after a failure).
    service = ServiceProcess(
        ["scheduler", "--database-url", through(proxy, db_url), "--database-wait", "5"]
    )
    code = service.finish(timeout=30)
    proxy.stop()
    assert code == 1
    assert len(service.lines_with(WAITING)) >= 2
    errors = [line for line in service.stderr_lines if line.startswith("error:")]
    assert len(errors) == 1, service.stderr_lines
    assert "gave up after" in errors[0], service.stderr_lines


@postgres_only
def test_until_idle_does_not_wait_by_default(db_url: str) -> None:
    proxy = TcpProxy((PG_HOST, PG_PORT))
    service = ServiceProcess(["worker", "--until-idle", "--database-url", through(proxy, db_url)])
    code = service.finish(timeout=30)
    proxy.stop()
    assert code == 1
    assert not service.lines_with(WAITING)
    assert any("connection refused" in line.lower() for line in service.stderr_lines)


def test_sigterm_while_waiting_stops_the_service(tmp_path: Path) -> None:
    proxy = TcpProxy(("127.0.0.1", 9))  # nobody listens, and nobody will
    url = f"postgresql://postgres@{proxy.url_netloc}/herald"
    service = ServiceProcess(["worker", "--database-url", url])
    service.wait_for_line(WAITING)
    service.signal(signal.SIGTERM)
    code = service.finish(timeout=30)
    proxy.stop()
    assert code == 0, service.stderr_lines
    assert not service.lines_with("Traceback")


def test_sighup_while_waiting_restarts_at_once() -> None:
    proxy = TcpProxy(("127.0.0.1", 9))  # nobody listens, and nobody will
    url = f"postgresql://postgres@{proxy.url_netloc}/herald"
    service = ServiceProcess(["scheduler", "--database-url", url])
    try:
        service.wait_for_line(WAITING)
        service.signal(signal.SIGHUP)
        service.wait_for_line("reloading: re-executing")
        # The new incarnation starts waiting from its first attempt again.
        wait_until(
            lambda: any("(attempt 1," in line for line in service.stderr_lines[1:]),
            timeout=30,
            what="a fresh first attempt after the re-exec",
        )
        assert service.process.poll() is None
    finally:
        code = service.stop()
        proxy.stop()
    assert code == 0, service.stderr_lines


@postgres_only
def test_serve_waits_for_its_database_then_listens(db_url: str) -> None:
    proxy = TcpProxy((PG_HOST, PG_PORT))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env["HERALD_SIGNING_KEYS"] = "k1:old-secret-0123456789"
    served = ServiceProcess(
        ["serve", "--port", "0", "--database-url", through(proxy, db_url)], env=env
    )
    try:
        served.wait_for_line(WAITING, count=2)
        assert not served.lines_with("listening on")
        proxy.open()
        served.wait_for_line("listening on", timeout=60)
    finally:
        code = served.stop()
        proxy.stop()
    assert code == 0, served.stderr_lines
