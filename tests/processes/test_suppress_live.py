"""The Show: suppress after launch, during a live send, with three worker processes.

Four campaigns are launched, each with another spelling of one mailbox (a quoted local part,
an IDN domain as U-label or A-label, upper case, a gratuitous backslash escape), plus a second
mailbox that unsubscribes from one list only. Three real `herald worker` processes send to a
real SMTP server, which holds its reply to RCPT TO for those two mailboxes, so the workers
are caught holding their claims, past RCPT, on the way to DATA. Then `herald suppress add`
(a real process) suppresses the first mailbox globally under yet another spelling, and the
second in `list:news` only; the server lets the RCPTs through.

Nothing reaches the globally suppressed mailbox in any spelling; the list-suppressed one gets
only the mail of the other lists (transactional mail too); each refused job is `cancelled`
with reason `suppressed`, its journal a valid path; every other message arrives exactly once.
"""

from __future__ import annotations

import csv
import email
import email.policy
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.addresses import mailbox_identity
from dispatch.models import send_event, send_job
from dispatch.states import is_valid_path
from tests.support.factories import run_herald
from tests.support.paths import HERALD
from tests.support.smtp_server import LedgerSMTPServer, RcptHold, read_ledger_entries

READER = "reader@xn--bcher-kva.example"  # the identity of reader@bücher.example
FAN = "fan@example.org"
# campaign -> (list, transactional, the spelling of READER in its audience)
CAMPAIGNS = {
    "news": ("news", False, "Reader@Bücher.example"),
    "digest": ("news", False, '"reader"@XN--BCHER-KVA.example'),
    "offers": ("promo", False, '"r\\eader"@bücher.EXAMPLE'),
    "receipts": (None, True, "READER@xn--bcher-kva.example"),
}
PEOPLE = 60  # other recipients per campaign


def write_campaign(
    folder: Path, name: str, list_name: str | None, transactional: bool, reader: str
) -> Path:
    folder.mkdir(parents=True)
    people = [f"p{i:03d}.{name}@example.com" for i in range(PEOPLE)]
    # The two mailboxes come first, so they are claimed while most of the send is still ahead.
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email"])
        writer.writerows([[address] for address in [reader, "Fan@Example.org", *people]])
    extra = (f"list: {list_name}\n" if list_name else "") + (
        "transactional: true\n" if transactional else ""
    )
    path = folder / "campaign.yaml"
    path.write_text(
        f"name: {name}\nfrom: shop@herald.test\naudience: people.csv\n{extra}"
        "steps: [{id: hello, subject: 'Hello', text: 'Hi {{ email }}'}]\n"
    )
    return path


@pytest.fixture
def held() -> RcptHold:
    return RcptHold(lambda address: mailbox_identity(address) in {READER, FAN})


@pytest.fixture
def smtp_server(tmp_path: Path, held: RcptHold) -> Iterator[LedgerSMTPServer]:
    server = LedgerSMTPServer(tmp_path / "ledger.txt", rcpt_hold=held)
    server.start()
    yield server
    held.release()
    server.stop()


