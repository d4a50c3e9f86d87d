"""A drip pass reads only the enrollments that may be ready for their next step.

``ReadyPages.page`` (scheduler.drip_ready) finds each enrollment's previous step's job by what
its key is made of (campaign, step, ``enrolled_at``, mailbox) and lets through those at step
0, those past the campaign's steps and those whose previous job is sent, failed or cancelled.
The pass then decides from the job it finds by key, as before, so the page must hold every
enrollment that decision would move or end. The property holds the page, paged in any size,
to that model for any mix of enrollments and jobs in every state, with decoys: jobs of another
step, occurrence, mailbox or campaign.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.keys import KeyTuple
from dispatch.models import send_job
from dispatch.states import State
from dispatch.store import NewJob, OutboxStore
from scheduler import enrollment_store
from scheduler.drip_ready import ReadyPages
from scheduler.enrollment_store import EnrollmentStore, NewEnrollment
from scheduler.models import enrollment_table
from tests.support.examples import examples
from tests.support.outboxes import new_job

AT = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)
STEPS = ["welcome", "tips", "last"]
MAILBOXES = [f"m{i}@example.com" for i in range(8)]
JOB_STATES = [state.value for state in State]


def _job(
    campaign: str, step: str, occurrence: datetime, mailbox: str, state: str
) -> tuple[NewJob, str]:
    key = KeyTuple(campaign, step, occurrence, mailbox).key()
    job = replace(
        new_job(key, occurrence, campaign=campaign, step=step), recipient=mailbox, mailbox=mailbox
    )
    return job, state


enrollment = st.tuples(
    st.sampled_from(["active", "active", "left", "done"]),
    st.integers(0, len(STEPS) + 1),  # next_step, past the steps too
    st.sampled_from([None, *JOB_STATES]),  # the previous step's job: none, or in this state
)
decoy = st.tuples(
    st.integers(0, len(MAILBOXES) - 1),
    st.sampled_from(["another step", "another occurrence", "another mailbox", "another campaign"]),
    st.sampled_from(JOB_STATES),
)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(enrollment, min_size=len(MAILBOXES), max_size=len(MAILBOXES)),
    decoys=st.lists(decoy, max_size=6),
    page=st.integers(1, 10),
)
def test_a_ready_page_holds_exactly_the_enrollments_whose_wait_ended(
    engine: Engine,
    rows: list[tuple[str, int, str | None]],
    decoys: list[tuple[int, str, str]],
    page: int,
) -> None:
    store, pages = EnrollmentStore(engine.dialect.name), ReadyPages()
    outbox = OutboxStore(engine.dialect.name)
    e, j = enrollment_table.c, send_job.c
    entries = [NewEnrollment(m, m, None, {}, None, "audience") for m in MAILBOXES]
    jobs: list[tuple[NewJob, str]] = []
    for mailbox, (_, step, job_state) in zip(MAILBOXES, rows, strict=True):
        if job_state is not None and step >= 1:
            previous = STEPS[min(step, len(STEPS)) - 1]
            jobs.append(_job("c", previous, AT, mailbox, job_state))
    for index, kind, job_state in decoys:
        mailbox, (_, step, _) = MAILBOXES[index], rows[index]
        previous = STEPS[max(0, min(step, len(STEPS)) - 1)]
        if kind == "another step":
            previous = next(s for s in STEPS if s != previous)
        occurrence = AT + timedelta(seconds=1) if kind == "another occurrence" else AT
        other = "zz@example.com" if kind == "another mailbox" else mailbox
        campaign = "d" if kind == "another campaign" else "c"
        jobs.append(_job(campaign, previous, occurrence, other, job_state))
    with engine.connect() as conn, mock.patch.object(enrollment_store, "CHUNK", 3):
        try:
            store.enroll(conn, "c", entries, enrolled_at=AT)
            ids = dict(conn.execute(sa.select(e.mailbox, e.id)).all())
            for mailbox, (state, step, _) in zip(MAILBOXES, rows, strict=True):
                conn.execute(
                    sa.update(enrollment_table)
                    .where(e.id == ids[mailbox])
                    .values(state=state, next_step=step)
                )
            outbox.enqueue(conn, [job for job, _ in jobs])
            for job, job_state in jobs:
                conn.execute(sa.update(send_job).where(j.key == job.key).values(state=job_state))
            found: list[int] = []
            after = 0
            while batch := pages.page(conn, "c", STEPS, after_id=after, limit=page):
                assert len(batch) <= page
                found += [row.id for row in batch]
                after = batch[-1].id
        finally:
            conn.rollback()
    expected = []
    for mailbox, (state, step, job_state) in zip(MAILBOXES, rows, strict=True):
        if state != "active":
            continue
        # Sent, failed or cancelled: what scheduler.drip moves on from, finishes or ends.
        if step == 0 or step > len(STEPS) or job_state in {"sent", "failed", "cancelled"}:
            expected.append(ids[mailbox])
    assert found == sorted(expected)
