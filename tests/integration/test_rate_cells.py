"""The shared rate cells and W3 (dispatch.outbox.rates, memory_rates), on memory, SQLite and
PostgreSQL: the same decisions from one conditional UPDATE per slot as from the pure arithmetic.

Rates here are slow (per hour) so a real database clock moving during a test changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dispatch.outbox import Deferral, SlotAsk
from dispatch.rates import SLOWDOWN_CODES, SLOWDOWN_SECONDS
from dispatch.states import State
from tests.integration.test_outbox_contract import claim, enqueue, harness, past
from tests.support.outboxes import Harness, ManualClock, MemoryHarness, new_job

__all__ = ["harness"]  # the fixture, on memory, SQLite and PostgreSQL

HOURLY = 2 / 3600  # 2/h: a burst of one, then one slot every 30 minutes


def asks(keys: tuple[str, ...], n: int, first: int = 1) -> list[SlotAsk]:
    return [SlotAsk((first + i, 1), keys) for i in range(n)]


def near(a: datetime, b: datetime, seconds: float = 60) -> bool:
    return abs((a - b).total_seconds()) < seconds


def test_a_cell_gives_its_burst_then_spreads_the_refused_over_their_slots(
    harness: Harness,
) -> None:
    with harness.begin() as tx:
        harness.outbox.set_rates(tx, {"domain:a.test": HOURLY})
        refused = harness.outbox.acquire_slots(tx, asks(("domain:a.test",), 4))
    now = datetime.now(UTC) if not isinstance(harness, MemoryHarness) else harness.clock()
    assert sorted(refused) == [2, 3, 4]  # the first, then nothing free now
    for n, job_id in enumerate([2, 3, 4], start=1):
        assert near(refused[job_id].due, now + timedelta(seconds=1800 * n))
        assert refused[job_id].key == "domain:a.test"
        assert near(refused[job_id].at, now)
    with harness.begin() as tx:  # the cell remembers: still nothing free
        assert set(harness.outbox.acquire_slots(tx, asks(("domain:a.test",), 1, 9))) == {9}


def test_a_job_needs_a_slot_of_every_key_and_keys_without_a_cell_do_not_limit(
    harness: Harness,
) -> None:
    with harness.begin() as tx:
        harness.outbox.set_rates(tx, {"campaign:c": 10.0, "domain:a.test": HOURLY})
        both = ("campaign:c", "domain:a.test")
        refused = harness.outbox.acquire_slots(tx, asks(both, 3) + asks(("domain:none",), 5, 10))
        assert set(refused) == {2, 3}  # the campaign's burst of 10 lets 3; the domain 1
        assert harness.outbox.rate_limits(tx) == {"campaign:c": 10.0, "domain:a.test": HOURLY}
        assert harness.outbox.rate_limits(tx, "campaign:") == {"campaign:c": 10.0}


def test_a_refusal_names_the_key_that_refused_and_the_keys_before_it_spent_a_slot(
    harness: Harness,
) -> None:
    """A worker learns from a refusal only what it says: under two limits (a campaign's and
    its recipients' domain's), which one has no slot, so that its next claims of that key
    wait for the slot instead of each meeting a refusal after MAIL and RCPT."""
    with harness.begin() as tx:
        o = harness.outbox
        o.set_rates(tx, {"campaign:c": HOURLY, "domain:a.test": 10.0})
        o.set_rates(tx, {"campaign:d": 10.0, "domain:b.test": HOURLY})
        first = o.acquire_slots(tx, asks(("campaign:c", "domain:a.test"), 2))
        # Job 3 takes the domain's burst of one; 4 and 5 each take a campaign slot first (the
        # keys in sorted order), then meet the domain's refusal.
        later = o.acquire_slots(tx, asks(("campaign:d", "domain:b.test"), 3, 3))
    assert {i: r.key for i, r in first.items()} == {2: "campaign:c"}  # its burst is one
    assert {i: r.key for i, r in later.items()} == {4: "domain:b.test", 5: "domain:b.test"}


def test_the_slots_a_job_took_before_its_refusal_are_spent() -> None:
    clock = ManualClock(datetime(2026, 12, 3, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        o = h.outbox
        o.set_rates(tx, {"campaign:d": 10.0, "domain:b.test": HOURLY})
        refused = o.acquire_slots(tx, asks(("campaign:d", "domain:b.test"), 3))
        assert {i: (r.key, r.at) for i, r in refused.items()} == {
            2: ("domain:b.test", clock()),
            3: ("domain:b.test", clock()),
        }
        left = 10 - 3  # the campaign's burst, less job 1's slot and the two spent
        assert set(o.acquire_slots(tx, asks(("campaign:d",), left + 1, 10))) == {10 + left}


def test_changing_a_limit_keeps_the_pace_and_none_removes_it(harness: Harness) -> None:
    with harness.begin() as tx:
        o = harness.outbox
        o.set_rates(tx, {"campaign:c": HOURLY})
        assert o.acquire_slots(tx, asks(("campaign:c",), 1)) == {}
        o.set_rates(tx, {"campaign:c": HOURLY * 2})  # the TAT stays: no fresh burst
        assert set(o.acquire_slots(tx, asks(("campaign:c",), 1, 2))) == {2}
        o.set_rates(tx, {"campaign:c": None})
        assert o.rate_limits(tx) == {}
        assert o.acquire_slots(tx, asks(("campaign:c",), 3, 3)) == {}


def test_a_slowdown_halves_one_key_once_per_burst_of_refusals(harness: Harness) -> None:
    with harness.begin() as tx:
        o = harness.outbox
        o.set_rates(tx, {"domain:a.test": HOURLY, "domain:b.test": HOURLY})
        assert o.slow_down(tx, "domain:a.test") == 0.5
        assert o.slow_down(tx, "domain:a.test") is None  # the same burst: once
        assert o.slow_down(tx, "domain:nowhere") is None
        # Half the rate: after the first slot, the next is an hour away, not half an hour.
        slow = o.acquire_slots(tx, asks(("domain:a.test",), 2))
        fast = o.acquire_slots(tx, asks(("domain:b.test",), 2, 3))
    now = datetime.now(UTC) if not isinstance(harness, MemoryHarness) else harness.clock()
    assert near(slow[2].due, now + timedelta(seconds=3600))
    assert near(fast[4].due, now + timedelta(seconds=1800))


def test_a_slowdown_halves_again_after_a_while_down_to_a_floor_then_ends() -> None:
    clock = ManualClock(datetime(2026, 12, 3, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.set_rates(tx, {"domain:a.test": 16.0})
    factors = []
    for _ in range(6):
        with h.begin() as tx:
            factors.append(h.outbox.slow_down(tx, "domain:a.test"))
        clock.advance(31)
    assert factors == [0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0625]
    clock.advance(SLOWDOWN_SECONDS)  # no refusal for ten minutes: the full rate again
    with h.begin() as tx:
        assert h.outbox.acquire_slots(tx, asks(("domain:a.test",), 16)) == {}


def test_the_memory_cell_paces_exactly_as_the_arithmetic_says() -> None:
    clock = ManualClock(datetime(2026, 12, 3, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.set_rates(tx, {"domain:a.test": 5.0})
    granted = 0
    for _ in range(100):  # 20 seconds, asking 3 every 0.2 s
        with h.begin() as tx:
            granted += 3 - len(h.outbox.acquire_slots(tx, asks(("domain:a.test",), 3)))
        clock.advance(0.2)
    assert granted == 5 + 99  # the burst, then one per interval


def test_a_rate_limited_claim_goes_back_uncounted_until_its_slot(harness: Harness) -> None:
    enqueue(harness, new_job("a", past(), max_claims=1))
    (job,) = claim(harness)
    slot = datetime.now(UTC) + timedelta(hours=2)
    with harness.begin() as tx:
        o = harness.outbox
        assert o.rate_limited_claims(tx, [Deferral((job.id, job.token + 1), slot)], actor="w") == (
            set()
        )
        assert o.rate_limited_claims(tx, [Deferral(job.lease, slot)], actor="w") == {job.id}
        assert o.rate_limited_claims(tx, [Deferral(job.lease, slot)], actor="w") == set()
        (row,) = o.jobs_in_state(tx, State.PENDING)
        events = o.events(tx, [job.id])
        due = o.next_due_in(tx)
    assert (row.claims, row.send_attempts) == (0, 0)  # neither the claim nor an attempt
    assert due is not None
    assert abs(due - 7200) < 60
    assert [(e.from_state, e.to_state) for e in events][-1] == ("claimed", "pending")
    assert events[-1].detail.startswith("rate limited; due ")
    assert claim(harness) == []  # not before its slot


def test_the_replies_that_slow_a_domain_down() -> None:
    assert frozenset({421, 451, 454}) == SLOWDOWN_CODES
