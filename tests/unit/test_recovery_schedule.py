"""When the worker's next recovery pass is due (WorkerConfig.next_recovery_in), and what the
memory outbox's recovery reports about the leases it left held, on a clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.worker_config import RECOVERY_FLOOR_SECONDS, RECOVERY_MARGIN_SECONDS, WorkerConfig
from tests.support.outboxes import ManualClock, MemoryHarness, new_job

CONFIG = WorkerConfig(recovery_interval=5.0, recovery_grace_seconds=2.0)


def test_with_no_lease_held_the_pass_waits_the_interval() -> None:
    assert CONFIG.next_recovery_in(None) == 5.0


def test_a_lease_expiring_soon_brings_the_pass_forward_to_its_expiry_plus_grace() -> None:
    assert CONFIG.next_recovery_in(1.0) == pytest.approx(3.0 + RECOVERY_MARGIN_SECONDS)


def test_a_lease_expiring_after_the_interval_does_not_delay_the_pass() -> None:
    assert CONFIG.next_recovery_in(60.0) == 5.0


def test_a_lease_already_past_its_grace_never_makes_the_loop_spin() -> None:
    assert CONFIG.next_recovery_in(-30.0) == RECOVERY_FLOOR_SECONDS


@given(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)))
def test_the_wait_is_always_between_the_floor_and_the_interval(expiry: float | None) -> None:
    wait = CONFIG.next_recovery_in(expiry)
    assert RECOVERY_FLOOR_SECONDS <= wait <= CONFIG.recovery_interval
    if expiry is not None and wait > RECOVERY_FLOOR_SECONDS:
        # Never before the lease is recoverable (expired more than the grace ago).
        assert wait >= expiry + CONFIG.recovery_grace_seconds or wait == CONFIG.recovery_interval


def test_memory_recovery_reports_the_earliest_lease_still_held() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    h = MemoryHarness(clock)
    with h.begin() as tx:
        h.outbox.enqueue(tx, [new_job("a", clock()), new_job("b", clock())])
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert report.next_expiry_in is None  # nothing leased
    with h.begin() as tx:
        h.outbox.claim(tx, owner="w1", limit=1, lease_seconds=10)
    clock.advance(3)
    with h.begin() as tx:
        h.outbox.claim(tx, owner="w2", limit=1, lease_seconds=10)
    clock.advance(1)
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert report.released == 0
    assert report.next_expiry_in == pytest.approx(6.0)
    clock.advance(7.5)  # w1's lease expired 1.5 s ago: within the grace, still held
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert report.released == 0
    assert report.next_expiry_in == pytest.approx(-1.5)
    assert CONFIG.next_recovery_in(report.next_expiry_in) == pytest.approx(
        0.5 + RECOVERY_MARGIN_SECONDS
    )
    clock.advance(0.6)  # w1's is past its grace; w2's (claimed at 3 s) expires at 13 s
    with h.begin() as tx:
        report = h.outbox.recover(tx, grace_seconds=2, actor="r")
    assert report.released == 1
    assert report.next_expiry_in == pytest.approx(0.9)
