"""``herald preview``: the exact bytes launch would enqueue, for one recipient, writing nothing.

The equivalence with launch is proven on a real database (SQLite and PostgreSQL) for random
recipients and data (hypothesis): preview's message, its Date aside, is byte for byte the
payload launch stored under the same key.
"""

from __future__ import annotations

import csv
import email
import email.policy
import itertools
import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.message_date import date_value
from herald.app.launch import launch
from herald.app.preview import preview
from scheduler.passes import run_pass
from tests.support.campaign_files import write_campaign
from tests.support.examples import examples
from tests.support.factories import invoke
from tests.support.paths import HERALD

NOW = "2026-12-07T09:00:00Z"
MOMENT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`herald ARGS` as a real process in ``tmp_path``, its database URL pointing there too."""
    env = {**os.environ, "HERALD_DATABASE_URL": f"sqlite:///{tmp_path / 'preview.db'}"}
    result = subprocess.run(
        [str(HERALD), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _parsed(text: str) -> EmailMessage:
    message = email.message_from_bytes(text.encode("ascii"), policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def test_preview_prints_the_message_and_creates_no_database(tmp_path: Path) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=3)
    databases = [tmp_path / "preview.db", tmp_path / "herald.db", tmp_path / "c" / "herald.db"]
    assert not any(db.exists() for db in databases)
    result = _run(tmp_path, "preview", str(path), "--step", "welcome", "--now", NOW)
    assert result.returncode == 0, result.stderr
    assert not any(db.exists() for db in databases)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # nothing written beside it
    message = _parsed(result.stdout.replace("\n", "\r\n"))
    assert message["To"] == f"User 0 <{addresses[0]}>"
    assert message["Subject"] == "Welcome User 0"
    assert message["Date"] == date_value(MOMENT)
    assert message["X-Herald-Key"]
    assert message["Message-ID"].startswith("<" + message["X-Herald-Key"][:32])
    assert "line 2" in result.stderr


def test_every_step_is_shown_with_a_marker_line(tmp_path: Path) -> None:
    path, addresses = write_campaign(tmp_path, recipients=2)
    result = invoke("preview", str(path), "--recipient", addresses[1].upper(), "--now", NOW)
    assert result.exit_code == 0, result.output
    markers = [line for line in result.stdout.splitlines() if line.startswith("==> ")]
    assert [m.split()[2] for m in markers] == ["welcome", "tips", "later"]
    assert result.stdout.count(f"To: User 1 <{addresses[1]}>") == 3


def test_json_carries_the_exact_bytes_and_html_writes_the_html_part(tmp_path: Path) -> None:
    path, addresses = write_campaign(tmp_path / "c", recipients=2)
    out_file = tmp_path / "out.html"
    result = _run(
        tmp_path, "preview", str(path), "--step", "welcome", "--json", "--html", str(out_file),
        "--now", NOW,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["recipient"] == {"email": addresses[0], "where": "line 2"}
    [message] = document["messages"]
    raw = message["message"]
    assert "\r\n" in raw
    assert raw.count("\n") == raw.count("\r\n")
    assert message["date"] == date_value(MOMENT)
    assert f"Date: {message['date']}\r\n" in raw
    assert out_file.read_text() == "<p>Hello <b>User 0</b> from City0.</p>\n"
    assert out_file.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "preview.db").exists()


def test_a_recipient_outside_the_audience_is_said_so(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path, recipients=2)
    result = invoke("preview", str(path), "--recipient", "stranger@example.org")
    assert result.exit_code == 2
    assert "'stranger@example.org' is not in the audience of onboarding" in result.stderr
    assert "nothing would be sent to it" in result.stderr
    assert result.stdout == ""


def test_hostile_recipient_and_unknown_step_are_clear_errors(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path, recipients=2)
    for hostile in ("a@b.example\r\nBcc: x@evil.example", "[red]x[/red]@b.example", "<b>@x"):
        result = invoke("preview", str(path), "--recipient", hostile)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: --recipient ")
        assert "\r" not in result.stderr
        assert "\nBcc" not in result.stderr
        assert result.stdout == ""
    shown = invoke("preview", str(path), "--recipient", "[red]x[/red]@b.example")
    assert "[red]x[/red]" in shown.stderr  # printed literally, never read as markup
    result = invoke("preview", str(path), "--step", "no-such\x1b[2J")
    assert result.exit_code == 2
    assert "has no step 'no-such\\x1b[2J'" in result.stderr
    assert "its steps: welcome, tips, later" in result.stderr


def test_html_needs_one_step_with_an_html_part(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path / "c", recipients=1)
    several = invoke("preview", str(path), "--html", str(tmp_path / "x.html"))
    assert several.exit_code == 2
    assert "--step" in several.stderr
    text_only = invoke("preview", str(path), "--step", "tips", "--html", str(tmp_path / "x.html"))
    assert text_only.exit_code == 2
    assert "has no HTML part" in text_only.stderr
    assert not (tmp_path / "x.html").exists()


def test_a_broken_template_for_this_recipient_is_reported(tmp_path: Path) -> None:
    path, _ = write_campaign(tmp_path, recipients=2)
    path.write_text(path.read_text().replace("{{ city }}.</p>", "{{ nope }}.</p>"))
    result = invoke("preview", str(path), "--step", "welcome")
    assert result.exit_code == 2
    assert "undefined variable 'nope'" in result.stderr
    assert result.stdout == ""


# ---------------------------------------------------------------- preview == launch's payload

_names = itertools.count()
_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="\x85"),
    max_size=40,
)
_local = st.from_regex(r"[a-z0-9][a-z0-9._+-]{0,15}", fullmatch=True).filter(
    lambda s: ".." not in s and not s.endswith(".")
)
PROPERTY_CAMPAIGN = """\
name: {name}
from: "Prop Tests <news@herald.test>"
audience: people.csv
steps:
  - id: first
    subject: "Hi {{{{ name }}}}: {{{{ note }}}}"
    template: body.html
  - id: second
    after: 1d
    subject: "{{{{ note }}}}"
    text: "{{{{ note }}}} / {{{{ email }}}}"
