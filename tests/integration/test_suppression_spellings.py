"""Property: a suppressed mailbox is blocked under every spelling, and only that mailbox.

Hypothesis draws a mailbox (dot-atom or quoted local part; ASCII or IDN domain), suppresses
it under one hostile spelling, and materialises jobs for other hostile spellings of it and for
look-alike mailboxes (tests/support/spellings.py), each with its mailbox identity as
``scheduler.compose`` computes it. At T4, on SQLite and PostgreSQL, every spelling's job is
refused (cancelled, "suppressed") and every look-alike's job goes out.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from campaigns.addresses import mailbox_identity
from campaigns.suppression import suppress
from dispatch.models import send_event, send_job, suppression
from dispatch.outbox.jobs import SUPPRESSED, NewJob
from dispatch.states import State
from dispatch.store import OutboxStore
from tests.support.examples import examples
from tests.support.spellings import Mailbox, lookalikes, mailboxes, spellings

_serial = itertools.count()


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), mailbox=mailboxes)
def test_every_spelling_has_the_identity_and_no_lookalike_does(
    data: st.DataObject, mailbox: Mailbox
) -> None:
    identity = mailbox_identity(mailbox.canonical())
    for _ in range(5):
        spelling = data.draw(spellings(mailbox), label="spelling")
        assert mailbox_identity(spelling) == identity, spelling
        other = data.draw(lookalikes(mailbox), label="lookalike")
        assert mailbox_identity(other.canonical()) != identity, other


def _job(recipient: str, list_scope: str | None) -> NewJob:
    n = next(_serial)
    when = datetime.now(UTC) - timedelta(seconds=1)
    return NewJob(
        key=f"{n:064x}",
        key_tuple="[]",
        campaign="news",
        step="s",
        occurrence_at=when,
        channel="email",
        sender="news@herald.test",
        recipient=recipient.strip(),
        mailbox=mailbox_identity(recipient),  # what scheduler.compose stores
        message_id=f"<{n}@herald.test>",
        payload=b"Subject: x\r\n\r\nbody\r\n",
        not_before=when,
        list_scope=list_scope,
    )


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.data(),
    mailbox=mailboxes,
    scope=st.sampled_from(["global", "list:news"]),
    transactional=st.booleans(),
)
def test_t4_refuses_every_spelling_and_only_that_mailbox(
    engine: Engine, data: st.DataObject, mailbox: Mailbox, scope: str, transactional: bool
) -> None:
    with engine.begin() as conn:  # each example starts from an empty outbox
        for table in (send_event, send_job, suppression):
            conn.execute(sa.delete(table))
    store = OutboxStore(engine.dialect.name)
    blocked = data.draw(st.lists(spellings(mailbox), min_size=1, max_size=4), label="spellings")
    others = data.draw(st.lists(lookalikes(mailbox), min_size=1, max_size=4), label="lookalikes")
    with engine.begin() as conn:
        assert suppress(
            conn, data.draw(spellings(mailbox), label="suppressed as"), "x", scope=scope
        )
    list_scope = None if transactional else "list:news"
    # One job per campaign occurrence and mailbox: each spelling is its own campaign's job.
    jobs = [_job(address, list_scope) for address in blocked]
    jobs += [_job(other.canonical(), list_scope) for other in others]
    jobs = [NewJob(**{**job.__dict__, "campaign": f"c{i}"}) for i, job in enumerate(jobs)]
    with engine.begin() as conn:
        assert store.enqueue(conn, jobs) == len(jobs)
        claimed = store.claim(conn, owner="w", limit=100, lease_seconds=60)
    leases = [job.lease for job in claimed]
    with engine.begin() as conn:
        started = store.start_sends(conn, leases, margin_seconds=0, actor="w")
        settled = store.settle_unstartable(
            conn, [lease for lease in leases if lease[0] not in started], actor="w"
        )
    by_id = {job.id: job.recipient for job in claimed}
    spared = transactional and scope != "global"  # a list unsubscribe spares receipts
    expect_blocked = set() if spared else {a.strip() for a in blocked}
    assert {by_id[i] for i in settled} == expect_blocked
    assert set(settled.values()) <= {State.CANCELLED}
    assert {by_id[i] for i in started} == {j.recipient for j in jobs} - expect_blocked
    with engine.connect() as conn:
        reasons = set(
            conn.execute(
                sa.select(send_job.c.outcome_text).where(send_job.c.state == "cancelled")
            ).scalars()
        )
    assert reasons <= {SUPPRESSED}
