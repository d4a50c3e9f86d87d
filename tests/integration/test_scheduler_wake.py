"""``next_wake``: the moment a scheduler must run its next pass, from what the database holds
(the next fire, a fan-out left unfinished, a drip step's pending job)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from scheduler.fire_store import DUE, Fire, FireStore
from scheduler.passes import next_wake
from tests.support.schedules import launch_at, pass_at, write_scheduled

REGISTERED = datetime(2026, 1, 4, 12, 0, tzinfo=UTC)  # Sunday
MONDAY = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

WEEKLY = """\
audience: people.csv
schedule: {cron: "0 9 * * mon"}
steps: [{id: digest, subject: Digest, text: Hello}]
"""

DRIP = """\
enrollment: audience
audience: people.csv
steps:
  - {id: one, subject: One, text: Hi}
  - {id: two, after: 3d, subject: Two, text: Again}
"""


def test_nothing_scheduled_means_no_wake(engine: Engine) -> None:
    assert next_wake(engine, REGISTERED) is None


def test_the_next_fire_of_a_schedule(engine: Engine, tmp_path: Path) -> None:
    launch_at(engine, write_scheduled(tmp_path / "c", WEEKLY, ["ann@example.com"]), REGISTERED)
    assert next_wake(engine, REGISTERED + timedelta(minutes=1)) == MONDAY
    # Overdue (no pass ran at the fire time): at once.
    assert next_wake(engine, MONDAY + timedelta(hours=1)) == MONDAY + timedelta(hours=1)
    pass_at(engine, MONDAY + timedelta(hours=1))
    assert next_wake(engine, MONDAY + timedelta(hours=2)) == MONDAY + timedelta(days=7)


def test_a_fan_out_left_unfinished_wakes_at_once(engine: Engine, tmp_path: Path) -> None:
    launch_at(engine, write_scheduled(tmp_path / "c", WEEKLY, ["ann@example.com"]), REGISTERED)
    with engine.begin() as conn:
        FireStore(engine.dialect.name).record(conn, "digest", [Fire(MONDAY, DUE)])
    now = MONDAY + timedelta(minutes=1)
    assert next_wake(engine, now) == now


def test_a_drip_wakes_when_its_pending_step_falls_due(engine: Engine, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", DRIP, ["ann@example.com"], name="drip")
    launch_at(engine, path, REGISTERED)
    with engine.begin() as conn:  # step one is due tomorrow (say, a send window)
        conn.execute(sa.update(send_job).values(not_before=REGISTERED + timedelta(days=1)))
    assert next_wake(engine, REGISTERED) == REGISTERED + timedelta(days=1)
