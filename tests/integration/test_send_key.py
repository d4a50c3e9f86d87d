"""send_key decides which jobs exist (migration 0009), through both enqueue paths.

Property: whatever a batch holds (keys and mailboxes repeated, taken by earlier jobs, any
occurrence time to the microsecond), every key row that went in has exactly one job with that
key and mailbox, and every job has its key row pointing at it: no job without a key, no key
without its job, no placeholder left behind.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.models import send_job, send_key
from dispatch.store import NewJob, OutboxStore
from tests.support.factories import new_job
from tests.support.outboxes import empty_outbox

BASE = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@st.composite
def batches(draw: st.DrawFn) -> list[NewJob]:
    jobs = []
    for _ in range(draw(st.integers(1, 12))):
        key = draw(st.sampled_from(["a", "b", "c", "d"])) * 64
        mailbox = draw(st.sampled_from(["m0@x.test", "m1@x.test", "m2@x.test"]))
        micros = draw(st.integers(0, 10**6 - 1))
        at = BASE + timedelta(microseconds=micros)
        jobs.append(replace(new_job(key, due=at, recipient=mailbox), occurrence_at=BASE))
    return jobs


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=batches(), second=batches(), micros=st.integers(0, 10**6 - 1))
def test_every_key_row_has_its_job_and_every_job_its_key(
    engine: Engine, first: list[NewJob], second: list[NewJob], micros: int
) -> None:
    store = OutboxStore(engine.dialect.name)
    at = BASE + timedelta(microseconds=micros)  # an occurrence a float may not hold exactly
    second = [replace(job, occurrence_at=at) for job in second]
    with engine.begin() as conn:
        empty_outbox(conn)
    created = 0
    with engine.begin() as conn:
        created += store.enqueue(conn, first)
        created += store.enqueue(conn, second)
    with engine.connect() as conn:
        jobs = conn.execute(sa.select(send_job.c.id, send_job.c.key, send_job.c.mailbox)).all()
        keys = conn.execute(sa.select(send_key.c.job_id, send_key.c.key, send_key.c.mailbox)).all()
    assert len(jobs) == created
    assert sorted(tuple(j) for j in jobs) == sorted(tuple(k) for k in keys)
    assert len({j.key for j in jobs}) == len(jobs)
    assert created == _expected(first + second)


def _expected(jobs: list[NewJob]) -> int:
    """The rule, in batch order: a job is new unless its key or its mailbox identity (campaign,
    step, occurrence, mailbox) is already taken, by an earlier job or an earlier row."""
    keys: set[str] = set()
    identities: set[tuple[object, ...]] = set()
    new = 0
    for job in jobs:
        identity = (job.campaign, job.step, job.occurrence_at, job.mailbox_identity)
        if job.key in keys or identity in identities:
            continue
        keys.add(job.key)
        identities.add(identity)
        new += 1
    return new
