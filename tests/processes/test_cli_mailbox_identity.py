"""One mailbox, one message, through the real CLI and a real SMTP server (SQLite, PostgreSQL).

Three spellings of one mailbox in an audience make one job and one message, sent to the first
spelling as written; a suppressed mailbox is never sent to under another spelling or case: its
job ends cancelled with reason "suppressed", as every suppressed job does.
"""

from __future__ import annotations

import csv
import email
import email.policy
import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.suppression import suppress
from tests.support.factories import run_herald
from tests.support.smtp_server import LedgerSMTPServer, read_ledger_entries


def write_campaign(folder: Path, name: str, emails: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name"])
        writer.writerows([address, f"Row {i}"] for i, address in enumerate(emails, start=2))
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nfrom: news@herald.test\naudience: {name}.csv\n"
        "steps: [{id: hello, subject: 'Hello {{ name }}', text: 'Hi {{ email }}'}]\n"
    )
    return path


def test_one_mailbox_gets_one_message_and_suppression_holds_for_every_spelling(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    assert run_herald("db", "upgrade", "--database-url", db_url).returncode == 0
    with engine.begin() as conn:
        assert suppress(conn, "blocked@example.com", "unsubscribed")

    spellings = write_campaign(
        tmp_path, "spellings", ["dup@y.example", '"dup"@y.example', '"d\\up"@y.example']
    )
    others = write_campaign(
        tmp_path, "others", ["Blocked@EXAMPLE.com", "friend@example.com", "DUP@Y.example"]
    )
    quoted = write_campaign(tmp_path, "quoted", ['"blocked"@example.com'])
    launched = {}
    for path in (spellings, others, quoted):
        result = run_herald("launch", str(path), "--database-url", db_url, "--json")
        assert result.returncode == 0, result.stderr
        launched[path.stem] = json.loads(result.stdout)["new_jobs"]
    assert launched == {"spellings": 1, "others": 3, "quoted": 1}

    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    result = run_herald(
        "worker", "--until-idle", "--json", "--database-url", db_url, "--smtp-url", smtp_url,
        "--poll", "0.05", "--retry-base", "0.01",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sent"] == 3

    # The server saw: dup once per campaign (the first spelling as written), friend once,
    # and nothing at all for the suppressed mailbox.
    recipients = sorted(entry.rcpt for entry in read_ledger_entries(smtp_server.ledger_path))
    assert recipients == ["DUP@y.example", "dup@y.example", "friend@example.com"]
    for raw in smtp_server.messages():
        msg = email.message_from_bytes(raw, policy=email.policy.SMTP)
        assert "blocked" not in str(msg["To"]).lower()
        if msg["Subject"] == "Hello Row 2":
            assert msg["To"].addresses[0].addr_spec.lower() == "dup@y.example"

    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "select campaign, recipient, mailbox, state, outcome_text from send_job "
                "order by campaign, recipient"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("others", "Blocked@example.com", "blocked@example.com", "cancelled", "suppressed"),
        ("others", "DUP@y.example", "dup@y.example", "sent", "OK: stored"),
        ("others", "friend@example.com", "friend@example.com", "sent", "OK: stored"),
        ("quoted", '"blocked"@example.com', "blocked@example.com", "cancelled", "suppressed"),
        ("spellings", "dup@y.example", "dup@y.example", "sent", "OK: stored"),
    ]  # fmt: skip

    # Relaunching changes nothing.
    for path in (spellings, others, quoted):
        result = run_herald("launch", str(path), "--database-url", db_url, "--json")
        assert json.loads(result.stdout)["new_jobs"] == 0
