"""A rate-limit slot is taken in the transaction of the send's T4 (dispatch.rate_gate's
``SlotThenStart``), so the sends themselves keep the limit whatever the worker's scheduling.

The property: claims made at any moments, T4s asked for in any batches after any delays (a
worker waiting for a free concurrency slot, a slow commit), refused jobs coming back when due:
the T4 moments never exceed ``rate * (t + EPSILON) + burst`` in any window of ``t`` seconds; no
job starts twice; every refused job is back in ``pending`` with its claim uncounted; and the
cell moved exactly once per started send (no slot taken by a job that did not start). With the
slot taken at the claim instead, the same schedules put up to every granted job's T4 in one
instant (tests/processes/test_rate_limit_processes.py shows it through real workers).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch import rates
from dispatch.commit_requests import CommitContext
from dispatch.instrumentation import NULL_INSTRUMENTATION
from dispatch.rate_requests import Slotted, SlotThenStart
from dispatch.states import State
from tests.integration.test_outbox_contract import claim, enqueue, harness, past
from tests.support.examples import examples
from tests.support.outboxes import Harness, ManualClock, MemoryHarness, new_job

__all__ = ["harness"]  # the fixture, on memory, SQLite and PostgreSQL

KEY = "domain:example.com"


def context(h: Harness) -> CommitContext:
    return CommitContext(
        store=cast(Any, h.outbox),
        owner="w",
        lease_seconds=3600,
        t4_margin_seconds=1,
        instrumentation=NULL_INSTRUMENTATION,
    )


def start(h: Harness, jobs: list[Any]) -> list[Slotted]:
    with h.begin() as tx:
        return SlotThenStart.apply(context(h), tx, [SlotThenStart(j.lease, (KEY,)) for j in jobs])


@settings(max_examples=examples(60), deadline=None)
@given(
    per_second=st.sampled_from([0.5, 1.0, 2.5, 5.0, 20.0]),
    count=st.integers(1, 40),
    data=st.data(),
)
def test_t4_moments_keep_the_limit_however_the_sends_are_scheduled(
    per_second: float, count: int, data: st.DataObject
) -> None:
    clock = ManualClock(datetime(2026, 12, 3, 12, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.set_rates(tx, {KEY: per_second})
    enqueue(h, *(new_job(f"k{i}", clock() - timedelta(seconds=1)) for i in range(count)))
    held: dict[int, Any] = {}  # claimed, T4 not asked yet
    started: dict[int, datetime] = {}
    handed_back = 0
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        clock.advance(data.draw(st.floats(0, 1.5), label="delay"))
        for job in claim(h, limit=data.draw(st.integers(0, 10), label="claim"), lease_seconds=3600):
            held[job.id] = job
        if not held:
            continue
        chosen = data.draw(st.lists(st.sampled_from(sorted(held)), unique=True), label="T4 batch")
        results = start(h, [held[i] for i in chosen])
        for job_id, result in zip(chosen, results, strict=True):
            job = held.pop(job_id)
            if result.started is not None:
                assert job_id not in started  # never twice
                assert result.started == clock()  # the grant's moment is T4's
                started[job_id] = result.started
            else:  # refused a slot: handed back in the same transaction, due at its slot
                assert result.due is not None
                assert result.due > clock()
                handed_back += 1
                with h.begin() as tx:
                    row = tx.data.jobs[job_id]
                    assert row.state == State.PENDING.value
                    assert row.claims == job.claims - 1  # the claim is not counted
    moments = sorted(m.timestamp() for m in started.values())
    for i, first in enumerate(moments):
        for j in range(i, len(moments)):
            window = moments[j] - first
            assert j - i + 1 <= per_second * (window + rates.EPSILON) + rates.burst(per_second)
    # No slot leaked: replaying GCRA over the started sends alone gives the cell's TAT.
    tat: float | None = None
    for moment in moments:
        allowed, tat = rates.acquire(tat, moment, per_second)
        assert allowed
    with h.begin() as tx:
        assert tx.data.rates[KEY].tat == tat
    journal = [(j, source, target) for j, source, target in h.journal() if target == "sending"]
    assert sorted(j for j, _, _ in journal) == sorted(started)


def test_a_job_refused_a_slot_goes_back_and_one_whose_t4_guard_refuses_spends_it(
    harness: Harness,
) -> None:
    """On every outbox: a lease no longer ours takes the burst's one slot and is not started
    (the slot is spent unused: under-use of the limit, never a send over it); the jobs refused
    a slot are handed back (W3) in the same transaction, one interval apart."""
    with harness.begin() as tx:
        harness.outbox.set_rates(tx, {KEY: 2 / 3600})  # a burst of one, then 30 minutes
    enqueue(harness, *(new_job(f"k{i}", past()) for i in range(3)))
    first, second, third = sorted(claim(harness, limit=3, lease_seconds=3600), key=lambda j: j.id)
    stale = replace(first, token=first.token + 1)
    lost, refused, after = start(harness, [stale, second, third])
    assert lost == Slotted(None, None)  # T4's guard refused: the caller settles it
    assert refused.started is None
    assert refused.due is not None
    assert after.started is None
    assert after.due is not None
    assert (after.due - refused.due).total_seconds() > 1700  # one interval later each
    assert refused.refusal is not None
    assert after.refusal is not None
    assert (refused.refusal.key, after.refusal.key) == (KEY, KEY)  # the worker learns the key
    states = harness.states()
    assert states[first.id] == State.CLAIMED.value  # still ours to settle
    assert states[second.id] == states[third.id] == State.PENDING.value
