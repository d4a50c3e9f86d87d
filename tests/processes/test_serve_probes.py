"""``herald serve``'s ``/healthz``, ``/readyz`` and ``/metrics`` as a real process, on SQLite and
PostgreSQL: ready and counting the outbox's jobs; not ready (503, with the reason) once the
database's schema is no longer the one this Herald needs, and ready again when it is."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import register
from campaigns.spec import load_campaign
from herald.db import create_engine
from herald.schema import HEAD_REVISION, upgrade
from scheduler.fanout import materialise
from tests.support.campaign_files import write_campaign
from tests.support.metrics_scrape import Scrape, scrape, wait_for
from tests.support.serve_process import herald_serve

SETTINGS = {"HERALD_SIGNING_KEYS": "k1:a-secret-of-16-chars"}


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def set_revision(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def test_serve_answers_probes_and_metrics(tmp_path: Path, engine: Engine, db_url: str) -> None:
    with herald_serve(db_url, SETTINGS) as served:
        assert get(f"{served.base_url}/healthz") == (200, "ok")
        assert get(f"{served.base_url}/readyz") == (200, "ready")
        first = scrape(f"{served.base_url}/metrics")
        assert first.value("herald_database_up") == 1
        assert first.value("herald_jobs_in_doubt") == 0
        assert first.values("herald_jobs") == {}

        path, _ = write_campaign(tmp_path / "c", recipients=4)
        loaded = load_campaign(path)
        at = register(engine, loaded, now=datetime.now(UTC)).campaign.launched_at
        assert materialise(engine, loaded, at).new_jobs == 12

        def counted() -> Scrape | None:
            got = scrape(f"{served.base_url}/metrics")
            pending = got.value("herald_jobs", campaign="onboarding", state="pending")
            return got if pending == 12 else None

        later = wait_for(counted, "12 pending jobs on /metrics (after the cache's seconds)")
        assert later.value("herald_jobs", campaign="onboarding", state="sent") == 0
        assert later.types["herald_jobs"] == "gauge"

        # A database upgraded by a newer Herald (or not yet upgraded for this one).
        set_revision(engine, "0001")
        status, body = get(f"{served.base_url}/readyz")
        assert status == 503
        assert body == f"not ready: schema at 0001, this Herald needs {HEAD_REVISION}"
        assert get(f"{served.base_url}/healthz") == (200, "ok")  # alive all the same
        set_revision(engine, HEAD_REVISION)
        assert get(f"{served.base_url}/readyz") == (200, "ready")


def test_serve_is_not_ready_once_its_sqlite_file_is_removed(tmp_path: Path) -> None:
    database = tmp_path / "herald.db"
    files = create_engine(f"sqlite:///{database}")
    upgrade(files)
    files.dispose()
    with herald_serve(f"sqlite:///{database}", SETTINGS) as served:
        assert get(f"{served.base_url}/readyz") == (200, "ready")
        for path in tmp_path.glob("herald.db*"):
            path.unlink()
        status, body = get(f"{served.base_url}/readyz")
        assert status == 503
        assert body == f"not ready: the database file {database} is gone"
