"""Property: whatever the jobs' states, ages and campaigns, a prune pass drops the message of
exactly the eligible jobs (finished, unchanged for longer than the retention period, of the
campaign asked for), trims exactly their journals to the final event, and changes nothing else.
On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.states import State
from dispatch.store import OutboxStore
from tests.support.examples import examples
from tests.support.pruning import journals, rows, run_prune

RETENTION_DAYS = 90
# Ages a day or more from the boundary: the database clock moves while the example runs.
AGES = st.sampled_from([0, 1, 30, 89, 91, 120, 1000])
JOBS = st.lists(
    st.tuples(st.sampled_from(list(State)), AGES, st.sampled_from(["a", "b"]), st.integers(1, 4)),
    max_size=12,
)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Written out, not imported from the code under test: in_doubt is terminal but never pruned.
FINISHED = {State.SENT, State.FAILED, State.CANCELLED}


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.delete(send_event))
        conn.execute(sa.delete(send_job))


def _insert(engine: Engine, jobs: list[tuple[State, int, str, int]]) -> set[str]:
    """Insert the jobs as they would be after their lives (each with ``events`` journal rows);
    returns the keys that are eligible for a 90-day prune of every campaign."""
    eligible: set[str] = set()
    with engine.begin() as conn:
        now = OutboxStore(engine.dialect.name).database_now(conn)
        for i, (state, days, campaign, events) in enumerate(jobs):
            key = hashlib.sha256(f"{i}".encode()).hexdigest()
            payload = f"Subject: {i}\r\n\r\nbody {i}\r\n".encode()
            job_id = conn.execute(
                sa.insert(send_job)
                .values(
                    key=key,
                    key_tuple="[]",
                    campaign=campaign,
                    step="s",
                    occurrence_at=EPOCH,
                    channel="email",
                    sender="s@herald.test",
                    recipient=f"u{i}@example.com",
                    mailbox=f"u{i}@example.com",
                    message_id=f"<{i}@herald.test>",
                    payload=payload,
                    payload_hash=hashlib.sha256(payload).hexdigest(),
                    state=state.value,
                    not_before=EPOCH,
                    max_claims=10,
                    max_send_attempts=5,
                    updated_at=now - timedelta(days=days),
                )
                .returning(send_job.c.id)
            ).scalar_one()
            conn.execute(
                sa.insert(send_event),
                [
                    {"job_id": job_id, "token": n, "to_state": state.value, "actor": "t"}
                    for n in range(events)
                ],
            )
            if state in FINISHED and days > RETENTION_DAYS:
                eligible.add(key)
    return eligible


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=JOBS, campaign=st.sampled_from([None, "a"]), keep=st.booleans())
def test_exactly_the_eligible_jobs_are_pruned(
    engine: Engine, jobs: list[tuple[State, int, str, int]], campaign: str | None, keep: bool
) -> None:
    _reset(engine)
    eligible = _insert(engine, jobs)
    before, journal_before = rows(engine), journals(engine)
    if campaign is not None:
        eligible = {k for k in eligible if before[k]["campaign"] == campaign}

    report = run_prune(engine, campaign=campaign, keep_journal=keep, batch_size=2)

    after, journal_after = rows(engine), journals(engine)
    assert {k for k, r in after.items() if r["payload"] == b""} == eligible
    for key, row in before.items():
        if key in eligible:
            assert after[key] == {**row, "payload": b""}
        else:
            assert after[key] == row
        trimmed = key in eligible and not keep
        events = journal_before[row["id"]]
        assert journal_after[row["id"]] == (events[-1:] if trimmed else events)
    assert report.jobs == len(eligible)
    assert report.payload_bytes == sum(len(before[k]["payload"]) for k in eligible)
    expected_events = 0 if keep else sum(len(journal_before[before[k]["id"]]) - 1 for k in eligible)
    assert report.events == expected_events
