"""``launch --force-new-version`` of scheduled and enrollment campaigns: the unsent work of
every occurrence and drip takes the new version at once, removed steps never go out, and later
fires use the new file (docs/design.md §7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.control import CampaignConflict
from scheduler.models import enrollment_table
from tests.support.schedules import jobs, launch_at, note_of, pass_at, write_scheduled

REGISTERED = datetime(2026, 1, 4, 12, 0, tzinfo=UTC)
MONDAY = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

WEEKLY = """\
audience: people.csv
schedule: {cron: "0 9 * * mon"}
steps:
  - id: digest
    subject: "Digest"
    text: "Hello {{ name }}"
  - id: reminder
    after: 2d
    subject: "Reminder"
    text: "Still there?"
"""

DRIP = """\
enrollment: audience
audience: people.csv
steps:
  - id: welcome
    subject: "Welcome"
    text: "Hello {{ name }}"
  - id: tips
    after: 2d
    subject: "Tips"
    text: "Tips"
"""


def payloads(engine: Engine, step: str) -> dict[str, tuple[str, bytes]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("select mailbox, state, payload from send_job where step = :s"), {"s": step}
        )
        return {row.mailbox: (row.state, bytes(row.payload)) for row in rows}


def test_a_new_version_of_a_schedule_rewrites_unsent_work(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", WEEKLY, ["ann@example.com", "bob@example.com"])
    launch_at(engine, path, REGISTERED)
    assert pass_at(engine, MONDAY).new_jobs == 4
    changed = WEEKLY.replace("Hello {{ name }}", "Hi there {{ name }}")
    changed = changed[: changed.index("  - id: reminder")]  # the reminder step is removed
    path.write_text(path.read_text().replace(WEEKLY, changed))
    # Unlaunched, the changed file fires nothing; the launch names the conflict.
    assert pass_at(engine, MONDAY + timedelta(days=7)).fired == 0
    assert note_of(engine, "digest") is not None
    with pytest.raises(CampaignConflict):
        launch_at(engine, path, MONDAY + timedelta(days=7, minutes=1))
    result = launch_at(engine, path, MONDAY + timedelta(days=7, minutes=2), force_new_version=True)
    assert result.version == 2
    assert result.superseded == 2  # both reminders
    assert note_of(engine, "digest") is None
    digests = payloads(engine, "digest")
    assert all(b"Hi there" in payload for _, payload in digests.values())
    assert {state for state, _ in payloads(engine, "reminder").values()} == {"cancelled"}
    # The pass run at launch fired the second Monday with the new version.
    mondays = sorted({job.occurrence_at for job in jobs(engine)})
    assert mondays == [MONDAY, MONDAY + timedelta(days=7)]
    assert {job.step for job in jobs(engine) if job.occurrence_at == mondays[1]} == {"digest"}


def test_a_new_version_of_a_drip_rewrites_each_drips_unsent_steps(
    engine: Engine, tmp_path: Path
) -> None:
    path = write_scheduled(tmp_path / "c", DRIP, ["ann@example.com"], name="drip")
    launch_at(engine, path, REGISTERED)
    path.write_text(
        path.read_text()
        .replace("Hello {{ name }}", "Welcome aboard {{ name }}")
        .replace(
            "  - id: welcome",
            '  - id: intro\n    subject: "Intro"\n    text: "First"\n  - id: welcome',
        )
    )
    result = launch_at(engine, path, REGISTERED + timedelta(hours=1), force_new_version=True)
    assert result.version == 2
    (state, payload) = payloads(engine, "welcome")["ann@example.com"]
    assert state == "pending"
    assert b"Welcome aboard" in payload
    # Ann's drip points at the first step she has not had: the new intro, planned now.
    assert set(payloads(engine, "intro")) == {"ann@example.com"}
    with engine.connect() as conn:
        next_step = conn.execute(sa.select(enrollment_table.c.next_step)).scalar_one()
    assert next_step == 1
