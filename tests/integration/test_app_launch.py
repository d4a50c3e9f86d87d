"""The application layer's launch use cases (herald.app.launch), on SQLite and PostgreSQL:
each message is composed once per launch, the check refuses before anything is written, and
the spool gives back exactly the jobs it was given."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import scheduler.check
import scheduler.fanout
import scheduler.new_version
from campaigns.audience import Recipient, iter_audience
from campaigns.control import CampaignConflict
from campaigns.spec import load_campaign
from herald.app.launch import CheckFailed, launch, validate
from scheduler.compose import compile_steps, compose_broadcast, compose_job
from scheduler.spool import JobSpool
from tests.support.campaign_files import write_campaign

LAUNCH_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RECIPIENTS = 10
STEPS = 3  # write_campaign's campaign


def clock() -> datetime:
    return LAUNCH_AT


@pytest.fixture
def compositions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every message composed by check, fan-out and new-version fan-out, by caller."""
    calls: list[str] = []

    def counting(module: Any) -> Callable[..., Any]:
        def compose(*args: Any, **kwargs: Any) -> Any:
            calls.append(module.__name__)
            return compose_broadcast(*args, **kwargs)

        return compose

    for module in (scheduler.check, scheduler.fanout, scheduler.new_version):
        monkeypatch.setattr(module, "compose_broadcast", counting(module))
    return calls


def job_rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("select key, step, payload from send_job order by key")))


def test_launch_composes_each_message_once(
    engine: Engine, tmp_path: Path, compositions: list[str]
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    result = launch(engine, path, clock=clock, actor="test")
    assert result.created
    assert result.version == 1
    assert result.fanout.new_jobs == RECIPIENTS * STEPS
    assert len(job_rows(engine)) == RECIPIENTS * STEPS
    # Composed by the check only; the fan-out enqueued the check's jobs.
    assert compositions == ["scheduler.check"] * (RECIPIENTS * STEPS)


def test_relaunch_is_idempotent_and_composes_once(
    engine: Engine, tmp_path: Path, compositions: list[str]
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    launch(engine, path, clock=clock, actor="test")
    before = job_rows(engine)
    compositions.clear()
    again = launch(engine, path, clock=lambda: datetime(2026, 3, 2, tzinfo=UTC), actor="test")
    assert not again.created
    assert (again.fanout.new_jobs, again.fanout.existing_jobs) == (0, RECIPIENTS * STEPS)
    assert job_rows(engine) == before
    assert len(compositions) == RECIPIENTS * STEPS


def test_spooled_jobs_are_the_jobs_composed_directly(engine: Engine, tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    launch(engine, path, clock=clock, actor="test")
    loaded = load_campaign(path)
    expected = sorted(
        (job.key, job.step, job.payload)
        for step in compile_steps(loaded)
        for item in iter_audience(loaded)
        if isinstance(item, Recipient)
        for job in [compose_job(loaded, step, item, LAUNCH_AT)]
    )
    assert [(r.key, r.step, bytes(r.payload)) for r in job_rows(engine)] == expected


def test_a_failed_check_launches_nothing(engine: Engine, tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    path.write_text(path.read_text().replace("{{ city }}.", "{{ cty }}.", 1))
    with pytest.raises(CheckFailed) as failed:
        launch(engine, path, clock=clock, actor="test")
    assert failed.value.exit_code == 2
    assert failed.value.report.problem_count == RECIPIENTS
    assert job_rows(engine) == []
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from campaign")).scalar_one() == 0


def test_a_changed_campaign_needs_a_new_version(
    engine: Engine, tmp_path: Path, compositions: list[str]
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    launch(engine, path, clock=clock, actor="test")
    path.write_text(path.read_text().replace("Welcome {{ name }}", "Hi again {{ name }}"))
    with pytest.raises(CampaignConflict):
        launch(engine, path, clock=clock, actor="test")
    compositions.clear()
    result = launch(engine, path, clock=clock, actor="test", force_new_version=True)
    assert result.version == 2
    assert not result.created
    assert result.superseded == 0  # same steps, same recipients
    # The new version's fan-out took the check's jobs too.
    assert compositions == ["scheduler.check"] * (RECIPIENTS * STEPS)
    with engine.connect() as conn:
        hashes = conn.execute(
            sa.text("select count(*) from send_job where step = 'welcome' and state = 'pending'")
        ).scalar_one()
    assert hashes == RECIPIENTS


def test_validate_reports_problems_and_writes_nothing(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=3)
    assert validate(path, clock=clock).report.ok
    path.write_text(path.read_text().replace("{{ city }}.", "{{ cty }}.", 1))
    report = validate(path, clock=clock).report
    assert not report.ok
    assert report.problem_count == 3
    assert not (tmp_path / "c" / "herald.db").exists()


def test_the_spool_gives_back_jobs_and_unusable_rows_in_order(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=2)
    loaded = load_campaign(path)
    steps = compile_steps(loaded)
    recipients = [r for r in iter_audience(loaded) if isinstance(r, Recipient)]
    with JobSpool(step.spec.id for step in steps) as spool:
        jobs = [compose_job(loaded, steps[0], r, LAUNCH_AT) for r in recipients]
        spool.add_job(1, jobs[0])
        spool.add_problem(2)
        spool.add_job(3, jobs[1])
        assert list(spool.entries(steps[0].spec.id)) == [(1, jobs[0]), (2, None), (3, jobs[1])]
        assert list(spool.entries(steps[1].spec.id)) == [(2, None)]
        assert (spool.count(steps[0].spec.id), spool.skipped, spool.positions) == (2, 1, 3)
        # Reading does not stop appending.
        spool.add_job(4, jobs[0])
        assert [p for p, _ in spool.entries(steps[0].spec.id)] == [1, 2, 3, 4]


def test_fan_out_refuses_an_incomplete_spool(engine: Engine, tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=2)
    loaded = load_campaign(path)
    with (
        JobSpool(step.id for step in loaded.spec.steps) as spool,
        pytest.raises(ValueError, match="incomplete spool"),
    ):
        scheduler.fanout.materialise(engine, loaded, LAUNCH_AT, composed=spool)


def test_a_version_stored_mid_fan_out_stops_it_after_the_committed_batches(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process stores a new version while the launch fans out: every batch checks the
    stored definition in its own transaction, so the batches committed before stay (the cursor
    says where), and the one behind them - staged already on PostgreSQL - leaves nothing."""
    monkeypatch.setattr(scheduler.fanout, "BATCH_SIZE", 4)
    monkeypatch.setattr(scheduler.fanout, "POSTGRES_BATCH_SIZE", 4)
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    told: list[int] = []

    @contextmanager
    def progress(label: str, _total: int | None) -> Iterator[Callable[[int], None] | None]:
        def tick(jobs: int) -> None:
            told.append(jobs)
            if len(told) == 1:  # after the first committed batch
                with engine.begin() as conn:
                    conn.execute(sa.text("UPDATE campaign SET spec_hash = 'stored meanwhile'"))

        yield tick if label == "enqueueing" else None

    with pytest.raises(CampaignConflict, match="changed while launching"):
        launch(engine, path, clock=clock, actor="test", progress=progress)
    assert told == [4]
    assert len(job_rows(engine)) == 4
    with engine.connect() as conn:
        cursor = conn.execute(sa.text("SELECT cursor, jobs_created FROM occurrence")).one()
    assert tuple(cursor) == (4, 4)
