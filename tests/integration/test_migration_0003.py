"""Migration 0003 (mailbox identity) on a database an older Herald filled, SQLite and PostgreSQL.

Keys never change; every job gets its mailbox identity; pre-existing jobs for one mailbox under
several spellings do not fail the migration (the holder keeps it, later pending ones are
cancelled and journalled); suppressions are stored by identity; and a relaunch after the
upgrade creates no second job for a mailbox an old-style key already covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Engine

from campaigns.spec import load_campaign
from campaigns.suppression import suppress
from dbtypes import UtcTimestamp
from dispatch.keys import KeyTuple
from herald.db import create_engine
from herald.schema import alembic_config, upgrade
from scheduler.fanout import materialise
from tests.conftest import PG_HOST, PG_PORT
from tests.support.factories import cli

OCCURRENCE = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def bare_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An empty database (no schema at all) on each backend."""
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
        yield engine
        engine.dispose()
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    name = f"herald_m_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine = create_engine(f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{name}")
    yield engine
    engine.dispose()
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def upgrade_to(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def old_key(campaign: str, step: str, recipient: str) -> str:
    """The key an older Herald derived: over the recipient's normal form (its spelling)."""
    return KeyTuple(campaign, step, OCCURRENCE, recipient).key()


def insert_old_job(
    conn: sa.Connection, recipient: str, state: str, *, campaign: str = "c", step: str = "s"
) -> int:
    key = old_key(campaign, step, recipient)
    row = conn.execute(
        sa.text(
            "insert into send_job (key, key_tuple, campaign, step, occurrence_at, channel, sender,"
            " recipient, message_id, payload, payload_hash, state, not_before, claims, max_claims,"
            " send_attempts, max_send_attempts, lease_token, in_doubt_policy) values (:key, '[]',"
            " :campaign, :step, :occ, 'email', 'news@herald.test', :recipient, :mid, :payload,"
            " 'h', :state, :occ, 0, 10, 0, 5, 0, 'hold') returning id"
        ).bindparams(sa.bindparam("occ", type_=_timestamp_type())),
        {
            "key": key,
            "campaign": campaign,
            "step": step,
            "occ": OCCURRENCE,
            "recipient": recipient,
            "mid": f"<{key[:32]}@herald.test>",
            "payload": b"old payload",
            "state": state,
        },
    ).one()
    conn.execute(
        sa.text(
            "insert into send_event (job_id, token, from_state, to_state, actor) "
            "values (:id, 0, null, 'pending', 'scheduler')"
        ),
        {"id": row.id},
    )
    return int(row.id)


def _timestamp_type() -> Any:
    return UtcTimestamp()


def jobs(engine: Engine) -> dict[int, Any]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "select id, key, recipient, mailbox, mailbox_dup, state, outcome_text, "
                "superseded_at "
                "from send_job order by id"
            )
        )
        return {row.id: row for row in rows}


