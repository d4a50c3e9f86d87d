"""Ending many drips at once (an audience that shrinks, suppressions): one locked UPDATE and one
withdrawal for the lot. The property holds ``end_drips`` to what ending each drip on its own
means, on both databases: exactly the active ones end, with the reason; exactly their
materialised steps' jobs that have not reached T4 are withdrawn; nothing else changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple
from dispatch.models import send_job
from dispatch.states import State
from dispatch.store import OutboxStore
from scheduler.enrollment import end_drips
from scheduler.enrollment_store import EnrollmentStore, NewEnrollment
from scheduler.models import enrollment_table
from tests.support.examples import examples
from tests.support.outboxes import new_job

AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
STEPS = ["welcome", "tips", "last"]
MAILBOXES = [f"m{i}@example.com" for i in range(8)]
WITHDRAWABLE = {"pending", "claimed"}  # not yet past T4 (T14's sources)

drip = st.tuples(
    st.sampled_from(["active", "active", "left", "done"]),
    st.lists(st.sampled_from([s.value for s in State]), max_size=len(STEPS)),  # its steps' jobs
)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    drips=st.lists(drip, min_size=len(MAILBOXES), max_size=len(MAILBOXES)),
    chosen=st.lists(st.integers(0, len(MAILBOXES) - 1), max_size=len(MAILBOXES)),
)
def test_ending_drips_together_ends_each_as_on_its_own(
    engine: Engine, drips: list[tuple[str, list[str]]], chosen: list[int]
) -> None:
    store, outbox = EnrollmentStore(engine.dialect.name), OutboxStore(engine.dialect.name)
    e, j = enrollment_table.c, send_job.c
    with engine.connect() as conn:
        try:
            store.enroll(
                conn,
                "c",
                [NewEnrollment(m, m, None, {}, None, "audience") for m in MAILBOXES],
                enrolled_at=AT,
            )
            ids = dict(conn.execute(sa.select(e.mailbox, e.id)).all())
            states: dict[str, str] = {}
            for mailbox, (state, jobs) in zip(MAILBOXES, drips, strict=True):
                conn.execute(
                    sa.update(enrollment_table)
                    .where(e.id == ids[mailbox])
                    .values(state=state, next_step=len(jobs))
                )
                for step, job_state in zip(STEPS, jobs, strict=False):
                    key = KeyTuple("c", step, AT, mailbox).key()
                    job = replace(new_job(key, AT, campaign="c", step=step), mailbox=mailbox)
                    outbox.enqueue(conn, [job])
                    conn.execute(sa.update(send_job).where(j.key == key).values(state=job_state))
                    states[key] = job_state
            rows = store.by_ids(conn, [ids[MAILBOXES[i]] for i in chosen])
            ended, withdrawn = end_drips(
                conn, "c", STEPS, rows, "left", reason="gone", actor="test"
            )
            after = {
                r.mailbox: (r.state, r.ended_reason)
                for r in conn.execute(sa.select(e.mailbox, e.state, e.ended_reason))
            }
            jobs_after = {
                r.key: (r.state, r.outcome_text)
                for r in conn.execute(sa.select(j.key, j.state, j.outcome_text))
            }
        finally:
            conn.rollback()
    picked = {MAILBOXES[i] for i in chosen}
    ending = {
        m
        for m, (state, _) in zip(MAILBOXES, drips, strict=True)
        if m in picked and state == "active"
    }
    assert ended == len(ending)
    expected_jobs: dict[str, str] = {}
    for mailbox, (_, jobs) in zip(MAILBOXES, drips, strict=True):
        for step, job_state in zip(STEPS, jobs, strict=False):
            key = KeyTuple("c", step, AT, mailbox).key()
            gone = mailbox in ending and job_state in WITHDRAWABLE
            expected_jobs[key] = "cancelled" if gone else job_state
    assert withdrawn == sum(1 for key, state in expected_jobs.items() if state != states[key])
    assert {key: state for key, (state, _) in jobs_after.items()} == expected_jobs
    for key, (state, text) in jobs_after.items():
        if state != states[key]:
            assert text == "gone"
    for mailbox, (state, _) in zip(MAILBOXES, drips, strict=True):
        expected = ("left", "gone") if mailbox in ending else (state, None)
        assert after[mailbox] == expected
