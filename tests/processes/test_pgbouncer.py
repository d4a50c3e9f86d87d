"""Scale-out through a real pooler: two ``herald worker``s, a ``herald scheduler`` and ``herald
serve`` on PgBouncer in transaction pooling mode (tests/support/pgbouncer.py), with fewer server
connections than clients, so consecutive transactions of one process run on different server
sessions.

Every message reaches a real SMTP server exactly once and every job's journal is a valid path
ending in ``sent``; a worker SIGKILLed in the middle is recovered by the other one through the
pooler, still without a duplicate. The negative control: the same workers without
``HERALD_DATABASE_POOLER=transaction`` fail on psycopg's prepared statements, so the setting is
what makes the pooler work.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple, message_id
from dispatch.models import send_event, send_job
from dispatch.states import is_valid_path
from tests.support.campaign_files import write_audience
from tests.support.paths import HERALD
from tests.support.pgbouncer import PgBouncer, pgbouncer_for_test
from tests.support.schedules import launch_at
from tests.support.serve_process import herald_env, herald_serve
from tests.support.smtp_server import LedgerSMTPServer, RcptHold

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

POOL_SIZE = 3  # server connections; the processes below open about a dozen client connections
TOKEN = "a-dashboard-token-for-tests"
SETTINGS = {
    "HERALD_DATABASE_POOLER": "transaction",
    "HERALD_SIGNING_KEYS": "k1:a-secret-of-16-chars",
    "HERALD_DASHBOARD_TOKEN": TOKEN,
}
WORKER = "worker --concurrency 8 --poll 0.05 --retry-base 0.05 --recovery-interval 0.5"
DEADLINE = 300.0  # the runs end when the database says so; this only bounds a hung one

CAMPAIGN = """\
name: {name}
from: "Herald Tests <news@herald.test>"
audience: people.csv
start_at: "{start}"
steps:
  - id: hello
    subject: "Hello {{{{ name }}}}"
    text: "Hello {{{{ name }}}}."
  - id: again
    after: 0
    subject: "Again, {{{{ name }}}}"
    text: "Again {{{{ name }}}}."
"""


@pytest.fixture
def bouncer(db_url: str) -> Iterator[PgBouncer]:
    with pgbouncer_for_test(db_url, pool_size=POOL_SIZE) as running:
        yield running


@dataclass
class Service:
    """One herald process, its stderr kept in a file for the failure message."""

    name: str
    args: list[str]
    log_dir: Path
    settings: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.log_dir / f"{self.name}.err"

    def start(self) -> Service:
        with self.log.open("wb") as stderr:
            self.process = subprocess.Popen(
                [str(HERALD), *self.args],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=herald_env(self.settings),
            )
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stderr(self) -> str:
        return f"--- {self.name}\n{self.log.read_text(errors='replace')}"

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


def launch_due(folder: Path, engine: Engine, recipients: int, name: str) -> frozenset[str]:
    """A one-shot campaign due a minute ago, registered before it was due (directly, not
    through the pooler): the scheduler's first pass fires it. Its expected Message-IDs."""
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    folder.mkdir()
    addresses = write_audience(folder / "people.csv", recipients)
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(name=name, start=due.strftime("%Y-%m-%dT%H:%M:%SZ")))
    assert launch_at(engine, path, due - timedelta(days=1)).fanout.new_jobs == 0
    return frozenset(
        message_id(KeyTuple(name, step, due, address).key(), "herald.test")
        for step in ("hello", "again")
        for address in addresses
    )


def job_states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(send_job.c.state)).scalars())


def journal(engine: Engine) -> dict[int, list[tuple[str | None, str]]]:
    e = send_event.c
    query = sa.select(e.job_id, e.from_state, e.to_state).order_by(e.job_id, e.id)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for job, source, target in rows:
        paths.setdefault(job, []).append((source, target))
    return paths


