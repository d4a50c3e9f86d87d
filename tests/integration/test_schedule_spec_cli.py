"""Bad timing keys at the CLI: file, line, field and a hint; exit code 2; nothing written.

Every case runs through ``herald validate FILE`` (no database) and ``herald launch FILE`` (on
SQLite and PostgreSQL, via the ``db_url`` fixture), in-process with typer's CliRunner, as in
test_cli_errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from typer.testing import Result

from tests.support.factories import invoke, write_yaml

HEAD = """\
name: timing
from: "Herald Tests <news@herald.test>"
audience: [ann@example.com, bob@example.com]
"""  # lines 1-3

STEP = """\
steps:
  - id: welcome
    subject: Welcome
    text: "Hello {{ email }}"
"""

TABLES = ("campaign", "occurrence", "send_job", "send_event", "trigger_fire", "enrollment")


@dataclass(frozen=True)
class Case:
    id: str
    yaml: str
    expect: tuple[str, ...]
    reject: tuple[str, ...] = ()


def _zone(value: str) -> str:
    return HEAD + f"timezone: {json.dumps(value)}\n" + STEP  # timezone on line 4


CASES = [
    Case(
        "invalid-cron",
        HEAD + "schedule:\n  cron: '0 9 * * mon 2'\n" + STEP,
        ("campaign.yaml:5", "schedule.cron", "has 6 fields, not 5", "no seconds or years"),
    ),
    Case(
        "cron-field-out-of-range",
        HEAD + "schedule: {cron: '0 25 * * *'}\n" + STEP,
        ("campaign.yaml:4", "schedule.cron", "invalid hour field '25'", "allowed: 0-23"),
    ),
    Case(
        "cron-never-fires",
        HEAD + "schedule: {cron: '0 9 31 2 *'}\n" + STEP,
        ("campaign.yaml:4", "schedule.cron", "never fires"),
    ),
    Case(
        "unknown-zone",
        _zone("Europe/Berln"),
        ("campaign.yaml:4", "timezone", "unknown time zone", "did you mean 'Europe/Berlin'?"),
    ),
    Case(
        "zone-path-traversal",
        _zone("../../../../etc/passwd"),
        ("campaign.yaml:4", "timezone", "unknown time zone '../../../../etc/passwd'", "IANA"),
        reject=("root:",),
    ),
    Case(
        "zone-nul",
        _zone("Europe/Berlin\x00"),
        ("campaign.yaml:4", "timezone", "unknown time zone 'Europe/Berlin\\x00'"),
    ),
    Case(
        "zone-huge",
        _zone("Europe/" + "B" * 200_000),
        ("campaign.yaml:4", "timezone", "too long for a name"),
        reject=("B" * 100,),
    ),
    Case(
        "schedule-zone-unknown",
        HEAD + "schedule:\n  every: 1d\n  timezone: Mars/Olympus\n" + STEP,
        ("campaign.yaml:6", "schedule.timezone", "unknown time zone 'Mars/Olympus'"),
    ),
    Case(
        "every-zero",
        HEAD + "schedule:\n  every: 0\n" + STEP,
        ("campaign.yaml:5", "schedule.every", "at least 1 minute", "e.g. every: 15m"),
    ),
    Case(
        "every-negative",
        HEAD + "schedule:\n  every: -6h\n" + STEP,
        ("campaign.yaml:5", "schedule.every", "negative"),
    ),
    Case(
        "every-garbage",
        HEAD + "schedule:\n  every: fortnightly\n" + STEP,
        ("campaign.yaml:5", "schedule.every", "invalid duration 'fortnightly'"),
    ),
    Case(
        "end-before-start",
        HEAD + "schedule:\n  every: 1d\n  start: 2026-06-01\n  end: 2026-05-01\n" + STEP,
        ("campaign.yaml:7", "schedule.end", "is not after start"),
    ),
    Case(
        "unknown-schedule-key",
        HEAD + "schedule:\n  every: 1d\n  catchup: all\n" + STEP,
        ("campaign.yaml:6", "schedule", "unknown key 'catchup'", "did you mean 'catch_up'?"),
    ),
    Case(
        "two-triggers",
        HEAD + "start_at: 2026-05-04 09:00:00\nschedule: {every: 1d}\n" + STEP,
        ("campaign.yaml:5", "schedule", "start_at and schedule cannot be used together"),
    ),
    Case(
        "at-without-zone",
        HEAD + STEP + "    at: '09:00'\n",
        ("campaign.yaml:8", "steps[0].at", "at without a time zone", "timezone: Europe/Berlin"),
    ),
    Case(
        "bad-at",
        HEAD + "timezone: UTC\n" + STEP + "    at: '25:00'\n",
        ("campaign.yaml:9", "steps[0].at", "no such time of day in '25:00'"),
    ),
    Case(
        "unquoted-at",
        HEAD + "timezone: UTC\n" + STEP + "    at: 10:00\n",
        ("campaign.yaml:9", "steps[0].at", 'write "10:00" in quotes'),
    ),
    Case(
        "on-without-at",
        HEAD + STEP + "    on: [mon]\n",
        ("campaign.yaml:8", "steps[0].on", "on needs at"),
    ),
    Case(
        "empty-window-days",
        HEAD + "send_window: {days: []}\n" + STEP,
        ("campaign.yaml:4", "send_window.days", "no days given"),
    ),
    Case(
        "empty-window-hours",
        HEAD + "send_window:\n  hours: '09:00-09:00'\n" + STEP,
        ("campaign.yaml:5", "send_window.hours", "open and close at the same time", "00:00-24:00"),
    ),
    Case(
        "unknown-day",
        HEAD + "send_window:\n  days: [mon, fry]\n" + STEP,
        ("campaign.yaml:5", "send_window.days", "unknown day 'fry'", "did you mean 'fri'?"),
    ),
    Case(
        "unknown-window-key",
        HEAD + "send_window:\n  days: mon-fri\n  hour: '09:00-17:00'\n" + STEP,
        ("campaign.yaml:6", "send_window", "unknown key 'hour'", "did you mean 'hours'?"),
    ),
    Case(
        "audience-needed-without-manual-enrollment",
        HEAD.replace("audience: [ann@example.com, bob@example.com]\n", "")
        + "enrollment: audience\n"
        + STEP,
        ("missing required key 'audience'",),
    ),
    Case(
        "all-at-once",
        HEAD
        + "timezone: Europe/Berln\n"  # 4
        + "schedule:\n  cron: '0 9 * *'\n"  # 6
        + "send_window: {days: [mon, fry], hours: '25:00-17:00'}\n"  # 7
        + STEP
        + "    at: '9am'\n",  # 12
        (
            "campaign.yaml:4: timezone",
            "campaign.yaml:6: schedule.cron",
            "campaign.yaml:7: send_window.days",
            "campaign.yaml:7: send_window.hours",
            "campaign.yaml:12: steps[0].at",
        ),
    ),
]


def _check_output(result: Result, case: Case) -> None:
    output = result.output
    assert result.exit_code == 2, f"exit {result.exit_code}, output:\n{output}"
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert len(output) < 4000, output[:4000]  # hostile values are quoted, never echoed whole
    for wanted in case.expect:
        assert wanted in output, f"{wanted!r} missing from:\n{output}"
    for unwanted in case.reject:
        assert unwanted not in output, f"{unwanted!r} should not be in:\n{output}"


def _row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table: conn.execute(sa.text(f"select count(*) from {table}")).scalar_one()
            for table in TABLES
        }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_rejects_bad_timing(tmp_path: Path, case: Case) -> None:
    path = write_yaml(tmp_path / "c", case.yaml)
    _check_output(invoke("validate", str(path)), case)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_launch_rejects_bad_timing_and_writes_nothing(
    tmp_path: Path, case: Case, db_url: str, engine: Engine
) -> None:
    path = write_yaml(tmp_path / "c", case.yaml)
    _check_output(invoke("launch", str(path), "--database-url", db_url), case)
    assert _row_counts(engine) == dict.fromkeys(TABLES, 0)


def test_valid_timing_keys_validate(tmp_path: Path) -> None:
    text = (
        HEAD
        + "timezone: Europe/Berlin\n"
        + "schedule: {cron: '0 9 * * mon', catch_up: latest, max_catch_up_age: 6h}\n"
        + "send_window: {days: mon-fri, hours: '09:00-17:00', timezone: recipient}\n"
        + STEP
        + "    at: '09:00'\n    on: [mon, thu]\n"
    )
    result = invoke("validate", str(write_yaml(tmp_path / "c", text)))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
