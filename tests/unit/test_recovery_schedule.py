"""When the worker's next recovery pass is due (WorkerConfig.next_recovery_in), and what the
memory outbox's recovery reports about the leases it left held, on a clock the test moves.

An unstarted claim is recoverable at its expiry, a started send the grace after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.outbox.jobs import HeldLeases
from dispatch.worker_config import RECOVERY_FLOOR_SECONDS, RECOVERY_MARGIN_SECONDS, WorkerConfig
from tests.support.outboxes import ManualClock, MemoryHarness, new_job

CONFIG = WorkerConfig(recovery_interval=5.0, recovery_grace_seconds=2.0)


def test_with_no_lease_held_the_pass_waits_the_interval() -> None:
    assert CONFIG.next_recovery_in(HeldLeases()) == 5.0


def test_a_claim_expiring_soon_brings_the_pass_forward_to_its_expiry() -> None:
    wait = CONFIG.next_recovery_in(HeldLeases(claimed_in=1.0))
    assert wait == pytest.approx(1.0 + RECOVERY_MARGIN_SECONDS)


def test_a_send_expiring_soon_brings_the_pass_forward_to_its_expiry_plus_grace() -> None:
    wait = CONFIG.next_recovery_in(HeldLeases(sending_in=1.0))
    assert wait == pytest.approx(3.0 + RECOVERY_MARGIN_SECONDS)


def test_the_first_lease_to_become_recoverable_decides() -> None:
    # The send expires first but owes the grace; the claim is recoverable sooner.
    wait = CONFIG.next_recovery_in(HeldLeases(claimed_in=2.5, sending_in=1.0))
    assert wait == pytest.approx(2.5 + RECOVERY_MARGIN_SECONDS)


def test_a_lease_expiring_after_the_interval_does_not_delay_the_pass() -> None:
    assert CONFIG.next_recovery_in(HeldLeases(claimed_in=60.0, sending_in=60.0)) == 5.0


def test_a_lease_already_recoverable_never_makes_the_loop_spin() -> None:
    assert CONFIG.next_recovery_in(HeldLeases(claimed_in=-30.0)) == RECOVERY_FLOOR_SECONDS
    assert CONFIG.next_recovery_in(HeldLeases(sending_in=-30.0)) == RECOVERY_FLOOR_SECONDS


expiries = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))


@given(expiries, expiries)
def test_the_wait_is_always_between_the_floor_and_the_interval(
    claimed: float | None, sending: float | None
) -> None:
    wait = CONFIG.next_recovery_in(HeldLeases(claimed_in=claimed, sending_in=sending))
    assert RECOVERY_FLOOR_SECONDS <= wait <= CONFIG.recovery_interval
    if wait > RECOVERY_FLOOR_SECONDS and wait < CONFIG.recovery_interval:
        # Never before the first lease is recoverable, and at that moment (plus the margin).
        due = [
            t
            for t in (
                claimed,
                None if sending is None else sending + CONFIG.recovery_grace_seconds,
            )
            if t is not None
        ]
        assert wait == pytest.approx(min(due) + RECOVERY_MARGIN_SECONDS)


def test_memory_recovery_reports_the_earliest_leases_still_held() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.enqueue(tx, [new_job("a", clock()), new_job("b", clock()), new_job("c", clock())])
    with h.begin() as tx:
        assert h.outbox.recover(tx, grace_seconds=2, actor="r").held == HeldLeases()
    with h.begin() as tx:
        (started,) = h.outbox.claim(tx, owner="w0", limit=1, lease_seconds=10)
        h.outbox.start_sends(tx, [started.lease], margin_seconds=1, actor="w0")
        h.outbox.claim(tx, owner="w1", limit=1, lease_seconds=10)
    clock.advance(3)
    with h.begin() as tx:
        h.outbox.claim(tx, owner="w2", limit=1, lease_seconds=10)
    clock.advance(1)
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.in_doubt) == (0, 0)
    assert (report.held.claimed_in, report.held.sending_in) == pytest.approx((6.0, 6.0))
    clock.advance(6.5)  # w0's send and w1's claim expired 0.5 s ago; w2's claim expires at 13 s
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.in_doubt) == (1, 0)  # the claim at once, the send not yet
    assert (report.held.claimed_in, report.held.sending_in) == pytest.approx((2.5, -0.5))
    assert CONFIG.next_recovery_in(report.held) == pytest.approx(1.5 + RECOVERY_MARGIN_SECONDS)
    clock.advance(1.6)  # w0's send is past its grace
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.in_doubt) == (0, 1)
    assert report.held.claimed_in == pytest.approx(0.9)
    assert report.held.sending_in is None


# Whole milliseconds: a lease time is kept to the microsecond, and the test's own arithmetic
# must not round differently from the outbox's.
millis = st.integers(min_value=-10_000, max_value=10_000).map(lambda ms: ms / 1000)


@given(
    st.lists(st.tuples(st.booleans(), millis), min_size=1, max_size=8),
    st.integers(min_value=0, max_value=5_000).map(lambda ms: ms / 1000),
)
def test_recovery_takes_claims_at_expiry_and_sends_after_the_grace(
    leases: list[tuple[bool, float]], grace: float
) -> None:
    """Each job is claimed (started or not) and its lease set to expire ``left`` seconds from
    now; one pass must take exactly the expired claims and the sends expired beyond the grace,
    and report the earliest of the rest."""
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.enqueue(tx, [new_job(f"k{i}", clock()) for i in range(len(leases))])
        claimed = h.outbox.claim(tx, owner="w", limit=len(leases), lease_seconds=60)
        started = [c.lease for c, (send, _) in zip(claimed, leases, strict=True) if send]
        h.outbox.start_sends(tx, started, margin_seconds=1, actor="w")
        for c, (_, left) in zip(claimed, leases, strict=True):
            tx.data.jobs[c.id].lease_expires_at = clock() + timedelta(seconds=left)
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=grace, actor="r")
    states = h.states()
    for c, (send, left) in zip(claimed, leases, strict=True):
        if send:
            assert states[c.id] == ("in_doubt" if left < -grace else "sending")
        else:
            assert states[c.id] == ("pending" if left < 0 else "claimed")
    kept_claims = [left for send, left in leases if not send and left >= 0]
    kept_sends = [left for send, left in leases if send and left >= -grace]
    expected = HeldLeases(
        claimed_in=min(kept_claims, default=None), sending_in=min(kept_sends, default=None)
    )
    for got, want in (
        (report.held.claimed_in, expected.claimed_in),
        (report.held.sending_in, expected.sending_in),
    ):
        assert got == (None if want is None else pytest.approx(want, abs=1e-6))
