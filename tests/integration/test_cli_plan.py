"""``herald schedule`` (``plan``) and ``herald simulate`` under a fixed ``--now``: the fires and
due times they print (local and UTC, right across the DST changes of Europe/Berlin), per step
and recipient time zone, for every kind of trigger; and that they write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import invoke, write_yaml

HEAD = """\
from: "Acme <news@acme.example>"
timezone: Europe/Berlin
"""
PEOPLE = """\
audience:
  - {email: ann@example.com, timezone: Europe/Berlin}
  - {email: bob@example.com, timezone: Europe/Berlin}
  - {email: cy@example.com, timezone: America/New_York}
  - {email: di@example.com}
"""
WEEKLY = (
    "name: weekly\n"
    + HEAD
    + PEOPLE
    + """\
schedule: {cron: "0 9 * * sun"}
steps:
  - id: digest
    subject: "Digest"
    text: "Hello"
  - id: nudge
    after: 1d
    at: "08:00"
    timezone: recipient
    subject: "Did you read it?"
    text: "Nudge"
"""
)
DRIP = (
    "name: drip\n"
    + HEAD
    + PEOPLE
    + """\
enrollment: audience
steps:
  - id: welcome
    subject: "Welcome"
    text: "Hi"
  - id: day2
    after: 1d
    at: "09:00"
    subject: "Day 2"
    text: "Two"
  - id: day3
    after: 1d
    at: "09:00"
    subject: "Day 3"
    text: "Three"
