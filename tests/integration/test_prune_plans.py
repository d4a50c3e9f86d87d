"""A prune batch costs its own jobs, not the size of the outbox, even before any ANALYZE.

On PostgreSQL with generic plans and no statistics, the batch's UPDATE took the partial index
of finished jobs and tested every finished job against the batch's ids, and the journal's trim
hashed the WHOLE journal for each 500 jobs: a pass over 300,000 freshly sent jobs took 183 s,
growing with the square of the outbox. Now the UPDATE finds its jobs by primary key (the states
bound, as ``sqlcore.guard`` binds them for every search by id) and the trim probes each job's
last journal row by index; the batch's transaction runs without JIT, which compiled the trim's
statement for 80 ms to run it in 4.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from dispatch.states import State
from dispatch.store import Completion, OutboxStore
from tests.support.outboxes import new_job
from tests.support.plans import generic_plans

JOBS = 3000


def _finished_unanalysed(engine: Engine) -> OutboxStore:
    """3,000 sent jobs (four journal rows each) in tables autovacuum never analyses."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL planner choice")
    store = OutboxStore("postgresql")
    with engine.begin() as conn:
        for table in ("send_job", "send_key", "send_event"):
            conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        earlier = datetime.now(UTC) - timedelta(minutes=5)
        store.enqueue(conn, [new_job(f"{i:064x}", earlier) for i in range(JOBS)])
    for _ in range(JOBS // 500):
        with engine.begin() as conn:
            leases = [j.lease for j in store.claim(conn, owner="w", limit=500, lease_seconds=60)]
            store.start_sends(conn, leases, margin_seconds=1, actor="w")
            store.complete(
                conn, [Completion(lease, State.SENT, 250, "ok") for lease in leases], actor="w"
            )
    return store


def test_prune_batches_read_their_own_jobs_only(engine: Engine) -> None:
    store = _finished_unanalysed(engine)
    cutoff = datetime.now(UTC) + timedelta(minutes=1)
    with engine.connect() as conn:
        after, pruned, events = 0, 0, 0
        for _ in range(8):  # prepared at the sixth
            with conn.begin():
                batch = store.prune_batch(conn, cutoff=cutoff, after_id=after, limit=100)
                jit_inside = conn.exec_driver_sql("SHOW jit").scalar()
            assert batch.last_id is not None
            after, pruned, events = batch.last_id, pruned + batch.jobs, events + batch.events
        jit_after = conn.exec_driver_sql("SHOW jit").scalar()
        updates = generic_plans(conn, "UPDATE send_job %")
        deletes = generic_plans(conn, "DELETE FROM send_event %")
        conn.rollback()
    assert (pruned, events) == (800, 2400)  # each job keeps its final journal row
    assert (jit_inside, jit_after) == ("off", "on")  # for the batch's transaction only
    assert updates
    assert deletes
    for plan in updates:  # the batch's ids, by primary key (an index scan or a bitmap of it)
        assert "on send_job_pkey" in plan, plan
        assert "ix_send_job_campaign_state" not in plan, plan
        assert "Seq Scan" not in plan, plan
    for plan in deletes:
        assert "SubPlan" in plan, plan  # each row: one probe of its job's last journal row
        assert "Seq Scan" not in plan, plan
        assert "Hash" not in plan, plan
