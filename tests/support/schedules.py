"""Scheduled and enrollment campaigns for tests: files, a launch at a given moment, a pass at
another, and what the outbox then holds."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from herald.app.launch import LaunchResult, launch
from scheduler.passes import PassReport, run_pass

HEADER = """\
name: {name}
from: "Herald Tests <news@herald.test>"
"""


def write_people(path: Path, people: Sequence[str | tuple[str, str]]) -> None:
    """A CSV of recipients: an address, or (address, time zone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "timezone"])
        for person in people:
            address, zone = (person, "") if isinstance(person, str) else person
            writer.writerow([address, address.split("@")[0].title(), zone])


def write_scheduled(
    folder: Path,
    body: str,
    people: Sequence[str | tuple[str, str]] = (),
    *,
    name: str = "digest",
) -> Path:
    """``campaign.yaml`` = the header + ``body`` (trigger, audience, steps), and people.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    write_people(folder / "people.csv", people)
    path = folder / "campaign.yaml"
    path.write_text(HEADER.format(name=name) + body, encoding="utf-8")
    return path


def launch_at(
    engine: Engine, path: Path, now: datetime, *, force_new_version: bool = False
) -> LaunchResult:
    return launch(
        engine, path, clock=lambda: now, actor="test", force_new_version=force_new_version
    )


def pass_at(engine: Engine, now: datetime, *campaigns: str) -> PassReport:
    return run_pass(engine, now=now, actor="test", campaigns=list(campaigns) or None)


@dataclass(frozen=True)
class JobRow:
    key: str
    step: str
    occurrence_at: datetime
    mailbox: str
    recipient: str
    not_before: datetime
    state: str
    send_window: str | None
    outcome_at: datetime | None


def jobs(engine: Engine, campaign: str | None = None) -> list[JobRow]:
    """Every job, by occurrence, step and mailbox."""
    from dispatch.models import send_job

    j = send_job.c
    stmt = sa.select(
        j.key,
        j.step,
        j.occurrence_at,
        j.mailbox,
        j.recipient,
        j.not_before,
        j.state,
        j.send_window,
        j.outcome_at,
    ).order_by(j.occurrence_at, j.step, j.mailbox)
    if campaign is not None:
        stmt = stmt.where(j.campaign == campaign)
    with engine.connect() as conn:
        return [JobRow(*row) for row in conn.execute(stmt)]


def fires(engine: Engine, campaign: str) -> list[tuple[datetime, str, str | None]]:
    from scheduler.models import trigger_fire_table

    f = trigger_fire_table.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(f.nominal_at, f.state, f.reason)
            .where(f.campaign == campaign)
            .order_by(f.nominal_at)
        )
        return [(row.nominal_at, row.state, row.reason) for row in rows]


def note_of(engine: Engine, campaign: str) -> str | None:
    from campaigns.store import CampaignStore

    with engine.connect() as conn:
        row = CampaignStore(engine.dialect.name).get(conn, campaign)
    assert row is not None
    return row.scheduler_note
