"""A launch whose check runs in several processes (scheduler.check_pool), on SQLite and
PostgreSQL: the outbox holds exactly the jobs a one-process check composes, in audience order;
a refused launch writes nothing. And ``herald launch`` on a terminal, where a progress bar's
thread runs while the check forks, finishes."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import herald.app.launch
import scheduler.check
from campaigns.spec import load_campaign
from herald.app.launch import CheckFailed, launch
from scheduler.check import check_campaign
from scheduler.check_pool import MIN_BYTES, CheckPool, check_in_processes
from scheduler.spool import JobSpool
from tests.integration.test_scheduler_drips import DRIP
from tests.support.campaign_files import write_audience, write_campaign
from tests.support.factories import cli
from tests.support.paths import HERALD
from tests.support.schedules import write_scheduled

LAUNCH_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
STEPS = ("welcome", "tips", "later")
DEADLINE = 120.0  # seconds for a CLI launch on a busy machine


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Launches check in 3 processes with small blocks; records whether each pooled check
    was kept (True) or handed back to one process (False)."""
    kept: list[bool] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        report = check_in_processes(*args, **kwargs)
        kept.append(report is not None)
        return report

    monkeypatch.setattr(
        herald.app.launch, "pool_of", lambda _processes: CheckPool(3, block=16, min_bytes=0)
    )
    monkeypatch.setattr(scheduler.check, "check_in_processes", recording)
    return kept


def outbox(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(sa.text("select key, step, recipient, payload from send_job order by id"))
        )


def composed_alone(path: Path) -> list[tuple[str, str, str, bytes]]:
    """What a one-process check composes, in the order fan-out enqueues it (step by step,
    each in audience order)."""
    with JobSpool(STEPS) as spool:
        report = check_campaign(load_campaign(path), LAUNCH_AT, count_duplicates=False, spool=spool)
        assert report.ok
        return [
            (job.key, job.step, job.recipient, job.payload)
            for step in STEPS
            for _, job in spool.entries(step)
            if job is not None
        ]


def test_a_pooled_launch_enqueues_what_one_process_composes(
    engine: Engine, tmp_path: Path, pooled: list[bool]
) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=150)
    result = launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    assert pooled == [True]
    assert result.fanout.new_jobs == result.report.messages == 150 * len(STEPS)
    assert result.report.recipients == 150
    assert [tuple(row) for row in outbox(engine)] == composed_alone(path)
    assert [row.recipient for row in outbox(engine)][:150] == addresses


def test_a_pooled_new_version_takes_the_pooled_check_s_jobs(
    engine: Engine, tmp_path: Path, pooled: list[bool]
) -> None:
    """--force-new-version fans out from the launch's spool too (scheduler.new_version): the
    pending jobs take exactly the new version's messages, each in its audience position."""
    path, _ = write_campaign(tmp_path / "c", recipients=120)
    launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    path.write_text(path.read_text().replace("Welcome {{ name }}", "Hi again {{ name }}"))
    result = launch(engine, path, clock=lambda: LAUNCH_AT, actor="test", force_new_version=True)
    assert pooled == [True, True]
    assert result.version == 2
    assert result.superseded == 0
    assert [tuple(row) for row in outbox(engine)] == composed_alone(path)
    assert b"Hi again" in outbox(engine)[0].payload


def test_a_pooled_launch_with_a_bad_row_is_refused_whole(
    engine: Engine, tmp_path: Path, pooled: list[bool]
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=100)
    csv_file = tmp_path / "c" / "people.csv"
    lines = csv_file.read_text().splitlines(keepends=True)
    lines[70] = "not-an-address,Bad,Nowhere\r\n"  # row 70: the third process's block
    csv_file.write_text("".join(lines))
    with pytest.raises(CheckFailed) as refused:
        launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    assert pooled == [False]  # handed back: the report is the one-process check's
    problems = refused.value.report.problems
    assert [problem.where for problem in problems] == ["line 71"]
    assert "not-an-address" in problems[0].error
    assert outbox(engine) == []