def test_suppressed_during_a_live_send_nothing_reaches_the_mailbox(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer, held: RcptHold
) -> None:
    for name, (list_name, transactional, reader) in CAMPAIGNS.items():
        path = write_campaign(tmp_path / name, name, list_name, transactional, reader)
        launched = run_herald("launch", str(path), "--database-url", db_url, "--json")
        assert launched.returncode == 0, launched.stderr
        assert json.loads(launched.stdout)["new_jobs"] == PEOPLE + 2

    # As many slots per worker as there are held jobs: a worker whose every slot is held at
    # RCPT can hold no further one in its backlog (claimed, never started) until its lease ran
    # out, which stalled the wait below for a lease and let recovery hand jobs back mid-test.
    held_jobs = 2 * len(CAMPAIGNS)
    command = [
        str(HERALD), "worker", "--until-idle", "--json", "--database-url", db_url,
        "--smtp-url", f"smtp://{smtp_server.host}:{smtp_server.port}",
        "--concurrency", str(held_jobs), "--poll", "0.05", "--retry-base", "0.01",
    ]  # fmt: skip
    workers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        # Every job of both mailboxes is claimed and past RCPT: the workers are mid-send.
        assert held.wait_held(held_jobs, timeout=120), held.held
        with engine.connect() as conn:
            mid_send = conn.execute(
                sa.select(send_job.c.state, sa.func.count())
                .where(send_job.c.mailbox.in_([READER, FAN]))
                .group_by(send_job.c.state)
            ).all()
        assert dict(mid_send) == {"claimed": held_jobs}

        everywhere = run_herald(
            "suppress", "add", "rEaDeR@BÜCHER.Example", "--reason", "asked by phone",
            "--database-url", db_url, "--json",
        )  # fmt: skip
        assert everywhere.returncode == 0, everywhere.stderr
        assert json.loads(everywhere.stdout)["unsent_jobs_stopped"] == len(CAMPAIGNS)
        news_only = run_herald(
            "suppress", "add", '"fan"@example.ORG', "--scope", "list:news",
            "--reason", "unsubscribed", "--database-url", db_url,
        )  # fmt: skip
        assert news_only.returncode == 0, news_only.stderr
        held.release()

        reports = []
        for worker in workers:
            stdout, stderr = worker.communicate(timeout=240)
            assert worker.returncode == 0, stderr
            reports.append(json.loads(stdout))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()

    # What the server saw: nothing for READER in any spelling, FAN only outside list:news.
    entries = read_ledger_entries(smtp_server.ledger_path)
    delivered = Counter(mailbox_identity(entry.rcpt) for entry in entries)
    assert delivered[READER] == 0
    assert delivered[FAN] == 2  # offers (list:promo) and receipts (transactional)
    for raw in smtp_server.messages():
        message = email.message_from_bytes(raw, policy=email.policy.SMTP)
        assert mailbox_identity(message["To"].addresses[0].addr_spec) != READER
    ids = [entry.message_id for entry in entries]
    assert len(ids) == len(set(ids)) == len(CAMPAIGNS) * PEOPLE + 2
    assert sum(report["sent"] for report in reports) == len(ids)

    # What Herald says: every refused job cancelled, reason "suppressed", journal a valid path.
    with engine.connect() as conn:
        jobs = conn.execute(
            sa.select(
                send_job.c.id, send_job.c.campaign, send_job.c.mailbox, send_job.c.state,
                send_job.c.outcome_text,
            ).where(send_job.c.mailbox.in_([READER, FAN]))
        ).all()  # fmt: skip
        events = conn.execute(
            sa.select(send_event.c.job_id, send_event.c.from_state, send_event.c.to_state,
                      send_event.c.detail).order_by(send_event.c.id)
        ).all()  # fmt: skip
    outcome = {(job.campaign, job.mailbox): (job.state, job.outcome_text) for job in jobs}
    cancelled = ("cancelled", "suppressed")
    assert {key: value for key, value in outcome.items() if key[1] == READER} == {
        (name, READER): cancelled for name in CAMPAIGNS
    }
    assert {key[0]: value[0] for key, value in outcome.items() if key[1] == FAN} == {
        "news": "cancelled", "digest": "cancelled", "offers": "sent", "receipts": "sent",
    }  # fmt: skip
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for event in events:
        paths.setdefault(event.job_id, []).append((event.from_state, event.to_state))
    assert all(is_valid_path(path) for path in paths.values())
    refused = {job.id for job in jobs if job.state == "cancelled"}
    assert len(refused) == len(CAMPAIGNS) + 2
    last = {event.job_id: event for event in events}
    assert {(last[i].from_state, last[i].to_state, last[i].detail) for i in refused} == {
        ("claimed", "cancelled", "suppressed")
    }
    assert all(
        path[-2:] == [("pending", "claimed"), ("claimed", "cancelled")]
        for i, path in paths.items()
        if i in refused
    )

    # And the operator sees why: not dead letters, but cancelled/suppressed.
    dead = run_herald("dead", "list", "--json", "--database-url", db_url)
    assert json.loads(dead.stdout)["count"] == 0
