"""A batch of leases fences each job by its own token, on both databases, whatever the batch
mixes: T4 and the outcomes change exactly the jobs whose (id, token) pair is current, write the
values given for each (codes bound as an array literal on PostgreSQL, NULL included), and leave
a stale, future or another job's token without effect — no row changed, no journal row."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.outbox.jobs import Completion
from dispatch.states import State
from dispatch.store import OutboxStore
from tests.support.examples import examples
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # due before anything an earlier example left pending
BIG = 2**40  # tokens as a long-lived outbox reaches them
INT4 = 2**31 - 1

# How the lease handed to the store relates to the job's current one.
EXACT, OLDER, NEWER, OTHERS = "exact", "older", "newer", "another job's"
cases = st.lists(
    st.tuples(
        st.sampled_from([EXACT, EXACT, OLDER, NEWER, OTHERS]),
        st.sampled_from([State.SENT, State.FAILED, State.IN_DOUBT, State.PENDING]),
        st.none() | st.integers(min_value=-INT4 - 1, max_value=INT4),
    ),
    min_size=1,
    max_size=8,
)


def _lease(kind: str, job: tuple[int, int], other: tuple[int, int]) -> tuple[int, int]:
    job_id, token = job
    if kind == OLDER:
        return job_id, token - 1
    if kind == NEWER:
        return job_id, token + 1
    if kind == OTHERS:
        return job_id, other[1] if other[1] != token else token + 7
    return job_id, token


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cases=cases)
def test_a_batch_changes_only_the_jobs_whose_own_token_it_carries(
    engine: Engine, cases: list[Any]
) -> None:
    store = OutboxStore(engine.dialect.name)
    tag = uuid.uuid4().hex[:12]
    with engine.begin() as conn:
        jobs = [new_job(f"{tag}{i:052d}", EPOCH, payload=b"x") for i in range(len(cases))]
        assert store.enqueue(conn, jobs) == len(cases)
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.key.startswith(tag))
            .values(lease_token=send_job.c.lease_token + BIG)
        )
        claimed = store.claim(conn, owner="w", limit=len(cases), lease_seconds=600)
    assert sorted(j.key for j in claimed) == sorted(j.key for j in jobs)
    current = sorted(j.lease for j in claimed)
    given_ = [
        _lease(kind, lease, current[(i + 1) % len(current)])
        for i, ((kind, _, _), lease) in enumerate(zip(cases, current, strict=True))
    ]
    good = {lease[0] for lease, (kind, _, _) in zip(given_, cases, strict=True) if kind == EXACT}
    if len(current) == 1:  # "another job's" token needs another job: it is then stale
        good = {lease[0] for lease in given_ if lease in current}

    with engine.begin() as conn:
        started = store.start_sends(conn, given_, margin_seconds=0, actor="w")
    assert set(started) == good

    completions = [
        Completion(lease, target, code, f"reply {code}", retry_in=60.0)
        for lease, (_, target, code) in zip(given_, cases, strict=True)
    ]
    with engine.begin() as conn:
        done = store.complete(conn, completions, actor="w")
    assert done == good

    with engine.connect() as conn:
        rows = {
            r.id: r
            for r in conn.execute(
                sa.select(send_job.c.id, send_job.c.state, send_job.c.outcome_code).where(
                    send_job.c.id.in_([lease[0] for lease in current])
                )
            )
        }
        journal = conn.execute(
            sa.select(send_event.c.job_id, send_event.c.to_state)
            .where(send_event.c.job_id.in_([lease[0] for lease in current]))
            .order_by(send_event.c.id)
        ).all()
    for lease, (_, target, code) in zip(given_, cases, strict=True):
        row = rows[lease[0]]
        steps = [to for job_id, to in journal if job_id == lease[0]]
        if lease[0] in good:
            assert (row.state, row.outcome_code) == (target.value, code)
            assert steps == ["pending", "claimed", "sending", target.value]
        else:  # fenced out: still claimed under its own lease, nothing written
            assert (row.state, row.outcome_code) == ("claimed", None)
            assert steps == ["pending", "claimed"]
