"""Recovery reports when the earliest lease it left held expires (database clock), the same on
memory, SQLite and PostgreSQL; on PostgreSQL the query reads the partial lease index."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from dispatch.outbox.recovery import RecoveryOps
from dispatch.store import OutboxStore
from tests.integration.test_outbox_contract import claim, enqueue, harness, past  # noqa: F401
from tests.support.outboxes import Harness, SqlHarness, new_job


def test_recovery_reports_the_earliest_held_lease(harness: Harness) -> None:  # noqa: F811
    enqueue(harness, new_job("a", past(3)), new_job("b", past(2)), new_job("c", past(1)))
    with harness.begin() as tx:
        assert harness.outbox.recover(tx, grace_seconds=2, actor="r").next_expiry_in is None
    claim(harness, limit=1, lease_seconds=30)
    claim(harness, limit=1, lease_seconds=10)
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=2, actor="r")
    assert report.released == 0
    assert report.next_expiry_in == pytest.approx(10, abs=1.5)
    harness.expire_leases()  # both expired minutes ago: taken back, nothing left held
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=2, actor="r")
    assert (report.released, report.next_expiry_in) == (2, None)


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
            store.next_expiry_in(conn)
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            (statement,) = captured
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement))
    finally:
        sa.event.remove(harness.engine, "before_cursor_execute", capture)
    assert "ix_send_job_state_lease" in plan, plan