def test_herald_launch_on_a_terminal_forks_beside_its_progress_bar(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    """The default pool (one process per core) on an audience file over MIN_BYTES, with rich's
    refresh thread drawing the bar on a pty while the check forks: the launch ends, exit 0,
    and every job is there."""
    assert len(os.sched_getaffinity(0)) >= 2, "the check runs in one process on one core"
    folder = tmp_path / "c"
    path, _ = write_campaign(folder, recipients=0)
    recipients = 8000
    write_audience(folder / "people.csv", recipients)
    assert (folder / "people.csv").stat().st_size >= MIN_BYTES
    controller, terminal = pty.openpty()
    started = time.monotonic()
    process = subprocess.Popen(
        [str(HERALD), "launch", str(path), "--database-url", db_url],
        stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True,
    )  # fmt: skip
    os.close(terminal)
    screen = b""
    try:
        while True:
            remaining = started + DEADLINE - time.monotonic()
            assert remaining > 0, f"herald launch did not finish: {screen[-400:]!r}"
            ready, _, _ = select.select([controller], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            screen += chunk
        assert process.wait(timeout=DEADLINE) == 0, screen[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    assert b"Traceback" not in screen
    with engine.connect() as conn:
        jobs = conn.execute(sa.text("select count(*) from send_job")).scalar_one()
    assert jobs == recipients * len(STEPS)


@pytest.mark.parametrize(
    ("args", "env", "asked"),
    [
        ((), {}, None),
        (("--check-processes", "1"), {}, 1),
        ((), {"HERALD_LAUNCH_CHECK_PROCESSES": "2"}, 2),
        (("--check-processes", "3"), {"HERALD_LAUNCH_CHECK_PROCESSES": "2"}, 3),
    ],
)
def test_herald_launch_takes_the_number_of_check_processes(
    tmp_path: Path,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    env: dict[str, str],
    asked: int | None,
) -> None:
    """``--check-processes`` / HERALD_LAUNCH_CHECK_PROCESSES reach the pool; none: per core."""
    seen: list[int | None] = []

    def recording(processes: int | None) -> CheckPool | None:
        seen.append(processes)
        return None

    monkeypatch.setattr(herald.app.launch, "pool_of", recording)
    path, _ = write_campaign(tmp_path / "c", recipients=3)
    result = cli(db_url, "launch", str(path), *args, env=env)
    assert result.exit_code == 0, result.output
    assert seen == [asked]


def test_herald_launch_refuses_zero_check_processes(tmp_path: Path, db_url: str) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=3)
    result = cli(db_url, "launch", str(path), "--check-processes", "0")
    assert result.exit_code == 2
    assert "--check-processes" in result.output
    assert "greater than or equal" in result.output


def test_a_drip_launch_checks_a_large_audience_in_processes(
    engine: Engine, tmp_path: Path, pooled: list[bool]
) -> None:
    """An enrollment campaign's check is shared out too; its pass then enrolls everyone and
    composes step 1 itself (the check's spool is only the processes' hand-over)."""
    people = [f"p{i:03}@example.com" for i in range(150)]
    path = write_scheduled(tmp_path / "d", DRIP, people, name="drip")
    result = launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    assert pooled == [True]
    assert result.report.recipients == 150
    assert result.report.messages == 150 * 3  # every step checked for everyone
    assert result.scheduled is not None
    assert (result.scheduled.enrolled, result.scheduled.new_jobs) == (150, 150)
    assert [(row.step, row.recipient) for row in outbox(engine)] == [
        ("welcome", person) for person in people
    ]


def test_a_drip_launch_with_a_bad_row_deep_in_its_audience_is_refused(
    engine: Engine, tmp_path: Path, pooled: list[bool]
) -> None:
    people = [f"p{i:03}@example.com" for i in range(150)]
    people[120] = "not-an-address"
    path = write_scheduled(tmp_path / "d", DRIP, people, name="drip")
    with pytest.raises(CheckFailed) as refused:
        launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    assert pooled == [False]  # handed back: the report is the one-process check's
    assert [problem.where for problem in refused.value.report.problems] == ["line 122"]
    assert outbox(engine) == []
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from enrollment")).scalar_one() == 0
