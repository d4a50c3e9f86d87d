"""What the dashboard tests look at: a database with a campaign really sent, and `herald serve`.

``build_world`` makes, per backend, a migrated database of its own, launches a newsletter with
``herald launch`` and sends it with a real ``herald worker`` process to a real SMTP server
(tests.support.smtp_server) whose fault plan leaves some messages *in doubt* (the server stores
the message, then drops the connection before its 250) and refuses some recipients at RCPT (the
jobs become dead letters). Then a real ``herald serve`` with the dashboard configured is
started in front of that database. Tests find the dashboard's elements only through the names
the contract in docs/operations/dashboard.md gives them (data-test attributes, field names, URLs).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job, suppression
from herald.db import create_engine
from tests.conftest import _drop_pg_database, _new_pg_database
from tests.support.factories import launch_json, write_yaml
from tests.support.paths import HERALD
from tests.support.serve_process import Served, herald_env, herald_serve
from tests.support.smtp_server import Fault, LedgerSMTPServer

PASSWORD = "correct-horse-battery-staple"
TOKEN = "tok-browser-0123456789abcdef0123"
SETTINGS = {
    "HERALD_SIGNING_KEYS": "k1:browser-tests-secret-0123456789",
    "HERALD_PUBLIC_URL": "https://news.herald.test",
    "HERALD_DASHBOARD_PASSWORD": PASSWORD,
    "HERALD_DASHBOARD_TOKEN": TOKEN,
}

NEWSLETTER = "spring-newsletter"
DELIVERED = [f"reader{i:02d}@example.com" for i in range(8)]
IN_DOUBT = ["doubt-a@example.com", "doubt-b@example.com", "doubt-c@example.com"]
DEAD = ["gone-a@example.net", "gone-b@example.net"]
NEWSLETTER_YAML = f"""\
name: {NEWSLETTER}
from: "Herald News <news@herald.test>"
audience: [{", ".join(DELIVERED + IN_DOUBT + DEAD)}]
steps:
  - id: announce
    subject: "Spring is here"
    text: "Hello {{{{ email }}}}, spring is here."
    html: "<p>Hello <b>{{{{ email }}}}</b>, spring is here.</p>"
  - id: reminder
    after: 0
    subject: "Spring sale ends soon"
    text: "Last days of the spring sale."
"""


@dataclass
class World:
    backend: str
    db_url: str
    engine: Engine
    served: Served
    folder: Path
    in_doubt: list[str]  # keys of the jobs the worker left in doubt
    dead: list[str]  # keys of the jobs refused at RCPT (failed: dead letters)

    def url(self, path: str) -> str:
        return self.served.base_url + path


@contextmanager
def database(
    backend: str, request: pytest.FixtureRequest, folder: Path
) -> Iterator[tuple[str, Engine]]:
    """A migrated database of the module's own on ``backend`` (tests/conftest.py's templates)."""
    if backend == "sqlite":
        path = folder / "herald.db"
        path.write_bytes(request.getfixturevalue("sqlite_template").read_bytes())
        url = f"sqlite:///{path}"
        engine = create_engine(url)
        yield url, engine
        engine.dispose()
        return
    admin = request.getfixturevalue("pg_admin")
    name, url = _new_pg_database(admin)
    engine = create_engine(url)
    try:
        yield url, engine
    finally:
        engine.dispose()
        _drop_pg_database(admin, name)


def worker_command(db_url: str, smtp: LedgerSMTPServer, *extra: str) -> list[str]:
    return [
        str(HERALD), "worker", "--until-idle", "--json", "--database-url", db_url,
        "--smtp-url", f"smtp://{smtp.host}:{smtp.port}",
        "--poll", "0.05", "--retry-base", "0.01", "--concurrency", "20", *extra,
    ]  # fmt: skip


def start_worker(db_url: str, smtp: LedgerSMTPServer) -> subprocess.Popen[str]:
    """``herald worker --until-idle`` as a real process."""
    return subprocess.Popen(
        worker_command(db_url, smtp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=herald_env({}),
    )


def finish_worker(worker: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """Wait for the worker to exit (killing it after ``timeout``); its JSON report."""
    try:
        stdout, stderr = worker.communicate(timeout=timeout)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    report: dict[str, Any] = json.loads(stdout)
    return report


def keys_for(engine: Engine, recipients: Sequence[str], step: str | None = None) -> list[str]:
    query = sa.select(send_job.c.key).where(send_job.c.recipient.in_(list(recipients)))
    if step is not None:
        query = query.where(send_job.c.step == step)
    with engine.connect() as conn:
        return list(conn.execute(query.order_by(send_job.c.recipient, send_job.c.step)).scalars())


def message_ids_for(engine: Engine, recipients: Sequence[str], step: str) -> set[str]:
    with engine.connect() as conn:
        return set(
            conn.execute(
                sa.select(send_job.c.message_id).where(
                    send_job.c.recipient.in_(list(recipients)), send_job.c.step == step
                )
            ).scalars()
        )


def job_state(engine: Engine, key: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(send_job.c.state).where(send_job.c.key == key)).one()[0])


def last_actor(engine: Engine, key: str) -> str:
    """Who made the job's latest journalled transition."""
    with engine.connect() as conn:
        job_id = conn.execute(sa.select(send_job.c.id).where(send_job.c.key == key)).scalar_one()
        return str(
            conn.execute(
                sa.select(send_event.c.actor)
                .where(send_event.c.job_id == job_id)
                .order_by(send_event.c.id.desc())
                .limit(1)
            ).scalar_one()
        )


def suppressed(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(suppression.c.address, suppression.c.scope, suppression.c.reason).order_by(
                suppression.c.address
            )
        )
        return [(r.address, r.scope, r.reason) for r in rows]


def launch_newsletter(engine: Engine, db_url: str, folder: Path) -> LedgerSMTPServer:
    """Launch the newsletter; an SMTP server (not started) that leaves some of it in doubt and
    refuses some recipients."""
    launched = launch_json(db_url, write_yaml(folder / "newsletter", NEWSLETTER_YAML))
    assert launched["new_jobs"] == 2 * len(DELIVERED + IN_DOUBT + DEAD), launched
    doubtful = message_ids_for(engine, IN_DOUBT, "announce")

    def plan(key: str, attempt: int) -> Fault:
        # Asked at RCPT with the address and at DATA with the Message-ID.
        if key in DEAD:
            return Fault.RCPT_REJECT
        return Fault.DROP_AFTER_STORE if key in doubtful else Fault.ACCEPT

    return LedgerSMTPServer(folder / "ledger.txt", fault_plan=plan)


@contextmanager
def build_world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    backend = str(request.param)
    folder = tmp_path_factory.mktemp(f"dashboard-{backend}")
    with ExitStack() as stack:
        db_url, engine = stack.enter_context(database(backend, request, folder))
        with launch_newsletter(engine, db_url, folder) as smtp:
            # The worker sends while herald serve starts: two process start-ups at once.
            worker = start_worker(db_url, smtp)
            try:
                served = stack.enter_context(herald_serve(db_url, SETTINGS))
            finally:
                report = finish_worker(worker)
        assert report["in_doubt"] == len(IN_DOUBT), report
        assert report["failed"] == 2 * len(DEAD), report
        in_doubt, dead = keys_for(engine, IN_DOUBT, "announce"), keys_for(engine, DEAD)
        assert {job_state(engine, key) for key in in_doubt} == {"in_doubt"}
        assert {job_state(engine, key) for key in dead} == {"failed"}
        yield World(backend, db_url, engine, served, folder, in_doubt, dead)