def wait_until(done: Callable[[], bool], services: list[Service], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        dead = [s for s in services if not s.alive]
        assert not dead, f"{what}: a process exited\n" + "\n".join(s.stderr() for s in dead)
        assert time.monotonic() < deadline, f"{what}: not after {DEADLINE:.0f}s"
        time.sleep(0.1)  # the observer's polling cadence, not a verdict


def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (loopback)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def pooled_clients(bouncer: PgBouncer, database: str) -> tuple[int, int]:
    """(client connections, server connections) PgBouncer holds for ``database`` now."""
    clients = [c for c in bouncer.admin("SHOW CLIENTS") if c["database"] == database]
    servers = [s for s in bouncer.admin("SHOW SERVERS") if s["database"] == database]
    return len(clients), len(servers)


def assert_clean(services: list[Service]) -> None:
    for service in services:
        log = service.stderr()
        assert "Traceback" not in log, log
        assert "prepared statement" not in log, log


def test_workers_scheduler_and_serve_through_pgbouncer_send_each_message_once(
    tmp_path: Path, engine: Engine, db_url: str, bouncer: PgBouncer, smtp_server: LedgerSMTPServer
) -> None:
    expected = launch_due(tmp_path / "campaign", engine, 150, "pooled")
    pooled = bouncer.url(db_url)
    smtp = ["--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}"]
    services = [
        Service("scheduler", ["scheduler", "--database-url", pooled, "--tick", "1"], tmp_path,
                SETTINGS),
        *(Service(f"worker{i}", [*WORKER.split(), "--database-url", pooled, *smtp], tmp_path,
                  SETTINGS) for i in (1, 2)),
    ]  # fmt: skip
    database = sa.make_url(db_url).database
    assert database is not None
    most_clients = 0
    try:
        with herald_serve(pooled, SETTINGS) as served:
            for service in services:
                service.start()

            def delivered() -> bool:
                nonlocal most_clients
                # Readiness and a dashboard page on every look, while the others write.
                assert get(f"{served.base_url}/readyz") == (200, "ready")
                status, page = get(f"{served.base_url}/", TOKEN)
                assert status == 200, page
                clients, servers = pooled_clients(bouncer, database)
                assert servers <= POOL_SIZE
                most_clients = max(most_clients, clients)
                return job_states(engine) == {"sent": len(expected)}

            wait_until(delivered, services, "the campaign was not delivered through PgBouncer")
            status, page = get(f"{served.base_url}/campaigns/pooled", TOKEN)
            assert status == 200, page
            for service in services:
                assert service.stop() == 0, service.stderr()
        assert "Traceback" not in "".join(served.lines)
    finally:
        for service in services:
            service.kill()
    assert_clean(services)

    # More client connections than server connections: the pooler really shared them.
    assert most_clients > POOL_SIZE
    accepted = smtp_server.accepted_ids()
    assert [mid for mid, n in Counter(accepted).items() if n > 1] == []
    assert set(accepted) == expected
    paths = journal(engine)
    assert len(paths) == len(expected)
    assert {job: p for job, p in paths.items() if not is_valid_path(p)} == {}
    assert all(p[-1] == ("sending", "sent") for p in paths.values())


def owned_by(engine: Engine, pid: int) -> dict[int, str]:
    """The unfinished jobs whose lease ``pid``'s worker holds (owner ``host:pid:nonce``)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(send_job.c.id, send_job.c.state).where(
                send_job.c.lease_owner.like(f"%:{pid}:%"),
                send_job.c.state.in_(["claimed", "sending"]),
            )
        ).all()
    return {job: state for job, state in rows}


def test_a_worker_killed_mid_run_is_recovered_through_pgbouncer(
    tmp_path: Path, engine: Engine, db_url: str, bouncer: PgBouncer
) -> None:
    # Every tenth recipient's RCPT waits until released: both workers fill their slots with
    # conversations stuck before T4, so the victim surely holds claims when it is killed.
    hold = RcptHold(lambda address: int(address[4:9]) % 10 == 0)
    server = LedgerSMTPServer(tmp_path / "ledger.txt", rcpt_hold=hold)
    server.start()
    expected = launch_due(tmp_path / "campaign", engine, 200, "killed")
    pooled = bouncer.url(db_url)
    smtp = ["--smtp-url", f"smtp://{server.host}:{server.port}"]
    worker = [*WORKER.split(), "--lease", "3", "--database-url", pooled, *smtp]
    victim = Service("victim", worker, tmp_path, SETTINGS)
    services = [
        Service("scheduler", ["scheduler", "--database-url", pooled, "--tick", "1"], tmp_path,
                SETTINGS),
        Service("survivor", worker, tmp_path, SETTINGS),
    ]  # fmt: skip
    try:
        for service in [victim, *services]:
            service.start()
        assert victim.process is not None
        pid = victim.process.pid

        def mid_run() -> bool:
            return (
                len(hold.held) >= 2 and bool(server.accepted_ids()) and bool(owned_by(engine, pid))
            )

        wait_until(mid_run, [victim, *services], "the victim never held a claim mid-run")
        victim.kill()  # SIGKILL
        assert len(server.accepted_ids()) < len(expected), "the kill was not mid-run"
        hold.release()

        def settled() -> bool:
            states = job_states(engine)
            return sum(n for s, n in states.items() if s in ("sent", "in_doubt")) == len(expected)

        wait_until(settled, services, "the survivor did not recover and finish")
        # An operator's decision for what was in a send when the victim died: the relay's log
        # (the ledger) says whether it arrived.
        in_doubt = resolve_in_doubt(engine, pooled, set(server.accepted_ids()))
        wait_until(lambda: job_states(engine) == {"sent": len(expected)}, services, "resend")
        for service in services:
            assert service.stop() == 0, service.stderr()
    finally:
        hold.release()
        for service in [victim, *services]:
            service.kill()
        server.stop()
    assert_clean(services)

    accepted = server.accepted_ids()
    assert [mid for mid, n in Counter(accepted).items() if n > 1] == []
    assert set(accepted) == expected
    paths = journal(engine)
    assert {job: p for job, p in paths.items() if not is_valid_path(p)} == {}
    # Each job the victim left claimed or sending was taken back by the survivor's recovery
    # through PgBouncer: R1 (back to pending) or R2 (in doubt), the very next transition.
    lost = left_behind(engine, f":{pid}:")
    assert lost, "the victim left nothing unfinished"
    recovered = {("claimed", "pending"), ("sending", "in_doubt")}
    assert {job: step for job, step in lost.items() if step not in recovered} == {}
    print(f"KILLED: {len(lost)} job(s) recovered, {in_doubt} resolved from in doubt")


def left_behind(engine: Engine, victim: str) -> dict[int, tuple[str | None, str] | None]:
    """For each job whose last transition by ``victim`` (an owner fragment) left it claimed or
    sending: the transition that came next, by someone else (None: nothing came)."""
    e = send_event.c
    query = sa.select(e.job_id, e.from_state, e.to_state, e.actor).order_by(e.job_id, e.id)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    events: dict[int, list[tuple[str | None, str, str]]] = {}
    for job, source, target, actor in rows:
        events.setdefault(job, []).append((source, target, actor))
    found: dict[int, tuple[str | None, str] | None] = {}
    for job, path in events.items():
        mine = [i for i, (_, _, actor) in enumerate(path) if victim in actor]
        if mine and path[mine[-1]][1] in ("claimed", "sending"):
            following = path[mine[-1] + 1 : mine[-1] + 2]
            found[job] = (following[0][0], following[0][1]) if following else None
    return found


def resolve_in_doubt(engine: Engine, pooled: str, delivered: set[str]) -> int:
    """Resolve each in-doubt job with ``herald in-doubt resolve`` through the pooler: sent when
    the ledger has its Message-ID, resent otherwise. How many there were."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(send_job.c.key, send_job.c.message_id).where(send_job.c.state == "in_doubt")
        ).all()
    for key, mid in rows:
        decision = ["--as", "sent"] if mid in delivered else ["--resend"]
        done = subprocess.run(
            [str(HERALD), "in-doubt", "resolve", key, *decision, "--database-url", pooled],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=herald_env(SETTINGS),
        )
        assert done.returncode == 0, done.stderr
    return len(rows)


