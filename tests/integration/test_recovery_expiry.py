"""Recovery reports when the earliest leases it left held expire (database clock), and takes an
unstarted claim back at its expiry but a started send only the grace after it, the same on
memory, SQLite and PostgreSQL; on PostgreSQL the query reads the partial lease index."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from dispatch.outbox.jobs import HeldLeases
from dispatch.outbox.recovery import RecoveryOps
from dispatch.store import OutboxStore
from tests.integration.test_outbox_contract import claim, enqueue, harness, past  # noqa: F401
from tests.support.outboxes import Harness, SqlHarness, new_job


def test_recovery_reports_the_earliest_held_leases(harness: Harness) -> None:  # noqa: F811
    enqueue(harness, new_job("a", past(3)), new_job("b", past(2)), new_job("c", past(1)))
    with harness.begin() as tx:
        assert harness.outbox.recover(tx, grace_seconds=2, actor="r").held == HeldLeases()
    (started,) = claim(harness, limit=1, lease_seconds=20)
    with harness.begin() as tx:
        harness.outbox.start_sends(tx, [started.lease], margin_seconds=1, actor="w")
    claim(harness, limit=1, lease_seconds=30)
    claim(harness, limit=1, lease_seconds=10)
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.in_doubt) == (0, 0)
    assert report.held.claimed_in == pytest.approx(10, abs=1.5)
    assert report.held.sending_in == pytest.approx(20, abs=1.5)
    harness.expire_leases()  # all expired minutes ago: taken back, nothing left held
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.in_doubt, report.held) == (2, 1, HeldLeases())


def test_an_expired_claim_is_released_at_once_but_a_send_keeps_its_grace(
    harness: Harness,  # noqa: F811
) -> None:
    # Both leases ran out a moment ago: the claim's holder can no longer start it (T4 needs
    # lease left), while the send's holder may still be reporting its outcome.
    enqueue(harness, new_job("a", past(2)), new_job("b", past(1)))
    (started,) = claim(harness, limit=1, lease_seconds=60)
    with harness.begin() as tx:
        harness.outbox.start_sends(tx, [started.lease], margin_seconds=1, actor="w")
    (unstarted,) = claim(harness, limit=1, lease_seconds=60)
    harness.expire_leases(seconds_ago=0.5)
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=30, actor="r")
    assert (report.released, report.in_doubt) == (1, 0)
    assert harness.states() == {started.id: "sending", unstarted.id: "pending"}
    # The holder of the released claim cannot start it any more.
    with harness.begin() as tx:
        assert harness.outbox.start_sends(tx, [unstarted.lease], margin_seconds=0, actor="w") == {}
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=0, actor="r")
    assert (report.released, report.in_doubt) == (0, 1)
    assert harness.states()[started.id] == "in_doubt"


def test_the_expiry_query_uses_the_lease_index_on_postgresql(harness: Harness) -> None:  # noqa: F811
    if not isinstance(harness, SqlHarness) or harness.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL plan")
    store = OutboxStore("postgresql")
    assert isinstance(store, RecoveryOps)
    captured: list[str] = []

    def capture(*args: object) -> None:
        statement, parameters = args[2], args[3]
        assert isinstance(statement, str)
        if "min(send_job.lease_expires_at)" in statement:
            assert not parameters  # the states are literals, as the partial index needs
            captured.append(statement)

    sa.event.listen(harness.engine, "before_cursor_execute", capture)
    try:
        with harness.engine.begin() as conn:
            store.held_leases(conn)
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            (statement,) = captured
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement))
    finally:
        sa.event.remove(harness.engine, "before_cursor_execute", capture)
    assert plan.count("ix_send_job_state_lease") == 2, plan  # one read per leased state
