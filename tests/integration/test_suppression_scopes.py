"""Scoped suppression at the T4 guard, on memory, SQLite and PostgreSQL (one contract).

T4 refuses a job whose mailbox is suppressed ``global``ly or in the job's own ``list_scope``;
a transactional job (``list_scope`` NULL) obeys ``global`` only. The refused claim ends
``cancelled`` with reason ``suppressed`` (T4c), journalled; lifting a suppression lifts that
scope only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatch.outbox import Completion
from dispatch.outbox.jobs import SUPPRESSED, ClaimedJob
from dispatch.states import State, T
from tests.integration import test_outbox_contract as contract
from tests.integration.test_outbox_contract import claim, enqueue, journal_is_consistent
from tests.support.outboxes import Harness, new_job

harness = contract.harness  # the contract's fixture: memory, SQLite and PostgreSQL

NEWS, OTHER, GLOBAL = "list:news", "list:other", "global"


def past() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=1)


def refused_and_settled(h: Harness, job: ClaimedJob) -> dict[int, State]:
    lease = job.lease
    with h.begin() as tx:
        started = h.outbox.start_sends(tx, [lease], margin_seconds=0, actor="w")
        if started:
            return {lease[0]: State.SENDING}
        settled: dict[int, State] = h.outbox.settle_unstartable(tx, [lease], actor="w")
        return settled


@pytest.mark.parametrize(
    ("job_scope", "suppressed_in", "refused"),
    [
        (NEWS, GLOBAL, True),
        (NEWS, NEWS, True),
        (NEWS, OTHER, False),  # an unsubscribe from another list
        (None, GLOBAL, True),  # transactional mail obeys global suppression…
        (None, NEWS, False),  # …and no list's
        (None, OTHER, False),
    ],
)
def test_t4_checks_global_and_the_jobs_own_list(
    harness: Harness, job_scope: str | None, suppressed_in: str, refused: bool
) -> None:
    enqueue(harness, new_job("a", past(), list_scope=job_scope))
    (job,) = claim(harness)
    with harness.begin() as tx:
        assert harness.outbox.suppress(tx, job.recipient, "unsubscribed", scope=suppressed_in)
    expected = State.CANCELLED if refused else State.SENDING
    assert refused_and_settled(harness, job) == {job.id: expected}
    journal_is_consistent(harness)
    if refused:
        last = [e for e in journal_events(harness) if e.job_id == job.id][-1]
        assert (last.from_state, last.to_state, last.detail) == ("claimed", "cancelled", SUPPRESSED)
        assert T.UNSTARTABLE_CANCELLED.edges() == {(State.CLAIMED, State.CANCELLED)}


def journal_events(h: Harness) -> list:  # type: ignore[type-arg]
    with h.begin() as tx:
        return list(h.outbox.events(tx))


def test_suppression_beats_every_later_reason_but_superseded(harness: Harness) -> None:
    """Suppressed and out of attempts: the job ends cancelled/suppressed, not a dead letter."""
    enqueue(harness, new_job("a", past(), max_send_attempts=1, list_scope=NEWS))
    (job,) = claim(harness)
    with harness.begin() as tx:
        harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w")
        retry = Completion(job.lease, State.PENDING, 451, "try later", before_data=False)
        harness.outbox.complete(tx, [retry], actor="w")
    (job,) = claim(harness)  # attempts are used up: T4 would fail it (T4f)…
    with harness.begin() as tx:
        harness.outbox.suppress(tx, job.recipient, "complaint", scope=NEWS)
    assert refused_and_settled(harness, job) == {job.id: State.CANCELLED}  # …but it is suppressed


def test_lifting_a_suppression_lifts_that_scope_only(harness: Harness) -> None:
    enqueue(harness, new_job("a", past(), list_scope=NEWS))
    (job,) = claim(harness)
    with harness.begin() as tx:
        assert harness.outbox.suppress(tx, job.recipient, "manual", scope=GLOBAL)
        assert harness.outbox.suppress(tx, job.recipient, "unsubscribed", scope=NEWS)
        assert harness.outbox.unsuppress(tx, job.recipient, scope=GLOBAL) is True
        assert harness.outbox.unsuppress(tx, job.recipient, scope=GLOBAL) is False
        assert harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w") == {}
        assert harness.outbox.unsuppress(tx, job.recipient, scope=NEWS) is True
        assert set(harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w")) == {
            job.id
        }


def test_suppress_many_inserts_each_entry_once(harness: Harness) -> None:
    rows = [
        ("a@example.com", GLOBAL, "bounce"),
        ("a@example.com", NEWS, "unsubscribed"),
        ("b@example.com", GLOBAL, "complaint"),
    ]
    with harness.begin() as tx:
        assert harness.outbox.suppress(tx, "b@example.com", "earlier") is True
        assert harness.outbox.suppress_many(tx, rows, source="import") == 2
        assert harness.outbox.suppress_many(tx, rows, source="import") == 0
