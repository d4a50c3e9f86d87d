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
from scheduler.models import enrollment_table, trigger_fire_table
from tests.support.campaign_files import write_campaign
from tests.support.factories import cli, write_yaml

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
    assert (doc["next_fire"], doc["next_fire_local"], doc["timezone"]) == (None, None, None)
    assert doc["trigger_ended"] is None
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


# ---------------------------------------------------------------------- timed triggers

WEEKLY = """\
name: weekly
from: "Acme <news@acme.example>"
timezone: Europe/Berlin
audience: [ann@example.com, bob@example.com]
schedule: {{cron: "0 9 * * sun"{end}}}
steps:
  - {{id: digest, subject: "Digest", text: "Hello"}}
"""
MONDAY = """\
name: monday
from: "Acme <news@acme.example>"
timezone: Europe/Berlin
audience: [ann@example.com, bob@example.com]
start_at: "2026-12-07 09:00"
steps:
  - {id: hello, subject: "Hi", text: "Hello"}
"""
WEDNESDAY = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def record_fire(engine: Engine, name: str, at: datetime, state: str = "done") -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(trigger_fire_table).values(campaign=name, nominal_at=at, state=state)
        )


def test_a_schedule_shows_its_next_fire_after_the_cursor(engine: Engine, tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY.format(end=""))
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert (doc["trigger"], doc["timezone"], doc["status"]) == (
        "schedule",
        "Europe/Berlin",
        "active",
    )
    assert doc["next_fire"] == "2026-12-06T08:00:00+00:00"  # Sunday 09:00 CET
    assert doc["next_fire_local"] == "2026-12-06T09:00:00+01:00"
    assert doc["trigger_ended"] is False
    assert doc["last_occurrence"] is None

    record_fire(engine, "weekly", datetime(2026, 12, 6, 8, tzinfo=UTC))
    record_fire(engine, "weekly", datetime(2026, 12, 13, 8, tzinfo=UTC), state="skipped")
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert doc["next_fire"] == "2026-12-20T08:00:00+00:00"  # after the cursor, skips included
    assert doc["last_occurrence"] == "2026-12-06T08:00:00+00:00"  # the newest that fired
    assert doc["fires"] == {"due": 0, "done": 1, "skipped": 1}


def test_a_schedule_that_has_ended_completes(engine: Engine, tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY.format(end=", end: 2026-12-10"))
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    record_fire(engine, "weekly", datetime(2026, 12, 6, 8, tzinfo=UTC), state="due")
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert (doc["next_fire"], doc["trigger_ended"]) == (None, True)
    assert doc["status"] == "active"  # the last fire is still being fanned out
    with engine.begin() as conn:
        conn.execute(sa.update(trigger_fire_table).values(state="done"))
    assert status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]["status"] == "completed"


def test_start_at_fires_once(engine: Engine, tmp_path: Path) -> None:
    path = write_yaml(tmp_path, MONDAY)
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert (doc["trigger"], doc["next_fire"]) == ("start_at", "2026-12-07T08:00:00+00:00")
    assert doc["status"] == "active"

    record_fire(engine, "monday", datetime(2026, 12, 7, 8, tzinfo=UTC))
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert (doc["next_fire"], doc["last_occurrence"]) == (None, "2026-12-07T08:00:00+00:00")
    assert doc["status"] == "completed"  # no job, no future fire


def test_an_unreadable_stored_spec_leaves_the_next_fire_unknown(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    path = write_yaml(tmp_path, WEEKLY.format(end=""))
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    set_campaign(engine, "weekly", spec="schedule: [not, a, campaign")
    doc = status(engine, clock=lambda: WEDNESDAY)["campaigns"][0]
    assert (doc["next_fire"], doc["trigger_ended"], doc["status"]) == (None, False, "active")
    text = cli(db_url, "status", "--now", "2026-12-02T12:00Z")
    assert text.exit_code == 0, text.output
    assert "unknown" in text.stdout


def test_cli_shows_the_next_fire_in_local_time(db_url: str, engine: Engine, tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY.format(end=""))
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    text = cli(db_url, "status", "--now", "2026-12-02T12:00Z")
    assert text.exit_code == 0, text.output
    assert "Sun 2026-12-06 09:00 CET (08:00Z)" in text.stdout
    assert "overdue" not in text.stdout
    # Ten minutes after the fire, with nothing recorded: no scheduler has fired it.
    late = cli(db_url, "status", "--now", "2026-12-06T08:10Z")
    assert "Sun 2026-12-06 09:00 CET (08:00Z) overdue" in late.stdout


def test_cli_shows_an_ended_trigger(db_url: str, engine: Engine, tmp_path: Path) -> None:
    path = write_yaml(tmp_path, MONDAY)
    launch(engine, path, clock=lambda: WEDNESDAY, actor="test")
    record_fire(engine, "monday", datetime(2026, 12, 7, 8, tzinfo=UTC))
    text = cli(db_url, "status", "--now", "2026-12-08T12:00Z")
    assert "none (ended)" in text.stdout
    assert "completed" in text.stdout
