"""``herald enroll`` and ``herald launch`` of scheduled campaigns, as a user runs them: what they
print, their JSON, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.factories import cli
from tests.support.schedules import write_scheduled

DRIP = """\
enrollment: manual
steps:
  - id: hello
    subject: "Hello {{ name }}"
    text: "Hi {{ name }}"
  - id: later
    after: 3d
    subject: "Later"
    text: "Again"
"""

WEEKLY = """\
timezone: Europe/Berlin
audience: people.csv
schedule: {cron: "0 9 * * mon"}
steps:
  - id: digest
    subject: "Digest"
    text: "Hello {{ name }}"
"""


def test_enroll_prints_what_it_did_and_twice_is_a_no_op(db_url: str, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", DRIP, name="welcome")
    launched = cli(db_url, "launch", str(path))
    assert launched.exit_code == 0, launched.output
    assert "enrollment: 0 enrolled" in launched.output
    first = cli(db_url, "enroll", "welcome", "Ann <ann@example.com>")
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("enrolled: ann@example.com in welcome at ")
    assert "1 step job(s) queued" in first.stdout
    again = cli(db_url, "enroll", "welcome", "ANN@example.com", "--json")
    assert again.exit_code == 0, again.output
    document = json.loads(again.stdout)
    assert (document["created"], document["state"], document["new_jobs"]) == (False, "active", 0)
    assert document["mailbox"] == "ann@example.com"
    plain = cli(db_url, "enroll", "welcome", "ann@example.com", "--data", '{"name": "A"}')
    assert plain.stdout.startswith("already enrolled: ann@example.com in welcome since ")
    assert "nothing changed" in plain.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["welcome", "ann@"], "invalid address"),
        (["welcome", "ann@example.com", "--data", "{name: Ann}"], "--data is not valid JSON"),
        (["welcome", "ann@example.com", "--data", '{"a": [1]}'], "--data: variable 'a'"),
        (["welcome", "ann@example.com", "--timezone", "Berlin"], "unknown time zone"),
        (["nope", "ann@example.com"], "no campaign named 'nope'"),
        (["digest", "ann@example.com"], "takes no enrollments"),
    ],
)
def test_enroll_refuses_bad_input_with_one_line_and_exit_2(
    db_url: str, tmp_path: Path, args: list[str], message: str
) -> None:
    cli(db_url, "launch", str(write_scheduled(tmp_path / "c", DRIP, name="welcome")))
    cli(db_url, "launch", str(write_scheduled(tmp_path / "d", WEEKLY, ["x@example.com"])))
    result = cli(db_url, "enroll", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.startswith("error:")
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1
    status = json.loads(cli(db_url, "status", "welcome", "--json").stdout)
    assert status["campaigns"][0]["totals"]["pending"] == 0


def test_launching_a_cron_campaign_prints_its_next_fire(db_url: str, tmp_path: Path) -> None:
    path = write_scheduled(tmp_path / "c", WEEKLY, ["ann@example.com"])
    result = cli(db_url, "launch", str(path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["trigger"] == "schedule"
    assert document["new_jobs"] == 0
    scheduler = document["scheduler"]
    assert scheduler["fired"] == []
    assert scheduler["next_fire"].endswith("+00:00")
    shown = cli(db_url, "launch", str(path))
    assert shown.exit_code == 0
    assert "already launched: digest (version 1)" in shown.stdout
    assert "next fire: " in shown.stdout