def test_without_the_setting_prepared_statements_break_through_pgbouncer(
    tmp_path: Path, engine: Engine, db_url: str, bouncer: PgBouncer, smtp_server: LedgerSMTPServer
) -> None:
    """The negative control: the same two workers, HERALD_DATABASE_POOLER unset. psycopg
    prepares its statements after five runs, and PgBouncer 1.18 sends the next transaction to
    a server session that does not have them (or already has one of that name)."""
    expected = launch_due(tmp_path / "campaign", engine, 150, "unpooled")
    pooled = bouncer.url(db_url)
    unset = {k: v for k, v in SETTINGS.items() if k != "HERALD_DATABASE_POOLER"}
    smtp = ["--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}"]
    services = [
        Service("scheduler", ["scheduler", "--database-url", pooled, "--tick", "1"], tmp_path,
                unset),
        *(Service(f"worker{i}", [*WORKER.split(), "--database-url", pooled, *smtp], tmp_path,
                  unset) for i in (1, 2)),
    ]  # fmt: skip

    def broken() -> bool:
        return any("prepared statement" in s.stderr() for s in services)

    try:
        for service in services:
            service.start()
        deadline = time.monotonic() + DEADLINE
        while not broken() and job_states(engine) != {"sent": len(expected)}:
            assert time.monotonic() < deadline, "neither broken nor done"
            time.sleep(0.1)  # the observer's polling cadence, not a verdict
    finally:
        for service in services:
            service.kill()
    assert broken(), "\n".join(s.stderr() for s in services)