"""
PROPERTY_BODY = """\
{% extends "herald/basic.html" %}
{% block content %}<p>{{ name }} — {{ note }}</p>{% endblock %}
{% block footer %}{{ email }}{% endblock %}
"""


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(
        st.tuples(_local, _text, _text), min_size=1, max_size=4, unique_by=lambda r: r[0]
    ),
    pick=st.integers(min_value=0, max_value=3),
    upper=st.booleans(),
)
def test_preview_bytes_equal_launchs_payload(
    engine: Engine,
    tmp_path: Path,
    rows: list[tuple[str, str, str]],
    pick: int,
    upper: bool,
) -> None:
    name = f"prop-{next(_names)}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "body.html").write_text(PROPERTY_BODY)
    with (folder / "people.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "note"])
        for local, person, note in rows:
            writer.writerow([f"{local}@example.com", person, note])
    path = folder / "campaign.yaml"
    path.write_text(PROPERTY_CAMPAIGN.format(name=name))
    local = rows[pick % len(rows)][0]
    address = f"{local}@example.com"
    asked = address.upper() if upper else address

    def clock() -> datetime:
        return MOMENT

    try:
        shown = preview(path, recipient=asked, clock=clock)
    except Exception as exc:  # a row the check refuses: launch must refuse it too
        try:
            launch(engine, path, clock=clock)
        except Exception as launch_exc:
            assert type(launch_exc).__name__ in ("CheckFailed", "SpecError"), launch_exc
            assert type(exc).__name__ in ("PreviewFailed", "SpecError"), exc
            return
        raise AssertionError(f"preview refused what launch took: {exc}") from exc
    launch(engine, path, clock=clock)
    with engine.connect() as conn:
        stored = {
            row.key: (bytes(row.payload), row.recipient, row.not_before)
            for row in conn.execute(
                sa.text(
                    "select key, payload, recipient, not_before from send_job where campaign = :c"
                ),
                {"c": name},
            )
        }
    assert [m.step for m in shown.messages] == ["first", "second"]
    for message in shown.messages:
        payload, recipient, _ = stored[message.key]
        assert recipient == message.to == address
        assert message.date_at is not None
        date_line = f"Date: {date_value(message.date_at)}\r\n".encode()
        assert message.message.count(date_line) == 1
        assert message.message.replace(date_line, b"", 1) == payload
    first, second = shown.messages
    # The Date each would be stamped with: when it falls due (the first at once).
    assert first.date_at == first.due == MOMENT
    assert second.date_at == second.due == MOMENT + timedelta(days=1)


SCHEDULED = """\
name: later-once
from: "Herald Tests <news@herald.test>"
audience: people.csv
start_at: 2026-12-08T08:00:00Z
steps:
  - id: only
    subject: "Hi {{ name }}"
    html: "<p>{{ city }}</p>"
"""


def test_a_scheduled_campaign_previews_the_occurrence_the_scheduler_fires(
    engine: Engine, tmp_path: Path
) -> None:
    path, addresses = write_campaign(tmp_path, recipients=2)
    path.write_text(SCHEDULED)
    shown = preview(path, recipient=addresses[1], clock=lambda: MOMENT)
    fire = datetime(2026, 12, 8, 8, 0, tzinfo=UTC)
    assert shown.occurrence_at == fire
    launch(engine, path, clock=lambda: MOMENT)  # registered; nothing due yet
    run_pass(engine, now=fire + timedelta(minutes=1), actor="test", takeover_after=None)
    [message] = shown.messages
    with engine.connect() as conn:
        payload = conn.execute(
            sa.text("select payload from send_job where key = :k"), {"k": message.key}
        ).scalar_one()
    date_line = f"Date: {date_value(fire)}\r\n".encode()
    assert message.message.replace(date_line, b"", 1) == bytes(payload)
