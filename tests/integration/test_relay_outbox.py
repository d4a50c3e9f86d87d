"""Relay outages in the outbox contract (W4, relay_status, R3's budgets), on memory, SQLite and
PostgreSQL alike."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from dispatch.models import relay_status
from dispatch.outbox import Completion
from dispatch.outbox.recovery import CLAIMS_EXHAUSTED, EXHAUSTED
from dispatch.outbox.relay import FORGET_AFTER
from dispatch.states import State
from tests.integration import test_outbox_contract as contract
from tests.integration.test_outbox_contract import claim, enqueue, journal_is_consistent, past
from tests.support.outboxes import Harness, MemoryHarness, SqlHarness, new_job

harness = contract.harness  # the same fixture: memory, SQLite and PostgreSQL

WHY = "relay unreachable: connection refused (smtp://relay.test:25)"


def hand_back(h: Harness, leases: list[tuple[int, int]], retry_in: float = 0.0) -> set[int]:
    with h.begin() as tx:
        done: set[int] = h.outbox.relay_unavailable_claims(
            tx, leases, retry_in=retry_in, why=WHY, actor="w"
        )
    return done


def pending(h: Harness) -> list:  # type: ignore[type-arg]
    with h.begin() as tx:
        return list(h.outbox.jobs_in_state(tx, State.PENDING))


def test_a_relay_hand_back_counts_neither_claim_nor_attempt(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()), new_job("b", past()))
    jobs = claim(harness)
    assert hand_back(harness, [j.lease for j in jobs], retry_in=30) == {j.id for j in jobs}
    rows = pending(harness)
    assert {(r.claims, r.send_attempts) for r in rows} == {(0, 0)}
    with harness.begin() as tx:
        due_in = harness.outbox.next_due_in(tx)
        events = harness.outbox.events(tx)
    assert due_in is not None
    assert 25 < due_in <= 30  # due when the breaker next tries the relay (database clock)
    handed = [e for e in events if e.from_state == "claimed"]
    assert sorted((e.job_id, e.to_state, e.detail) for e in handed) == sorted(
        (j.id, "pending", WHY) for j in jobs
    )
    # A stale lease hands back nothing.
    assert hand_back(harness, [j.lease for j in jobs]) == set()
    journal_is_consistent(harness)


def test_no_outage_however_long_lets_recovery_dead_letter_a_job(harness: Harness) -> None:
    enqueue(harness, new_job("a", past(), max_claims=2, max_send_attempts=1))
    for _ in range(25):  # far more outage rounds than max_claims
        (job,) = claim(harness)
        hand_back(harness, [job.lease])
        with harness.begin() as tx:
            report = harness.outbox.recover(tx, grace_seconds=0, actor="recovery")
        assert report.dead == 0
    (row,) = pending(harness)
    assert (row.claims, row.send_attempts) == (0, 0)
    journal_is_consistent(harness)


@pytest.mark.parametrize(
    ("attempts", "completion_before_data", "why"),
    [(1, False, EXHAUSTED), (5, True, CLAIMS_EXHAUSTED)],
)
def test_recovery_names_the_budget_that_ran_out(
    harness: Harness, attempts: int, completion_before_data: bool, why: str
) -> None:
    # Attempts: one DATA refused with 4xx. Claims: two pre-DATA retries (T6), no attempt.
    enqueue(harness, new_job("a", past(), max_claims=2, max_send_attempts=attempts))
    rounds = 1 if not completion_before_data else 2
    for _ in range(rounds):
        (job,) = claim(harness)
        if not completion_before_data:
            with harness.begin() as tx:
                harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w")
        with harness.begin() as tx:
            harness.outbox.complete(
                tx,
                [
                    Completion(
                        job.lease, State.PENDING, 451, "later", before_data=completion_before_data
                    )
                ],
                actor="w",
            )
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=0, actor="recovery")
        (dead,) = harness.outbox.jobs_in_state(tx, State.FAILED)
    assert report.dead == 1
    assert dead.outcome_text == why
    journal_is_consistent(harness)


def test_relay_status_keeps_an_outage_since_its_start_until_a_send_succeeds(
    harness: Harness,
) -> None:
    relay = "smtp://relay.test:25"
    with harness.begin() as tx:
        assert (
            harness.outbox.record_relay(tx, relay, reachable=True, error=None, worker="w1") is False
        )
        assert harness.outbox.relay_statuses(tx) == []  # a healthy relay leaves no row
    with harness.begin() as tx:
        assert harness.outbox.record_relay(
            tx, relay, reachable=False, error="connection refused", worker="w1"
        )
    with harness.begin() as tx:
        (first,) = harness.outbox.relay_statuses(tx)
    # Another worker meets the same outage later: still the same outage, newest error.
    with harness.begin() as tx:
        again = harness.outbox.record_relay(
            tx, relay, reachable=False, error="connect timeout after 60s", worker="w2"
        )
        (second,) = harness.outbox.relay_statuses(tx)
    assert again is False
    assert (second.state, second.since) == ("unreachable", first.since)
    assert (second.last_error, second.worker) == ("connect timeout after 60s", "w2")
    with harness.begin() as tx:
        assert harness.outbox.record_relay(tx, relay, reachable=True, error=None, worker="w3")
        (ok,) = harness.outbox.relay_statuses(tx)
    assert (ok.state, ok.worker) == ("ok", "w3")
    assert ok.since >= first.since
    # A new outage starts a new "since".
    with harness.begin() as tx:
        assert harness.outbox.record_relay(tx, relay, reachable=False, error="x", worker="w1")
        (down,) = harness.outbox.relay_statuses(tx)
    assert down.state == "unreachable"
    assert down.since >= ok.since


def test_a_send_through_one_relay_forgets_another_nobody_reports_any_more(
    harness: Harness,
) -> None:
    """The wrong port of yesterday's run must not warn in `herald status` for ever once mail
    goes out through the fixed URL; an outage still being reported stays."""
    with harness.begin() as tx:
        harness.outbox.record_relay(tx, "smtp://old:1", reachable=False, error="x", worker="w")
        harness.outbox.record_relay(tx, "smtp://other:25", reachable=False, error="y", worker="w")
    long_ago = datetime.now(UTC) - timedelta(seconds=FORGET_AFTER + 60)
    if isinstance(harness, SqlHarness):
        with harness.begin() as conn:
            conn.execute(
                sa.update(relay_status)
                .where(relay_status.c.relay == "smtp://old:1")
                .values(updated_at=long_ago)
            )
    else:
        assert isinstance(harness, MemoryHarness)
        with harness.begin() as tx:
            old = tx.data.relays["smtp://old:1"]
            tx.data.relays["smtp://old:1"] = dataclasses.replace(
                old, updated_at=harness.clock() - timedelta(seconds=FORGET_AFTER + 60)
            )
    with harness.begin() as tx:
        harness.outbox.record_relay(tx, "smtp://new:587", reachable=True, error=None, worker="w")
        left = [(r.relay, r.state) for r in harness.outbox.relay_statuses(tx)]
    assert left == [("smtp://other:25", "unreachable")]