def test_0003_backfills_identities_and_keeps_keys(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0002")
    spellings = ["dup@y.example", '"dup"@y.example', '"d\\up"@y.example', "Ann@x.example"]
    with bare_engine.begin() as conn:
        ids = [insert_old_job(conn, r, "pending") for r in spellings[:1]]
        ids += [insert_old_job(conn, r, "pending", step="t") for r in spellings]
        ids.append(insert_old_job(conn, "not an address", "failed", step="u"))
    before = {i: row.key for i, row in jobs_before(bare_engine).items()}

    upgrade(bare_engine)

    after = jobs(bare_engine)
    assert {i: row.key for i, row in after.items()} == before  # keys never change
    assert [after[i].mailbox for i in ids] == [
        "dup@y.example",
        "dup@y.example",
        "dup@y.example",
        "dup@y.example",
        "ann@x.example",
        "not an address",  # no longer valid: its own identity, as written
    ]
    # Step t held three jobs for one mailbox: the first keeps it, the others are cancelled.
    first, second, third = ids[1:4]
    assert (after[first].state, after[first].mailbox_dup) == ("pending", 0)
    for number, job_id in enumerate((second, third), start=1):
        assert after[job_id].state == "cancelled"
        assert after[job_id].mailbox_dup == number
        assert after[job_id].outcome_text == f"duplicate mailbox: job {first} holds it"
    with bare_engine.connect() as conn:
        journal = conn.execute(
            sa.text(
                "select job_id, from_state, to_state, actor from send_event "
                "where actor = 'migration 0003' order by job_id"
            )
        ).all()
    assert [tuple(r) for r in journal] == [
        (second, "pending", "cancelled", "migration 0003"),
        (third, "pending", "cancelled", "migration 0003"),
    ]


def jobs_before(engine: Engine) -> dict[int, Any]:
    with engine.connect() as conn:
        return {row.id: row for row in conn.execute(sa.text("select id, key from send_job"))}


def test_0003_keeps_the_job_that_may_have_reached_the_mailbox(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0002")
    with bare_engine.begin() as conn:
        pending = insert_old_job(conn, "Dup@y.example", "pending")
        sent = insert_old_job(conn, '"dup"@y.example', "sent")
        failed = insert_old_job(conn, "dup@y.example", "failed")
    upgrade(bare_engine)
    after = jobs(bare_engine)
    assert (after[sent].state, after[sent].mailbox_dup) == ("sent", 0)
    assert after[pending].state == "cancelled"  # it would have been a second message
    assert after[pending].outcome_text == f"duplicate mailbox: job {sent} holds it"
    assert (after[failed].state, after[failed].mailbox_dup) == ("failed", 2)  # history, as was
    assert after[pending].mailbox_dup == 1
    # Migration 0004 marks every second job of a mailbox superseded, so no operator action can
    # re-arm the failed one into a second message; the job that holds the mailbox is unmarked.
    assert after[sent].superseded_at is None
    assert after[failed].superseded_at is not None
    assert after[pending].superseded_at is not None
    url = bare_engine.url.set(drivername=bare_engine.url.get_backend_name())
    key = after[failed].key
    retried = cli(url.render_as_string(hide_password=False), "dead", "retry", key)
    assert retried.exit_code == 1, retried.output
    assert jobs(bare_engine)[failed].state == "failed"


def test_0003_stores_suppressions_by_identity(bare_engine: Engine) -> None:
    upgrade_to(bare_engine, "0002")
    with bare_engine.begin() as conn:
        for address, reason, day in [
            ("Blocked@example.com", "unsubscribed", 2),
            ('"blocked"@example.com', "bounced", 3),
            ("other@example.com", "manual", 4),
            ("Third@Example.com", "manual", 5),
        ]:
            conn.execute(
                sa.text(
                    "insert into suppression (address, reason, created_at) values (:a, :r, :t)"
                ).bindparams(sa.bindparam("t", type_=_timestamp_type())),
                {"a": address, "r": reason, "t": datetime(2026, 1, day, tzinfo=UTC)},
            )
    upgrade(bare_engine)
    with bare_engine.connect() as conn:
        rows = conn.execute(sa.text("select address, reason from suppression order by address"))
        assert [tuple(r) for r in rows] == [
            ("blocked@example.com", "unsubscribed"),  # the earliest entry's reason
            ("other@example.com", "manual"),
            ("third@example.com", "manual"),
        ]
    with bare_engine.begin() as conn:
        assert suppress(conn, '"BLOCKED"@Example.COM', "again") is False
        assert suppress(conn, "new@Example.COM", "manual") is True


def test_a_relaunch_after_upgrade_adds_no_job_for_a_mailbox_an_old_key_covers(
    bare_engine: Engine, tmp_path: Path
) -> None:
    """An older Herald keyed 'User@example.com' on its spelling; the identity key differs, but
    the one-job-per-mailbox index makes the relaunch skip it, like a key conflict."""
    upgrade_to(bare_engine, "0002")
    with bare_engine.begin() as conn:
        old = insert_old_job(conn, "User@example.com", "sent", campaign="relaunch", step="s")
    upgrade(bare_engine)

    # The second row is the quoted spelling "user"@EXAMPLE.com, CSV-escaped.
    (tmp_path / "people.csv").write_text(
        'email\nUser@example.com\n"""user""@EXAMPLE.com"\nb@x.example\n'
    )
    (tmp_path / "c.yaml").write_text(
        "name: relaunch\nfrom: news@herald.test\naudience: people.csv\n"
        "steps: [{id: s, subject: Hi, text: hello}]\n"
    )
    loaded = load_campaign(tmp_path / "c.yaml")
    first = materialise(bare_engine, loaded, OCCURRENCE)
    assert (first.new_jobs, first.existing_jobs) == (1, 2)
    after = jobs(bare_engine)
    mailboxes = sorted(row.mailbox for row in after.values())
    assert mailboxes == ["b@x.example", "user@example.com"]
    assert after[old].key == old_key("relaunch", "s", "User@example.com")
    again = materialise(bare_engine, loaded, OCCURRENCE)
    assert again.new_jobs == 0
    assert len(jobs(bare_engine)) == 2
