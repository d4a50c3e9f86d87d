"""``herald status`` beyond counts: trigger, last occurrence, enrollments, the due-time histogram
of pending jobs under a given ``--now``, the scheduler's note, and ``completed`` when nothing is
left to do. On SQLite and PostgreSQL; rows the scheduler would write are written directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.models import campaign_table
from dispatch.models import send_job
from herald.app.launch import launch
from herald.app.status import status
from herald.app.status_reads import DUE_BUCKETS, ENROLLMENT_STATES, FIRE_STATES
from scheduler.models import enrollment_table
from tests.support.campaign_files import write_campaign
from tests.support.factories import cli

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
RECIPIENTS = 4


def launched(engine: Engine, tmp_path: Path, *, at: datetime = NOW) -> str:
    path, _ = write_campaign(tmp_path / "c", recipients=RECIPIENTS)
    launch(engine, path, clock=lambda: at, actor="test")
    return "onboarding"


def set_jobs(engine: Engine, **values: Any) -> list[int]:
    """Set ``values`` on every job; returns the job ids in order."""
    with engine.begin() as conn:
        conn.execute(sa.update(send_job).values(**values))
        return list(conn.execute(sa.select(send_job.c.id).order_by(send_job.c.id)).scalars())


def set_job(engine: Engine, job_id: int, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(sa.update(send_job).where(send_job.c.id == job_id).values(**values))


def set_campaign(engine: Engine, name: str, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.update(campaign_table).where(campaign_table.c.name == name).values(**values)
        )


def enroll(engine: Engine, name: str, mailbox: str, state: str, at: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(enrollment_table).values(
                campaign=name,
                mailbox=mailbox,
                recipient=mailbox,
                variables="{}",
                source="cli",
                enrolled_at=at,
                state=state,
                next_step=0,
            )
        )


def test_every_new_mapping_is_complete_and_launch_campaigns_have_no_next_fire(
    engine: Engine, tmp_path: Path
) -> None:
    name = launched(engine, tmp_path)
    snapshot = status(engine, clock=lambda: NOW)
    assert snapshot["now"] == NOW.isoformat()
    (doc,) = snapshot["campaigns"]
    assert doc["name"] == name
    assert doc["trigger"] == "launch"
    assert (doc["next_fire"], doc["next_fire_local"]) == (None, None)
    assert doc["last_occurrence"] == NOW.isoformat()
    assert list(doc["due"]) == list(DUE_BUCKETS)
    assert list(doc["fires"]) == list(FIRE_STATES)
    assert list(doc["enrollments"]) == list(ENROLLMENT_STATES)
    assert doc["scheduler_note"] is None
    assert doc["due"]["now"] == RECIPIENTS * 3  # launched at NOW: all due at once
    assert snapshot["due"] == doc["due"]


def test_due_histogram_buckets_pending_jobs_from_the_given_now(
    engine: Engine, tmp_path: Path
) -> None:
    launched(engine, tmp_path)
    ids = set_jobs(engine, not_before=NOW + timedelta(days=30))
    offsets = [
        timedelta(hours=-5),  # overdue
        timedelta(0),  # due exactly now
        timedelta(minutes=59),
        timedelta(hours=1),  # the boundary belongs to the nearer bucket
        timedelta(hours=23),
        timedelta(days=6),
        timedelta(days=7, seconds=1),
    ]
    for job_id, offset in zip(ids, offsets, strict=False):
        set_job(engine, job_id, not_before=NOW + offset)
    set_job(engine, ids[-1], state="sent")  # not pending: not in the histogram

    due = status(engine, clock=lambda: NOW)["campaigns"][0]["due"]
    assert len(ids) == 12  # 5 jobs left at +30 days, one of them sent; and the one at 7d+1s
    assert due == {"now": 2, "within_1h": 2, "within_24h": 1, "within_7d": 1, "later": 4 + 1}
    # The same jobs a day later: what was within 24h is now overdue.
    later = status(engine, clock=lambda: NOW + timedelta(days=1))["campaigns"][0]["due"]
    assert later["now"] == 5
    assert sum(later.values()) == sum(due.values())


def test_completed_when_every_job_is_settled(engine: Engine, tmp_path: Path) -> None:
    name = launched(engine, tmp_path)
    ids = set_jobs(engine, state="sent")
    assert status(engine, name)["campaigns"][0]["status"] == "completed"

    set_job(engine, ids[0], state="in_doubt")  # an operator still has to decide
    assert status(engine, name)["campaigns"][0]["status"] == "active"
    set_job(engine, ids[0], state="failed")
    set_job(engine, ids[1], state="cancelled")
    assert status(engine, name)["campaigns"][0]["status"] == "completed"

    set_campaign(engine, name, status="paused")  # an operator's status is shown as it is
    assert status(engine, name)["campaigns"][0]["status"] == "paused"


def test_a_drip_shows_its_enrollments_and_completes_when_they_have_ended(
    engine: Engine, tmp_path: Path
) -> None:
    name = launched(engine, tmp_path)
    set_campaign(engine, name, trigger="enrollment")
    set_jobs(engine, state="sent")
    doc = status(engine, name)["campaigns"][0]
    assert doc["trigger"] == "enrollment"
    assert doc["status"] == "active"  # nobody enrolled yet: the drip has not started
    assert doc["last_occurrence"] is None

    enroll(engine, name, "a@example.com", "active", NOW)
    enroll(engine, name, "b@example.com", "done", NOW + timedelta(hours=1))
    enroll(engine, name, "c@example.com", "left", NOW - timedelta(days=1))
    doc = status(engine, name)["campaigns"][0]
    assert doc["enrollments"] == {"active": 1, "left": 1, "ended": 0, "done": 1}
    assert doc["last_occurrence"] == (NOW + timedelta(hours=1)).isoformat()
    assert doc["status"] == "active"  # a has steps left

    with engine.begin() as conn:
        conn.execute(sa.update(enrollment_table).values(state="ended"))
    assert status(engine, name)["campaigns"][0]["status"] == "completed"


def test_cli_shows_schedule_table_and_scheduler_note(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    name = launched(engine, tmp_path)
    set_jobs(engine, not_before=NOW + timedelta(hours=2))
    set_campaign(engine, name, scheduler_note="campaign file changed since launch; nothing fired")

    result = cli(db_url, "status", "--now", "2026-12-07T09:00:00Z", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["campaigns"][0]["due"]["within_24h"] == RECIPIENTS * 3
    assert document["campaigns"][0]["scheduler_note"].startswith("campaign file changed")

    # 11:30+01:00 is 10:30Z: everything is due within the hour then.
    later = cli(db_url, "status", "--json", env={"HERALD_NOW": "2026-12-07T11:30+01:00"})
    assert json.loads(later.stdout)["due"]["within_1h"] == RECIPIENTS * 3

    text = cli(db_url, "status", "--now", "2026-12-07T09:00:00Z")
    assert text.exit_code == 0, text.output
    assert "<24h" in text.output
    assert "last occurrence" in text.output
    assert f"⚠ {name}: campaign file changed since launch; nothing fired" in text.output
