"""``herald launch`` is idempotent, safe to run concurrently, refuses silent changes, and the
campaign controls (status, pause, resume, cancel) behave. On SQLite and PostgreSQL."""

from __future__ import annotations

import email
import email.policy
import json
import subprocess
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.support.campaign_files import write_audience, write_campaign
from tests.support.factories import invoke, launch_json
from tests.support.paths import HERALD

CAMPAIGN = "onboarding"  # the name write_campaign() uses

# Big enough that two launches overlap (each renders every message twice: check, then fan-out).
CONCURRENT_RECIPIENTS = 2000
# Text-only steps: rendering cost is mostly MIME building, and multipart doubles it.
TEXT_ONLY_THREE_STEPS = """\
name: concurrent
from: "Herald Tests <news@herald.test>"
audience: people.csv
steps:
  - id: welcome
    subject: "Welcome {{ name }}"
    text: "Hello {{ name }}"
  - id: tips
    subject: "Tips for {{ city }}"
    text: "Tip"
  - id: later
    after: 1d
    subject: "Later"
    text: "See you"
"""


def jobs(engine: Engine) -> dict[str, tuple[str, str, bytes]]:
    """key -> (state, payload_hash, payload)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("select key, state, payload_hash, payload from send_job"))
        return {r.key: (r.state, r.payload_hash, bytes(r.payload)) for r in rows}


def campaign_row(engine: Engine) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("select name, version, spec_hash, status from campaign where name = :n"),
            {"n": CAMPAIGN},
        ).one()


def subject_of(payload: bytes) -> str:
    return str(email.message_from_bytes(payload, policy=email.policy.default)["Subject"])


def change_welcome_subject(path: Path) -> None:
    text = path.read_text()
    assert 'subject: "Welcome {{ name }}"' in text
    path.write_text(
        text.replace('subject: "Welcome {{ name }}"', 'subject: "Hello again {{ name }}"')
    )


def mark_sent(engine: Engine, count: int) -> set[str]:
    """Mark ``count`` jobs of the 'welcome' step as sent, as a worker would have."""
    with engine.begin() as conn:
        keys = [
            r.key
            for r in conn.execute(
                sa.text("select key from send_job where step = 'welcome' order by key limit :n"),
                {"n": count},
            )
        ]
        conn.execute(
            sa.text("update send_job set state = 'sent' where key = :k"), [{"k": k} for k in keys]
        )
    return set(keys)


# ---------------------------------------------------------------------- idempotence


def test_launch_twice_creates_nothing_the_second_time(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=10)

    first = launch_json(db_url, path)
    assert first["new_jobs"] == 30
    assert first["existing_jobs"] == 0
    before = jobs(engine)
    assert len(before) == 30

    second = launch_json(db_url, path)
    assert second["new_jobs"] == 0
    assert second["existing_jobs"] == 30
    assert second["version"] == 1
    assert jobs(engine) == before

    # The human-readable form says so too.
    third = invoke("launch", str(path), "--database-url", db_url)
    assert third.exit_code == 0, third.output
    assert "already launched" in third.output
    assert "0 new job(s)" in third.output
    assert jobs(engine) == before

    # Checked last so that the counts above are still checked if this fails.
    assert first["created"] is True
    assert second["created"] is False


def test_two_concurrent_launches_enqueue_each_job_once(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    write_audience(folder / "people.csv", CONCURRENT_RECIPIENTS)
    path = folder / "campaign.yaml"
    path.write_text(TEXT_ONLY_THREE_STEPS)
    expected = CONCURRENT_RECIPIENTS * 3
    command = [str(HERALD), "launch", str(path), "--database-url", db_url, "--json"]
    processes = [
        subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
        assert "Traceback" not in stderr
    reports = [json.loads(stdout) for stdout, _ in outputs]

    with engine.connect() as conn:
        total = conn.execute(sa.text("select count(*) from send_job")).scalar_one()
        distinct = conn.execute(sa.text("select count(distinct key) from send_job")).scalar_one()
        campaigns = conn.execute(sa.text("select count(*) from campaign")).scalar_one()
    assert total == expected
    assert distinct == expected
    assert campaigns == 1
    assert sum(r["new_jobs"] for r in reports) == expected, reports
    assert sum(1 for r in reports if r["created"]) == 1, reports


# ---------------------------------------------------------------------- changed definitions


def test_changed_campaign_is_refused_without_force_new_version(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=10)
    launch_json(db_url, path)
    before_jobs = jobs(engine)
    before_campaign = campaign_row(engine)

    change_welcome_subject(path)
    result = invoke("launch", str(path), "--database-url", db_url)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--force-new-version" in result.output
    assert CAMPAIGN in result.output

    assert jobs(engine) == before_jobs
    assert campaign_row(engine) == before_campaign
    assert before_campaign.version == 1


def test_force_new_version_keeps_sent_jobs_and_updates_pending_ones(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=10)
    launch_json(db_url, path)
    sent = mark_sent(engine, 3)
    before = jobs(engine)

    change_welcome_subject(path)
    report = launch_json(db_url, path, "--force-new-version")
    assert report["version"] == 2
    assert report["created"] is False

    after = jobs(engine)
    assert set(after) == set(before), "a new version must not change the keys"
    assert campaign_row(engine).version == 2
    welcome_pending = 0
    for key, (state, digest, payload) in after.items():
        old_state, old_digest, old_payload = before[key]
        if key in sent:
            assert (state, digest, payload) == ("sent", old_digest, old_payload)
            assert subject_of(payload).startswith("Welcome User ")
            continue
        assert state == old_state == "pending"
        if subject_of(old_payload).startswith("Welcome User "):
            welcome_pending += 1
            assert subject_of(payload).startswith("Hello again User "), subject_of(payload)
            assert digest != old_digest
        else:  # the other steps did not change
            assert subject_of(payload) == subject_of(old_payload)
    assert welcome_pending == 7

    # Launching the new version again is a no-op.
    again = launch_json(db_url, path)
    assert again["new_jobs"] == 0
    assert again["version"] == 2
    assert jobs(engine) == after


# ---------------------------------------------------------------------- status and controls


def status_json(db_url: str) -> dict[str, Any]:
    result = invoke("status", CAMPAIGN, "--database-url", db_url, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_status_of_unknown_campaign_is_invalid_input(db_url: str) -> None:
    result = invoke("status", "no-such-campaign", "--database-url", db_url, "--json")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "no-such-campaign" in result.output


def test_controls_on_unknown_campaign_are_invalid_input(db_url: str, engine: Engine) -> None:
    for action in ("pause", "resume", "cancel"):
        result = invoke(action, "no-such-campaign", "--database-url", db_url)
        assert result.exit_code == 2, (action, result.output)
        assert "Traceback" not in result.output
        assert "no campaign named 'no-such-campaign'" in result.output
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from campaign")).scalar_one() == 0


def test_pause_resume_cancel(tmp_path: Path, db_url: str, engine: Engine) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=10)
    launch_json(db_url, path)
    sent = mark_sent(engine, 2)
    assert status_json(db_url)["campaigns"][0]["status"] == "active"

    paused = invoke("pause", CAMPAIGN, "--database-url", db_url)
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.output
    assert status_json(db_url)["campaigns"][0]["status"] == "paused"

    again = invoke("pause", CAMPAIGN, "--database-url", db_url)
    assert again.exit_code == 2, again.output
    assert "Traceback" not in again.output
    assert "paused" in again.output

    resumed = invoke("resume", CAMPAIGN, "--database-url", db_url)
    assert resumed.exit_code == 0, resumed.output
    assert status_json(db_url)["campaigns"][0]["status"] == "active"

    cancelled = invoke("cancel", CAMPAIGN, "--database-url", db_url)
    assert cancelled.exit_code == 0, cancelled.output
    assert "28 unsent job(s) cancelled" in cancelled.output
    snapshot = status_json(db_url)["campaigns"][0]
    assert snapshot["status"] == "cancelled"
    assert snapshot["totals"]["cancelled"] == 28
    assert snapshot["totals"]["sent"] == 2
    assert snapshot["totals"]["pending"] == 0
    states = {key: state for key, (state, _, _) in jobs(engine).items()}
    assert {k for k, s in states.items() if s == "sent"} == sent
    assert sum(1 for s in states.values() if s == "cancelled") == 28

    twice = invoke("cancel", CAMPAIGN, "--database-url", db_url)
    assert twice.exit_code == 2, twice.output
    assert "Traceback" not in twice.output
    assert "cannot cancel" in twice.output
    assert "cancelled" in twice.output
    assert {key: state for key, (state, _, _) in jobs(engine).items()} == states

    # A cancelled campaign cannot be resumed either.
    resume_cancelled = invoke("resume", CAMPAIGN, "--database-url", db_url)
    assert resume_cancelled.exit_code == 2, resume_cancelled.output
    assert "Traceback" not in resume_cancelled.output