"""
)


def run_json(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def rows(groups: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    return [(g["step"], g["due"], g["zone"], g["messages"]) for g in groups]


# ---------------------------------------------------------------------- schedule


def test_weekly_fires_across_the_autumn_change_in_local_time_and_utc(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY)
    result = invoke("schedule", str(path), "--count", "3", "--now", "2026-10-14T00:00Z")
    assert result.exit_code == 0, result.output
    text = result.stdout
    # 09:00 in Berlin is 07:00Z in summer time and 08:00Z from 25 October.
    assert "Sun 2026-10-18 09:00 CEST" in text
    assert "2026-10-18 07:00Z" in text
    assert "Sun 2026-10-25 09:00 CET" in text
    assert "2026-10-25 08:00Z" in text
    assert "Sun 2026-11-01 09:00 CET" in text
    assert "2026-11-01 08:00Z" in text
    assert "nothing was written" in text

    document = run_json("plan", str(path), "-n", "3", "--now", "2026-10-14T00:00Z")
    assert document["trigger"] == "schedule"
    assert document["timezone"] == "Europe/Berlin"
    assert [fire["at"] for fire in document["fires"]] == [
        "2026-10-18T07:00:00+00:00",
        "2026-10-25T08:00:00+00:00",
        "2026-11-01T08:00:00+00:00",
    ]
    assert document["fires"][1]["local"] == "2026-10-25T09:00:00+01:00"
    assert set(document["computed_with"]) == {"croniter", "tzdata"}


def test_per_step_groups_follow_recipient_zones(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY)
    document = run_json("schedule", str(path), "--count", "1", "--now", "2026-12-01T00:00Z")
    (fire,) = document["fires"]
    assert fire["at"] == "2026-12-06T08:00:00+00:00"  # Sunday 09:00 CET
    assert fire["messages"] == 8
    # The digest goes to everyone at the fire; the nudge the next day at 08:00 on each
    # recipient's own clock (no zone: the campaign's).
    assert rows(fire["steps"]) == [
        ("digest", "2026-12-06T08:00:00+00:00", "Europe/Berlin", 4),
        ("nudge", "2026-12-07T07:00:00+00:00", "Europe/Berlin", 3),
        ("nudge", "2026-12-07T13:00:00+00:00", "America/New_York", 1),
    ]
    assert fire["steps"][2]["due_local"] == "2026-12-07T08:00:00-05:00"

    text = invoke("schedule", str(path), "-n", "1", "--now", "2026-12-01T00:00Z").stdout
    assert "Mon 2026-12-07 08:00 EST" in text
    assert "Mon 2026-12-07 08:00 CET" in text


def test_a_launch_campaign_fires_at_launch(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "name: once\n" + HEAD + PEOPLE + 'steps:\n  - {id: hello, subject: "Hi", text: "x"}\n'
        '  - {id: later, after: 2d, subject: "Later", text: "y"}\n',
    )
    document = run_json("schedule", str(path), "--now", "2026-12-07T10:00+01:00")
    assert document["trigger"] == "launch"
    (fire,) = document["fires"]
    assert (fire["at"], fire["label"]) == ("2026-12-07T09:00:00+00:00", "at launch")
    assert rows(fire["steps"]) == [
        ("hello", "2026-12-07T09:00:00+00:00", "Europe/Berlin", 4),
        ("later", "2026-12-09T09:00:00+00:00", "Europe/Berlin", 4),
    ]
    assert "at launch" in invoke("schedule", str(path), "--now", "2026-12-07").stdout


@pytest.mark.parametrize(
    ("now", "due"),
    [
        ("2026-05-01T00:00Z", "2026-05-04T07:00:00+00:00"),  # before: at its time (CEST)
        ("2026-05-05T12:00Z", "2026-05-05T12:00:00+00:00"),  # already past: at once
    ],
)
def test_start_at_is_its_one_time(tmp_path: Path, now: str, due: str) -> None:
    path = write_yaml(
        tmp_path,
        "name: monday\n" + HEAD + PEOPLE + 'start_at: "2026-05-04 09:00"\n'
        'steps:\n  - {id: hello, subject: "Hi", text: "x"}\n',
    )
    document = run_json("schedule", str(path), "--now", now)
    assert document["trigger"] == "start_at"
    (fire,) = document["fires"]
    assert fire["at"] == "2026-05-04T07:00:00+00:00"  # the nominal time, in the key
    assert rows(fire["steps"]) == [("hello", due, "Europe/Berlin", 4)]


def test_a_drip_is_planned_as_if_everyone_enrolled_now(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, DRIP)
    document = run_json("schedule", str(path), "--now", "2026-12-07T20:00Z")
    assert document["trigger"] == "enrollment"
    (fire,) = document["fires"]
    assert fire["label"] == "if enrolled now"
    assert rows(fire["steps"]) == [
        ("welcome", "2026-12-07T20:00:00+00:00", "Europe/Berlin", 4),
        ("day2", "2026-12-08T08:00:00+00:00", "Europe/Berlin", 4),  # Mon 21:00 + 1d at 09:00
        ("day3", "2026-12-09T08:00:00+00:00", "Europe/Berlin", 4),
    ]


def test_cron_warnings_are_shown_both_day_fields_mean_either(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY.replace('"0 9 * * sun"', '"0 9 1 * mon"'))
    document = run_json("schedule", str(path), "--now", "2026-12-01T00:00Z")
    assert any("EITHER" in warning for warning in document["warnings"])
    result = invoke("schedule", str(path), "--now", "2026-12-01T00:00Z")
    assert result.exit_code == 0
    assert "warning:" in result.stderr
    assert "EITHER" in result.stderr
    fires = run_json("schedule", str(path), "-n", "3", "--now", "2026-12-01T00:00Z")["fires"]
    # The 1st of the month OR a Monday.
    assert [f["local"][:10] for f in fires] == ["2026-12-01", "2026-12-07", "2026-12-14"]


def test_a_campaign_that_fails_its_check_exits_2(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY.replace('text: "Hello"', 'text: "Hello {{ nobody }}"'))
    result = invoke("schedule", str(path), "--now", "2026-12-01T00:00Z")
    assert result.exit_code == 2, result.output
    assert "nobody" in result.output


# ---------------------------------------------------------------------- simulate


def test_simulated_drip_across_the_spring_change(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, DRIP)
    result = invoke("simulate", str(path), "--until", "5d", "--now", "2026-03-27T12:00Z")
    assert result.exit_code == 0, result.output
    text = result.stdout
    # Day 2 on Saturday in winter time, day 3 on Sunday after the clocks went forward.
    assert "Sat 2026-03-28 09:00 CET" in text
    assert "2026-03-28 08:00Z" in text
    assert "Sun 2026-03-29 09:00 CEST" in text
    assert "2026-03-29 07:00Z" in text
    assert "simulated in memory, nothing was written" in text

    document = run_json("simulate", str(path), "--until", "5d", "--now", "2026-03-27T12:00Z")
    assert [(e["step"], e["due"], e["messages"]) for e in document["timeline"]] == [
        ("welcome", "2026-03-27T12:00:00+00:00", 4),
        ("day2", "2026-03-28T08:00:00+00:00", 4),
        ("day3", "2026-03-29T07:00:00+00:00", 4),
    ]
    assert (document["occurrences"], document["messages"], document["beyond_until"]) == (1, 12, 0)


def test_simulated_cohorts_overlap(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, DRIP)
    document = run_json(
        "simulate", str(path), "--until", "2d", "--enroll-every", "1d", "--now", "2026-12-07T20:00Z"
    )
    assert document["occurrences"] == 3  # enrolled at now, +1d, +2d (the horizon's end included)
    # Wednesday 09:00: the first cohort's day 3 and the second cohort's day 2.
    at_9 = [e for e in document["timeline"] if e["due"] == "2026-12-09T08:00:00+00:00"]
    assert [(e["step"], e["occurrence"][:10]) for e in at_9] == [
        ("day3", "2026-12-07"),
        ("day2", "2026-12-08"),
    ]
    assert document["beyond_until"] == 3 * 4  # day 3 of cohort 2, days 2 and 3 of cohort 3


def test_simulated_schedule_lists_every_occurrence_in_the_horizon(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY)
    document = run_json("simulate", str(path), "--until", "3w", "--now", "2026-10-14T00:00Z")
    occurrences = sorted({e["occurrence"] for e in document["timeline"]})
    assert occurrences == [
        "2026-10-18T07:00:00+00:00",
        "2026-10-25T08:00:00+00:00",
        "2026-11-01T08:00:00+00:00",
    ]
    assert document["messages"] == 3 * 8


def test_simulate_until_an_iso_time_and_bad_values(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY)
    document = run_json("simulate", str(path), "--until", "2026-10-19", "--now", "2026-10-14")
    assert document["until"] == "2026-10-19T00:00:00+00:00"
    for bad in ("soon", "0", "2026-10-01"):
        result = invoke("simulate", str(path), "--until", bad, "--now", "2026-10-14")
        assert result.exit_code == 2, (bad, result.output)
        assert result.output.startswith("error:")
    not_a_drip = invoke("simulate", str(path), "--enroll-every", "1d")
    assert not_a_drip.exit_code == 2
    assert "--enroll-every is for drips" in not_a_drip.output


def test_a_send_window_moves_the_weekend_to_monday(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "name: windowed\n"
        + HEAD
        + PEOPLE
        + 'send_window: {days: mon-fri, hours: "09:00-17:00"}\n'
        + 'steps:\n  - {id: hello, subject: "Hi", text: "x"}\n',
    )
    document = run_json("simulate", str(path), "--until", "7d", "--now", "2026-12-05T12:00Z")
    assert [(e["due"], e["messages"]) for e in document["timeline"]] == [
        ("2026-12-07T08:00:00+00:00", 4)  # Saturday → Monday 09:00 CET
    ]


# ---------------------------------------------------------------------- nothing written


@pytest.mark.parametrize("command", [["schedule"], ["plan"], ["simulate", "--until", "30d"]])
def test_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    path = write_yaml(tmp_path / "campaign", WEEKLY)
    monkeypatch.chdir(tmp_path)  # where the default database, sqlite:///herald.db, would go
    db = tmp_path / "elsewhere.db"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = invoke(
        command[0], str(path), *command[1:], env={"HERALD_DATABASE_URL": f"sqlite:///{db}"}
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not db.exists()
    assert not (tmp_path / "herald.db").exists()


def test_herald_now_from_the_environment(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, WEEKLY)
    by_env = invoke("schedule", str(path), "--json", env={"HERALD_NOW": "2026-10-14T02:00+02:00"})
    assert by_env.exit_code == 0, by_env.output
    document = json.loads(by_env.stdout)
    assert document["now"] == "2026-10-14T00:00:00+00:00"
    assert document["fires"][0]["at"] == "2026-10-18T07:00:00+00:00"
    # The option wins over the environment.
    result = invoke(
        "schedule",
        str(path),
        "--json",
        "--now",
        "2026-10-19T00:00Z",
        env={"HERALD_NOW": "2026-10-14T00:00Z"},
    )
    both = json.loads(result.stdout)
    assert both["fires"][0]["at"] == "2026-10-25T08:00:00+00:00"
