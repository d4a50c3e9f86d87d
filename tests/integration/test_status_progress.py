"""``herald status`` as the operator's screen, on SQLite and PostgreSQL: steps in campaign order
(a step without jobs included), the rate and ETA from the jobs' outcome times under a given now,
the top failure reasons, and the CLI's text at a given width. Rows the worker would write are
written directly, at fixed times."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.cells import cell_len
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from herald.app.launch import launch
from herald.app.status import status
from herald.app.status_progress import failure_reason, step_ids
from tests.support.campaign_files import write_campaign
from tests.support.factories import cli

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
RECIPIENTS = 10
LONG = "reactivation-europe-customers-who-bought-twice-in-the-last-year-2026"


def launched(engine: Engine, tmp_path: Path, name: str = "onboarding") -> str:
    path, _ = write_campaign(tmp_path / name, recipients=RECIPIENTS, name=name)
    launch(engine, path, clock=lambda: NOW - timedelta(hours=1), actor="test")
    return name


def job_ids(engine: Engine, name: str, step: str) -> list[int]:
    with engine.connect() as conn:
        stmt = sa.select(send_job.c.id).where(send_job.c.campaign == name, send_job.c.step == step)
        return list(conn.execute(stmt.order_by(send_job.c.id)).scalars())


def set_jobs(engine: Engine, ids: list[int], **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(sa.update(send_job).where(send_job.c.id.in_(ids)).values(**values))


def test_steps_come_in_campaign_order_with_steps_not_yet_made(
    engine: Engine, tmp_path: Path
) -> None:
    name = launched(engine, tmp_path)
    doc = status(engine, name, clock=lambda: NOW)["campaigns"][0]
    assert [s["step"] for s in doc["steps"]] == ["welcome", "tips", "later"]  # not by name

    # A drip's later step has no jobs until someone reaches it: it is listed, all zero.
    with engine.begin() as conn:
        conn.execute(sa.delete(send_job).where(send_job.c.step == "tips"))
        # A job of a step the stored spec no longer has (a version removed it) comes last.
        conn.execute(sa.update(send_job).where(send_job.c.step == "welcome").values(step="old"))
    doc = status(engine, name, clock=lambda: NOW)["campaigns"][0]
    assert [s["step"] for s in doc["steps"]] == ["welcome", "tips", "later", "old"]
    tips = doc["steps"][1]
    assert (tips["total"], tips["left"], tips["rate_per_minute"], tips["eta"]) == (0, 0, 0.0, None)
    assert set(tips["counts"].values()) == {0}


def test_rate_and_eta_come_from_recent_outcomes(engine: Engine, tmp_path: Path) -> None:
    name = launched(engine, tmp_path)
    welcome = job_ids(engine, name, "welcome")
    tips = job_ids(engine, name, "tips")
    # welcome: 6 finished over the last 3 minutes (4 sent, 2 failed), 4 left.
    set_jobs(engine, welcome[:4], state="sent", outcome_at=NOW - timedelta(minutes=3))
    set_jobs(engine, welcome[4:6], state="failed", outcome_at=NOW - timedelta(minutes=1))
    # tips: 5 sent, but 11 minutes ago (outside the window): no rate now.
    set_jobs(engine, tips[:5], state="sent", outcome_at=NOW - timedelta(minutes=11))
    # A retried job's outcome (back to pending) is not a finished send.
    set_jobs(engine, welcome[6:7], outcome_at=NOW - timedelta(minutes=1))

    snapshot = status(engine, clock=lambda: NOW)
    doc = snapshot["campaigns"][0]
    by_step = {s["step"]: s for s in doc["steps"]}
    assert by_step["welcome"]["rate_per_minute"] == 2.0  # 6 in the 3 minutes since the first
    assert by_step["welcome"]["left"] == 4
    assert by_step["welcome"]["eta"] == (NOW + timedelta(minutes=2)).isoformat()
    assert (by_step["tips"]["rate_per_minute"], by_step["tips"]["eta"]) == (0.0, None)
    assert by_step["later"]["rate_per_minute"] == 0.0
    assert doc["rate_per_minute"] == 2.0
    assert doc["left"] == 4 + 5 + RECIPIENTS
    assert doc["eta"] == (NOW + timedelta(minutes=(4 + 5 + RECIPIENTS) / 2)).isoformat()
    assert snapshot["rate_per_minute"] == 2.0
    assert snapshot["rate_window_minutes"] == 10

    # Work not due yet is not done sooner than it is due, whatever the rate.
    set_jobs(engine, welcome[9:], not_before=NOW + timedelta(hours=3))
    doc = status(engine, clock=lambda: NOW)["campaigns"][0]
    assert doc["steps"][0]["eta"] == (NOW + timedelta(hours=3)).isoformat()

    # Ten minutes on, nothing has finished within the window: no rate, no ETA.
    later = status(engine, clock=lambda: NOW + timedelta(minutes=10))["campaigns"][0]
    assert (later["rate_per_minute"], later["eta"]) == (0.0, None)

    # A first send seconds ago counts over a minute, not as hundreds a minute.
    set_jobs(engine, tips[5:6], state="sent", outcome_at=NOW - timedelta(seconds=2))
    doc = status(engine, clock=lambda: NOW)["campaigns"][0]
    assert doc["steps"][1]["rate_per_minute"] == 1.0


def test_top_failures_group_replies_and_mask_addresses(engine: Engine, tmp_path: Path) -> None:
    name = launched(engine, tmp_path)
    ids = job_ids(engine, name, "welcome") + job_ids(engine, name, "tips")
    at = NOW - timedelta(minutes=1)
    for i, job_id in enumerate(ids[:5]):  # one reply per recipient, naming them
        reply = f"5.1.1 <user{i:05d}@example.com>: Recipient address rejected"
        set_jobs(engine, [job_id], state="failed", outcome_code=550, outcome_text=reply)
    set_jobs(engine, ids[5:8], state="failed", outcome_code=554, outcome_text="5.7.1 Refused")
    set_jobs(engine, ids[8:10], state="failed", outcome_code=None, outcome_text="\x00odd\nreply")
    set_jobs(engine, ids[10:11], state="failed", outcome_code=421, outcome_text="busy")
    set_jobs(engine, ids[:11], outcome_at=at)

    doc = status(engine, name, clock=lambda: NOW)["campaigns"][0]
    assert doc["top_failures"] == [
        {"reason": "550 5.1.1 <address>: Recipient address rejected", "count": 5},
        {"reason": "554 5.7.1 Refused", "count": 3},
        {"reason": "\\x00odd reply", "count": 2},
    ]  # the fourth (421 busy, once) is left out
    other = launched(engine, tmp_path, "other")
    assert status(engine, other, clock=lambda: NOW)["campaigns"][0]["top_failures"] == []


def test_reasons_and_step_ids_from_odd_input() -> None:
    assert failure_reason(None, None) == "no reason recorded"
    assert failure_reason(550, "550 5.1.1 bob@x.example unknown") == "550 5.1.1 <address> unknown"
    assert failure_reason(None, "x" * 2000).endswith("…")
    assert step_ids("steps: [{id: b}, {id: a}, {id: b}, 7]") == ("b", "a")
    assert step_ids("steps: [not, closed") == ()
    assert step_ids("- just a list") == ()


def test_cli_text_fits_the_width_and_still_says_completed(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    name = launched(engine, tmp_path, LONG)
    set_jobs(engine, job_ids(engine, name, "tips"), state="failed", outcome_code=550)
    for width in (60, 80, 160):
        text = cli(db_url, "status", "--now", "2026-12-07T09:00Z", "--width", str(width))
        assert text.exit_code == 0, text.output
        lines = text.stdout.splitlines()
        assert all(cell_len(line) <= width for line in lines), text.stdout
        assert LONG in "".join(text.stdout.split())  # wrapped, never cut
        rows = [line.split()[0] for line in lines if line.startswith("  ") and line[2] != " "]
        assert [r for r in rows if r in ("welcome", "tips", "later")] == [
            "welcome",
            "tips",
            "later",
        ]
        assert "10× 550\n" in text.stdout  # the code alone when there is no text

    set_jobs(
        engine, job_ids(engine, name, "welcome") + job_ids(engine, name, "later"), state="sent"
    )
    text = cli(db_url, "status", "--now", "2026-12-07T09:00Z", "--width", "60")
    assert "completed" in text.stdout
    document = json.loads(cli(db_url, "status", "--json").stdout)
    assert document["campaigns"][0]["status"] == "completed"
    assert document["campaigns"][0]["left"] == 0


def test_piped_text_uses_columns_if_set_else_is_unbounded(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    launched(engine, tmp_path, LONG)
    whole = cli(db_url, "status", "--now", "2026-12-07T09:00Z")
    assert any(LONG in line for line in whole.stdout.splitlines())
    narrow = cli(db_url, "status", "--now", "2026-12-07T09:00Z", env={"COLUMNS": "40"})
    assert all(cell_len(line) <= 40 for line in narrow.stdout.splitlines()), narrow.stdout
    assert not any(LONG in line for line in narrow.stdout.splitlines())
    assert LONG in "".join(narrow.stdout.split())


def test_the_screen_of_a_fixed_database_is_the_committed_one(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    """From rows to screen on either database: the same data, the same 80 columns."""
    name = launched(engine, tmp_path, LONG)
    welcome, tips = job_ids(engine, name, "welcome"), job_ids(engine, name, "tips")
    set_jobs(engine, welcome[:6], state="sent", outcome_at=NOW - timedelta(minutes=4))
    set_jobs(engine, welcome[6:8], state="failed", outcome_code=550, outcome_text="5.1.1 no <a@b>")
    set_jobs(engine, welcome[6:8], outcome_at=NOW - timedelta(minutes=2))
    set_jobs(engine, tips[:1], state="in_doubt", in_doubt_reason="timeout in DATA")
    set_jobs(engine, tips[1:], not_before=NOW + timedelta(hours=2))
    text = cli(db_url, "status", "--now", NOW.isoformat(), "--width", "80")
    assert text.exit_code == 0, text.output
    path = Path(__file__).parent.parent / "snapshots" / "status_db_80.txt"
    if os.environ.get("HERALD_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text.stdout, encoding="utf-8")
    assert text.stdout == path.read_text(encoding="utf-8")
