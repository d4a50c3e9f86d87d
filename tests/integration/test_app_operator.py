"""The application layer's operator, status, audience and worker use cases, called directly
(no CLI) on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import CampaignNotFound, CampaignStateError
from dispatch.states import State
from herald.app.audience import check_audience
from herald.app.engine import open_engine
from herald.app.launch import launch
from herald.app.operator import (
    change_status,
    list_jobs,
    recover,
    resolve_in_doubt,
    retry_dead,
    selection,
)
from herald.app.status import status
from herald.app.worker import WorkerOptions, build_worker, run_worker
from herald.errors import HeraldError, UsageError
from tests.support.campaign_files import write_campaign
from tests.support.smtp_server import LedgerSMTPServer

LAUNCH_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RECIPIENTS = 4
JOBS = RECIPIENTS * 3


def launched(engine: Engine, tmp_path: Path) -> str:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    return "onboarding"


def set_state(engine: Engine, state: State, keys: list[str]) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("update send_job set state = :s where key in :k").bindparams(
                sa.bindparam("k", expanding=True)
            ),
            {"s": state.value, "k": keys},
        )


def keys(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("select key from send_job order by key")).scalars())


def test_status_counts_and_refuses_an_unknown_campaign(engine: Engine, tmp_path: Path) -> None:
    assert status(engine)["campaigns"] == []
    name = launched(engine, tmp_path)
    snapshot = status(engine, name)
    assert snapshot["totals"]["pending"] == JOBS
    # In the campaign's order (welcome, tips, later), not by name.
    assert [step["step"] for step in snapshot["campaigns"][0]["steps"]] == [
        "welcome",
        "tips",
        "later",
    ]
    with pytest.raises(UsageError):
        status(engine, "nope")


def test_change_status_pause_resume_cancel(engine: Engine, tmp_path: Path) -> None:
    name = launched(engine, tmp_path)
    assert change_status(engine, name, "pause", actor="t").status == "paused"
    with pytest.raises(CampaignStateError):
        change_status(engine, name, "pause", actor="t")
    assert change_status(engine, name, "resume", actor="t").previous == "paused"
    cancelled = change_status(engine, name, "cancel", actor="t")
    assert (cancelled.status, cancelled.cancelled_jobs) == ("cancelled", JOBS)
    with pytest.raises(CampaignNotFound):
        change_status(engine, "nope", "pause", actor="t")


def test_retry_dead_and_resolve_in_doubt(engine: Engine, tmp_path: Path) -> None:
    launched(engine, tmp_path)
    all_keys = keys(engine)
    set_state(engine, State.FAILED, all_keys[:2])
    set_state(engine, State.IN_DOUBT, all_keys[2:4])
    assert sorted(r.key for r in list_jobs(engine, State.FAILED)) == all_keys[:2]

    retried = retry_dead(engine, [all_keys[0][:12], all_keys[4]], actor="t")
    assert retried.keys == [all_keys[0]]
    assert retried.missed == [all_keys[4]]  # pending, not failed: named, unchanged

    resolved = resolve_in_doubt(engine, None, target=State.SENT, actor="t", why="seen")
    assert sorted(resolved.keys) == all_keys[2:4]
    assert resolved.missed == []
    assert list_jobs(engine, State.IN_DOUBT) == []

    with pytest.raises(UsageError):
        resolve_in_doubt(engine, None, target=State.CLAIMED, actor="t")
    with pytest.raises(UsageError):  # not hex
        retry_dead(engine, ["zzzzzzzzzz"], actor="t")
    with pytest.raises(HeraldError):  # well formed, no such job
        retry_dead(engine, ["0" * 64], actor="t")


def test_selection_needs_keys_or_all() -> None:
    assert selection([], True) is None
    assert selection(["abc"], False) == ["abc"]
    with pytest.raises(UsageError):
        selection([], False)
    with pytest.raises(UsageError):
        selection(["abc"], True)


def test_recover_with_nothing_expired(engine: Engine, tmp_path: Path) -> None:
    launched(engine, tmp_path)
    report = recover(engine, actor="t", grace=0.0)
    assert (report.released, report.in_doubt, report.dead) == (0, 0, 0)


def test_open_engine_migrates_an_empty_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    engine = open_engine(url)
    try:
        assert status(engine)["campaigns"] == []
    finally:
        engine.dispose()


def test_run_worker_sends_everything(
    engine: Engine, db_url: str, tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    launched(engine, tmp_path)
    options = WorkerOptions(until_idle=True, idle_horizon=0.0, poll=0.05)
    worker = build_worker(
        engine, f"smtp://{smtp_server.host}:{smtp_server.port}", options, environ={}
    )
    report = run_worker(worker)
    assert (report.sent, report.failed, report.in_doubt) == (JOBS, 0, 0)
    assert status(engine)["totals"]["sent"] == JOBS


def test_check_audience_counts_rows(tmp_path: Path) -> None:
    csv = tmp_path / "people.csv"
    csv.write_text("email,name\na@example.com,A\nnot-an-address,B\nA@example.com,A2\n")
    report = check_audience(str(csv))
    assert (report.recipients, report.invalid, report.duplicates) == (2, 1, 1)
    assert report.format == "csv"
    assert not report.ok
    with pytest.raises(UsageError):
        check_audience(str(csv), format="xml")
    with pytest.raises(UsageError):
        check_audience(str(tmp_path / "missing.csv"))
